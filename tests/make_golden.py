#!/usr/bin/env python3
"""Make the golden files the C reference model is checked against, with transformers itself.

For each tiny Qwen3 config below, writes tests/golden/<name>/:
  config.json, model.safetensors   the model as transformers saves it (fp32)
  golden.safetensors               tokens [S+1] (I32), logits [S, vocab], loss [1],
                                   grad.<HF name> for every parameter; metadata names the versions;
                                   a masked config also weights [S+1] (I32 0/1, the loss mask)
The loss is the mean next-token NLL over S predicted tokens (inputs tokens[:S], labels tokens[1:]),
computed in fp32 with eager attention. A masked config's labels are -100 where weights[1:] is 0
(a prompt: completion-only loss), and transformers' own causal-LM loss averages over the rest.
A packed config (--packing) also holds eot [1] (I32): documents end at that token, and the truth is
each document run alone through transformers (its positions from 0, its own keys only), the label
after an eot (the next document's first token) carrying no loss; loss = the documents' summed NLL
over the labels that count / their number, and the gradients are that loss's.

  python3 tests/make_golden.py            # regenerate into tests/golden
  python3 tests/make_golden.py --check    # regenerate into a temp dir and compare with the committed files
"""
import argparse, json, os, sys, tempfile

import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import save_file, load_file
from transformers import Qwen3Config, Qwen3ForCausalLM

# (a) tied, GQA 2:1, head_dim 128, hidden != heads*head_dim;  (b) untied, GQA 4:1, S % 64 != 0;
# (c) YaRN factor 4 with original_max_position_embeddings (32) below the sequence (96).
CONFIGS = {
    "tied_gqa2_hd128": dict(vocab=384, hidden=64, inter=128, layers=2, heads=4, kv=2, head_dim=128, tied=True,
                            seq=64, rope={"rope_type": "default", "rope_theta": 1e6}, max_pos=4096),
    "untied_gqa4_s100": dict(vocab=320, hidden=96, inter=160, layers=2, heads=8, kv=2, head_dim=64, tied=False,
                             seq=100, rope={"rope_type": "default", "rope_theta": 1e6}, max_pos=4096),
    "yarn4_orig32": dict(vocab=256, hidden=64, inter=128, layers=2, heads=4, kv=2, head_dim=64, tied=False, seq=96,
                         rope={"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0,
                               "original_max_position_embeddings": 32}, max_pos=128),
    # (d) a loss mask: three prompt spans carry no loss (the first label, the middle, and one inside
    # a zigzag chunk of P = 4), the last label counts; S = 128 splits into 2 x 8 chunks
    "masked_gqa4_s128": dict(vocab=320, hidden=96, inter=160, layers=2, heads=8, kv=2, head_dim=64, tied=False,
                             seq=128, rope={"rope_type": "default", "rope_theta": 1e6}, max_pos=4096,
                             mask=[(0, 21), (50, 70), (100, 113)]),
    # (e) packed documents: eot (7) ends documents at these inputs: 1-token documents (5, 64), ends on
    # zigzag chunk edges of P = 4 and 8 (31, 47, 63), documents across several chunks; the last one
    # cut by the window (its last label counts); two prompt spans, one across a boundary
    "packed_gqa4_s128": dict(vocab=320, hidden=96, inter=160, layers=2, heads=8, kv=2, head_dim=64, tied=False,
                             seq=128, rope={"rope_type": "default", "rope_theta": 1e6}, max_pos=4096,
                             mask=[(20, 28), (88, 95)], eot=7, ends=[4, 5, 31, 47, 63, 64, 90, 111]),
}


def build(cfg, seed):
    kw = dict(vocab_size=cfg["vocab"], hidden_size=cfg["hidden"], intermediate_size=cfg["inter"],
              num_hidden_layers=cfg["layers"], num_attention_heads=cfg["heads"], num_key_value_heads=cfg["kv"],
              head_dim=cfg["head_dim"], max_position_embeddings=cfg["max_pos"], rms_norm_eps=1e-6,
              tie_word_embeddings=cfg["tied"], use_cache=False, attn_implementation="eager",
              initializer_range=0.05, torch_dtype="float32")
    try:
        conf = Qwen3Config(rope_parameters=dict(cfg["rope"]), **kw)
    except TypeError:  # transformers v4
        rope = dict(cfg["rope"])
        theta = rope.pop("rope_theta")
        conf = Qwen3Config(rope_theta=theta, rope_scaling=rope if rope["rope_type"] != "default" else None, **kw)
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(conf).float()
    # norm weights away from 1, so a missing or misplaced norm weight cannot pass
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.ndim == 1:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
    return model


def packed(model, cfg, tokens):
    """Each document of tokens[:S] alone (documents end at eot): logits [S, V], the loss over every
    label that counts, and the weights [S+1] the fixture records (its prompt spans)."""
    eot, S = cfg["eot"], cfg["seq"]
    tokens[tokens == eot] = eot + 1  # no stray document ends
    for p in cfg["ends"]:
        tokens[p] = eot
    weights = torch.ones(S + 1, dtype=torch.int32)
    for a, b in cfg.get("mask", []):
        weights[a:b] = 0
    starts = [0] + [p + 1 for p in cfg["ends"] if p + 1 < S]
    bounds = list(zip(starts, starts[1:] + [S]))
    logits_all, total, count = [], 0.0, 0
    for a, b in bounds:
        labels = tokens[a + 1:b + 1].clone()
        labels[weights[a + 1:b + 1] == 0] = -100
        if tokens[b - 1] == eot:  # the label after the document's end: the next document's first token
            labels[-1] = -100
        logits = model(input_ids=tokens[None, a:b]).logits[0].float()  # positions 0..b-a-1
        total = total + F.cross_entropy(logits, labels, ignore_index=-100, reduction="sum")
        count += int((labels != -100).sum())
        logits_all.append(logits.detach())
    return torch.cat(logits_all), total / count, weights


def make(name, cfg, out_dir, seed):
    model = build(cfg, seed)
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d, safe_serialization=True)
    for extra in ("generation_config.json",):
        p = os.path.join(d, extra)
        if os.path.exists(p):
            os.remove(p)
    g = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(0, cfg["vocab"], (cfg["seq"] + 1,), generator=g)
    model.train()
    weights = None
    if "eot" in cfg:
        logits, loss, weights = packed(model, cfg, tokens)
    elif "mask" in cfg:  # tokens [a, b) of each span are prompt: their labels are -100
        weights = torch.ones(cfg["seq"] + 1, dtype=torch.int32)
        for a, b in cfg["mask"]:
            weights[a:b] = 0
        labels = tokens[1:].clone()
        labels[weights[1:] == 0] = -100
        # transformers' causal-LM loss (shift_labels: our labels are already shifted, so all S count)
        out = model(input_ids=tokens[None, :-1], labels=labels[None], shift_labels=labels[None])
        logits, loss = out.logits[0].float(), out.loss
        manual = F.cross_entropy(logits.detach(), labels, ignore_index=-100, reduction="mean")
        assert torch.allclose(loss.detach(), manual, rtol=1e-6), (loss.item(), manual.item())
    else:
        logits = model(input_ids=tokens[None, :-1]).logits[0].float()
        loss = F.cross_entropy(logits, tokens[1:], reduction="mean")
    loss.backward()
    out = {"tokens": tokens.to(torch.int32), "logits": logits.detach().contiguous(),
           "loss": loss.detach().reshape(1)}
    if weights is not None:
        out["weights"] = weights
    if "eot" in cfg:
        out["eot"] = torch.tensor([cfg["eot"]], dtype=torch.int32)
    for n, p in model.named_parameters():
        out["grad." + n] = p.grad.detach().contiguous()
    meta = {"transformers": transformers.__version__, "torch": torch.__version__, "seed": str(seed),
            "loss": "mean NLL over S predicted tokens, eager attention, fp32"
                    + ("; labels -100 where weights is 0" if weights is not None else "")
                    + ("; packed: each document alone, no loss after eot" if "eot" in cfg else "")}
    save_file(out, os.path.join(d, "golden.safetensors"), metadata=meta)
    kept = f", {int(weights[1:].sum())} labels unmasked" if weights is not None else ""
    print(f"{name}: seq {cfg['seq']} loss {loss.item():.6f}{kept} ({sum(k.startswith('grad.') for k in out)} grads) -> {d}")


def compare(a_dir, b_dir, names):
    bad = 0
    for name in names:
        for f in ("model.safetensors", "golden.safetensors"):
            a, b = load_file(os.path.join(a_dir, name, f)), load_file(os.path.join(b_dir, name, f))
            for k in a:
                x, y = a[k].double(), b[k].double()
                err = (x - y).norm() / max(y.norm(), 1e-30)
                if k not in b or err > 1e-6:
                    print(f"MISMATCH {name}/{f}:{k} rel err {err:.3e}")
                    bad += 1
    print("golden files match" if not bad else f"{bad} mismatches")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden"))
    ap.add_argument("--check", action="store_true", help="regenerate in a temp dir and compare with --out")
    ap.add_argument("--only", help="make only this config (the others' seeds stay as they are)")
    a = ap.parse_args()
    torch.set_num_threads(min(4, os.cpu_count() or 1))
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    target = tempfile.mkdtemp() if a.check else a.out
    for i, (name, cfg) in enumerate(CONFIGS.items()):
        if not a.only or name == a.only:
            make(name, cfg, target, seed=1234 + i)
    if a.check:
        sys.exit(1 if compare(target, a.out, [a.only] if a.only else list(CONFIGS)) else 0)


if __name__ == "__main__":
    main()
