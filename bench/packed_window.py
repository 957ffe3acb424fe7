#!/usr/bin/env python3
"""A token file of packed documents for the --packing measurements.

Documents of log-uniform lengths in [MIN, MAX] tokens (default 1K-256K: mean about 46K, a
fine-tuning mix from short examples to whole books), each ended by <|endoftext|> (151643), drawn
until the file holds N tokens; ids are random below the Qwen3 vocabulary (never the end token):
attention's cost does not depend on them. Prints the mix: documents in the first window of SEQ
tokens, their mean, and the attention pairs they keep, sum len (len + 1) / 2 against SEQ^2 / 2.

  python3 bench/packed_window.py OUT.tok [--tokens N] [--seq SEQ] [--min 1024] [--max 262144] [--seed 1]
"""
import argparse, random, struct, sys

EOT, VOCAB = 151643, 151936


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--tokens", type=int, default=(1 << 20) + 1)
    ap.add_argument("--seq", type=int, default=1 << 20, help="the window whose mix is printed")
    ap.add_argument("--min", type=int, default=1024)
    ap.add_argument("--max", type=int, default=262144)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if not (0 < a.min <= a.max) or a.tokens < 2:
        sys.exit("packed_window.py: need 0 < --min <= --max and --tokens >= 2")
    rng = random.Random(a.seed)
    ids, lens = [], []
    while len(ids) < a.tokens:
        n = int(a.min * (a.max / a.min) ** rng.random())
        for _ in range(n - 1):
            t = rng.randrange(VOCAB - 1)
            ids.append(t + 1 if t >= EOT else t)  # any id but EOT
        ids.append(EOT)
        lens.append(n)
    ids = ids[:a.tokens]
    with open(a.out, "wb") as f:
        f.write(b"LCTOKENS" + struct.pack("<IIq", 1, 4, len(ids)))
        f.write(struct.pack(f"<{len(ids)}I", *ids))
    win, cur, pairs = [], 0, 0
    for t in ids[:a.seq]:
        cur += 1
        if t == EOT:
            win.append(cur)
            cur = 0
    if cur:
        win.append(cur)
    pairs = sum(n * (n + 1) // 2 for n in win)
    print(f"{a.out}: {len(ids):,} tokens; the first window of {a.seq:,}: {len(win)} documents, mean {a.seq / len(win):,.0f}, "
          f"min {min(win):,}, max {max(win):,}; attention pairs {pairs / (a.seq * a.seq / 2):.4f} of unpacked")


if __name__ == "__main__":
    main()
