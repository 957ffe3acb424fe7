#!/usr/bin/env bash
# readme_figures.sh -- every figure the README quotes comes from the command printed beside it. For
# each planned figure: the README holds the figure and its command (flags and environment as
# printed), and running that command here prints the figure, to the precision the README gives it.
# For each GPU figure: the README names where it was measured, and RESULTS.md holds it. Also: the
# stage-1 plan block is the program's output line for line. No GPU needed. Prints "N passed, M failed".
set -u
cd "$(dirname "$0")/.."
python3 - <<'PY'
import re, subprocess

readme = open("README.md").read()
results = open("RESULTS.md").read()
passed = failed = 0
outputs = {}


def ok(what, cond):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL", what)


def run(cmd):
    if cmd not in outputs:
        outputs[cmd] = subprocess.run(cmd + " 2>&1", shell=True, capture_output=True, text=True).stdout
    return outputs[cmd]


TOTAL, HOST = r"total \(peak\)\s+([0-9.]+) GiB", r"(?m)^  total\s+([0-9.]+) GiB$"
S4 = "NCCL_NVLS_ENABLE=0 ./stage4 --model 32B --seq 1M --dry-run"
S4N = "NCCL_NVLS_ENABLE=0 ./stage4 --model 32B --seq 1M --offload none --dry-run"
S5N = "NCCL_NVLS_ENABLE=0 ./stage5 --seq 1M --keep-attn none --dry-run"
S5 = "NCCL_NVLS_ENABLE=0 ./stage5 --seq 1048576 --dry-run"
# (the figure as the README prints it, the command printed beside it, what in the output holds it)
FIGURES = [
    ("25.6 GiB", "./stage1 --seq 131072 --dry-run", TOTAL),
    ("14.2 GiB", "./stage1 --seq 131072 --keep-attn --dry-run", r"kept attention \(O, LSE\)\s+([0-9.]+) GiB"),
    ("593.5 GiB", "python3 -c 'print(round(1048576 * 151936 * 4 / 2**30, 1))'", r"([0-9.]+)"),
    ("1021.6 GiB", "NCCL_NVLS_ENABLE=0 ./stage2 --model 32B --seq 1M --dry-run", TOTAL),
    ("205.7 GiB", "NCCL_NVLS_ENABLE=0 ./stage3 --model 32B --seq 1M --dry-run", TOTAL),
    ("58.8 GiB", S4, TOTAL),
    ("148.7 GiB", S4, HOST),
    ("1189.2 GiB", S4, r"per node \(8 ranks\): ([0-9.]+) GiB"),
    ("35.4", S4N, r"working set\s+([0-9.]+) GiB"),
    ("4.0", S4N, r"cuDNN workspace\s+([0-9.]+) GiB"),
    ("33.5 GiB", S5N, TOTAL),
    ("13.6 GiB", S5N, r"working set\s+([0-9.]+) GiB"),
    ("0.5 GiB", S5N, r"cuDNN workspace\s+([0-9.]+) GiB"),
    ("74.1 GiB", S5, TOTAL),
    ("18 layers on the GPU", S5, r"attention kept: (\d+) layers on the GPU"),
    ("53.5 GiB", "NCCL_NVLS_ENABLE=0 ./stage5 --model Qwen3.5-27B --seq 1M --dry-run", TOTAL),
]
for fig, cmd, pat in FIGURES:
    ok(f"README quotes {fig!r} beside `{cmd}`", fig in readme and cmd in readme)
    want = re.match(r"[0-9.]+", fig).group(0)
    m = re.search(pat, run(cmd))
    got = None
    if m:
        d = len(want.split(".")[1]) if "." in want else 0
        got = f"{float(m.group(1)):.{d}f}"
    print(f"  {fig:>22}  <- {got!s:>9}  {cmd}")
    ok(f"`{cmd}` prints {fig} (got {got})", got == want)

# lines the README shows as the program prints them
for line, cmd in [("attention kept: 18 layers on the GPU, 40 on the host, 6 recompute", S5),
                  ("holds 1 window of 1048576+1 tokens; 8 data-parallel ranks need",
                   "NCCL_NVLS_ENABLE=0 ./stage2 --model 32B --seq 1M --dry-run")]:
    ok(f"`{cmd}` prints {line!r}", line in run(cmd))

# the stage-1 plan block: every line the README shows, in the program's output, in order
block = re.search(r"```\n\$ (\./stage1 --seq 131072 --dry-run)[^\n]*\n(.*?)```", readme, re.S)
ok("README shows the stage-1 plan block with its command", block is not None)
if block:
    out = run(block.group(1)).splitlines()
    shown = block.group(2).rstrip("\n").splitlines()
    at = out.index(shown[0]) if shown[0] in out else -1
    ok("the stage-1 plan block is the program's output, line for line", at >= 0 and out[at:at + len(shown)] == shown)

# the zigzag picture's claim: every rank does the same work (8 block-units at P = 4)
grid = [l.split() for l in run("./build/zigzag_grid 4").splitlines() if l and not l.startswith("#")]
work = {}
for step, r, q, k, kind in grid:
    work[r] = work.get(r, 0) + {"full": 1, "diag": 0.5, "skip": 0}[kind]
ok(f"./build/zigzag_grid 4: 8 block-units per rank (got {work})", work and set(work.values()) == {8.0})
ok("README says so", "Every rank does 8 block-units of work" in readme)

# the balanced layout's claim: on bench/packed_window.py's 1M window, 8 ranks, the busiest rank's pairs
# against the mean: 1.79x on the zigzag, 1.02x balanced, as common/layout.c lays the window out
cmd = "python3 bench/packed_window.py W.tok && ./build/layout_grid 8 --tok W.tok"
import tempfile, os
with tempfile.TemporaryDirectory() as d:
    out = subprocess.run(cmd.replace("W.tok", os.path.join(d, "W.tok")) + " 2>&1", shell=True,
                         capture_output=True, text=True).stdout
bal = re.findall(r"balance: busiest rank ([0-9.]+)x the mean", out)
ok(f"README quotes `{cmd}` and its 1.79x and 1.02x (layout_grid gives {bal})",
   cmd in readme and "1.79x the mean rank's pairs" in readme and "falls to 1.02x" in readme and bal == ["1.79", "1.02"])

# GPU figures: named beside where they were measured, and held by RESULTS.md
for fig, where in [("946.4 s", "The ladder's closing table"), ("73.3 GiB", "The ladder's closing table"),
                   ("1295 s", "The ladder's closing table"), ("1.6% of the step for 15.8 GiB", "Stage 4: offload"),
                   ("2.6% a layer", "Stage 5: sequence tiling and YaRN"),
                   ("167 s", "The whole ladder: checks and the workshop"),
                   ("3.488 s", "Packed documents"), ("4.303 s", "Packed documents"), ("15.449 s", "Packed documents"),
                   ("1.79x", "Packed documents"), ("about 380 s", "Qwen3.5 hybrids"),
                   ("3.0x faster forward at 32K", "Qwen3.5: the tiled rule"), ("5.8x faster", "Qwen3.5: the tiled rule"),
                   ("3.1x at 8K", "Qwen3.5: the tiled rule"), ("at most 4.9x", "Qwen3.5: the tiled rule"),
                   ("2.3x faster at 32K", "Qwen3.5: the tiled rule"), ("28.2 GiB", "Qwen3.5: the tiled rule"),
                   ("43.4 GiB", "Qwen3.5: the tiled rule"), ("1.61x", "Qwen3.5: the tiled rule")]:
    ok(f"README quotes the GPU figure {fig!r} and names RESULTS.md's {where!r}", fig in readme and where in readme)
    num = re.search(r"[0-9.]+%?", fig).group(0)
    ok(f"RESULTS.md holds {num} and has the section {where!r}", num in results and where in results)

print(f"{passed} passed, {failed} failed")
raise SystemExit(1 if failed else 0)
PY
