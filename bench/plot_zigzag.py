#!/usr/bin/env python3
"""The zigzag x ring-step picture for the README's stage 3: the causal attention of one sequence cut
into 2P chunks, as a grid of (query chunk, K/V chunk) blocks. Each block that is computed is
coloured by the rank that computes it and labelled with the ring step at which it does; the
diagonal blocks (half a block under the causal mask) are hatched; the blocks above the diagonal
are never computed. Read from ./build/zigzag_grid (common/zigzag.c's own schedule); no GPU.
  python3 bench/plot_zigzag.py [P] [OUT.png]     (default 4, bench/results/zigzag_ring.png)
With packed documents (--packing), the same grid at token scale with the blocks each rank's calls
are cut into (common/docs.c, through ./build/zigzag_grid P S START...): rectangles where keys
precede every query, triangles on a document's own diagonal, nothing where chunks share no
document (no kernel runs there):
  python3 bench/plot_zigzag.py 4 bench/results/zigzag_docs.png --docs 64 0 5 6 20 41"""
import subprocess, sys
from mpl import pyplot  # bench/mpl.py


def schedule(P):
    out = subprocess.run(["./build/zigzag_grid", str(P)], capture_output=True, text=True, check=True).stdout
    rows = [l.split() for l in out.splitlines() if l and not l.startswith("#")]
    return [(int(s), int(r), int(q), int(k), kind) for s, r, q, k, kind in rows]


def docs_main(P, out, S, starts):
    plt = pyplot()  # or one line naming the install, exit 2
    from matplotlib.patches import Polygon, Rectangle
    txt = subprocess.run(["./build/zigzag_grid", str(P), str(S)] + [str(x) for x in starts], capture_output=True,
                         text=True, check=True).stdout
    blocks = [tuple(int(v) for v in l.split()[1:]) for l in txt.splitlines() if l.startswith("block")]
    colors = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(7.2, 6.4))
    c = S // (2 * P)
    work, pairs = {r: 0 for r in range(P)}, 0
    for step, r, q0, nq, k0, nk, causal in blocks:
        top = S - q0
        if causal:
            ax.add_patch(Polygon([(k0, top), (k0, top - nq), (k0 + nk, top - nq)], closed=True, facecolor=colors(r),
                                 alpha=0.6, edgecolor="k", lw=0.5))
            n = nq * (nq + 1) // 2
        else:
            ax.add_patch(Rectangle((k0, top - nq), nk, nq, facecolor=colors(r), alpha=0.6, edgecolor="k", lw=0.5))
            n = nq * nk
        work[r] += n
        pairs += n
        cx, cy = (k0 + nk / 3, top - 2 * nq / 3) if causal else (k0 + nk / 2, top - nq / 2)
        if nq * nk >= 16:
            ax.text(cx, cy, f"step {step}", ha="center", va="center", fontsize=7)
    for x in range(0, S + 1, c):  # the chunks
        ax.axvline(x, color="0.75", lw=0.6), ax.axhline(S - x, color="0.75", lw=0.6)
    for x in starts[1:]:  # document boundaries
        ax.axvline(x, color="k", lw=0.8, ls="--"), ax.axhline(S - x, color="k", lw=0.8, ls="--")
    ax.plot([0, S], [S, 0], color="0.5", lw=0.5)
    ax.set_xlim(0, S), ax.set_ylim(0, S)
    ax.set_xticks(range(0, S + 1, c)), ax.set_yticks([S - y for y in range(0, S + 1, c)], [str(y) for y in range(0, S + 1, c)])
    ax.set_xlabel("key position (K/V sent around the ring)")
    ax.set_ylabel("query position")
    for r in range(P):
        ax.add_patch(Rectangle((0, 0), 0, 0, facecolor=colors(r), alpha=0.6, label=f"rank {r}: {work[r]} pairs"))
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(f"Packed documents (dashed: boundaries at {', '.join(str(x) for x in starts[1:])}) over P = {P} ranks:\n"
                 f"each block at its ring step, {pairs} of {S * (S + 1) // 2} causal pairs; white: no kernel", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print("pairs per rank:", work, f"total {pairs} of {S * (S + 1) // 2}")
    print(f"wrote {out}")


def main():
    if "--docs" in sys.argv:
        i = sys.argv.index("--docs")
        P, out = int(sys.argv[1]), sys.argv[2]
        S, starts = int(sys.argv[i + 1]), [int(x) for x in sys.argv[i + 2:]]
        return docs_main(P, out, S, starts)
    P = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    out = sys.argv[2] if len(sys.argv) > 2 else "bench/results/zigzag_ring.png"
    plt = pyplot()  # or one line naming the install, exit 2
    from matplotlib.patches import Rectangle
    cells = [x for x in schedule(P) if x[4] != "skip"]
    seen = {(q, k) for _, _, q, k, _ in cells}
    assert len(seen) == len(cells) == 2 * P * (2 * P + 1) // 2, "each causal block exactly once"
    colors = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(7.2, 6.4))
    n = 2 * P
    for s, r, q, k, kind in cells:
        ax.add_patch(Rectangle((k, n - 1 - q), 1, 1, facecolor=colors(r), alpha=0.55 if kind == "full" else 0.35,
                               hatch="//" if kind == "diag" else None, edgecolor="k", lw=0.6))
        ax.text(k + 0.5, n - 0.5 - q, f"step {s}", ha="center", va="center", fontsize=8)
    for q in range(n):
        for k in range(q + 1, n):
            ax.add_patch(Rectangle((k, n - 1 - q), 1, 1, facecolor="0.95", edgecolor="0.8", lw=0.4))
    ax.set_xlim(0, n), ax.set_ylim(0, n)
    ax.set_xticks([k + 0.5 for k in range(n)], [f"{k}" for k in range(n)])
    ax.set_yticks([n - 0.5 - q for q in range(n)], [f"{q} (rank {q if q < P else n - 1 - q})" for q in range(n)])
    ax.set_xlabel("K/V chunk (sent around the ring)")
    ax.set_ylabel("query chunk (the rank that holds it)")
    for r in range(P):
        ax.add_patch(Rectangle((0, 0), 0, 0, facecolor=colors(r), alpha=0.55, label=f"rank {r}: chunks {r} and {n - 1 - r}"))
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(f"Zigzag over P = {P} ranks: each block once, at the ring step shown\n"
                 "(hatched: the causal diagonal, half a block; grey: never computed)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    work = {r: sum(0.5 if kind == "diag" else 1 for _, rr, _, _, kind in cells if rr == r) for r in range(P)}
    print("blocks of work per rank:", work)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
