#!/usr/bin/env python3
"""The linear layers' state under context parallelism (stage 3), as a picture: the 2P zigzag chunks of
one sequence in sequence order, coloured by the rank that holds each, with the state maps composed
forward (left to right: chunk c takes the state before it to the state after it, S M_c + B_c) and
backward (right to left: the gradient of the state after chunk c to the gradient of the state before
it, dS M_c^T + C_c). For one rank the maps it composes are drawn bold, the others grey, and its chunks'
initial states (forward) and final states' gradients (backward) are marked where the walk reaches them.
docs/context_parallel_state.md derives it; stage3_context_parallel.c's linear_states and
linear_state_grads are the walks drawn. No GPU.
  python3 bench/plot_cp_state.py [P] [OUT.png] [--rank R]   (default 4, bench/results/cp_state.png, rank 1)
Which rank holds which chunk comes from ./build/zigzag_grid P (common/zigzag.c's own schedule) where it
is built, else from the zigzag rule itself (rank r holds chunks r and 2P-1-r)."""
import os
import subprocess
import sys

ME = "plot_cp_state"
P_MAX = 16  # past this the labels no longer fit


def refuse(msg):
    """bad input: the message on stderr, exit 2 (as the stages do)"""
    print(f"{ME}: {msg}", file=sys.stderr)
    sys.exit(2)


def parse(argv):
    pos, rank = [], None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--rank":
            if i + 1 >= len(argv):
                refuse("--rank needs a rank number")
            rank = argv[i + 1]
            i += 2
            continue
        if a.startswith("-") and not a.lstrip("-").isdigit():
            refuse(f"unknown option {a!r} (usage: {ME}.py [P] [OUT.png] [--rank R])")
        pos.append(a)
        i += 1
    if len(pos) > 2:
        refuse(f"too many arguments {pos[2:]!r} (usage: {ME}.py [P] [OUT.png] [--rank R])")
    P = pos[0] if pos else "4"
    if not P.isdigit() or not 1 <= int(P) <= P_MAX:
        refuse(f"P must be a whole number from 1 to {P_MAX} (got {P!r})")
    P = int(P)
    out = pos[1] if len(pos) > 1 else "bench/results/cp_state.png"
    if not out.endswith(".png"):
        refuse(f"OUT must be a .png file (got {out!r})")
    folder = os.path.dirname(out) or "."
    if not os.path.isdir(folder):
        refuse(f"OUT's folder {folder!r} does not exist")
    if rank is None:
        rank = "1" if P > 1 else "0"
    if not rank.isdigit() or not int(rank) < P:
        refuse(f"--rank must be a rank of P = {P}, 0 to {P - 1} (got {rank!r})")
    return P, out, int(rank)


def owners(P):
    """chunk -> rank: the zigzag rule, checked against ./build/zigzag_grid where it is built"""
    rule = [c if c < P else 2 * P - 1 - c for c in range(2 * P)]
    grid = "./build/zigzag_grid"
    if not os.access(grid, os.X_OK):
        return rule, "the zigzag rule (./build/zigzag_grid not built)"
    txt = subprocess.run([grid, str(P)], capture_output=True, text=True, check=True).stdout
    got = [None] * (2 * P)
    for line in txt.splitlines():
        if not line or line.startswith("#"):
            continue
        step, r, q, _k, kind = line.split()
        if step == "0" and kind == "diag":  # at step 0 each rank runs its own chunks' diagonal blocks
            got[int(q)] = int(r)
    if got != rule:
        sys.exit(f"{ME}: ./build/zigzag_grid {P} gives owners {got}, the zigzag rule {rule}")
    return got, "./build/zigzag_grid"


def composed(P, r):
    """the chunks whose maps rank r composes, in the order it composes them (stage 3's walks)"""
    fwd = list(range(0, 2 * P - 1 - r))           # chunk 0 .. 2P-2-r: those before its tail
    bwd = list(range(2 * P - 1, r, -1))           # chunk 2P-1 .. r+1: those after its head
    return fwd, bwd


def main():
    P, out, R = parse(sys.argv[1:])
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
        from matplotlib.patches import Rectangle
    except ImportError:
        print("needs matplotlib: python3 -m pip install -r bench/requirements.txt")
        sys.exit(2)
    own, source = owners(P)
    n = 2 * P
    head, tail = R, n - 1 - R
    fwd, bwd = composed(P, R)
    assert len(fwd) == len(bwd) == n - 1 - R
    colors = plt.get_cmap("tab10")
    rc = colors(R % 10)
    fig, axes = plt.subplots(2, 1, figsize=(max(11.5, 1.35 * n + 1.5), 6.6))
    pad = max(0.0, (8 - n) / 2)  # few chunks: keep them their width, centred

    def chunks(ax):
        for c in range(n):
            ax.add_patch(Rectangle((c + 0.04, 0), 0.92, 0.5, facecolor=colors(own[c] % 10), alpha=0.55,
                                   edgecolor="k", lw=1.6 if own[c] == R else 0.6))
            ax.text(c + 0.5, 0.25, f"chunk {c}\nrank {own[c]}", ha="center", va="center", fontsize=8)
        for b in range(n + 1):
            ax.plot([b], [0.75], "o", color="0.3", ms=3)
        ax.set_xlim(-0.45 - pad, n + 0.45 + pad), ax.set_ylim(-0.55, 1.55)
        ax.axis("off")

    def arrow(ax, c, used, back):
        x0, x1 = (c + 0.92, c + 0.08) if back else (c + 0.08, c + 0.92)
        ax.annotate("", xy=(x1, 0.78), xytext=(x0, 0.78),
                    arrowprops=dict(arrowstyle="-|>", connectionstyle=f"arc3,rad={0.45 if back else -0.45}",
                                    lw=2.4 if used else 0.9, color=rc if used else "0.65", ls="-" if used else "--"))
        lab = rf"$M_{{{c}}}^T,\ C_{{{c}}}$" if back else rf"$M_{{{c}}},\ B_{{{c}}}$"
        ax.text(c + 0.5, 1.2, lab, ha="center", va="center", fontsize=9, color="k" if used else "0.55",
                fontweight="bold" if used else "normal")

    def mark(ax, x, text):
        ax.plot([x], [0.75], marker="*", ms=15, color=rc, mec="k", zorder=5)
        ax.annotate(text, xy=(x, 0.02), xytext=(x, -0.35), ha="center", va="center", fontsize=8,
                    arrowprops=dict(arrowstyle="->", color=rc, lw=1.2))

    ax = axes[0]  # forward: chunk 0 upwards from a zero state
    chunks(ax)
    for c in range(n):
        arrow(ax, c, c in fwd, back=False)
    ax.text(-0.3, 0.95, "S = 0", ha="center", fontsize=8)
    mark(ax, head, f"S_start of chunk {head}\n(rank {R}'s head)")
    mark(ax, tail, f"S_start of chunk {tail}\n(rank {R}'s tail)")
    ax.set_title(f"forward (linear_states): rank {R} composes the maps of chunks 0 .. {n - 2 - R} "
                 f"({len(fwd)} = 2P-1-r), left to right from a zero state;\n"
                 f"each arrow is S <- S M_c + B_c; the state after its tail, chunk {tail}, is nobody's", fontsize=9.5)

    ax = axes[1]  # backward: chunk 2P-1 downwards from a zero gradient
    chunks(ax)
    for c in range(n):
        arrow(ax, c, c in bwd, back=True)
    ax.text(n + 0.3, 0.95, "dS = 0", ha="center", fontsize=8)
    mark(ax, tail + 1, f"dS_end of chunk {tail}\n(rank {R}'s tail)")
    mark(ax, head + 1, f"dS_end of chunk {head}\n(rank {R}'s head)")
    ax.set_title(f"backward (linear_state_grads): rank {R} composes the maps of chunks {n - 1} .. {R + 1} "
                 f"({len(bwd)} = 2P-1-r), right to left from a zero gradient;\n"
                 f"each arrow is dS <- dS M_c^T + C_c; the gradient before its head, chunk {head}, is nobody's",
                 fontsize=9.5)

    for r in range(P):
        axes[0].add_patch(Rectangle((0, 0), 0, 0, facecolor=colors(r % 10), alpha=0.55,
                                    label=f"rank {r}: chunks {r}, {n - 1 - r}; {n - 1 - r} map{'s' if n - 1 - r > 1 else ''} each way"))
    axes[0].add_line(Line2D([], [], color=rc, lw=2.4, label=f"a map rank {R} composes (the first, from zero, is a copy: B_0, C_{n - 1})"))
    axes[0].add_line(Line2D([], [], color="0.65", lw=0.9, ls="--", label=f"a map rank {R} does not need"))
    fig.legend(loc="lower center", ncol=min(P, 4), fontsize=8, frameon=False)
    fig.suptitle(f"Linear attention's state over P = {P} zigzag ranks: every rank all-gathers the {n} chunks' "
                 f"maps (M, B; then C), then composes its own walk", fontsize=10.5)
    fig.tight_layout(rect=(0, 0.06 + 0.03 * ((P + 1) // 4), 1, 0.97))
    fig.savefig(out, dpi=110)
    print(f"owners from {source}: " + ", ".join(f"chunk {c} rank {own[c]}" for c in range(n)))
    print("maps composed per rank (forward = backward): " + ", ".join(f"rank {r} {n - 1 - r}" for r in range(P)) +
          f"; all ranks {P * (3 * P - 1) // 2}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
