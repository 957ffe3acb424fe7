#!/usr/bin/env python3
"""Packed documents over context-parallel ranks, balanced (common/layout.h, docs/packed_balance.md):
the picture for the README's packed-documents section. Read from ./build/layout_grid (the layout code
itself); no GPU.

Left: a small window's causal attention as (query position, key position), each block of the
balanced layout coloured by the rank that computes it and labelled with its ring step (triangles: a
piece against itself, step 0; rectangles: keys of an earlier piece of the same document); the strip
on the left says which rank holds each query position; dashed lines are document boundaries; white
is never computed. Middle: that window's pairs per rank in the whole-window zigzag and in the balanced
layout. Right: the same for the 1M window of bench/packed_window.py --seed 1 (23 documents of 1K-256K
tokens) on 8 ranks, the case that motivates it.
  python3 bench/plot_layout.py [OUT.png] [--whole F] [--docs P S START...]
  (defaults: bench/results/layout_docs.png --whole 0.1 --docs 4 256 0 120 180 200 212 220 236 240: two long
  documents split over the 4 ranks, six kept whole)"""
import subprocess, sys
from mpl import pyplot  # bench/mpl.py

SEED1 = [0, 2157, 38530, 48266, 50109, 69428, 70490, 128652, 130129, 233787, 338304, 364203, 365235, 381572, 402857,
         505707, 714271, 837774, 844382, 880952, 962811, 975639, 998812]


def grid(P, S, starts, whole, detail):
    args = ["./build/layout_grid", "--whole", str(whole)] + (["--pieces", "--blocks"] if detail else [])
    out = subprocess.run(args + [str(P), str(S)] + [str(x) for x in starts], capture_output=True, text=True,
                         check=True).stdout
    res = {"zigzag": {"pairs": [], "tokens": [], "pieces": [], "blocks": []},
           "balanced": {"pairs": [], "tokens": [], "pieces": [], "blocks": []}}
    cur = None
    for line in out.splitlines():
        w = line.split()
        if line.startswith("zigzag ("):
            cur = "zigzag"
        elif line.startswith("balanced ("):
            cur = "balanced"
        elif line.startswith("rank ") and cur:
            res[cur]["tokens"].append(int(w[2]))
            res[cur]["pairs"].append(int(w[4]))
        elif w and w[0] == "piece":
            res[w[1]]["pieces"].append(tuple(int(x) for x in w[2:]))
        elif w and w[0] == "block":
            res[w[1]]["blocks"].append(tuple(int(x) for x in w[2:]))
        elif line.startswith("bound:") and cur:
            res[cur]["split"] = int(line.split(";")[1].split()[0])
    return res


def bars(ax, res, P, title, colors):
    x = list(range(P))
    mean = sum(res["balanced"]["pairs"]) / P
    for i, (name, hatch) in enumerate((("zigzag", "//"), ("balanced", None))):
        p = res[name]["pairs"]
        if not p:
            continue
        ax.bar([r + (i - 0.5) * 0.4 for r in x], [v / mean for v in p], 0.4, color=[colors(r) for r in range(P)],
               alpha=0.35 if name == "zigzag" else 0.8, hatch=hatch, edgecolor="k", lw=0.5,
               label=f"{name}: busiest {max(p) / mean:.2f}x")
    ax.axhline(1, color="k", lw=0.8, ls="--")
    ax.set_xticks(x, [str(r) for r in range(P)])
    ax.set_xlabel("rank (each holds S/P tokens in both layouts)")
    ax.set_ylabel("causal pairs / the mean rank's")
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(title, fontsize=9)


def main():
    argv = sys.argv[1:]
    whole, P, S, starts = 0.1, 4, 256, [0, 120, 180, 200, 212, 220, 236, 240]
    if "--whole" in argv:
        i = argv.index("--whole")
        whole = float(argv[i + 1])
        del argv[i:i + 2]
    if "--docs" in argv:
        i = argv.index("--docs")
        P, S, starts = int(argv[i + 1]), int(argv[i + 2]), [int(x) for x in argv[i + 3:]]
        del argv[i:]
    out = argv[0] if argv else "bench/results/layout_docs.png"
    plt = pyplot()  # or one line naming the install, exit 2
    from matplotlib.patches import Polygon, Rectangle
    small = grid(P, S, starts, whole, True)
    big = grid(8, 1 << 20, SEED1, 1 / 32, False)
    fig, axes = plt.subplots(1, 3, figsize=(16, 5.8), gridspec_kw={"width_ratios": [1.35, 0.8, 0.8]})
    colors = plt.get_cmap("tab10")
    ax = axes[0]
    B = small["balanced"]
    for step, r, q0, nq, k0, nk, diag, doc in B["blocks"]:
        top = S - q0
        if diag:
            ax.add_patch(Polygon([(k0, top), (k0, top - nq), (k0 + nk, top - nq)], closed=True, facecolor=colors(r),
                                 alpha=0.6, edgecolor="k", lw=0.4))
        else:
            ax.add_patch(Rectangle((k0, top - nq), nk, nq, facecolor=colors(r), alpha=0.6, edgecolor="k", lw=0.4))
        if nq * nk >= 40:
            cx, cy = (k0 + nk / 3, top - 2 * nq / 3) if diag else (k0 + nk / 2, top - nq / 2)
            ax.text(cx, cy, str(step), ha="center", va="center", fontsize=6)
    strip = max(2, S // 40)
    for rank, doc, st, ln, pos, row in B["pieces"]:  # who holds each query position
        ax.add_patch(Rectangle((-strip - 1, S - st - ln), strip, ln, facecolor=colors(rank), edgecolor="k", lw=0.3,
                               clip_on=False))
    for x in starts[1:]:
        ax.axvline(x, color="k", lw=0.7, ls="--"), ax.axhline(S - x, color="k", lw=0.7, ls="--")
    ax.plot([0, S], [S, 0], color="0.5", lw=0.5)
    ax.set_xlim(-strip - 1, S), ax.set_ylim(0, S)
    ticks = [0]
    for t in starts[1:] + [S]:  # boundaries, leaving out those too close to the last one shown
        if t - ticks[-1] >= S / 25 or t == S:
            ticks = ticks[:-1] + [t] if t == S and t - ticks[-1] < S / 25 else ticks + [t]
    ax.set_xticks(ticks), ax.set_yticks([S - y for y in ticks], [str(y) for y in ticks])
    ax.set_xlabel("key position (K/V sent around the ring)")
    ax.set_ylabel("query position (strip: the rank that holds it)")
    work = B["pairs"]
    for r in range(P):
        ax.add_patch(Rectangle((0, 0), 0, 0, facecolor=colors(r), alpha=0.6,
                               label=f"rank {r}: {B['tokens'][r]} tokens, {work[r]} pairs"))
    ax.legend(loc="upper right", fontsize=7)
    spread = len({p[1] for p in B["pieces"] if sum(1 for x in B["pieces"] if x[1] == p[1]) > 1})
    cut = spread - B["split"]
    ax.set_title(f"Balanced layout, P = {P}, {S} tokens, documents at {', '.join(str(x) for x in starts)}:\n"
                 f"{B['split']} split over every rank, {len(starts) - spread} whole"
                 + (f", {cut} cut at a rank's edge" if cut else "") + " (numbers: each block's ring step)", fontsize=9)
    bars(axes[1], small, P, "that window: pairs per rank\n(zigzag needs S % 2P = 0)", colors)
    bars(axes[2], big, 8, "the seed-1 1M window (bench/packed_window.py),\n23 documents of 1K-256K tokens, P = 8", colors)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    for name, res in (("small window", small), ("seed-1 1M", big)):
        for lay in ("zigzag", "balanced"):
            p = res[lay]["pairs"]
            if p:
                print(f"{name} {lay}: pairs per rank {p}, busiest {max(p) * len(p) / sum(p):.4f}x the mean")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
