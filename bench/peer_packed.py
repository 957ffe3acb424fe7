#!/usr/bin/env python3
"""The PyTorch peer on packed documents: bench/peer_dense.py's training step (transformers
Qwen3ForCausalLM, bf16, per-layer checkpointing, chunked NLL, fused AdamW) on a window of a token
file whose documents end at <|endoftext|>, the way transformers trains packed data without
padding: position_ids restart at 0 in each document, from which transformers 5 builds the
document mask itself (masking_utils: packed sequences found from position_ids), and the label
after each end of text is ignored. --attn flex_attention runs that mask block-sparse (the
sequence's FLOPs are the documents'); sdpa materialises it as a dense [S, S] mask.

  python3 bench/peer_packed.py --data W.tok --model 0.6B --seq 32768 [--attn flex_attention]
Prints one JSON line per length: step time (median of timed steps), peak memory, loss.
"""
import argparse, json, os, statistics, struct, sys, time

EOT = 151643


def window(path, seq):
    with open(path, "rb") as f:
        head = f.read(24)
        if head[:8] != b"LCTOKENS":
            sys.exit(f"{path}: not a token file")
        n = struct.unpack("<q", head[16:24])[0]
        if n < seq + 1:
            sys.exit(f"{path}: {n} tokens, a window of {seq} needs {seq + 1}")
        f.seek(24 + (32 if struct.unpack("<I", head[8:12])[0] >= 3 else 0))  # versions 3, 4: the tag first
        return list(struct.unpack(f"<{seq + 1}I", f.read(4 * (seq + 1))))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--model", default="0.6B")
    ap.add_argument("--seq", type=int, nargs="+", default=[32768])
    ap.add_argument("--attn", default="flex_attention", choices=["flex_attention", "sdpa"])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=8192)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import peer_dense as peer
    import torch
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint
    dev = torch.device(a.device)
    for seq in a.seq:
        try:
            ids = window(a.data, seq)
            pos, p, lens, cur = [], 0, [], 0
            for t in ids[:seq]:
                pos.append(p)
                p, cur = p + 1, cur + 1
                if t == EOT:
                    p = 0
                    lens.append(cur)
                    cur = 0
            if cur:
                lens.append(cur)
            labels = torch.tensor(ids[1:], device=dev)
            labels[torch.tensor(ids[:seq], device=dev) == EOT] = -100  # the next document's first token
            x = torch.tensor(ids[:seq], device=dev)[None]
            position_ids = torch.tensor(pos, device=dev)[None]
            with torch.device(dev):
                model = peer.build(a.model, 0, a.attn, a.device)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=a.device == "cuda")
            count = int((labels != -100).sum())
            times, losses = [], []
            for step in range(a.steps + 1):
                if step == 1 and a.device == "cuda":
                    torch.cuda.reset_peak_memory_stats()
                if a.device == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                opt.zero_grad(set_to_none=True)
                h = model.model(input_ids=x, position_ids=position_ids, use_cache=False).last_hidden_state[0]
                w = model.lm_head.weight
                total = 0.0
                for s in range(0, seq, a.chunk):
                    total = total + checkpoint(lambda hh, ww, yy: F.cross_entropy((hh @ ww.t()).float(), yy,
                                                                                   ignore_index=-100, reduction="sum"),
                                               h[s:s + a.chunk], w, labels[s:s + a.chunk], use_reentrant=False)
                loss = total / count
                loss.backward()
                opt.step()
                if a.device == "cuda":
                    torch.cuda.synchronize()
                if step > 0:
                    times.append(time.perf_counter() - t0)
                losses.append(float(loss.detach()))
            t = statistics.median(times)
            pairs = sum(n * (n + 1) // 2 for n in lens) / (seq * seq / 2)
            out = dict(peer="torch-packed", model=a.model, seq=seq, attn=a.attn, documents=len(lens), pairs_of_unpacked=round(pairs, 4),
                       steps=a.steps, step_s=round(t, 4), tokens_per_s=round(seq / t, 1), losses=[round(v, 4) for v in losses],
                       torch=torch.__version__)
            if a.device == "cuda":
                out.update(peak_alloc_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2),
                           peak_reserved_gib=round(torch.cuda.max_memory_reserved() / 2**30, 2))
            print(json.dumps(out), flush=True)
            del model, opt
        except Exception as e:  # an OOM at one size should not hide the others
            print(json.dumps(dict(peer="torch-packed", model=a.model, seq=seq, attn=a.attn,
                                  error=f"{type(e).__name__}: {str(e)[:300]}")), flush=True)
        if a.device == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
