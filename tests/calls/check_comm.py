#!/usr/bin/env python3
"""Check one CPU-faked run's records of its ranks' collectives (RUN/rank<R>.comm, tests/calls/fake_nccl.c
says what a line holds): prints what is wrong, exits 1 if anything is.
    check_comm.py RUN [--like REF] [--no-order]
  - every rank of the run issued the same sequence of collectives and fences (kind, count, type,
    peers relative to the rank): the ranks of one job must, or NCCL hangs or moves the wrong bytes;
  - --like REF: each rank's collectives of the communicator ("C comm" lines, less the warm-up, which
    only NCCL runs) are REF's same rank's: a faked-NCCL run against the local backend's, a rehearsed
    rank against the same rank of local ranks (what the rehearsal stands for);
  - the allocation rule (common/comm.h), unless --no-order (a rehearsal is one thread): a rank thread
    allocates or frees (A) only before its first collective, or after a fence (F) with no collective
    (C) between; a fence comes between every allocation and the rank's next collective; and that
    next collective is the job-wide barrier ("C barrier"), so the ranks' drift through set-up
    (pinning, loading) never runs on --comm-timeout's clock. The record "C comm warm-up" is the
    call, not a collective: NCCL's own are recorded in it.
"""
import glob
import os
import re
import sys


def records(run):
    out = {}
    for p in glob.glob(os.path.join(run, "rank*.comm")):
        r = int(re.search(r"rank(-?\d+)\.comm$", p).group(1))
        if r >= 0:
            out[r] = [l.rstrip("\n") for l in open(p)]
    return out


def sequence(lines):
    return [l for l in lines if l[:2] in ("C ", "F ")]


def api(lines):
    return [l for l in lines if l.startswith("C comm ") and l != "C comm warm-up"]


def order(lines):
    """the allocation rule's breaches in one rank's record: (line number, message)"""
    bad, last_c, fenced, pending, allocated = [], None, False, None, None
    for i, l in enumerate(lines, 1):
        kind = l[:2]
        if kind == "X ":
            bad.append((i, l[2:]))
        elif kind == "F ":
            fenced, pending = True, None
        elif kind == "A ":
            if last_c and not fenced:
                bad.append((i, f"'{l[2:]}' after the collective '{last_c[1]}' (line {last_c[0]}) with no fence "
                               "between: another rank thread's collective may be in flight"))
            if not pending:
                pending = (i, l[2:])
            allocated = allocated or (i, l[2:])
        elif kind == "C " and l != "C comm warm-up":
            if pending:
                bad.append((i, f"the collective '{l[2:]}' follows '{pending[1]}' (line {pending[0]}) with no fence "
                               "between: another rank thread may still be allocating"))
            if allocated and not l.startswith("C barrier"):
                bad.append((i, f"the first collective after the allocation '{allocated[1]}' (line {allocated[0]}) is "
                               f"'{l[2:]}', not the job-wide barrier: a rank's set-up would run on its clock"))
            last_c, fenced, pending, allocated = (i, l[2:]), False, None, None
    return bad


def main():
    args = sys.argv[1:]
    check_order = "--no-order" not in args
    args = [a for a in args if a != "--no-order"]
    ref = None
    if "--like" in args:
        k = args.index("--like")
        ref = args[k + 1]
        del args[k:k + 2]
    run = args[0]
    recs = records(run)
    problems = []
    if not recs:
        problems.append("no rank recorded anything")
    ranks = sorted(recs)
    if ranks:
        first = sequence(recs[ranks[0]])
        if not any(l.startswith("C ") for l in first):
            problems.append(f"rank {ranks[0]} recorded no collective")
        for r in ranks[1:]:
            mine = sequence(recs[r])
            if mine == first:
                continue
            k = next((i for i, (a, b) in enumerate(zip(first, mine)) if a != b), min(len(first), len(mine)))
            a = first[k] if k < len(first) else "(nothing: its record ends)"
            b = mine[k] if k < len(mine) else "(nothing: its record ends)"
            problems.append(f"ranks {ranks[0]} and {r} differ at their event {k + 1}: '{a}' against '{b}'")
    if ref:
        theirs = records(ref)
        for r in ranks:
            if r not in theirs:
                problems.append(f"{ref} has no rank {r}")
                continue
            a, b = api(theirs[r]), api(recs[r])
            if a != b:
                k = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                x = a[k] if k < len(a) else "(nothing)"
                y = b[k] if k < len(b) else "(nothing)"
                problems.append(f"rank {r}'s collective {k + 1} is '{y}', {os.path.basename(ref)}'s '{x}'")
    if check_order:
        for r in ranks:
            for i, m in order(recs[r])[:3]:
                problems.append(f"rank {r}, line {i}: {m}")
    for p in problems:
        print("   ", p)
    n = len(api(recs[ranks[0]])) if ranks else 0
    print(f"    {len(ranks)} rank(s), {n} collectives each")
    return 1 if problems else 0


sys.exit(main())
