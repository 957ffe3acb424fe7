#!/usr/bin/env python3
"""Plot a results folder: loss against step for the C trainer and transformers (same init,
data, hyper-parameters), and tokens/s against sequence length for stage 1 and the PyTorch peer.
  python3 bench/plot.py bench/results/2026-12-02_h200 [-o out.png]"""
import argparse, glob, json, os, statistics
from mpl import pyplot  # bench/mpl.py


def lines(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("-o", "--out")
    a = ap.parse_args()
    plt = pyplot()  # or one line naming the install, exit 2
    fig, (l, r) = plt.subplots(1, 2, figsize=(12, 4.5))
    c, h = lines(os.path.join(a.results, "c_books.jsonl")), lines(os.path.join(a.results, "hf_books.jsonl"))
    l.plot([x["step"] for x in c], [x["loss"] for x in c], "o-", ms=3, label="longctx.c stage 1")
    l.plot([x["step"] for x in h], [x["loss"] for x in h], "x--", ms=4, label="transformers (same init, data, AdamW)")
    l.set(xlabel="step", ylabel="loss (nats)", title="Qwen3-0.6B on the books, 8,192 tokens/step")
    l.legend()
    series = {"stage 1, checkpointing": {}, "stage 1, --keep-attn": {}}
    for p in glob.glob(os.path.join(a.results, "c_0.6B_*.jsonl")):
        rows = [x for x in lines(p) if x.get("step", 0) > 1] or lines(p)
        key = "stage 1, --keep-attn" if rows[0].get("keep_attn") else "stage 1, checkpointing"
        series[key][rows[0]["seq"]] = statistics.median(x["tokens_per_s"] for x in rows)
    series["PyTorch peer (cuDNN SDPA)"] = {x["seq"]: x["tokens_per_s"] for x in lines(os.path.join(a.results, "peer.jsonl"))
                                           if x["model"] == "0.6B" and "tokens_per_s" in x}
    for name, pts in series.items():
        xs = sorted(pts)
        r.plot(xs, [pts[x] for x in xs], "o-", label=name)
    r.set(xscale="log", yscale="log", xlabel="sequence length (tokens)", ylabel="tokens/s",
          title="Qwen3-0.6B training throughput, one H200")
    r.minorticks_off()
    r.set_xticks([16384, 65536, 131072, 524288], ["16K", "64K", "128K", "512K"])
    r.set_yticks([2000, 5000, 10000, 20000, 40000], ["2K", "5K", "10K", "20K", "40K"])
    r.legend()
    fig.tight_layout()
    out = a.out or os.path.join(a.results, "stage1.png")
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main()
