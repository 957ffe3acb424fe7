#!/usr/bin/env python3
"""Write the bad inputs tests/refusals.sh feeds the trainers, into OUT (made fresh):
token files, config.json files past their bounds, model directories whose weights are wrong in one
way each, and saves whose trainer state is wrong in one way each. Plain Python: no torch, no
safetensors library (the point is files those libraries would refuse or never write).
  python3 tests/make_bad_inputs.py OUT"""
import json, os, shutil, struct, sys

V = 1024  # a small vocabulary: the models here hold [V, 64] embeddings, the token files ids below V


def tokens(path, ids, weights=None):
    """version 1 (ids), or 2 with a loss weight (0/1) per token"""
    with open(path, "wb") as f:
        f.write(b"LCTOKENS" + struct.pack("<IIq", 2 if weights else 1, 4, len(ids)) + struct.pack(f"<{len(ids)}I", *ids))
        if weights:
            f.write(bytes(weights))


def config(d, **over):
    """a tiny Qwen3: hidden 64, one head of 64, one layer, tied, vocabulary V"""
    c = {"model_type": "qwen3", "vocab_size": V, "hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 1,
         "num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": 64, "rms_norm_eps": 1e-6,
         "rope_theta": 1e6, "max_position_embeddings": 4096, "tie_word_embeddings": True, "hidden_act": "silu"}
    c.update(over)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write(json.dumps(c) if not isinstance(c.get("raw"), str) else c["raw"])


def raw_config(d, text):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write(text)


def weights(prefix=""):
    """the tiny model's tensors: (name, shape), as common/model.c lays them out"""
    t = [("model.embed_tokens.weight", [V, 64])]
    L = "model.layers.0."
    t += [(L + "input_layernorm.weight", [64]), (L + "self_attn.q_proj.weight", [64, 64]),
          (L + "self_attn.k_proj.weight", [64, 64]), (L + "self_attn.v_proj.weight", [64, 64]),
          (L + "self_attn.o_proj.weight", [64, 64]), (L + "self_attn.q_norm.weight", [64]),
          (L + "self_attn.k_norm.weight", [64]), (L + "post_attention_layernorm.weight", [64]),
          (L + "mlp.gate_proj.weight", [64, 64]), (L + "mlp.up_proj.weight", [64, 64]),
          (L + "mlp.down_proj.weight", [64, 64]), ("model.norm.weight", [64])]
    return [(prefix + n, s) for n, s in t]


def safetensors(path, tensors, metadata=None, header_text=None):
    """tensors: (name, shape[, dtype]); data zeros. header_text replaces the JSON header as written."""
    head, off = {}, 0
    if metadata:
        head["__metadata__"] = metadata
    items = []
    for t in tensors:
        name, shape, dt = t if len(t) == 3 else (*t, "BF16")
        n = 1
        for d in shape:
            n *= d
        nb = n * {"BF16": 2, "F32": 4, "I32": 4}[dt]
        items.append(f'"{name}":{{"dtype":"{dt}","shape":{json.dumps(shape)},"data_offsets":[{off},{off + nb}]}}')
        off += nb
    text = header_text or "{" + ",".join(([f'"__metadata__":{json.dumps(metadata)}'] if metadata else []) + items) + "}"
    text += " " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text.encode() + b"\0" * off)
    return text


def main(out):
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    P = lambda *a: os.path.join(out, *a)
    tokens(P("tiny.tok"), [i % V for i in range(9000)])           # 9000 tokens, ids below V
    tokens(P("short.tok"), list(range(100)))                        # shorter than any window tested
    os.mkdir(P("dir.tok"))                                          # a directory given as a token file
    tokens(P("other.tok"), [(7 * i) % V for i in range(9000)])      # as long as tiny.tok, other ids
    tokens(P("zero_weights.tok"), [i % V for i in range(9000)], [0] * 9000)  # no label carries loss
    tokens(P("all_eot.tok"), [5] * 9000)                             # --packing 5: every label follows an end of text
    # config.json past its bounds (each a model directory of its own)
    config(P("cfg_vocab_2p62"), vocab_size=2 ** 62)
    raw_config(P("cfg_int_past_int64"), json.dumps({"model_type": "qwen3"})[:-1] +
               ', "vocab_size": 99999999999999999999999, "hidden_size": 64, "intermediate_size": 64,'
               ' "num_hidden_layers": 1, "num_attention_heads": 1}')
    config(P("cfg_layers_2p40"), num_hidden_layers=2 ** 40)
    config(P("cfg_theta_1"), rope_theta=1)
    config(P("cfg_theta_0"), rope_theta=0)
    config(P("cfg_theta_neg"), rope_theta=-1)
    config(P("cfg_yarn_1e300"), rope_scaling={"rope_type": "yarn", "factor": 1e300, "original_max_position_embeddings": 32})
    raw_config(P("cfg_yarn_inf"), json.dumps({"model_type": "qwen3", "vocab_size": V, "hidden_size": 64,
               "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 1, "head_dim": 64,
               "rope_scaling": {"rope_type": "yarn", "factor": 12345}}).replace("12345", "1e400"))
    config(P("cfg_yarn_betas"), rope_scaling={"rope_type": "yarn", "factor": 4, "beta_fast": 1, "beta_slow": 32})
    config(P("cfg_eps_neg"), rms_norm_eps=-1e-6)
    config(P("cfg_head_dim_0"), head_dim=0)
    os.makedirs(P("cfg_is_dir", "config.json"))                     # config.json a directory
    raw_config(P("cfg_syntax"), '{\n  "model_type": "qwen3",\n  "rope_scaling": {"factor": 4x},\n  "vocab_size": 8\n}')
    # model directories: the tiny config and weights wrong in one way each
    good = weights()
    config(P("m_good")); safetensors(P("m_good", "model.safetensors"), good)
    config(P("m_missing")); safetensors(P("m_missing", "model.safetensors"), good[:-1])
    config(P("m_shape")); safetensors(P("m_shape", "model.safetensors"), good[:-1] + [("model.norm.weight", [65])])
    config(P("m_int")); safetensors(P("m_int", "model.safetensors"), good[:-1] + [("model.norm.weight", [64], "I32")])
    config(P("m_st_dir")); os.makedirs(P("m_st_dir", "model.safetensors"))
    config(P("m_dup"))  # one name twice in the header (the second copy's bytes differ)
    safetensors(P("m_dup", "model.safetensors"), good + [("model.norm.weight", [64])])
    h = safetensors(P("m_good", "model.safetensors"), good)
    config(P("m_huge"))  # a shape whose element count wraps int64: [2^40, 2^40] would read as 0 elements
    end = sum(2 * (s[0] * (s[1] if len(s) > 1 else 1)) for _, s in good)
    safetensors(P("m_huge", "model.safetensors"), good, header_text=h.rstrip()[:-1] +
                f',"x.huge":{{"dtype":"BF16","shape":[1099511627776,1099511627776],"data_offsets":[{end},{end}]}}}}')
    for name, second in (("m_two_shards", good[-1:]), ("m_wrong_shard", [])):
        config(P(name))  # sharded: the index names shard 1 for every tensor but the last
        safetensors(P(name, "model-00001-of-00002.safetensors"), good[:-1] + second)
        safetensors(P(name, "model-00002-of-00002.safetensors"), good[-1:])
        wm = {n: "model-00001-of-00002.safetensors" for n, _ in good}
        wm["model.norm.weight"] = "model-00002-of-00002.safetensors"
        if name == "m_wrong_shard":
            wm["model.layers.0.mlp.down_proj.weight"] = "model-00002-of-00002.safetensors"
        with open(P(name, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": wm}, f)
    config(P("m_index_dir")); os.makedirs(P("m_index_dir", "model.safetensors.index.json"))
    # saves (--resume DIR/step-N): the tiny model's config, a trainer state wrong in one way each
    state = weights("master.") + weights("adam_m.") + weights("adam_v.")
    # r_meta: stamped by tests/refusals.sh (build/check_stage stamp) with what a run of m_good on tiny.tok
    # at --seq 64 records, which --resume compares
    for name, step, cfg in (("r_step_neg", "-3", {}), ("r_step_abc", "abc", {}), ("r_step_late", "7", {}),
                            ("r_good", "1", {}), ("r_other_model", "1", {"hidden_size": 128, "head_dim": 128}),
                            ("r_meta", "1", {})):
        d = P(name, "step-1")
        config(d, **cfg)
        safetensors(P(name, "step-1", "trainer_state.safetensors"), state, metadata={"step": step, "seq": "64"})
        safetensors(P(name, "step-1", "model.safetensors"), good)
    d = P("r_no_master", "step-1"); config(d)
    safetensors(P("r_no_master", "step-1", "trainer_state.safetensors"), weights("adam_m.") + weights("adam_v."),
                metadata={"step": "1"})
    open(P("save_is_file"), "w").close()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
