#!/usr/bin/env python3
"""How much of a stage diff is its lever: every changed line of diffs/stageA-stageB.diff sorted into
the lever (the new code, its option, its plan rows, the header paragraph, title and examples that
present it) or not: the previous stage's header paragraph going out, the stage number, the plan's
title line, the headline's advice, and (stage 5) the MoE model's plumbing, which is not a lever.
    python3 bench/lever_count.py            # every diff, one table each
The sorting is by pattern, then read by hand (the closing notes quote its numbers)."""
import re, sys, glob

NOT_LEVER = [
    ("stage number", r"define STAGE"),
    ("plan title", r'snprintf\(title|"kept for|M\.c\.experts \? ", MoE|\(long long\)M\.S, M\.o\.merge|'
                   r'M\.o\.offload, \(long long\)M\.kept|M\.o\.ranks\.rehearse >= 0 \? ", rehearsed"|'
                   r'M\.o\.keep_attn \? ", --keep-attn"'),
    ("headline advice (operations)", r"advice|advise_|FitAsk|\.ranks = &M\.o\.ranks, \.gpu_gib"),
]
MOE = ("MoE model (not the lever)", r"moe|expert|aux_term|aux =|router|MOE_[WG]|->aux\b")


def count(path, n):
    lines = open(path).read().split("\n")
    head_end = next(i for i, x in enumerate(lines) if i > 2 and x.rstrip().endswith("*/"))
    cats = {}
    for i, x in enumerate(lines):
        if x.startswith(("+++", "---")) or x[:1] not in "+-" or not x[1:].strip():
            continue
        body = x[1:]
        if i <= head_end:  # the file's header comment
            c = "header: the previous stage's paragraph out" if x[0] == "-" and not re.search(
                r"^ \*   (make stage|\./stage)|^/\* stage", body) else "lever (header: title, paragraph, examples)"
        else:
            c = next((name for name, pat in NOT_LEVER if re.search(pat, body)), None)
            if c is None and n == 5 and re.search(MOE[1], body, re.I):
                c = MOE[0]
            c = c or "lever"
        cats[c] = cats.get(c, 0) + 1
    total = sum(cats.values())
    lever = sum(v for k, v in cats.items() if k.startswith("lever"))
    print(f"{path}: {total} changed lines, {lever} lever ({100 * lever / total:.1f}%)")
    for k, v in sorted(cats.items(), key=lambda kv: -kv[1]):
        print(f"  {v:4d}  {k}")


for p in sorted(glob.glob("diffs/stage*-stage*.diff")):
    count(p, int(re.findall(r"stage(\d)", p)[-1]))
