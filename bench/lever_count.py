#!/usr/bin/env python3
"""How much of each stage diff is its lever: a first pass at the count, by rule.

The rule. A changed line of diffs/stageA-stageB.diff is
  the lever  the stage's new mechanism, its data, calls and comments, and the options about it.
             Stage 2: FSDP gathers, reduce-scatters and sharding, data-parallel ranks reading their
             own windows, loss sums across ranks. Stage 3: ring attention, zigzag, the LSE merge, the
             K/V exchange, the loss normalised over the ranks, the ring's document blocks, the linear
             layers' state passing. Stage 4: offload of checkpoints, optimizer state and kept
             attention, its slots, events and placement. Stage 5: MLP sequence tiles, attention
             head groups, YaRN.
  not lever  header and usage text, includes, rank launching and main(), other options, logging and
             plan titles, evaluation, rehearsal and instrumentation (block timers, profile spans),
             operational checks (STOP refusals), advice, MoE and hybrid plumbing.
  apart      fences (/* ---- stage N ... ---- */, /* ---- end stage N ---- */) and blank lines,
             counted apart from the rest.

The headline shares, the numbers to quote, come from an independent reviewer who sorted every
changed line by hand. This script is a first pass at that count: it lands within a couple of points
of the reviewer's, and it lists the lines it placed only by default, for a reader to check.

How it sorts. It reads both stage files whole, so a changed line is judged with its C statement (a
call over three lines is one statement, one class), its block, its function and its fences. Patterns
look at code only: comments and string literals never decide a class ("MoE" in a help text is not
MoE plumbing). A statement changed in place is judged by what changed in it (an option's default, a
size S -> T). The first that applies:
  1. blank lines and fence comments: apart; the file's header comment, STAGE and SUMMARY; #include
  2. the options' defaults, changed in place: by the fields that changed (below: options)
  3. advice, logging and plan titles, rehearsal and instrumentation, rank launching: by the calls
     the statement makes (NOT_LEVER)
  4. operational checks: a STOP or DIE whose condition only tests (it assigns nothing and calls
     only predicates: *_ok, *_check*, strcmp), a block that only refuses or warns, a *_check* call
  5. options: a field of the options struct or its entry in the option table. The lever's options
     are those declared or entered inside this stage's fences or tagged `stage N` for this stage;
     the rank options are rank launching; every other option is "other options"
  6. MoE and hybrid plumbing: a statement whose changed code is about the model's kind (KIND:
     experts, moe_*, lin_*, attn_gate, ...) and whose code and body touch nothing the stage adds
  7. evaluation: in an eval function, outside this stage's fences and untagged
  8. inherited: a block's body and closing brace take their header's class, a function's body and
     the comment above it the function's (tiling_report's body as its call), a declaration whose
     names only statements of one other class use takes that class
  9. the lever, on evidence: inside this stage's fence; tagged `stage N` for this stage; touching a
     name the stage adds (a function, macro or field in its fences, a name declared on a tagged
     line); the rule's words for the stage in what changed (WORDS); inside a block of the lever
 10. a removed statement: the class of its counterpart (the added statement that shares a line with
     it or replaces it in the same run of changes), else of the code it moved to
 11. what is left: in main() or rank_main(), rank launching and main(); else the lever if it is in
     one run of changes with lines placed as the lever (its edit: a line it replaces, a size it
     changes); else the lever, by default. These last are listed "to read".
    python3 bench/lever_count.py            # every diff: counts, then the lines placed by default
    python3 bench/lever_count.py -v         # and every changed line with its class
    python3 tests/test_lever_count.py       # the rules on small synthetic diffs"""
import difflib
import glob
import re
import sys

LEVER = "lever"
APART_BLANK, APART_FENCE = "apart: blank", "apart: fence"
HEADER, INCLUDES, LAUNCH = "header and usage text", "includes", "rank launching and main()"
OPTIONS, LOGGING, EVAL = "other options", "logging and plan titles", "evaluation"
INSTR, CHECKS, ADVICE = "rehearsal and instrumentation", "operational checks", "advice"
MOE, HYBRID = "MoE plumbing", "hybrid plumbing"

# (category, pattern on code, comments and strings removed): first match wins
NOT_LEVER = [
    (ADVICE, r"\badvi[cs]e_\w+\(|\bFitAsk\b"),
    (LOGGING, r"\btitle\b|\bsay\(|\bf?printf\(|\w_report\(|\bhost_budget_whence\("),
    (INSTR, r"\bBlockTimer\b|\bblocks_(?:init|watch|report)\(|\bcomm_ring_hop_s\(|\bmark\(|\bprof_\w+\(|"
            r"\btimeline_\w+\(|\brun_instruments\("),
    (LAUNCH, r"\bRankOpts\b|\bRANK_(?:OPTIONS|DEFAULTS)\b|\branks_run\w*\(|\bplan_machine\(|\bcomm_barrier\("),
]
LAUNCH_RE = dict(NOT_LEVER)[LAUNCH]
PREDICATE = r"(?:^|_)(?:ok|check\w*|is|has)(?:_|$)|^strn?cmp$"  # calls a check's condition may make
REFUSAL = r"\b(?:STOP|DIE)\("
KIND = [  # the model's kind: plumbing when a change is about it and not about the lever
    (MOE, r"\bexperts\b|\bmoe_\w+|\bMOE_[WG]\b|\bMoe[A-Z]\w*"),
    (HYBRID, r"\blin_\w+|\bconfig_is_linear\b|\battn_gate\b|\bconfig_plain_heads\b|\bdeltanet_\w+|\bGDN_[WG]\b|"
             r"\bGdn[A-Z]\w*"),
]
KIND_IS_LEVER = {3: HYBRID}  # stage 3's lever includes the linear layers' state passing
WORDS = {  # the rule's words for each stage's lever, in changed code or comments: evidence, never a verdict
    2: r"\bshards?\b|\bshard_|gather|reduce.scatter|all.reduce|\bFSDP\b|\bZeRO\b|\bunits?\b|\branks?\b|"
       r"\bjob_plan\b|windows? of its own",
    3: r"\bring\b|\bring_|zigzag|\bLSE\b|\bmerge\b|\bK/V\b|\bkv\b|\bdkv|sendrecv|\bchunks?\b|\bhalos?\b|\bdocplan_|"
       r"\bRingBlock\b|\bjob\.P\b|\bthis rank",
    4: r"offload|\bhost\b|pinned|\bkept\b|\bslots?\b|copy_(?:up|down|st)\b|\bevents?\b|staging|_stage\b|\bcpu_|"
       r"\bthreads\b",
    5: r"\btiles?\b|\btile_|\bT\b|head groups?|\bgroups?\b|\b[HK]g\b|\bhg\b|\bkg\b|\bQR?g\b|\bKVg\b|YaRN|\byarn",
}
LAUNCH_FUNCS = ("main", "rank_main")
EVAL_FUNC = r"eval"
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "else", "do", "case", "default", "goto",
            "break", "continue", "static", "const", "struct", "enum", "typedef", "unsigned", "signed",
            "void", "int", "char", "float", "double", "long", "short", "extern", "inline", "volatile"}


# ---------------------------------------------------------------- reading a C file
def lex(lines):
    """each line's code (comments removed, string and char literals emptied), its comment text, and
    whether the line starts inside a comment"""
    code, com, cont = [], [], []
    inside = False
    for ln in lines:
        cont.append(inside)
        c, m, i = [], [], 0
        while i < len(ln):
            if inside:
                j = ln.find("*/", i)
                m.append(ln[i:] if j < 0 else ln[i:j])
                i, inside = (len(ln), True) if j < 0 else (j + 2, False)
            elif ln.startswith("/*", i):
                inside, i = True, i + 2
            elif ln.startswith("//", i):
                m.append(ln[i + 2:])
                i = len(ln)
            elif ln[i] in "\"'":
                q, j = ln[i], i + 1
                while j < len(ln) and ln[j] != q:
                    j += 2 if ln[j] == "\\" else 1
                c.append(q + q)
                i = j + 1
            else:
                c.append(ln[i])
                i += 1
        code.append("".join(c))
        com.append(" ".join(m))
    return code, com, cont


FENCE = re.compile(r"\s*/\* ---- (end )?stage (\d+)")


class Stmt:
    def __init__(self, kind, first, parent, func):
        self.kind, self.lines, self.parent, self.func = kind, [first], parent, func
        self.code, self.com = "", ""
        self.name = None        # a function header: its name
        self.closes = None      # a closing brace: the header it closes
        self.fenced = False     # inside a fence of the counted stage
        self.header = False     # above the file's first section banner


def statements(lines, stage):
    """the file as statements: (list of Stmt, the statement of each line)"""
    code, com, cont = lex(lines)
    out, of = [], [None] * len(lines)
    stack = []              # enclosing blocks: (kind 'block'|'init', header statement index)
    fences, in_fence = [], False
    cur, paren, ibrace = None, 0, 0
    banner = next((i for i, ln in enumerate(lines) if ln.startswith("/* =====")), 0)

    def scope():
        return stack[-1] if stack else (None, None)

    def func_of():
        for kind, h in stack:
            if kind == "block" and out[h].name:
                return out[h].name
        return None

    def new(kind, i):
        s = Stmt(kind, i, scope()[1], func_of())
        s.fenced = stage in fences
        s.header = i < banner
        out.append(s)
        return s

    for i, ln in enumerate(lines):
        c = code[i].strip()
        if in_fence or (cur is None and FENCE.match(ln)):  # a fence, maybe over several lines
            m = FENCE.match(ln)
            if m and not in_fence:
                if m.group(1):
                    if fences:
                        fences.pop()
                else:
                    fences.append(int(m.group(2)))
                s = new("fence", i)
            else:
                s = out[-1]
                s.lines.append(i)
            in_fence = not ln.rstrip().endswith("*/")
            of[i] = len(out) - 1
            continue
        if cur is None and not ln.strip():
            new("blank", i)
            of[i] = len(out) - 1
            continue
        if cur is None and not c:  # a comment alone
            if cont[i] and out and out[-1].kind == "comment" and out[-1].lines[-1] == i - 1:
                s = out[-1]
                s.lines.append(i)
            else:
                s = new("comment", i)
            s.com += " " + com[i]
            of[i] = len(out) - 1
            continue
        if cur is None:
            cur = new("pre" if c.startswith("#") else "code", i)
        else:
            cur.lines.append(i)
        of[i] = len(out) - 1
        cur.code += " " + c
        cur.com += " " + com[i]
        if cur.kind == "pre":
            if not c.endswith("\\"):
                cur = None
            continue
        opened, closed = 0, 0
        prev = cur.code[:len(cur.code) - len(c)].rstrip()[-1:] or ""
        for ch in c:
            if ch in "([":
                paren += 1
            elif ch in ")]":
                paren -= 1
            elif ch == "{":
                if paren or ibrace or scope()[0] == "init" or prev in "=,([{" and prev:
                    ibrace += 1
                else:
                    opened += 1
            elif ch == "}":
                if ibrace:
                    ibrace -= 1
                elif opened:
                    opened -= 1
                else:
                    closed += 1
            if not ch.isspace():
                prev = ch
        for _ in range(closed):
            if stack:
                kind, h = stack.pop()
                if cur.closes is None:
                    cur.closes = h
                    cur.parent = scope()[1]
                    cur.func = func_of() if stack else out[h].func or out[h].name
        if ibrace and c.endswith("{") and not paren:  # `... = {` at a line's end: a table, one entry a statement
            ibrace -= 1
            stack.append(("init", len(out) - 1))
            cur = None
            continue
        if opened:
            if not stack:
                m = re.search(r"(\w+)\s*\([^()]*(?:\([^()]*\)[^()]*)*\)\s*\{$", cur.code.strip())
                if m and not re.match(r"\s*(typedef|struct|enum)\b", cur.code):
                    cur.name = m.group(1)
            for _ in range(opened):
                stack.append(("block", len(out) - 1))
            cur = None
            continue
        if paren or ibrace:
            continue
        if scope()[0] == "init" and (c.endswith(",") or closed):
            cur = None
        elif re.search(r"[;}]$", c) or closed:
            cur = None
        elif re.fullmatch(r"(?:\}\s*)?(?:else\s+)?(?:if|for|while)\s*\(.*\)|(?:\}\s*)?else", c):
            continue  # a body follows on the next line
        elif c.endswith((",", "=", "&&", "||", "?", ":", "+", "-", "*", "/")):
            continue
        else:
            cur = None
    for s in out:
        if s.kind == "comment":
            s.com = s.com.strip()
    return out, of


def tagged(s, stage):
    return re.search(rf"\b[Ss]tage {stage}\b", s.com) is not None


def declared(code):
    """names a declaration statement declares (crudely: C's common forms)"""
    c = code.strip()
    if re.match(r"(return|if|for|while|else|do|switch|case|goto)\b", c):
        return []
    m = re.match(r"(?:(?:static|const|struct|unsigned|signed|volatile|extern)\s+)*[A-Za-z_]\w*(?:\s*\*+\s*|\s+)"
                 r"(?:const\s+)?\**\s*([A-Za-z_]\w*)\s*([=;,\[(])", c)
    if not m or m.group(1) in KEYWORDS:
        return []
    if m.group(2) == "(":
        return [m.group(1)] if c.endswith("{") else []
    names, depth, part = [], 0, ""
    rest = c[m.start(1):]
    for ch in rest:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch in ",;" and depth == 0:
            names.append(part)
            part = ""
        else:
            part += ch if depth == 0 else ""
    names.append(part)
    return [n.group(1) for n in (re.match(r"\s*\**\s*([A-Za-z_]\w*)", p) for p in names) if n]


def idents(code):
    return set(re.findall(r"[A-Za-z_]\w*", code))


# ---------------------------------------------------------------- one diff
class Side:
    def __init__(self, lines, stage):
        self.lines = lines
        self.st, self.of = statements(lines, stage)


def parse_diff(text):
    """changed lines as (side, file line index, diff line, block: the run of changes between two
    unchanged lines, line number in the diff), and the unchanged lines' old -> new map"""
    rows, pairs, o, n, block = [], [], 0, 0, 0
    for no, ln in enumerate(text.split("\n"), 1):
        if ln.startswith(("--- ", "+++ ")):
            continue
        m = re.match(r"@@ -(\d+)(?:,\d+)? \+(\d+)", ln)
        if m:
            ho, hn = int(m.group(1)) - 1, int(m.group(2)) - 1
            while o < ho:  # lines between hunks
                pairs.append((o, n))
                o, n = o + 1, n + 1
            o, n, block = ho, hn, block + 1
            continue
        if not ln:
            continue
        if ln[0] == " ":
            pairs.append((o, n))
            o, n, block = o + 1, n + 1, block + 1
        elif ln[0] == "-":
            rows.append(("-", o, ln, block, no))
            o += 1
        elif ln[0] == "+":
            rows.append(("+", n, ln, block, no))
            n += 1
    return rows, pairs


def option_info(side, stage):
    """the options struct's fields, the fields that are this stage's lever, the options function"""
    st = side.st
    fields, lever, typename, func = set(), set(), None, None
    table = {s.func for s in st if s.func and re.match(r"\s*\{\s*\"\"\s*,\s*OPT_", s.code)}
    for s in st:
        m = re.match(r"\s*(\w+)\s+\w+\s*=\s*\{\s*\.", s.code)
        if m and s.func in table:
            typename, func = m.group(1), s.func
    for s in st:  # the struct: its fields' parent is the header closed by `} Opts;`
        if s.closes is not None and typename and re.match(rf"\s*\}}\s*{typename}\s*;", s.code):
            h = s.closes
            for f in st:
                if f.parent == h and f.kind == "code":
                    names = declared(f.code)
                    fields.update(names)
                    if f.fenced or tagged(f, stage):
                        lever.update(names)
    for s in st:  # the table: {"--name", TYPE, &o.field, ...}
        m = re.search(r"&\w+\.(\w+)", s.code)
        if m and re.match(r"\s*\{\s*\"\"", s.code) and (s.fenced or tagged(s, stage)):
            lever.add(m.group(1))
    return fields, lever, func


class Names:
    """names this stage adds: functions, macros and globals in its fences; fields declared in its fences
    or on its tagged lines (used as ->f or .f); a function's locals declared on its tagged lines"""
    def __init__(self, side, stage):
        self.plain, self.fields, self.local = set(), set(), {}
        for s in side.st:
            if s.kind == "pre" and s.fenced:
                m = re.match(r"\s*#\s*define\s+(\w+)", s.code)
                if m:
                    self.plain.add(m.group(1))
            if s.kind != "code" or not (s.fenced or tagged(s, stage)):
                continue
            hdr = side.st[s.parent] if s.parent is not None else None
            if s.name:
                self.plain.add(s.name)
            elif hdr is not None and re.match(r"\s*(?:typedef\s+)?struct\b", hdr.code):
                self.fields.update(declared(s.code))
            elif s.func:
                if tagged(s, stage):
                    self.local.setdefault(s.func, set()).update(declared(s.code))
            else:
                self.plain.update(declared(s.code))

    def touched(self, code, func):
        """whether code uses one of the names"""
        ids = idents(code)
        return bool(ids & (self.plain | self.local.get(func, set())) or
                    set(re.findall(r"(?:->|\.)\s*([A-Za-z_]\w*)", code)) & self.fields)


def tokens(code):
    return re.findall(r"[A-Za-z_]\w*|\d[\w.]*|->|\S", code)


def changed_code(a, b):
    """the tokens that differ between two versions of a statement (a changed field keeps its -> or .)"""
    ta, tb = tokens(a), tokens(b)
    out = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, ta, tb, autojunk=False).get_opcodes():
        if op != "equal":
            for t, i, j in ((ta, i1, i2), (tb, j1, j2)):
                out += (t[i - 1:i] if i and t[i - 1] in ("->", ".") else []) + t[i:j]
    return " ".join(out)


def fields_of(code):
    return dict(re.findall(r"\.(\w+)\s*=\s*([^,}]+)", code))


def pair(old, new, gone, came, least):
    """removed statements -> the added statement most like each (an assignment to the same target
    counts as alike), none under `least`"""
    out, taken = {}, set()
    for k in gone:
        a = old.st[k]
        best, score = None, least
        for j in came:
            b = new.st[j]
            if j in taken or a.kind != b.kind or a.kind not in ("code", "comment"):
                continue
            x, y = (a.code, b.code) if a.kind == "code" else (a.com, b.com)
            r = difflib.SequenceMatcher(None, x, y, autojunk=False).ratio()
            tx, ty = ASSIGN.match(x), ASSIGN.match(y)
            if tx and ty and tx.group(1) == ty.group(1):
                r = max(r, 0.9)
            if r > score:
                best, score = j, r
        if best is not None:
            out[k] = best
            taken.add(best)
    return out


ASSIGN = re.compile(r"\s*([\w.\->\[\]]+)\s*=[^=]")


def classify_diff(text, old_lines, new_lines, stage):
    """each changed line of the diff as (class, placed by default, the diff's line, its number in the diff)"""
    old, new = Side(old_lines, stage), Side(new_lines, stage)
    sides = {"-": old, "+": new}
    rows, pairs = parse_diff(text)
    names = Names(new, stage)
    fields, lever_opts, opt_func = option_info(new, stage)
    changed, block_of = {"-": set(), "+": set()}, {}
    for side, at, _, b, _ in rows:
        k = sides[side].of[at]
        changed[side].add(k)
        block_of.setdefault((side, k), set()).add(b)

    # a changed statement's counterpart: the statement on the other side that shares an unchanged line
    # with it, else the likeliest in its run of changes; a removed statement with neither may have
    # moved: the added statement most like it, anywhere
    partner = {}
    for side, other, mp in (("-", "+", dict(pairs)), ("+", "-", {n: o for o, n in pairs})):
        for k in changed[side]:
            ln = next((ln for ln in sides[side].st[k].lines if ln in mp), None)
            if ln is not None:
                partner[(side, k)] = (other, sides[other].of[mp[ln]])
    for b in sorted({r[3] for r in rows}):
        gone = sorted({old.of[at] for sd, at, _, rb, _ in rows if sd == "-" and rb == b} - {k for s, k in partner if s == "-"})
        came = sorted({new.of[at] for sd, at, _, rb, _ in rows if sd == "+" and rb == b} - {k for s, k in partner if s == "+"})
        for k, j in pair(old, new, gone, came, 0.5).items():
            partner[("-", k)], partner[("+", j)] = ("+", j), ("-", k)
    moved = {("-", k): ("+", j) for k, j in
             pair(old, new, sorted(k for k in changed["-"] if ("-", k) not in partner), sorted(changed["+"]), 0.75).items()}

    def other(key):
        return sides[partner[key][0]].st[partner[key][1]]

    def delta(key):
        """the code that changed in a statement: the differing tokens, or all of it if it has no counterpart"""
        s = sides[key[0]].st[key[1]]
        return changed_code(s.code, other(key).code) if key in partner else s.code

    def delta_words(key):
        """the code and comment words that changed in a statement"""
        s = sides[key[0]].st[key[1]]
        return delta(key) + " " + (changed_code(s.com, other(key).com) if key in partner else s.com)

    def is_check(sd, k):
        """a refusal whose condition only tests; a block that only refuses or warns; a *_check* call"""
        c = sd.st[k].code.strip()
        m = re.match(r"(?:\}\s*)?(?:else\s+)?if\s*\(", c)
        if m:
            depth, j = 1, m.end()
            while j < len(c) and depth:
                depth += {"(": 1, ")": -1}.get(c[j], 0)
                j += 1
            cond, body = c[m.end():j - 1], c[j:].strip()
            if re.search(r"[^=!<>]=[^=]", cond):  # it assigns: a parse, its refusal the parse's error
                return False
            if not all(re.search(PREDICATE, f) for f in re.findall(r"(\w+)\s*\(", cond) if f != "sizeof"):
                return False  # it calls what does work
            if re.search(REFUSAL, body):
                return True
            if body == "{":
                inner = [t for t in sd.st if t.parent == k and t.kind == "code" and t.closes != k]
                return (any(re.search(REFUSAL, t.code) for t in inner) and
                        all(re.search(REFUSAL + r"|\bf?printf\(|\bsay\(", t.code) for t in inner))
            return False
        if re.match(REFUSAL, c):
            return True
        m = re.match(r"(\w+)\s*\(", c)
        return bool(m and re.search(r"(?:^|_)check(?:_|$)", m.group(1)))

    def own(side, k):
        """the class a statement has of itself, or None"""
        sd = sides[side]
        s = sd.st[k]
        if s.kind == "blank":
            return APART_BLANK
        if s.kind == "fence":
            return APART_FENCE
        if s.header or re.match(r"\s*#\s*define\s+STAGE\b|\s*static const char \*SUMMARY\b", s.code):
            return HEADER
        if s.kind == "pre" and re.match(r"\s*#\s*include\b", s.code):
            return INCLUDES
        if s.kind == "comment":
            return None
        if s.func == opt_func and (side, k) in partner and re.match(r"\s*\w+\s+\w+\s*=\s*\{\s*\.", s.code):
            # the options' defaults, changed in place: by the fields that changed
            fa, fb = fields_of(s.code), fields_of(other((side, k)).code)
            diff = [f for f in set(fa) | set(fb) if fa.get(f, "").strip() != fb.get(f, "").strip()]
            if any(re.search(LAUNCH_RE, fa.get(f, "") + fb.get(f, "")) for f in diff):
                return LAUNCH
            return LEVER if any(f in lever_opts for f in diff) else OPTIONS
        for cat, pat in NOT_LEVER:
            if re.search(pat, s.code):
                return cat
        if is_check(sd, k):
            return CHECKS
        entry = re.match(r"\s*\{\s*\"\"\s*,\s*OPT_\w+\s*,\s*&\w+\.(\w+)", s.code)
        if entry and s.func == opt_func:  # an entry of the option table
            return LEVER if entry.group(1) in lever_opts else OPTIONS
        decl = set(declared(s.code))
        if decl & fields and s.parent is not None and not sd.st[s.parent].func:  # a field of the options struct
            return LEVER if decl & lever_opts else OPTIONS
        dc = delta((side, k))
        for cat, pat in KIND:
            if KIND_IS_LEVER.get(stage) == cat or not re.search(pat, dc):
                continue
            body = [s] + [t for t in sd.st if t.parent == k and t.kind == "code"]
            if any(names.touched(t.code, t.func) for t in body if not own_pattern(t)):
                continue
            if side == "+" and (tagged(s, stage) or s.fenced and names.touched(dc, s.func)):
                continue
            return cat
        if s.func and re.search(EVAL_FUNC, s.func) and not s.fenced and not tagged(s, stage):
            return EVAL
        return None

    def own_pattern(t):
        return any(re.search(p, t.code) for _, p in NOT_LEVER) or re.search(REFUSAL, t.code)

    memo = {}

    def header_class(side, h):
        """a block or function header's class, its own or its enclosing block's"""
        if (side, h) not in memo:
            memo[(side, h)] = None
            c = own(side, h)
            if c is None and sides[side].st[h].parent is not None:
                c = header_class(side, sides[side].st[h].parent)
            memo[(side, h)] = c
        return memo[(side, h)]

    def inherit(side, k):
        """a class from around the statement: its block's (a closing brace: its header's), the function's
        below a comment above a function"""
        sd = sides[side]
        s = sd.st[k]
        if s.closes is not None and header_class(side, s.closes):
            return header_class(side, s.closes)
        h = s.parent
        while h is not None:
            if header_class(side, h) not in (None, LEVER):
                return header_class(side, h)
            h = sd.st[h].parent
        if s.kind == "comment":
            j = k + 1
            while j < len(sd.st) and sd.st[j].kind == "comment":
                j += 1
            if j < len(sd.st) and sd.st[j].name:
                return header_class(side, j)
        return None

    def uses(side, k):
        """a declaration whose names are used only by statements of one class other than the lever's"""
        sd = sides[side]
        s = sd.st[k]
        nm = set(declared(s.code))
        if not nm or s.name:
            return None
        got = {cls.get((side, j), own(side, j)) for j in range(k + 1, len(sd.st))
               if sd.st[j].func == s.func and idents(sd.st[j].code) & nm}
        return got.pop() if len(got) == 1 and not got & {None, LEVER} else None

    def evidence(side, k):
        """whether the statement shows the lever"""
        sd = sides[side]
        s = sd.st[k]
        if side == "+" and (s.fenced or tagged(s, stage) or names.touched(delta((side, k)), s.func)):
            return True
        if re.search(WORDS.get(stage, "$^"), delta_words((side, k))):
            return True
        h = s.parent if side == "+" else None
        while h is not None:
            if header_class(side, h) == LEVER or sd.st[h].fenced or tagged(sd.st[h], stage):
                return True
            h = sd.st[h].parent
        return False

    cls = {key: own(*key) for key in ((side, k) for side in "-+" for k in changed[side])}
    for key in cls:
        cls[key] = cls[key] or inherit(*key)
    for key in cls:
        if key[0] == "+":
            cls[key] = cls[key] or uses(*key)
    final = {}  # (class, placed by default)
    for side in "+-":  # the added first: a removed statement may take the class of what replaced it
        for k in sorted(changed[side]):
            key = (side, k)
            if cls[key]:
                final[key] = (cls[key], False)
            elif evidence(side, k):
                final[key] = (LEVER, False)
            elif key in partner and final.get(partner[key]):
                final[key] = final[partner[key]]
            elif key in partner and (cls.get(partner[key]) or own(*partner[key]) or inherit(*partner[key])):
                final[key] = (cls.get(partner[key]) or own(*partner[key]) or inherit(*partner[key]), False)
            elif key in partner and evidence(*partner[key]):
                final[key] = (LEVER, False)
            elif key in moved and final.get(moved[key]):
                final[key] = final[moved[key]]
            else:
                final[key] = None
    # what the evidence leaves: rank launching in main(), else the lever if it is in one run of changes
    # with the lever's placed lines (its edit: a line it replaces, a size it changes), else the lever by
    # default
    sure = set().union(*(block_of[key] for key, v in final.items() if v and v[0] == LEVER and not v[1]))
    for key, v in final.items():
        if v is None:
            if sides[key[0]].st[key[1]].func in LAUNCH_FUNCS:
                final[key] = (LAUNCH, False)
            elif block_of[key] & sure:
                final[key] = (LEVER, False)
            else:
                final[key] = (LEVER, True)
    return [final[(side, sides[side].of[at])] + (ln, no) for side, at, ln, _, no in rows]


# ---------------------------------------------------------------- the report
def tally(rows):
    """changed, fences, blanks, counted, lever, not lever by class, placed by default"""
    cats = {}
    for c, _, _, _ in rows:
        cats[c] = cats.get(c, 0) + 1
    fences, blanks = cats.pop(APART_FENCE, 0), cats.pop(APART_BLANK, 0)
    return dict(changed=len(rows), fences=fences, blanks=blanks, counted=sum(cats.values()),
                lever=cats.pop(LEVER, 0), not_lever=cats, default=sum(1 for r in rows if r[1]))


def count(path, verbose):
    a, b = re.findall(r"stage(\d)", path)[-2:]
    old = open(glob.glob(f"stage{a}_*.c")[0]).read().split("\n")
    new = open(glob.glob(f"stage{b}_*.c")[0]).read().split("\n")
    rows = classify_diff(open(path).read(), old, new, int(b))
    t = tally(rows)
    print(f"{path}: {t['changed']} changed lines, {t['fences']} fences and {t['blanks']} blank apart: "
          f"{t['counted']} counted, {t['lever']} the lever ({100 * t['lever'] / max(t['counted'], 1):.1f}%), "
          f"{sum(t['not_lever'].values())} not")
    for k, v in sorted(t["not_lever"].items(), key=lambda kv: -kv[1]):
        print(f"  {v:4d}  {k}")
    print(f"  {t['default']:4d}  of the lever's, placed by default" + (": to read" if t["default"] else ""))
    for c, d, ln, no in rows:
        if verbose or d:
            print(f"  {no:5d} {c + (' (default)' if d else ''):>32}  {ln[:100]}")


def main():
    verbose = "-v" in sys.argv
    for p in sorted(glob.glob("diffs/stage*-stage*.diff")):
        count(p, verbose)


if __name__ == "__main__":
    main()
