#!/usr/bin/env python3
"""The dense peer: a Qwen3 training step in the PyTorch stack a user would run -- transformers'
Qwen3ForCausalLM in bf16, activation checkpointing per layer, SDPA on cuDNN, a chunked NLL that never
holds the whole [seq, vocab] logits, fused AdamW -- at a size and sequence length of stage 1's. Run it
in the same device call as the stage, on the same size and length, and quote the ratio of step times
and peaks (bench/bench_stage1.sh does).

  python3 bench/peer_dense.py --model 0.6B --seq 16384 65536 --steps 2
Prints one JSON line per length: step time (median of the timed steps), peak memory, the losses."""
import argparse, json, statistics, sys, time

# hidden, intermediate, layers, heads, kv heads, tied (the official configs; head_dim 128, vocab 151936)
SIZES = {"0.6B": (1024, 3072, 28, 16, 8, True), "1.7B": (2048, 6144, 28, 16, 8, True),
         "4B": (2560, 9728, 36, 32, 8, True), "8B": (4096, 12288, 36, 32, 8, False),
         "14B": (5120, 17408, 40, 40, 8, False), "32B": (5120, 25600, 64, 64, 8, False)}


def build(size, layers=0, attn="sdpa", device="cuda"):
    """the model, bf16 on the GPU (device "cpu": fp32, a check of a script without a GPU)"""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM
    D, I, L, H, K, tied = SIZES[size]
    cfg = Qwen3Config(vocab_size=151936, hidden_size=D, intermediate_size=I, num_hidden_layers=layers or L,
                      num_attention_heads=H, num_key_value_heads=K, head_dim=128, max_position_embeddings=1 << 22,
                      rms_norm_eps=1e-6, tie_word_embeddings=tied, use_cache=False, attn_implementation=attn,
                      rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForCausalLM(cfg)
    if device == "cuda":
        model = model.to(torch.bfloat16)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model


def train_step(model, opt, ids, labels, chunk):
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint
    opt.zero_grad(set_to_none=True)
    seq = ids.shape[1]
    h, w = model.model(input_ids=ids, use_cache=False).last_hidden_state[0], model.lm_head.weight
    nll = lambda hc, yc: F.cross_entropy((hc @ w.t()).float(), yc, reduction="sum")  # one chunk's logits at a time
    total = sum(checkpoint(nll, h[s:s + chunk], labels[s:s + chunk], use_reentrant=False) for s in range(0, seq, chunk))
    loss = total / seq
    loss.backward()
    opt.step()
    return loss.detach()


def one_length(model, seq, steps, chunk):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    g = torch.Generator(device="cuda").manual_seed(1)
    ids = torch.randint(0, 151936, (1, seq + 1), device="cuda", generator=g)
    times, losses = [], []
    for step in range(steps + 1):  # step 0 warms up
        if step == 1:
            torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION], set_priority=True):
            loss = train_step(model, opt, ids[:, :seq], ids[0, 1:], chunk)
        torch.cuda.synchronize()
        if step > 0:
            times.append(time.perf_counter() - t0)
        losses.append(round(float(loss), 4))
    return dict(step_s=round(statistics.median(times), 4), losses=losses,
                peak_alloc_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2),
                peak_reserved_gib=round(torch.cuda.max_memory_reserved() / 2**30, 2))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="0.6B", choices=sorted(SIZES))
    ap.add_argument("--layers", type=int, default=0, help="the first N layers (0: all)")
    ap.add_argument("--seq", type=int, nargs="+", default=[16384])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=4096, help="rows of logits at a time")
    a = ap.parse_args()
    if a.steps < 1 or a.layers < 0 or a.chunk < 1 or min(a.seq) < 2:
        ap.error("--steps and --chunk take at least 1, --layers at least 0, --seq at least 2")
    try:
        import torch
    except ImportError:
        print("peer_dense.py needs PyTorch and transformers (the GPU machine's stack)", file=sys.stderr)
        return 2
    import torch
    model = build(a.model, a.layers)
    bad = 0
    for seq in a.seq:
        row = dict(peer="torch", model=a.model, layers=a.layers or SIZES[a.model][2], seq=seq, steps=a.steps,
                   torch=torch.__version__)
        try:
            row.update(one_length(model, seq, a.steps, a.chunk))
        except Exception as e:  # out of memory at the longer lengths: the row says so, the next length runs
            row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            bad = 1
            torch.cuda.empty_cache()
        print(json.dumps(row), flush=True)
    return bad


if __name__ == "__main__":
    sys.exit(main())
