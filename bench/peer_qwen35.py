#!/usr/bin/env python3
"""The PyTorch peer for Qwen3.5 hybrids: bench/peer_dense.py's training step (bf16, activation
checkpointing per layer, a chunked NLL that never holds the full logits, fused AdamW) on transformers'
Qwen3_5ForCausalLM. Without flash-linear-attention installed (as on our H200) transformers runs the
gated delta rule with its own torch code (torch_chunk_gated_delta_rule) and the conv with torch's;
that is what a user of the PyTorch stack gets there, and what this measures.

The default model is the Qwen3.5-9B shape (hidden 4096, 16/4 heads of 256, linear heads
16/32 of 128, intermediate 12288, vocabulary 248,320), cut to 4 layers: 3 linear attention, then full.
  python3 bench/peer_qwen35.py --seq 8192 16384 32768 --steps 2
  python3 bench/peer_qwen35.py --plain --dtype fp32 --seq 8192   # 2.318 s on an H200, not the quoted 3.6 s: see bench/results/2026-12-04_h200/NOTES.md
Prints one JSON line per length: step time (median of timed steps), peak memory, or the error (an
out-of-memory at one length does not hide the others). --device cpu with a tiny --hidden checks the
script without a GPU.
"""
import argparse, json, statistics, sys, time

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def build(a, dev):
    from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5ForCausalLM
    cfg = Qwen3_5TextConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.intermediate,
                            num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                            head_dim=a.head_dim, linear_num_key_heads=16, linear_num_value_heads=a.linear_v_heads,
                            linear_key_head_dim=128, linear_value_head_dim=128, max_position_embeddings=1 << 22,
                            tie_word_embeddings=False, use_cache=False)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(dev):
        model = Qwen3_5ForCausalLM(cfg).to(torch.bfloat16 if dev == "cuda" and a.dtype == "bf16" else torch.float32)
    if not a.plain:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model, cfg


def step(model, opt, x, y, chunk):
    if opt is None:  # --plain: transformers' own loss from labels (the full logits), forward and backward
        model.zero_grad(set_to_none=True)
        loss = model(input_ids=x, labels=x, use_cache=False).loss
        loss.backward()
        return float(loss.detach())
    opt.zero_grad(set_to_none=True)
    seq = x.shape[1]
    h = model.model(input_ids=x, use_cache=False).last_hidden_state[0]
    w = model.lm_head.weight
    total = 0.0
    for s in range(0, seq, chunk):
        total = total + checkpoint(lambda hh, ww, yy: F.cross_entropy((hh @ ww.t()).float(), yy, reduction="sum"),
                                   h[s:s + chunk], w, y[s:s + chunk], use_reentrant=False)
    loss = total / seq
    loss.backward()
    opt.step()
    return float(loss.detach())


def run(a, seq, dev):
    model, cfg = build(a, dev)
    opt = None if a.plain else torch.optim.AdamW(model.parameters(), lr=1e-5, fused=dev == "cuda")
    g = torch.Generator(device=dev).manual_seed(1)
    ids = torch.randint(0, a.vocab, (1, seq + 1), device=dev, generator=g)
    x, y = ids[:, :seq], ids[0, 1:]
    times, losses = [], []
    for i in range(a.steps + 1):
        if i == 1 and dev == "cuda":
            torch.cuda.reset_peak_memory_stats()
        if dev == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        losses.append(step(model, opt, x, y, a.chunk))
        if dev == "cuda":
            torch.cuda.synchronize()
        if i > 0:
            times.append(time.perf_counter() - t0)
    out = dict(peer="torch-qwen3.5" + ("-plain" if a.plain else ""), dtype=str(next(model.parameters()).dtype), hidden=a.hidden, layers=a.layers, layer_types=cfg.layer_types, seq=seq,
               steps=a.steps, step_s=round(statistics.median(times), 4), tokens_per_s=round(seq / statistics.median(times), 1),
               losses=[round(v, 4) for v in losses], torch=torch.__version__)
    if dev == "cuda":
        out.update(peak_alloc_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2),
                   peak_reserved_gib=round(torch.cuda.max_memory_reserved() / 2**30, 2))
    del model, opt
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seq", type=int, nargs="+", default=[8192])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=8192)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--intermediate", type=int, default=12288)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=256)
    ap.add_argument("--linear-v-heads", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=248320)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16",
                    help="the model's dtype on the GPU (fp32 is what from_config gives unless told)")
    ap.add_argument("--plain", action="store_true",
                    help="the plainest transformers script: model(input_ids, labels).loss, backward, no "
                         "checkpointing, no optimizer step: forward and backward only")
    a = ap.parse_args()
    for seq in a.seq:
        try:
            print(json.dumps(run(a, seq, a.device)), flush=True)
        except Exception as e:  # an OOM at one size should not hide the others
            print(json.dumps(dict(peer="torch-qwen3.5" + ("-plain" if a.plain else ""), seq=seq, error=f"{type(e).__name__}: {str(e)[:300]}")), flush=True)
        if a.device == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
