#!/usr/bin/env python3
"""Train with transformers from the exact initial weights a longctx trainer saved, on the same
token windows with the same hyper-parameters, and print one JSON line of loss per step, so the
two loss curves can be compared step by step.

  ./stage1 --model 0.6B --seq 8192 --steps 0 --save /tmp/init          # the C trainer's init
  ./stage1 --resume /tmp/init --seq 8192 --steps 30 --log c.jsonl      # the C run
  python3 tests/hf_train.py /tmp/init data/books.tok --seq 8192 --steps 30 > hf.jsonl

transformers side: fp32 master weights (the trainer's fp32 master, not the bf16 export), bf16
autocast, SDPA attention, AdamW (decay on matrices only), global-norm clipping, the trainer's
warmup + cosine schedule."""
import argparse
import os, json, math, struct, sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers import AutoConfig, Qwen3ForCausalLM


def lr_at(a, step):  # step 1-based, as stage1's lr_at
    if step <= a.warmup:
        return a.lr * step / max(a.warmup, 1)
    t = min(1.0, (step - a.warmup) / max(a.steps - a.warmup, 1))
    floor = a.lr * a.min_lr_frac
    return floor + (a.lr - floor) * 0.5 * (1 + math.cos(math.pi * t))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("init_dir")
    ap.add_argument("tokens")
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    a = ap.parse_args()
    if not os.path.exists(os.path.join(a.init_dir, "config.json")):  # a --save DIR: its newest save
        a.init_dir = os.path.join(a.init_dir, "latest")
    cfg = AutoConfig.from_pretrained(a.init_dir)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(cfg).float().cuda()
    state = load_file(f"{a.init_dir}/trainer_state.safetensors")
    master = {k[len("master."):]: v for k, v in state.items() if k.startswith("master.")}
    missing, unexpected = model.load_state_dict(master, strict=False)
    missing = [m for m in missing if not (cfg.tie_word_embeddings and m == "lm_head.weight")]
    if missing or unexpected:
        sys.exit(f"weights do not match: missing {missing[:5]} unexpected {unexpected[:5]}")
    model.train()
    decay = [p for n, p in model.named_parameters() if p.ndim == 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    with open(a.tokens, "rb") as f:
        head = f.read(24)
        count, data = struct.unpack("<q", head[16:])[0], 24 + (32 if struct.unpack("<I", head[8:12])[0] >= 3 else 0)
    windows = (count - 1) // a.seq
    for step in range(1, a.steps + 1):
        w = (step - 1) % windows
        with open(a.tokens, "rb") as f:
            f.seek(data + 4 * w * a.seq)  # versions 3, 4: after the tokenizer's tag
            ids = torch.tensor(struct.unpack(f"<{a.seq + 1}I", f.read(4 * (a.seq + 1))), dtype=torch.long).cuda()
        for g in opt.param_groups:
            g["lr"] = lr_at(a, step)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = model.model(input_ids=ids[None, :-1]).last_hidden_state[0]
            logits = (h @ model.lm_head.weight.t()).float()
        loss = F.cross_entropy(logits, ids[1:])
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        print(json.dumps({"trainer": "transformers", "step": step, "loss": loss.item(), "grad_norm": gn.item(),
                          "lr": lr_at(a, step)}), flush=True)


if __name__ == "__main__":
    main()
