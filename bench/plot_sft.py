#!/usr/bin/env python3
"""Plot the masked fine-tune of bench/sft_demo.sh: the training loss (over the completions in each
step's window) and the held-out eval loss against the step.
  python3 bench/plot_sft.py OUT [-o OUT/sft_curve.png]"""
import argparse, json, os
from mpl import pyplot  # bench/mpl.py


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("-o", "--png")
    a = ap.parse_args()
    plt = pyplot()  # or one line naming the install, exit 2
    rows = [json.loads(l) for l in open(os.path.join(a.out, "sft.jsonl")) if l.strip()]
    train = [(r["step"], r["loss"]) for r in rows if "loss" in r]
    ev = [(r["step"], r["eval_loss"]) for r in rows if "eval_loss" in r]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(*zip(*train), "-", lw=1, alpha=0.7, label="training loss (completion tokens of the step's window)")
    ax.plot(*zip(*ev), "o-", ms=4, label="eval loss (held-out books, completions only)")
    ax.set(xlabel="step", ylabel="loss (nats)", yscale="log",
           title="Masked fine-tune: copy task, Qwen3-0.6B slice (4 layers), 4096 tokens/step")
    ax.legend()
    fig.tight_layout()
    png = a.png or os.path.join(a.out, "sft_curve.png")
    fig.savefig(png, dpi=120)
    print(f"wrote {png}: {len(train)} steps, {len(ev)} evaluations; eval loss {ev[0][1]:.3f} -> {ev[-1][1]:.3f}")


if __name__ == "__main__":
    main()
