#!/usr/bin/env python3
"""Write a copy of a MoE model directory with its routed experts fused as a Qwen3.5 MoE release on the
Hub holds them: per layer, mlp.experts.gate_up_proj [E, 2I, H] (each expert's gate rows, then its up
rows) and mlp.experts.down_proj [E, H, I], in place of one gate/up/down tensor per expert (what
transformers' save_pretrained writes, and the trainers' saves). Every other tensor, config.json and a
golden.safetensors beside it are copied as they are. Pure Python (no numpy, no torch): the GPU tests
run it on the device machine, CI on the CPU.

    python3 tests/fuse_experts.py SRC_DIR OUT_DIR
"""
import json
import os
import re
import shutil
import struct
import sys

def refuse(msg):
    """bad input: the message on stderr, exit 2 (as the stages do)"""
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


EXPERT = re.compile(r"^(.*\.mlp\.experts)\.(\d+)\.(gate|up|down)_proj\.weight$")


def read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", None)
    return header, data, meta


def tensor(header, data, name):
    b, e = header[name]["data_offsets"]
    return data[b:e]


def write(path, tensors, meta):
    """tensors: list of (name, dtype, shape, bytes) in file order"""
    header, off = {}, 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    if meta:
        header["__metadata__"] = meta
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, _, _, raw in tensors:
            f.write(raw)


def fuse(src, out):
    path = os.path.join(src, "model.safetensors")
    if not os.path.isfile(path):
        refuse(f"{path} is not a file (this script reads one unsharded model.safetensors)")
    header, data, meta = read(path)
    layers, kept = {}, []
    for name in header:
        m = EXPERT.match(name)
        if m:
            layers.setdefault(m.group(1), {})[(int(m.group(2)), m.group(3))] = name
        else:
            kept.append(name)
    if not layers:
        refuse(f"{src}/model.safetensors has no per-expert tensors (*.mlp.experts.N.gate_proj.weight) to fuse")
    tensors = [(n, header[n]["dtype"], header[n]["shape"], tensor(header, data, n)) for n in kept]
    for prefix, parts in sorted(layers.items()):
        E = 1 + max(e for e, _ in parts)
        missing = [f"{prefix}.{e}.{k}_proj.weight" for e in range(E) for k in ("gate", "up", "down") if (e, k) not in parts]
        if missing:
            refuse(f"{missing[0]} is missing: every expert needs its gate, up and down")
        g0, d0 = header[parts[(0, "gate")]], header[parts[(0, "down")]]
        dtype, (I, H) = g0["dtype"], g0["shape"]
        gate_up = b"".join(tensor(header, data, parts[(e, k)]) for e in range(E) for k in ("gate", "up"))
        down = b"".join(tensor(header, data, parts[(e, "down")]) for e in range(E))
        tensors.append((prefix + ".gate_up_proj", dtype, [E, 2 * I, H], gate_up))
        tensors.append((prefix + ".down_proj", d0["dtype"], [E, H, I], down))
    os.makedirs(out, exist_ok=True)
    write(os.path.join(out, "model.safetensors"), tensors, meta)
    for f in ("config.json", "golden.safetensors"):
        if os.path.exists(os.path.join(src, f)):
            shutil.copy(os.path.join(src, f), os.path.join(out, f))
    print(f"fuse_experts: {len(layers)} layers of {E} experts fused into {out}/model.safetensors")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0 if len(sys.argv) == 2 else 2)
    fuse(sys.argv[1], sys.argv[2])
