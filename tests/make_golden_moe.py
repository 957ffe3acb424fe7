#!/usr/bin/env python3
"""Make the golden files of a tiny Qwen3 MoE (transformers' Qwen3MoeForCausalLM), as tests/make_golden.py
does for the dense configs: tests/golden/moe_e8_k2/ with
  config.json            as transformers writes it (model_type qwen3_moe)
  model.safetensors      fp32, in the Hub's per-expert layout: model.layers.L.mlp.gate.weight (the router)
                         and model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight -- checked to load
                         back through Qwen3MoeForCausalLM.from_pretrained to the same logits
  golden.safetensors     tokens [S+1], logits [S, vocab], loss [1] = mean NLL + router_aux_loss_coef x
                         transformers' load-balancing loss, aux_loss [1], nll [1], grad.<HF name> (per expert)
8 experts, top-2 with norm_topk_prob, moe_intermediate_size 48 (2 x 48 != hidden 64: a transposed expert
tensor cannot pass), output_router_logits true (the aux loss is added, as transformers adds it then).

  python3 tests/make_golden_moe.py [--out DIR]
"""
import argparse, os, re

import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import load_file, save_file
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

NAME = "moe_e8_k2"
CFG = dict(vocab_size=256, hidden_size=64, intermediate_size=128, moe_intermediate_size=48, num_hidden_layers=2,
           num_attention_heads=4, num_key_value_heads=2, head_dim=64, num_experts=8, num_experts_per_tok=2,
           norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[], router_aux_loss_coef=0.05,
           output_router_logits=True, max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=False,
           use_cache=False, initializer_range=0.05)
SEQ = 80


def per_expert(sd, E, Im):
    """transformers v5 may hold experts fused ([E, 2*Im, D] gate_up, [E, D, Im] down): the Hub's names instead"""
    out = {}
    for n, t in sd.items():
        m = re.fullmatch(r"(.*\.mlp\.experts)\.(gate_up_proj|down_proj)", n)
        if not m:
            out[n] = t.contiguous()
            continue
        base, kind = m.groups()
        assert t.shape[0] == E, (n, t.shape)
        for e in range(E):
            if kind == "gate_up_proj":
                assert t.shape[1] == 2 * Im, (n, t.shape)
                out[f"{base}.{e}.gate_proj.weight"] = t[e, :Im].contiguous()
                out[f"{base}.{e}.up_proj.weight"] = t[e, Im:].contiguous()
            else:
                assert t.shape[2] == Im, (n, t.shape)
                out[f"{base}.{e}.down_proj.weight"] = t[e].contiguous()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden"))
    a = ap.parse_args()
    torch.set_num_threads(4)
    conf = Qwen3MoeConfig(rope_parameters={"rope_type": "default", "rope_theta": 1e6}, attn_implementation="eager",
                          **CFG)
    torch.manual_seed(4321)
    model = Qwen3MoeForCausalLM(conf).float()
    with torch.no_grad():  # norm weights away from 1, so a missing or misplaced one cannot pass
        for n, p in model.named_parameters():
            if p.ndim == 1:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
    print("parameters:", ", ".join(f"{n} {tuple(p.shape)}" for n, p in model.named_parameters() if "layers.0." in n))
    d = os.path.join(a.out, NAME)
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d, safe_serialization=True)
    for f in os.listdir(d):
        if f != "config.json":
            os.remove(os.path.join(d, f))
    E, Im = CFG["num_experts"], CFG["moe_intermediate_size"]
    weights = per_expert({n: p.detach() for n, p in model.named_parameters()}, E, Im)
    save_file(weights, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})

    g = torch.Generator().manual_seed(4322)
    tokens = torch.randint(0, CFG["vocab_size"], (SEQ + 1,), generator=g)
    model.train()
    out = model(input_ids=tokens[None, :-1], output_router_logits=True)
    logits = out.logits[0].float()
    nll = F.cross_entropy(logits, tokens[1:], reduction="mean")
    loss = nll + CFG["router_aux_loss_coef"] * out.aux_loss
    loss.backward()
    grads = per_expert({"grad." + n: p.grad.detach() for n, p in model.named_parameters()}, E, Im)
    res = {"tokens": tokens.to(torch.int32), "logits": logits.detach().contiguous(), "loss": loss.detach().reshape(1),
           "nll": nll.detach().reshape(1), "aux_loss": out.aux_loss.detach().float().reshape(1), **grads}
    meta = {"transformers": transformers.__version__, "torch": torch.__version__, "seed": "4321",
            "loss": "mean NLL over S predicted tokens + router_aux_loss_coef x load-balancing loss, eager, fp32"}
    save_file(res, os.path.join(d, "golden.safetensors"), metadata=meta)
    # the per-expert layout is the Hub's: transformers loads it back to the same logits
    back = Qwen3MoeForCausalLM.from_pretrained(d, torch_dtype=torch.float32).eval()
    model.eval()
    with torch.no_grad():
        err = (back(input_ids=tokens[None, :-1]).logits - model(input_ids=tokens[None, :-1]).logits).abs().max().item()
    print(f"{NAME}: seq {SEQ} loss {loss.item():.6f} (nll {nll.item():.6f}, aux {out.aux_loss.item():.6f}), "
          f"{len(grads)} grads, reload max |dlogit| {err:.2e} -> {d}")
    assert err < 1e-5, "the per-expert file does not load back to the same model"


if __name__ == "__main__":
    main()
