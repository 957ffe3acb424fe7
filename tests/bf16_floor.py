#!/usr/bin/env python3
"""The bf16 floor of a fixture: transformers itself run in bf16 (weights and activations) against its own
fp32 gradients in the fixture's golden.safetensors, per tensor: cosine and norm ratio. What a correct
bf16 trainer can reach on that fixture; check_stage's bands must sit outside it (tests/check_stage.c).
Unpacked fixtures only (a packed one's truth runs each document alone).
  python3 tests/bf16_floor.py tests/golden/q35_l2_s97        # prints the tensors off by > 5e-4 / 5e-3
  python3 tests/bf16_floor.py tests/golden/q35_l2_s97 --weights   # only the weights rounded, fp32 math"""
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def main():
    d, weights_only = sys.argv[1], "--weights" in sys.argv[2:]
    gold = load_file(d + "/golden.safetensors")
    if "eot" in gold:
        sys.exit(f"{d}: a packed fixture (each document alone): not this tool's")
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
    if weights_only:
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.bfloat16().float())
    else:
        model = model.to(torch.bfloat16)
    tok = gold["tokens"].long()
    logits = model(input_ids=tok[None, :-1]).logits[0].float()
    loss = F.cross_entropy(logits, tok[1:])
    loss.backward()
    worst_cos, worst_ratio = (2.0, ""), (0.0, "")
    grads = {n: p.grad for n, p in model.named_parameters()}
    if any(n.endswith("experts.gate_up_proj") for n in grads):  # an MoE: the golden file's experts are apart
        sys.path.insert(0, __file__.rsplit("/", 1)[0])
        from make_golden_moe import per_expert
        grads = per_expert(grads, model.config.num_experts, model.config.moe_intermediate_size)
    for n, g in grads.items():
        want, got = gold["grad." + n].flatten().double(), g.flatten().double()
        cos = (want @ got / want.norm() / got.norm()).item()
        ratio = (got.norm() / want.norm()).item()
        if cos < 0.9995 or abs(ratio - 1) > 5e-3:
            print(f"  {n:52s} [{got.numel():6d}] cosine {cos:.6f}  norm ratio {ratio:.4f}")
        worst_cos = min(worst_cos, (cos, n))
        worst_ratio = max(worst_ratio, (abs(ratio - 1), n))
    print(f"{'weights rounded to bf16' if weights_only else 'transformers in bf16'}: loss {loss.item():.6f} vs "
          f"{gold['loss'].item():.6f}; worst cosine {worst_cos[0]:.6f} ({worst_cos[1]}), worst norm ratio off 1 by "
          f"{worst_ratio[0]:.4f} ({worst_ratio[1]})")


if __name__ == "__main__":
    main()
