#!/usr/bin/env python3
"""One layer's stream timeline for the README: what the compute stream, the communication stream
and the copy stream do during one decoder layer's forward and its backward, from a run's
--timeline file (step 2; each collective and host copy on the stream it runs on, the compute
stream's kernels by class). bench/results/timeline.tsv is made on a GPU by
  ./stage5 --model 8B --seq 512K --gpus 8 --rehearse 0 --layers 2 --steps 2 --timeline bench/results/timeline.tsv
(under a rehearsal the collectives are local copies of the same bytes: the picture shows where they
sit and what overlaps, not their link time).
  python3 bench/plot_timeline.py [TIMELINE.tsv] [OUT.png]
It draws a layer whose forward is followed by another layer's (its window holds that layer alone,
not the loss) and a layer whose backward is followed by another's (not the embedding and the
optimizer): with two layers, layer 0's forward and layer 1's backward."""
import sys
from mpl import pyplot  # bench/mpl.py


def read(path):
    rows = []
    for line in open(path):
        lane, what, a, b = line.rstrip("\n").split("\t")
        rows.append((lane, what, float(a), float(b)))
    return rows


def window(rows, name):
    """[start, end) of the layer phase `name` ("forward 1"): from its marker to the next marker"""
    marks = sorted((a, w) for lane, w, a, _ in rows if lane == "layer")
    i = next(k for k, (_, w) in enumerate(marks) if w == name)
    end = marks[i + 1][0] if i + 1 < len(marks) else max(b for lane, _, _, b in rows if lane == "compute")
    return marks[i][0], end


def inner_layer(rows, phase):
    """a layer whose `phase` window ends at the next layer's marker of the same phase"""
    ls = sorted(int(w.split()[1]) for lane, w, _, _ in rows if lane == "layer" and w.startswith(phase))
    return ls[0] if phase == "forward" else ls[-1]


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "bench/results/timeline.tsv"
    out = sys.argv[2] if len(sys.argv) > 2 else "bench/results/timeline.png"
    plt = pyplot()  # or one line naming the install, exit 2
    rows = read(path)
    lanes = ["compute", "communication", "host copies"]
    kinds = sorted({w for lane, w, _, _ in rows if lane in lanes})
    cmap = plt.get_cmap("tab10")
    color = {k: cmap(i % 10) for i, k in enumerate(kinds)}
    fig, axes = plt.subplots(2, 1, figsize=(11, 5))
    for ax, phase in zip(axes, ("forward", "backward")):
        layer = inner_layer(rows, phase)
        t0, t1 = window(rows, f"{phase} {layer}")
        for y, lane in enumerate(lanes):
            for l, w, a, b in rows:
                if l == lane and b > t0 and a < t1:
                    ax.barh(len(lanes) - 1 - y, min(b, t1) - max(a, t0), left=max(a, t0) - t0, color=color[w],
                            edgecolor="k", lw=0.2)
        ax.set_yticks(range(len(lanes)), reversed(lanes))
        ax.set_xlim(0, t1 - t0)
        ax.set_title(f"layer {layer}, {phase}: {t1 - t0:.1f} ms", fontsize=10)
    axes[-1].set_xlabel("ms from the layer's start (CUDA events, step 2)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=color[k]) for k in kinds]
    fig.tight_layout(rect=(0, 0, 0.8, 1))
    fig.legend(handles, kinds, loc="center right", fontsize=7)
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
