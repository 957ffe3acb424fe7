#!/usr/bin/env python3
"""The gated delta rule's golden file, from transformers' own torch fallback (Qwen3.5's linear
attention; tests/ref_gdn.c is checked against it by test_cpu).

Writes tests/golden/gdn_rule.safetensors (a file, not a fixture directory): inputs q, k [1, T, H, dk], v [1, T, H, dv], g, beta
[1, T, H] (fp32: g a log-decay below 0, beta in (0, 1)), and transformers'
torch_recurrent_gated_delta_rule(..., use_qk_l2norm_in_kernel=True) output o [1, T, H, dv] and
final state [1, H, dk, dv]; its chunked form's too (o_chunk, state_chunk), which must agree. And
the backward by autograd for upstream gradients do [1, T, H, dv] and dstate [1, H, dk, dv]:
grad_q, grad_k, grad_v, grad_g, grad_beta (of the raw q and k: through transformers' l2norm).
Odd sizes: T 37, H 3, dk 16, dv 12.
  python3 tests/make_golden_gdn.py        # regenerate tests/golden/gdn_rule.safetensors
"""
import os

import torch
import transformers
from safetensors.torch import save_file
from transformers.models.qwen3_5 import modeling_qwen3_5 as m


def main():
    torch.manual_seed(5)
    T, H, dk, dv = 37, 3, 16, 12
    q, k = torch.randn(1, T, H, dk), torch.randn(1, T, H, dk)
    v = torch.randn(1, T, H, dv)
    g = -torch.nn.functional.softplus(torch.randn(1, T, H)) * 0.5
    beta = torch.sigmoid(torch.randn(1, T, H))
    for t in (q, k, v, g, beta):
        t.requires_grad_(True)
    o, s = m.torch_recurrent_gated_delta_rule(q, k, v, g, beta, output_final_state=True, use_qk_l2norm_in_kernel=True)
    do, ds = torch.randn_like(o), torch.randn_like(s)
    ((o * do).sum() + (s * ds).sum()).backward()
    grads = {f"grad_{n}": t.grad for n, t in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta))}
    o, s = o.detach(), s.detach()
    q, k, v, g, beta = (t.detach() for t in (q, k, v, g, beta))
    oc, sc = m.torch_chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True, use_qk_l2norm_in_kernel=True)
    assert torch.allclose(o, oc, atol=1e-4) and torch.allclose(s, sc, atol=1e-4), "recurrent and chunked disagree"
    out = dict(q=q, k=k, v=v, g=g, beta=beta, o=o.contiguous(), state=s.contiguous(), o_chunk=oc.contiguous(),
               state_chunk=sc.contiguous(), do=do, dstate=ds, **grads)
    d = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden", "gdn_rule.safetensors")
    save_file({n: t.float().contiguous() for n, t in out.items()}, d,
              metadata={"transformers": transformers.__version__, "torch": torch.__version__,
                        "rule": "torch_recurrent_gated_delta_rule, use_qk_l2norm_in_kernel=True"})
    print(f"gdn_rule: T {T} H {H} dk {dk} dv {dv}; |o| {o.norm():.4f}, |state| {s.norm():.4f} -> {d}")


if __name__ == "__main__":
    main()
