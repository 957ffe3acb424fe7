#!/usr/bin/env python3
"""Memory against sequence length, one line per stage: each stage's --dry-run peak per GPU for
Qwen3-8B on the headline's machine (stage 1 on one GPU, stages 2-5 on 8; NCCL without NVLS; stages
4-5 with attention recomputed), from 16K to 4M tokens, on log-log axes with the 80 GB line. What
grows with S is what each lever divides: stage 2 leaves it whole, stage 3 divides it by P, stage 4
moves it to the host, stage 5 tiles what remains. No GPU needed.
  python3 bench/memory_by_seq.py [OUT.png]      (default bench/results/memory_by_seq.png)"""
import os, re, subprocess, sys
from mpl import pyplot  # bench/mpl.py

STAGES = [("stage 1: one GPU", ["./stage1"]), ("stage 2: FSDP, 8 GPUs", ["./stage2", "--gpus", "8"]),
          ("stage 3: + ring", ["./stage3", "--gpus", "8"]),
          ("stage 4: + offload", ["./stage4", "--gpus", "8", "--keep-attn", "0"]),
          ("stage 5: + tiles", ["./stage5", "--gpus", "8", "--keep-attn", "0"])]
SEQS = [16384 << i for i in range(9)]  # 16K .. 4M


def peak(cmd, seq):
    env = dict(os.environ, NCCL_NVLS_ENABLE="0")
    out = subprocess.run(cmd + ["--model", "8B", "--seq", str(seq), "--gpu-gib", "74.5", "--dry-run"],
                         capture_output=True, text=True, env=env).stdout  # plans print before any data refusal
    m = re.search(r"total \(peak\)\s+([0-9.]+) GiB", out)
    return float(m.group(1)) if m else None


def main():
    plt = pyplot()  # or one line naming the install, exit 2
    out = sys.argv[1] if len(sys.argv) > 1 else "bench/results/memory_by_seq.png"
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, cmd in STAGES:
        pts = [(s, peak(cmd, s)) for s in SEQS]
        pts = [(s, p) for s, p in pts if p is not None]
        ax.plot([s for s, _ in pts], [p for _, p in pts], marker="o", label=name)
        print(name, " ".join(f"{s >> 10}K:{p:.1f}" for s, p in pts))
    ax.axhline(74.5, color="k", ls="--", lw=1)
    ax.text(SEQS[0], 80, "80 GB GPU (74.5 GiB)")
    ax.set_xscale("log", base=2), ax.set_yscale("log")
    ax.set_xticks(SEQS, [f"{s >> 10}K" if s < 1 << 20 else f"{s >> 20}M" for s in SEQS])
    ax.set_xlabel("tokens per step (the whole sequence)")
    ax.set_ylabel("GiB per GPU (--dry-run plan)")
    ax.set_title("Qwen3-8B: each GPU's plan against the sequence length, by stage")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
