#!/usr/bin/env python3
"""Load a directory written by a trainer's --save with transformers and compute the loss of one
window of a token file; it must match the trainer's loss for that step (the step after the save)
within 2% (bf16 weights, bf16 vs fp32 compute differences). Dense Qwen3 or Qwen3MoE (whose loss
adds router_aux_loss_coef x the load-balancing loss when output_router_logits, as transformers does).
  python3 tests/hf_check.py DIR TOKENS.tok SEQ STEP0 TRAINER_LOSS"""
import os, struct, sys

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM


def main():
    d, tok, seq, step0, want = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    if not os.path.exists(os.path.join(d, "config.json")):  # a --save DIR: its newest complete save
        d = os.path.join(d, "latest")
    with open(tok, "rb") as f:
        head = f.read(24)
        version, count = struct.unpack("<I", head[8:12])[0], struct.unpack("<q", head[16:])[0]
        windows = (count - 1) // seq
        start = (step0 % windows) * seq
        f.seek(24 + (32 if version >= 3 else 0) + 4 * start)  # versions 3, 4: the tokenizer's tag first
        ids = torch.tensor(struct.unpack(f"<{seq + 1}I", f.read(4 * (seq + 1))), dtype=torch.long)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32).to(dev).eval()
    moe_aux = getattr(model.config, "output_router_logits", False)  # Qwen3MoE: + coef x load-balancing loss
    with torch.no_grad():
        out = model(input_ids=ids[None, :-1].to(dev), **({"output_router_logits": True} if moe_aux else {}))
        loss = F.cross_entropy(out.logits[0].float(), ids[1:].to(dev)).item()
        if moe_aux:
            loss += model.config.router_aux_loss_coef * float(out.aux_loss)
    err = abs(loss - want) / abs(want)
    print(f"  transformers loss {loss:.6f} vs trainer {want:.6f} (rel {err:.2e})")
    ok = err <= 2e-2
    print(f"{int(ok)} passed, {int(not ok)} failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
