#!/usr/bin/env python3
"""The memory-by-stage chart for the README: Qwen3-32B at 1,048,576 tokens on 8 GPUs, each stage's
--dry-run plan per GPU (no GPU needed), stacked by arena, with the 80 GB line. Stage 1 cannot plan
it (one cuDNN call would pass 2^31 elements), so the first bar is stage 2: FSDP, every rank the
whole sequence. Stages 4-5 recompute attention here (--keep-attn 0); the last bar is stage 5 with
kept attention placed on an 80 GB GPU.

  python3 bench/memory_chart.py [OUT.png]      (default bench/results/memory_by_stage.png)"""
import os, re, subprocess, sys

RUNS = [("stage 2\nFSDP", ["./stage2", "--gpus", "8"]),
        ("stage 3\n+ ring", ["./stage3", "--gpus", "8"]),
        ("stage 4\n+ offload", ["./stage4", "--gpus", "8", "--keep-attn", "0"]),
        ("stage 5\n+ tiles", ["./stage5", "--gpus", "8", "--keep-attn", "0"]),
        ("stage 5\n+ kept O", ["./stage5", "--gpus", "8", "--gpu-gib", "74.5", "--host-gib", "2048"])]


def plan(cmd):
    env = dict(os.environ, NCCL_NVLS_ENABLE="0")  # NCCL without NVLS, as the GPUs here run it
    out = subprocess.run(cmd + ["--model", "32B", "--seq", "1M", "--dry-run"], capture_output=True, text=True,
                         env=env, check=True).stdout
    gpu = {}
    for line in out.split("pinned host memory")[0].splitlines():
        m = re.match(r"  (.+?)\s+([0-9.]+) GiB$", line)
        if m and not m.group(1).startswith("total"):
            gpu[m.group(1)] = float(m.group(2))
    return gpu


def main():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    out = sys.argv[1] if len(sys.argv) > 1 else "bench/results/memory_by_stage.png"
    plans = [(name, plan(cmd)) for name, cmd in RUNS]
    arenas = []
    for _, p in plans:
        arenas += [a for a in p if a not in arenas]
    fig, ax = plt.subplots(figsize=(9, 5))
    base = [0.0] * len(plans)
    for a in arenas:
        h = [p.get(a, 0.0) for _, p in plans]
        ax.bar(range(len(plans)), h, bottom=base, label=a)
        base = [b + x for b, x in zip(base, h)]
    for i, t in enumerate(base):  # a bar past the top says its height inside it
        ax.text(i, t + 3 if t < 290 else 280, f"{t:.1f} GiB", ha="center", color="k" if t < 290 else "w")
    ax.axhline(74.5, color="k", ls="--", lw=1)
    ax.text(2.55, 77, "80 GB GPU (74.5 GiB)", ha="center")
    ax.set_ylim(0, 300)
    ax.set_xticks(range(len(plans)), [n for n, _ in plans])
    ax.set_ylabel("GiB per GPU (--dry-run plan)")
    ax.set_title("Qwen3-32B, 1,048,576 tokens, 8 GPUs: the plan per GPU, by stage")
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    for (n, p), t in zip(plans, base):
        print(f"{n.replace(chr(10), ' '):22s} {t:8.1f} GiB")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
