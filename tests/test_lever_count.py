#!/usr/bin/env python3
"""bench/lever_count.py's rules on small synthetic stage diffs, then on planted mis-rules.

Each case is a pair of stage files (rung 4 and rung 5 of a made-up trainer) and the class each
changed line must get. The rules must place every one; then each planted mis-rule -- an edit of the
script's own source, one per mistake a rule-based count is prone to (a pattern that matches inside a
longer name, comments read as code, a statement split over its lines, ...) -- must make at least one
case fail, so these cases can catch it.
    python3 tests/test_lever_count.py       # prints "N passed, M failed" and exits 1 on a failure"""
import difflib
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "bench", "lever_count.py")

# one made-up stage file, its sections filled per case
BASE = dict(
    head="/* stage{n}_demo.c -- a made-up trainer: rung {n}.\n *   make stage{n}\n */",
    includes='#include "common/stage.h"',
    stage="#define STAGE {n}\nstatic const char *SUMMARY = \"Rung {n}.\" STAGE_USAGE;",
    fields="    int64_t seq;             /* tokens per step */\n"
           "    const char *moe_gemm;    /* MoE experts' GEMMs: loop | grouped */\n"
           "    double yarn_factor;\n"
           "    const char *offload;     /* stage 4: what lives on the host */",
    defaults="    Opts o = {.seq = 16384, .moe_gemm = \"loop\",\n"
             "              .offload = \"all\"};",
    table="        {\"--seq\", OPT_INT, &o.seq, \"tokens per step\"},\n"
          "        {\"--moe-gemm\", OPT_STRING, &o.moe_gemm, \"MoE experts' GEMMs: loop | grouped\"},\n"
          "        {\"--yarn-factor\", OPT_DOUBLE, &o.yarn_factor, \"YaRN factor\"},\n"
          "        {\"--offload\", OPT_STRING, &o.offload, \"what lives on the host\"}, /* stage 4 */",
    model="    int64_t S;\n    bf16_t *x;",
    build="",
    carve="    w->x = arena_take(W, BF(S * D), \"x\");\n"
          "    w->g = arena_take(W, BF(S * I), \"g\");",
    config="    M->S = M->o.seq;",
    forward="    mlp_rows(M, l, 0, M->S);",
    eval="    if (!(*labels = M->counted)) return 0;",
    tail="",
    main="    plan_machine(M.o.dry_run, NULL);\n"
         "    load_config(&M);\n"
         "    char title[256];\n"
         "    int n = snprintf(title, sizeof title, \"stage %d\", STAGE);",
)

TEMPLATE = """{head}

/* ============================================================ includes and usage */
{includes}

{stage}

/* ============================================================ options */
typedef struct {{
{fields}
}} Opts;

static Opts parse_opts(int argc, char **argv) {{
{defaults}
    const Opt table[] = {{
{table}
    }};
    char err[256];
    if (cli_parse(argc, argv, table, (int)(sizeof table / sizeof table[0]), err, sizeof err)) STOP("%s", err);
    return o;
}}

/* ============================================================ model state */
typedef struct {{
    Opts o;
{model}
}} Model;

/* ============================================================ build */
{build}
static void carve(Model *M, Arena *W) {{
    const int64_t S = M->S, D = M->c.hidden, I = M->c.intermediate;
    Work *w = &M->w;
{carve}
}}

static void load_config(Model *M) {{
    char err[256];
    if (config_for_run(&M->c, M->o.model, err, sizeof err)) STOP("%s", err);
{config}
}}

/* ============================================================ forward */
static void mlp_forward(Model *M, int64_t l) {{
{forward}
}}

/* ============================================================ evaluation */
static double eval_window(void *m, int64_t k, int64_t *labels) {{
    Model *M = m;
    data_load(M->eval, M, k);
{eval}
    forward(M);
    return loss_of(M);
}}

/* ============================================================ main */
{tail}
int main(int argc, char **argv) {{
    static Model M;
    M.o = parse_opts(argc, argv);
{main}
    ranks_run(&M.o.ranks, rank_main, &M);
    return 0;
}}
"""

L, F, B = "lever", "apart: fence", "apart: blank"
HEADER, INCLUDES, LAUNCH = "header and usage text", "includes", "rank launching and main()"
OPTIONS, LOGGING, EVAL = "other options", "logging and plan titles", "evaluation"
INSTR, CHECKS, ADVICE = "rehearsal and instrumentation", "operational checks", "advice"
MOE, HYBRID = "MoE plumbing", "hybrid plumbing"
DEFAULT = "lever (default)"

FENCED_TILE = """/* ---- stage 5: tiling ---- */
/* rows of the MLP at a time */
static void choose_tile(Model *M) {
    M->tile = M->o.mlp_tile ? M->o.mlp_tile : 4096;
}
static int64_t tile_rows(const Model *M, int64_t t0) { return M->S - t0 < M->tile ? M->S - t0 : M->tile; }
/* ---- end stage 5 ---- */
"""

# (name, sections of rung 4, sections of rung 5 (rung 4's unless given), {text of a changed line: its class})
CASES = [
    ("the file's header, STAGE and SUMMARY", {}, {},
     {"rung 4.": HEADER, "rung 5.": HEADER, "#define STAGE 4": HEADER, "#define STAGE 5": HEADER,
      "\"Rung 5.\"": HEADER}),
    ("an include", {}, dict(includes='#include "common/stage.h"\n#include "common/tiles.h"'),
     {"tiles.h": INCLUDES}),
    ("fences, blank lines and the lever inside them",
     {}, dict(build=FENCED_TILE + "\n", model="    int64_t S;\n    bf16_t *x;\n    /* ---- stage 5: tiling ---- */\n"
                                           "    int64_t tile;       /* MLP rows at a time */\n    /* ---- end stage 5 ---- */"),
     {"/* ---- stage 5: tiling ---- */": F, "/* ---- end stage 5 ---- */": F, "+": B,
      "static void choose_tile": L, "M->tile = M->o.mlp_tile": L, "rows of the MLP at a time": L,
      "int64_t tile;": L}),
    ("a fence over two lines",
     {}, dict(forward="    /* ---- stage 5: a tile at a time, each tile's forward\n"
                      "     * then its backward ---- */\n"
                      "    for (int64_t t0 = 0; t0 < M->S; t0 += M->tile) mlp_rows(M, l, t0, tile_rows(M, t0));\n"
                      "    /* ---- end stage 5 ---- */"),
     {"a tile at a time": F, "then its backward": F, "for (int64_t t0": L, "mlp_rows(M, l, 0, M->S)": L}),
    ("the lever's option: its field, its entry, its default",
     {}, dict(fields=BASE["fields"] + "\n    /* ---- stage 5: tiling ---- */\n    int64_t mlp_tile;        /* MLP rows at a time */\n"
                                      "    /* ---- end stage 5 ---- */",
              defaults="    Opts o = {.seq = 16384, .moe_gemm = \"loop\",\n              .offload = \"all\", .mlp_tile = 0};",
              table=BASE["table"] + "\n        {\"--mlp-tile\", OPT_INT, &o.mlp_tile, \"MLP rows at a time\"}, /* stage 5 */"),
     {"int64_t mlp_tile;": L, "\"--mlp-tile\"": L, ".mlp_tile = 0}": L, ".offload = \"all\"};": L}),
    ("another option: its default changed, tagged or not; its field; MoE in its help text",
     {}, dict(defaults="    Opts o = {.seq = 1048576, /* stage 5: the headline */ .moe_gemm = \"loop\",\n"
                       "              .offload = \"all\"};",
              fields=BASE["fields"] + "\n    int verbose;             /* print more */",
              table=BASE["table"].replace("\"MoE experts' GEMMs: loop | grouped\"", "\"MoE experts' GEMMs: loop | grouped | auto\"")),
     {".seq = 16384": OPTIONS, ".seq = 1048576": OPTIONS, "int verbose;": OPTIONS, "| auto": OPTIONS}),
    ("an option about the lever by its tag", {},
     dict(table=BASE["table"].replace("\"YaRN factor\"},", "\"YaRN factor (0: from --seq)\"}, /* stage 5 */")),
     {"YaRN factor (0: from --seq)": L, "\"YaRN factor\"},": L}),
    ("the rank options: field, entry, default",
     {}, dict(fields=BASE["fields"] + "\n    RankOpts ranks;          /* stage 5: --gpus, --local-ranks */",
              defaults="    Opts o = {.seq = 16384, .moe_gemm = \"loop\",\n              .offload = \"all\", .ranks = RANK_DEFAULTS};",
              table=BASE["table"] + "\n        RANK_OPTIONS(o.ranks), /* stage 5 */"),
     {"RankOpts ranks;": LAUNCH, "RANK_OPTIONS": LAUNCH, "RANK_DEFAULTS": LAUNCH, ".offload = \"all\"};": LAUNCH}),
    ("logging over two lines; a report, its body, its comment and its call",
     {}, dict(tail="/* ---- stage 5: tiling ---- */\n/* what tiling saves */\nstatic void tiling_report(Model m) {\n"
                   "    const double gib = 1 << 30;\n    m.tile = m.S;\n"
                   "    say(\"tiling saves %.1f GiB\\n\",\n        plan_peak(&m) / gib);\n}\n/* ---- end stage 5 ---- */\n",
              main=BASE["main"] + "\n    tiling_report(M); /* stage 5 */",
              config=BASE["config"] + "\n    say(\"seq %lld per rank\\n\",\n        (long long)M->S); /* stage 5 */"),
     {"what tiling saves": LOGGING, "static void tiling_report": LOGGING, "const double gib": LOGGING,
      "m.tile = m.S;": LOGGING, "say(\"tiling saves": LOGGING, "plan_peak(&m) / gib);": LOGGING, "+}": LOGGING,
      "tiling_report(M);": LOGGING, "seq %lld per rank": LOGGING, "(long long)M->S);": LOGGING}),
    ("instrumentation: a block timer, its data, a profile span; arena_mark is none of it",
     {}, dict(forward="    const int64_t kv = 2 * M->S; /* a ring's K/V */\n    blocks_init(&M->blocks, kv);\n"
                      "    mark(M->gpu.stream, K_MLP); /* --profile */\n    mlp_rows(M, l, 0, M->S);",
              carve=BASE["carve"] + "\n    M->b2_bytes = arena_mark(W) - region_b; /* stage 5: the MLP's tiles may use as much */"),
     {"const int64_t kv": INSTR, "blocks_init": INSTR, "mark(M->gpu.stream": INSTR, "arena_mark": L}),
    ("operational checks, over two lines too; a refusal on a parsing line is the parse's",
     {}, dict(config=BASE["config"] + "\n    if (M->c.kv_heads % M->o.groups)\n"
                                      "        STOP(\"--attn-groups %lld must divide the K/V heads\", (long long)M->o.groups);\n"
                                      "    if (config_check_yarn(&M->c, err, sizeof err)) STOP(\"%s\", err); /* stage 5 */",
              build="/* ---- stage 5: tiling ---- */\nstatic void parse_tile(Model *M) {\n    char err[256];\n"
                    "    if (tile_parse(M->o.tile_spec, &M->tile, err, sizeof err)) STOP(\"--mlp-tile: %s\", err);\n"
                    "    if ((M->groups = groups_parse(M->o.groups_spec)) < 0) STOP(\"--attn-groups: bad\");\n}\n"
                    "/* ---- end stage 5 ---- */\n"),
     {"if (M->c.kv_heads % M->o.groups)": CHECKS, "must divide the K/V heads": CHECKS, "config_check_yarn": CHECKS,
      "tile_parse": L, "groups_parse": L}),
    ("MoE plumbing; MoE code the lever changes; MoE in a comment of the lever",
     {}, dict(carve="    const int64_t T = M->tile; /* stage 5: one MLP tile's rows */\n"
                    "    w->x = arena_take(W, BF(S * D), \"x\");\n"
                    "    if (c->experts) moe_route_stats(&w->moe, c); /* MoE: the router's statistics */\n"
                    "    w->g = arena_take(W, BF(T * I), \"g\");\n"
                    "    /* ---- stage 5: tiling ---- */\n"
                    "    w->rows = arena_take(W, F32(S), \"rows\"); /* the experts' rows, MoE's too */\n"
                    "    /* ---- end stage 5 ---- */"),
     {"moe_route_stats": MOE, "BF(S * I)": L, "BF(T * I)": L, "the experts' rows, MoE's too": L}),
    ("the model's kind in an unchanged part of a statement does not make it plumbing",
     {"config": "    gemm_init(&M->gemm, M->o.moe_gemm, 64 << 20);\n    M->S = M->o.seq;"},
     {"config": "    gemm_init(&M->gemm, M->o.moe_gemm, 128 << 20);\n    M->S = M->o.seq;"},
     {"64 << 20": DEFAULT, "128 << 20": DEFAULT}),
    ("hybrid plumbing: a block that switches the lever off for a hybrid",
     {}, dict(build=FENCED_TILE.replace("    M->tile = M->o.mlp_tile ? M->o.mlp_tile : 4096;\n",
                                        "    int64_t want = M->o.mlp_tile;\n"
                                        "    if (M->c.lin_v_heads && want) { /* Qwen3.5: not yet */\n"
                                        "        want = 0;\n    }\n    M->tile = want ? want : 4096;\n") + "\n"),
     {"if (M->c.lin_v_heads && want)": HYBRID, "        want = 0;": HYBRID, "+    }": HYBRID,
      "int64_t want": L, "M->tile = want": L}),
    ("advice over four lines",
     {}, dict(main=BASE["main"] + "\n    advise_unless_fits(&(FitAsk){.prog = \"./stage5\", .model = M.o.model, /* stage 5 */\n"
                                  "                                 .seq = M.o.seq,\n"
                                  "                                 .P = M.job.P},\n"
                                  "                       &M.mp); /* a dry-run prints what the run would */"),
     {"advise_unless_fits": ADVICE, ".seq = M.o.seq,": ADVICE, ".P = M.job.P},": ADVICE, "&M.mp);": ADVICE}),
    ("main(): a call to the lever, rank launching, the rest",
     {}, dict(build=FENCED_TILE + "\n",
              main=BASE["main"].replace("plan_machine(M.o.dry_run, NULL);", "plan_machine(M.o.dry_run, &M.o.ranks);")
              + "\n    choose_tile(&M);\n    config_print(&M.c);"),
     {"choose_tile(&M);": L, "plan_machine(M.o.dry_run, NULL)": LAUNCH, "plan_machine(M.o.dry_run, &M.o.ranks)": LAUNCH,
      "config_print": LAUNCH}),
    ("a removed line: the class of what replaces it",
     {}, dict(build=FENCED_TILE + "\n",
              forward="    for (int64_t t0 = 0; t0 < M->S; t0 += M->tile) /* stage 5 */\n"
                      "        mlp_rows(M, l, t0, tile_rows(M, t0));"),
     {"mlp_rows(M, l, 0, M->S);": L, "for (int64_t t0": L, "tile_rows(M, t0));": L}),
    ("evaluation", {}, dict(eval="    if (!(*labels = M->counted)) return 0; /* windows of prompt only */\n"
                                 "    if (M->o.eval_every < 0) return 0;"),
     {"eval_every": EVAL}),
    ("a line with nothing to place it: the lever, by default", {},
     dict(carve=BASE["carve"].replace("BF(S * D)", "BF(S * D + 64)")),
     {"BF(S * D)": DEFAULT, "BF(S * D + 64)": DEFAULT}),
]

# mistakes a rule-based count can make, each planted as an edit of the script's source
MISRULES = [
    ("`mark(` matches arena_mark(", r'\bmark\(', r'mark\('),
    ("comments decide the model's kind", "if KIND_IS_LEVER.get(stage) == cat or not re.search(pat, dc):",
     "if KIND_IS_LEVER.get(stage) == cat or not re.search(pat, dc + \" \" + s.com):"),
    ("help strings are read as code", "c.append(q + q)", "c.append(ln[i:j + 1])"),
    ("STOP( on a parsing line makes it a check", "cond, body = c[m.end():j - 1], c[j:].strip()",
     "cond, body = \"\", c[j:].strip()"),
    ("a statement over several lines split into lines", "        if paren or ibrace:\n            continue\n",
     "        if paren or ibrace:\n            cur, paren, ibrace = None, 0, 0\n            continue\n"),
    ("a function's body not its call's class", "if header_class(side, h) not in (None, LEVER):", "if False:"),
    ("the lever's option defaults counted as other options",
     "return LEVER if any(f in lever_opts for f in diff) else OPTIONS", "return OPTIONS"),
    ("every line of main() rank launching", "        if s.kind == \"comment\":\n            return None\n",
     "        if s.kind == \"comment\":\n            return None\n        if s.func in LAUNCH_FUNCS:\n            return LAUNCH\n"),
    ("the model's kind anywhere in a changed statement, not in what changed", "        dc = delta((side, k))\n",
     "        dc = s.code\n"),
]


def load(source):
    m = types.ModuleType("lever_count")
    exec(compile(source, SCRIPT, "exec"), m.__dict__)
    return m


def stage_file(sections, n):
    return TEMPLATE.format(**{k: v.replace("{n}", str(n)) for k, v in sections.items()}).split("\n")


def run_case(lc, old_sec, new_sec, want):
    """the expectations the module's rules miss: (text, wanted, got)"""
    old = stage_file(dict(BASE, **old_sec), 4)
    new = stage_file(dict(BASE, **dict(old_sec, **new_sec)), 5)
    diff = "\n".join(difflib.unified_diff(old, new, "stage4_demo.c", "stage5_demo.c", lineterm=""))
    rows = lc.classify_diff(diff, old, new, 5)
    misses = []
    for text, cls in want.items():
        got = [c + (" (default)" if d else "") for c, d, ln, _ in rows if (ln == text if text in "+-" else text in ln)]
        if not got:
            misses.append((text, cls, "no changed line holds it"))
        elif any(g != cls for g in got):
            misses.append((text, cls, ", ".join(sorted(set(got)))))
    return misses


def main():
    source = open(SCRIPT).read()
    passed = failed = 0
    lc = load(source)
    for name, old_sec, new_sec, want in CASES:
        misses = run_case(lc, old_sec, new_sec, want)
        if misses:
            failed += 1
            print(f"FAIL {name}")
            for text, cls, got in misses:
                print(f"     {text!r}: wants {cls}, got {got}")
        else:
            passed += 1
    for name, was, planted in MISRULES:
        if source.count(was) != 1:
            failed += 1
            print(f"FAIL the mis-rule '{name}' cannot be planted: the script no longer holds {was!r} once")
            continue
        bad = load(source.replace(was, planted))
        caught = [c[0] for c in CASES if run_case(bad, c[1], c[2], c[3])]
        if caught:
            passed += 1
            print(f"ok   planted mis-rule caught: {name} (fails: {caught[0]}{', ...' if len(caught) > 1 else ''})")
        else:
            failed += 1
            print(f"FAIL planted mis-rule not caught: {name}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
