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

And the whole layer (tests/golden/gdn_layer.safetensors): transformers' Qwen3_5GatedDeltaNet of a
small Qwen3_5TextConfig (hidden 48, 2 key heads and 4 value heads of 8 and 6, conv width 4), its
weights drawn at random (A_log, dt_bias and the norm weight too), x [1, 29, 48] and y = layer(x);
for an upstream dy, autograd's grad.x and grad.<parameter> (conv1d's squeezed as its weight is).

And the other layer kind (tests/golden/gated_attn.safetensors): transformers' Qwen3_5Attention (q_proj
with its output gate, q/k norms, partial rotary 0.25, sdpa causal) of the same config (4 heads, 2 K/V
heads, head dim 16: 4 rotated dims), random weights, x [1, 21, 48] at positions 0..20, y; for an
upstream dy, autograd's grad.x and grad.<parameter>.

And the whole hybrid text model (tests/golden/qwen35_tiny.safetensors): transformers'
Qwen3_5ForCausalLM of that config, 4 layers (3 linear attention, then full attention), vocabulary 128,
untied, random weights; tokens [24]: the mean next-token NLL over 23 labels, the logits, and the
gradient of every parameter (conv1d's squeezed).
And three fixture directories the trainers run (tests/golden/q35_l2_s112/, q35_yarn4_l2_s112/,
q35_packed_l2_s112/: fixture()), and the MoE hybrid's (tests/golden/q35moe_l2_s112/: fixture_moe()).
  python3 tests/make_golden_gdn.py            # regenerate them all
  python3 tests/make_golden_gdn.py fixtures   # only the fixture directories
  python3 tests/make_golden_gdn.py moe        # only the MoE hybrid's
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


def tiny_config(**kw):
    """the small Qwen3.5 text config every golden here uses: hidden 48, 4 layers (3 linear, 1 full),
    linear key heads 2 x 8 and value heads 4 x 6, conv 4; full attention 4 heads over 2 K/V of 16"""
    from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig
    args = dict(hidden_size=48, num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_hidden_layers=4,
                intermediate_size=64, vocab_size=128, linear_num_key_heads=2, linear_num_value_heads=4,
                linear_key_head_dim=8, linear_value_head_dim=6, linear_conv_kernel_dim=4)
    args.update(kw)
    return Qwen3_5TextConfig(**args)


def layer():
    torch.manual_seed(6)
    cfg = tiny_config(num_attention_heads=2, num_key_value_heads=1)
    mod = m.Qwen3_5GatedDeltaNet(cfg, 0).float()
    with torch.no_grad():
        for n, p in mod.named_parameters():
            p.copy_(torch.randn_like(p) * (0.3 if p.ndim > 1 else 0.5) + (1.0 if n == "norm.weight" else 0.0))
    x = torch.randn(1, 29, 48, requires_grad=True)
    y = mod(x)
    dy = torch.randn_like(y)
    (y * dy).sum().backward()
    out = {n: p.detach().float().contiguous() for n, p in mod.named_parameters()}
    out.update({"grad." + n: p.grad.detach().float().contiguous() for n, p in mod.named_parameters()})
    for n in ("conv1d.weight", "grad.conv1d.weight"):
        out[n] = out[n].squeeze(1).contiguous()
    out.update({"x": x.detach(), "y": y.detach().contiguous(), "dy": dy, "grad.x": x.grad.detach()})
    d = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden", "gdn_layer.safetensors")
    save_file(out, d, metadata={"transformers": transformers.__version__, "torch": torch.__version__,
                                "layer": "Qwen3_5GatedDeltaNet: hidden 48, key heads 2 x 8, value heads 4 x 6, conv 4"})
    print(f"gdn_layer: {', '.join(f'{n} {list(t.shape)}' for n, t in out.items())}; |y| {y.norm():.4f} -> {d}")


def attn():
    torch.manual_seed(7)
    cfg = tiny_config()
    cfg._attn_implementation = "sdpa"
    mod = m.Qwen3_5Attention(cfg, 3).float()
    with torch.no_grad():
        for n, p in mod.named_parameters():
            p.copy_(torch.randn_like(p) * (0.3 if p.ndim > 1 else 0.5))
    rope = m.Qwen3_5TextRotaryEmbedding(cfg)
    T = 21
    x = torch.randn(1, T, 48, requires_grad=True)
    pos = torch.arange(T)[None].expand(3, 1, T)
    cos, sin = rope(x, pos)
    y, _ = mod(x, (cos, sin), None)
    dy = torch.randn_like(y)
    (y * dy).sum().backward()
    out = {n: p.detach().float().contiguous() for n, p in mod.named_parameters()}
    out.update({"grad." + n: p.grad.detach().float().contiguous() for n, p in mod.named_parameters()})
    out.update({"x": x.detach(), "y": y.detach().contiguous(), "dy": dy, "grad.x": x.grad.detach()})
    d = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden", "gated_attn.safetensors")
    rp = cfg.rope_parameters
    save_file(out, d, metadata={"transformers": transformers.__version__, "torch": torch.__version__,
                                "rope_theta": str(rp["rope_theta"]), "partial_rotary_factor": str(rp.get("partial_rotary_factor")),
                                "rms_norm_eps": str(cfg.rms_norm_eps)})
    print(f"gated_attn: theta {rp['rope_theta']}, partial {rp.get('partial_rotary_factor')}, cos dims {cos.shape[-1]}; "
          f"{', '.join(f'{n} {list(t.shape)}' for n, t in out.items())} -> {d}")


def model():
    torch.manual_seed(8)
    cfg = tiny_config()
    cfg._attn_implementation = "sdpa"
    mod = m.Qwen3_5ForCausalLM(cfg).float()
    with torch.no_grad():
        for n, p in mod.named_parameters():
            p.copy_(torch.randn_like(p) * (0.2 if p.ndim > 1 else 0.3) + (1.0 if n.endswith("linear_attn.norm.weight") else 0.0))
    tokens = torch.randint(0, 128, (24,))
    logits = mod(input_ids=tokens[None, :-1]).logits[0].float()
    loss = torch.nn.functional.cross_entropy(logits, tokens[1:])
    loss.backward()
    out = {n: p.detach().float().contiguous() for n, p in mod.named_parameters()}
    out.update({"grad." + n: p.grad.detach().float().contiguous() for n, p in mod.named_parameters()})
    for n in list(out):
        if n.endswith("conv1d.weight"):
            out[n] = out[n].squeeze(1).contiguous()
    out.update({"tokens": tokens.to(torch.int32), "logits": logits.detach().contiguous(), "loss": loss.detach().reshape(1)})
    d = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden", "qwen35_tiny.safetensors")
    save_file(out, d, metadata={"transformers": transformers.__version__, "torch": torch.__version__,
                                "layer_types": ",".join(cfg.layer_types), "rms_norm_eps": str(cfg.rms_norm_eps)})
    print(f"qwen35_tiny: {cfg.layer_types}, loss {loss.item():.6f}, {sum(n.startswith('grad.') for n in out)} grads -> {d}")


def draw(mod):
    """a fixture's weights, in place: matrices normal(0, 0.05) (initializer_range 0.05, as
    tests/make_golden.py), the (1 + w) norms' w around 0, the gated norm's weight around 1, A in (0.02,
    0.5) (decays near 1: a long memory)"""
    with torch.no_grad():
        for n, p in mod.named_parameters():
            if n.endswith("linear_attn.norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif n.endswith("A_log"):
                p.copy_(torch.log(torch.rand_like(p) * 0.48 + 0.02))
            elif p.ndim == 1:
                p.copy_(0.2 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * 0.05)
    return mod


def fixture(name="q35_l2_s112", yarn=None, ends=None):
    """A fixture directory the trainers run (tests/golden/<name>/, as tests/make_golden.py writes them:
    config.json and model.safetensors by save_pretrained, golden.safetensors with tokens, loss, logits
    and grad.<HF name>): sizes the GPU kernels take (linear head dims 32, head dim 64 of which 16
    rotated), 2 layers (linear, then full attention: as deep as the Qwen3 fixtures, whose bf16 noise the
    bands were measured on), 112 tokens (16 x 7: zigzag chunks of 7 at P = 8); the (1 + w) norms' w drawn around 0.
    yarn: a YaRN factor (rope_parameters rope_type "yarn" from 32 original positions). ends: packed
    documents ending (token 7) at these positions, each run alone (tests/make_golden.py's packed(): the
    truth --packing is held to), with a prompt span whose labels do not count."""
    torch.manual_seed(9 if yarn is None else 10 if ends is None else 12)
    kw = dict(hidden_size=128, intermediate_size=256, vocab_size=256, num_attention_heads=4, num_key_value_heads=2,
              head_dim=64, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=32,
              linear_value_head_dim=32, max_position_embeddings=4096, tie_word_embeddings=False,
              num_hidden_layers=2, layer_types=["linear_attention", "full_attention"])
    if yarn:
        kw["rope_parameters"] = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": float(yarn),
                                 "original_max_position_embeddings": 32, "partial_rotary_factor": 0.25}
    cfg = tiny_config(**kw)
    cfg._attn_implementation = "eager"
    mod = draw(m.Qwen3_5ForCausalLM(cfg).float())
    d = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden", name)
    os.makedirs(d, exist_ok=True)
    mod.save_pretrained(d, safe_serialization=True)
    S = 112
    tokens = torch.randint(0, cfg.vocab_size, (S + 1,), generator=torch.Generator().manual_seed(11))
    out = {}
    if ends:
        from make_golden import packed
        logits, loss, weights = packed(mod, {"eot": 7, "seq": S, "ends": ends, "mask": [(20, 26)]}, tokens)
        out.update(weights=weights, eot=torch.tensor([7], dtype=torch.int32))
    else:
        logits = mod(input_ids=tokens[None, :-1]).logits[0].float()
        loss = torch.nn.functional.cross_entropy(logits, tokens[1:])
    loss.backward()
    out.update({"tokens": tokens.to(torch.int32), "logits": logits.detach().contiguous(), "loss": loss.detach().reshape(1)})
    out.update({"grad." + n: p.grad.detach().float().contiguous() for n, p in mod.named_parameters()})
    save_file(out, os.path.join(d, "golden.safetensors"),
              metadata={"transformers": transformers.__version__, "torch": torch.__version__,
                        "loss": "mean NLL over S predicted tokens, eager attention, fp32"})
    print(f"{name}: {cfg.layer_types}, seq {S}, loss {loss.item():.6f} "
          f"({sum(k.startswith('grad.') for k in out)} grads) -> {d}")


def routes(mod, tokens, dtype):
    """every layer's chosen experts for tokens, the model run in dtype (a copy) with its routers' logits
    in fp32 from their dtype inputs, as the trainers compute them"""
    import copy
    run, got = copy.deepcopy(mod).to(dtype), []

    def fp32_router(gate):
        def fwd(x):
            logits = torch.nn.functional.linear(x.reshape(-1, gate.hidden_dim).float(), gate.weight.float())
            top = torch.topk(torch.softmax(logits, -1), gate.top_k, dim=-1).indices
            got.append(top.sort(-1).values)
            return gate.__class__.forward(gate, x)
        return fwd
    for layer in run.model.layers:
        layer.mlp.gate.forward = fp32_router(layer.mlp.gate)
    with torch.no_grad():
        run(input_ids=tokens[None, :-1])
    return torch.stack(got)


def fixture_moe(name="q35moe_l2_s112"):
    """The MoE hybrid's fixture (Qwen3_5MoeForCausalLM, model_type qwen3_5_moe_text): fixture()'s shapes,
    with every MLP 8 routed experts of 32 (top 2, renormalised; fused in transformers' memory, saved one
    tensor an expert, as the Hub holds them) and a shared expert of 48 behind its sigmoid gate; no load-balancing loss (output_router_logits off,
    as released). The routers are solved for wide margins (below): a near tie flipped by rounding would
    move a token to another expert, which no band covers."""
    from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as mm
    from transformers.models.qwen3_5_moe.configuration_qwen3_5_moe import Qwen3_5MoeTextConfig
    cfg = Qwen3_5MoeTextConfig(hidden_size=128, vocab_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                               linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=32,
                               linear_value_head_dim=32, linear_conv_kernel_dim=4, max_position_embeddings=4096,
                               tie_word_embeddings=False, num_hidden_layers=2,
                               layer_types=["linear_attention", "full_attention"], num_experts=8, num_experts_per_tok=2,
                               moe_intermediate_size=32, shared_expert_intermediate_size=48,
                               rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25})
    cfg._attn_implementation = "eager"
    S = 112
    tokens = torch.randint(0, cfg.vocab_size, (S + 1,), generator=torch.Generator().manual_seed(11))
    seed = 21
    torch.manual_seed(seed)
    mod = draw(mm.Qwen3_5MoeForCausalLM(cfg).float())
    # Each layer's router solved for (least squares: 112 tokens, hidden 128) so that every token's
    # logits are a random order of 8 levels a unit apart: margins far above bf16's noise, the choices
    # still spread over all experts. Layer by layer, as a router changes the next layer's input.
    g = torch.Generator().manual_seed(seed)
    for layer in mod.model.layers:
        seen = []
        h = layer.mlp.gate.register_forward_hook(lambda _m, i, _o: seen.append(i[0].reshape(-1, cfg.hidden_size)))
        with torch.no_grad():
            mod(input_ids=tokens[None, :-1])
        h.remove()
        xn = seen[0].double()
        levels = torch.stack([torch.randperm(cfg.num_experts, generator=g) for _ in range(S)]).double() * 0.5
        w = torch.linalg.lstsq(xn, levels - levels.mean(1, keepdim=True)).solution.t()
        with torch.no_grad():
            layer.mlp.gate.weight.copy_(w.float())
    flips = (routes(mod, tokens, torch.float32) != routes(mod, tokens, torch.bfloat16)).any(-1).sum().item()
    print(f"{name}: routers solved, |w| max {max(l.mlp.gate.weight.abs().max().item() for l in mod.model.layers):.2f}; "
          f"{flips} routings differ in bf16")
    assert flips == 0, "the bf16 model routes some token elsewhere"
    d = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden", name)
    os.makedirs(d, exist_ok=True)
    mod.save_pretrained(d, safe_serialization=True)
    if os.path.exists(os.path.join(d, "generation_config.json")):
        os.remove(os.path.join(d, "generation_config.json"))  # as the other fixtures: config and weights only
    logits = mod(input_ids=tokens[None, :-1]).logits[0].float()
    loss = torch.nn.functional.cross_entropy(logits, tokens[1:])
    loss.backward()
    out = {"tokens": tokens.to(torch.int32), "logits": logits.detach().contiguous(), "loss": loss.detach().reshape(1)}
    from make_golden_moe import per_expert  # transformers fuses the experts in memory, saves them apart
    out.update(per_expert({"grad." + n: p.grad.detach().float() for n, p in mod.named_parameters()},
                          cfg.num_experts, cfg.moe_intermediate_size))
    save_file(out, os.path.join(d, "golden.safetensors"),
              metadata={"transformers": transformers.__version__, "torch": torch.__version__, "seed": str(seed),
                        "loss": "mean NLL over S predicted tokens, eager attention, fp32"})
    print(f"{name}: seed {seed}, {cfg.layer_types}, seq {S}, loss {loss.item():.6f} "
          f"({sum(k.startswith('grad.') for k in out)} grads) -> {d}")


if __name__ == "__main__":
    import sys
    if sys.argv[1:] == ["fixtures"]:  # only the trainers' fixture directories
        fixture()
        fixture("q35_yarn4_l2_s112", yarn=4)
        fixture("q35_packed_l2_s112", ends=[0, 13, 47, 48, 83, 95])
        fixture_moe()
        sys.exit(0)
    if sys.argv[1:] == ["moe"]:  # only the MoE hybrid's fixture
        fixture_moe()
        sys.exit(0)
    main()
    layer()
    attn()
    model()
    fixture()
    fixture("q35_yarn4_l2_s112", yarn=4)
    fixture("q35_packed_l2_s112", ends=[0, 13, 47, 48, 83, 95])
    fixture_moe()
