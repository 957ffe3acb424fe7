#!/usr/bin/env python3
"""How much of each stage diff is its lever, by the course's rule:
  lever      the stage's new mechanism, its data, calls and comments, and the options about it
  not lever  header and usage text, includes, rank launching and main(), other options, logging and
             plan titles, evaluation, rehearsal and instrumentation, operational checks, advice, MoE
             and hybrid plumbing
  apart      fences and blank lines
A changed line of diffs/stageA-stageB.diff is sorted by where it is (the file's header, main(), the
evaluation hook, the stage's own fences) and by what it holds (a plan title, a refusal, an advice
call, MoE plumbing, ...). What it cannot place -- a changed line outside the stage's fences with no
`stage N` tag and no pattern -- it lists as "to read", for a reader to sort by hand: this script is a
first pass, the count that stands is a reader's.
    python3 bench/lever_count.py            # every diff, one table each; -v lists every line"""
import glob
import re
import sys

NOT_LEVER = [  # (category, pattern): checked in order, before the fences
    ("logging and plan titles", r"\btitle\b|memplan_title_tail|\bsay\(|printf\(|kept_report|memplan_host_report|"
                                r"host_budget_whence|step_report"),
    ("advice", r"advice_|advise_|FitAsk|\bvisible\b|\.prog = |\.argv = "),
    ("rehearsal and instrumentation", r"blocks_init|blocks_watch|blocks_report|comm_ring_hop_s|\bBlockTimer\b|"
                                      r"tiling_report|rehearse|timeline|prof_|mark\(|const int64_t kv = "),
    ("operational checks", r"STOP\(|DIE\(|ranks_check_opts|_check\(|_ok\(&"),
    ("MoE plumbing", r"(?i)\bmoe|expert|MOE_[WG]"),
]
HYBRID = ("hybrid plumbing", r"deltanet_|lin_v_heads|GDN_[WG]|Qwen3\.5")


def functions(lines):
    """the function each line of a C file sits in ('' outside one)"""
    name, out = "", []
    for ln in lines:
        m = re.match(r"(?:static\s+)?[\w\s\*]+?\b(\w+)\(.*\)\s*\{\s*$", ln)
        if m and not ln.startswith((" ", "\t", "}")):
            name = m.group(1)
        out.append(name)
        if ln.startswith("}"):
            name = ""
    return out


def fenced(lines, stage):
    """for each line: inside a fence of this stage (the fence lines themselves excluded)"""
    depth, out = [], []
    for ln in lines:
        m = re.match(r"\s*/\* ---- (end )?stage (\d+)", ln)
        if m and m.group(1):
            if depth:
                depth.pop()
            out.append(None)
            continue
        if m:
            depth.append(int(m.group(2)))
            out.append(None)
            continue
        out.append(stage in depth)
    return out


def header_end(lines):
    return next(i for i, ln in enumerate(lines) if ln.startswith("/* ====="))


def classify(line, where, inside, func, hdr, stage):
    body = line.strip()
    if not body:
        return "apart: blank"
    if re.match(r"/\* ---- (end )?stage \d+", body):
        return "apart: fence"
    if where < hdr or re.match(r"#define STAGE|static const char \*SUMMARY|\"[^\"]*\" STAGE_USAGE", body):
        return "header and usage text"
    if body.startswith("#include"):
        return "includes"
    if func == "main":
        return "rank launching and main()"
    if func == "eval_window" and not inside:
        return "evaluation"
    if func == "rank_main" and not inside:
        return "rank launching and main()"
    for cat, pat in NOT_LEVER:
        if re.search(pat, body):
            return cat
    tagged = re.search(rf"\bstage {stage}\b", body)
    if stage != 3 and re.search(HYBRID[1], body):  # stage 3's lever includes the linear layers' state passing
        return HYBRID[0]
    if inside or tagged:
        return "lever"
    if func in ("parse_opts",) or re.search(r'\{"--', body):
        return "other options"
    return "to read"


def count(path, verbose):
    a, b = re.findall(r"stage(\d)", path)[-2:]
    stage = int(b)
    old_file, new_file = glob.glob(f"stage{a}_*.c")[0], glob.glob(f"stage{b}_*.c")[0]
    old, new = open(old_file).read().split("\n"), open(new_file).read().split("\n")
    info = {}
    for side, lines in (("-", old), ("+", new)):
        info[side] = (fenced(lines, stage), functions(lines), header_end(lines))
    cats, rows, hunk = {}, [], 0
    o = n = 0
    for ln in open(path).read().split("\n"):
        if ln.startswith(("---", "+++")):
            continue
        m = re.match(r"@@ -(\d+)(?:,\d+)? \+(\d+)", ln)
        if m:
            o, n = int(m.group(1)) - 1, int(m.group(2)) - 1
            hunk += 1
            continue
        if not ln:
            continue
        if ln[0] == " ":
            o, n = o + 1, n + 1
            hunk += 1
            continue
        side, at = ln[0], (o if ln[0] == "-" else n)
        inside, funcs, hdr = info[side]
        c = classify(ln[1:], at, inside[at], funcs[at], hdr, stage)
        rows.append((c, ln, hunk))
        if side == "-":
            o += 1
        else:
            n += 1
    # a line it could not place, in a run of changes that holds the lever: the lever's edit (a line it
    # replaces, a comment it rewords, a size it changes)
    run, runs = [], []
    for i in range(len(rows)):
        run.append(i)
        if i + 1 == len(rows) or rows[i + 1][2] != rows[i][2]:
            runs.append(run)
            run = []
    for run in runs:
        if any(rows[i][0] == "lever" for i in run):
            for i in run:
                if rows[i][0] == "to read":
                    rows[i] = ("lever (its edit)",) + rows[i][1:]
    cats = {}
    for c, _, _ in rows:
        cats[c] = cats.get(c, 0) + 1
    counted = {k: v for k, v in cats.items() if not k.startswith("apart")}
    total, lever = sum(counted.values()), counted.get("lever", 0) + counted.get("lever (its edit)", 0)
    changed = sum(cats.values())
    print(f"{path}: {changed} changed lines; {total} counted (fences and blanks apart), {lever} lever "
          f"({100 * lever / max(total, 1):.1f}%; {100 * lever / max(total - counted.get('to read', 0), 1):.1f}% of those placed)")
    for k, v in sorted(cats.items(), key=lambda kv: -kv[1]):
        print(f"  {v:4d}  {k}")
    for c, ln, _ in rows:
        if verbose or c == "to read":
            print(f"      {c:>30}  {ln[:110]}")


def main():
    verbose = "-v" in sys.argv
    for p in sorted(glob.glob("diffs/stage*-stage*.diff")):
        count(p, verbose)


main()
