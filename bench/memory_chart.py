#!/usr/bin/env python3
"""The memory-by-stage chart for the README: Qwen3-32B at 1,048,576 tokens, each stage's --dry-run
plan per GPU (no GPU needed), stacked by arena, on a log scale so that no bar is cut, with the 80 GB
line. Stage 1 is one GPU holding everything (its plan says the run would stop: one cuDNN call would
pass 2^31 elements); stage 2 is 8 GPUs with FSDP, every rank the whole sequence (its run would also
need 8 windows of data); stages 3-5 share one sequence over 8. Stages 4-5 recompute attention here
(--keep-attn 0); the last bar is stage 5 with kept attention placed on an 80 GB GPU.

  python3 bench/memory_chart.py [OUT.png]      (default bench/results/memory_by_stage.png)"""
import os, re, subprocess, sys
from mpl import pyplot  # bench/mpl.py

RUNS = [("stage 1\none GPU", ["./stage1", "--gpu-gib", "74.5"]),
        ("stage 2\nFSDP", ["./stage2", "--gpus", "8"]),
        ("stage 3\n+ ring", ["./stage3", "--gpus", "8"]),
        ("stage 4\n+ offload", ["./stage4", "--gpus", "8", "--keep-attn", "0"]),
        ("stage 5\n+ tiles", ["./stage5", "--gpus", "8", "--keep-attn", "0"]),
        ("stage 5\n+ kept O", ["./stage5", "--gpus", "8", "--gpu-gib", "74.5", "--host-gib", "2048"])]


def plan(cmd):
    env = dict(os.environ, NCCL_NVLS_ENABLE="0")  # NCCL without NVLS, as the GPUs here run it
    out = subprocess.run(cmd + ["--model", "32B", "--seq", "1M", "--dry-run"], capture_output=True, text=True,
                         env=env).stdout  # a plan printed, then perhaps the inputs' refusal (stage 2's data)
    assert "total (peak)" in out, out
    gpu = {}
    for line in out.split("pinned host memory")[0].splitlines():
        m = re.match(r"  (.+?)\s+([0-9.]+) GiB$", line)
        if m and not m.group(1).startswith("total"):
            gpu[m.group(1)] = float(m.group(2))
    return gpu


def bars(ax, plans, arenas, colors, ymax, line):
    base = [0.0] * len(plans)
    for a in arenas:
        h = [p.get(a, 0.0) for _, p in plans]
        ax.bar(range(len(plans)), h, bottom=base, label=a, color=colors[a])
        base = [b + x for b, x in zip(base, h)]
    for i, t in enumerate(base):
        ax.text(i, t + ymax * 0.015, f"{t:.1f} GiB", ha="center", fontsize=9)
    if line:
        ax.axhline(74.5, color="k", ls="--", lw=1)
        ax.text(-0.45, 76, "80 GB GPU (74.5 GiB)", fontsize=8)
    ax.set_ylim(0, ymax)
    ax.set_xticks(range(len(plans)), [n for n, _ in plans], fontsize=8)
    return base


def main():
    plt = pyplot()  # or one line naming the install, exit 2
    out = sys.argv[1] if len(sys.argv) > 1 else "bench/results/memory_by_stage.png"
    plans = [(name, plan(cmd)) for name, cmd in RUNS]
    arenas = []
    for _, p in plans:
        arenas += [a for a in p if a not in arenas]
    cmap = plt.get_cmap("tab10")
    colors = {a: cmap(i % 10) for i, a in enumerate(arenas)}
    # two panels, both to scale: what does not fit (stages 1-3, up to 1.6 TiB), then what does (3-5)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 5), gridspec_kw={"width_ratios": [3, 4]})
    bars(a1, plans[:3], arenas, colors, 1650, True)
    base = bars(a2, plans[2:], arenas, colors, 230, True)
    a1.set_ylabel("GiB per GPU (--dry-run plan)")
    a1.set_title("stages 1-3: the sequence on every GPU", fontsize=10)
    a2.set_title("stages 3-5: a share of it, then off the GPU", fontsize=10)
    a2.legend(fontsize=7, loc="upper right")
    fig.suptitle("Qwen3-32B, 1,048,576 tokens, 8 GPUs (stage 1: one): the plan per GPU, by stage")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    for n, p in plans:
        print(f"{n.replace(chr(10), ' '):22s} {sum(p.values()):8.1f} GiB")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
