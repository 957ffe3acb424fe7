#!/usr/bin/env python3
"""The MoE peer: one training step of Qwen3-30B-A3B's first N layers in the PyTorch stack
(transformers' Qwen3MoeForCausalLM, bf16, activation checkpointing per layer, SDPA on cuDNN, a
chunked NLL that never holds the full logits, the load-balancing loss as transformers adds it,
fused AdamW), as bench/peer_dense.py does for the dense models. Run it in the same device
call as stage 5 on the same slice and sequence length, and quote the ratio of step times and peaks.

  python3 bench/peer_moe.py --layers 4 --seq 32768 --steps 2
Prints one JSON line: step time (median of the timed steps), peak memory, the losses."""
import argparse, json, statistics, sys, time

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def build(layers):
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    cfg = Qwen3MoeConfig(vocab_size=151936, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
                         num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                         num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, router_aux_loss_coef=0.001,
                         output_router_logits=True, max_position_embeddings=1 << 22, rms_norm_eps=1e-6,
                         tie_word_embeddings=False, use_cache=False, attn_implementation="sdpa",
                         rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen3MoeForCausalLM(cfg).to(torch.bfloat16)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model, cfg


def chunk_nll(h, w, y):
    return F.cross_entropy((h @ w.t()).float(), y, reduction="sum")


def train_step(model, cfg, opt, ids, labels, chunk):
    from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func
    opt.zero_grad(set_to_none=True)
    seq = ids.shape[1]
    out = model.model(input_ids=ids, use_cache=False, output_router_logits=True)
    h, w = out.last_hidden_state[0], model.lm_head.weight
    total = 0.0
    for s in range(0, seq, chunk):
        total = total + checkpoint(chunk_nll, h[s:s + chunk], w, labels[s:s + chunk], use_reentrant=False)
    aux = load_balancing_loss_func(out.router_logits, cfg.num_experts, cfg.num_experts_per_tok, None)
    loss = total / seq + cfg.router_aux_loss_coef * aux
    loss.backward()
    opt.step()
    return loss.detach()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--seq", type=int, default=32768)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=8192)
    ap.add_argument("--tokens", default=None, help="a token file (the trainers' format) to read the window from")
    a = ap.parse_args()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    model, cfg = build(a.layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    g = torch.Generator(device="cuda").manual_seed(1)
    ids = torch.randint(0, 151936, (1, a.seq + 1), device="cuda", generator=g)
    x, y = ids[:, :a.seq], ids[0, 1:]
    times, losses = [], []
    try:
        for step in range(a.steps + 1):
            if step == 1:
                torch.cuda.reset_peak_memory_stats()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION], set_priority=True):
                loss = train_step(model, cfg, opt, x, y, a.chunk)
            torch.cuda.synchronize()
            if step > 0:
                times.append(time.perf_counter() - t0)
            losses.append(round(float(loss), 4))
        print(json.dumps(dict(peer="torch", model="30B-A3B", layers=a.layers, seq=a.seq, steps=a.steps,
                              step_s=round(statistics.median(times), 4),
                              peak_alloc_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2),
                              peak_reserved_gib=round(torch.cuda.max_memory_reserved() / 2**30, 2),
                              losses=losses, torch=torch.__version__)), flush=True)
    except Exception as e:
        print(json.dumps(dict(peer="torch", model="30B-A3B", layers=a.layers, seq=a.seq,
                              error=f"{type(e).__name__}: {str(e)[:300]}")), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
