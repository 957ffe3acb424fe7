#!/usr/bin/env python3
"""Regenerate the fuzzers' seed corpus, tests/fuzz/corpus/NAME/ (made afresh), from the project's own
tools and files: the golden model directories (tests/golden/*/), config.json and safetensors files
written by the project's writers (config_write_json, st_plan_* as the trainers save, rdv_publish, the
TCP rendezvous's hello and answers, ckpt_begin/ckpt_commit: tests/fuzz/corpus_tool.c, built here with
the system compiler), token files from ./build/check_stage (tokens, random, slice of data/books.tok,
mask), the bad inputs tests/make_bad_inputs.py writes, the stage command lines of tests/test_cli.sh and
the --rendezvous specs of tests/test_rendezvous.c. Big files are cut to what the reader reads first: a
safetensors seed is its header, with its data as a count of zero bytes (fuzz_safetensors.c's input
format); token files are a few hundred tokens.
  python3 tests/fuzz/make_corpus.py        (needs cc, python3, and builds build/check_stage if missing)"""
import glob, os, re, shlex, shutil, struct, subprocess, sys, tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "fuzz", "corpus")
NAMES = ["json", "config", "safetensors", "tokens", "cli", "ckpt", "rendezvous"]
MAX_FILE = 64 << 10  # no seed is larger


def run(*cmd, **kw):
    subprocess.run([str(c) for c in cmd], check=True, cwd=ROOT, stdout=subprocess.DEVNULL, **kw)


def put(name, fname, data):
    if isinstance(data, str):
        data = data.encode()
    assert len(data) <= MAX_FILE, f"{name}/{fname}: {len(data)} bytes"
    fname = re.sub(r"[^A-Za-z0-9._+-]", "_", fname)
    with open(os.path.join(OUT, name, fname), "wb") as f:
        f.write(data)


def read(path):
    with open(path, "rb") as f:
        return f.read()


# ---------------------------------------------------------------- safetensors in fuzz_safetensors.c's form
def header(path):
    """a safetensors file's JSON header and the bytes of data after it"""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return f.read(n), os.path.getsize(path) - 8 - n


def pad3(n):
    return min(n, (1 << 24) - 1).to_bytes(3, "little")


def st_seed(path):
    """a file: flags 0, its data as zeros, its header"""
    h, data = header(path)
    return bytes([0]) + pad3(data) + h


def st_raw_seed(path, cut=None):
    """a file as it is (flags 1: raw), optionally cut after `cut` bytes"""
    b = read(path)
    return bytes([1]) + pad3(0) + (b[:cut] if cut else b)


def st_dir_seed(d):
    """a directory (flags 2): the index and each shard's header, or no index and model.safetensors"""
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.isfile(index):
        shards = sorted(glob.glob(os.path.join(d, "model-*-of-*.safetensors")))
        parts = [read(index)]
    else:
        shards, parts = [os.path.join(d, "model.safetensors")], [b""]
    heads = [header(s) for s in shards]
    return bytes([2]) + pad3(max(h[1] for h in heads)) + b"\0".join(parts + [h[0] for h in heads])


# ---------------------------------------------------------------- a save root in fuzz_ckpt.c's form
def ckpt_seed(root, path_pick, extra=b""):
    lines = []
    for name in sorted(os.listdir(root)):
        p = os.path.join(root, name)
        if os.path.islink(p):
            if name == "latest":
                t = os.readlink(p)
                lines.append(("a" + os.path.basename(t)) if t.startswith("/") else ("l" + t))
        elif os.path.isdir(p):
            st = os.path.join(p, "trainer_state.safetensors")
            lines.append(("d" if os.path.isfile(st) else "t" if os.path.isdir(st) else "e") + name)
        elif name == "trainer_state.safetensors":
            lines.append("r")
        else:
            lines.append("f" + name)
    return bytes([path_pick]) + "\n".join(lines).encode() + extra


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    for n in NAMES:
        os.makedirs(os.path.join(OUT, n))
    tmp = tempfile.mkdtemp(prefix="longctx-corpus-")
    try:
        make(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    total = 0
    for n in NAMES:
        files = os.listdir(os.path.join(OUT, n))
        size = sum(os.path.getsize(os.path.join(OUT, n, f)) for f in files)
        total += size
        print(f"{n:12s} {len(files):4d} files {size:8d} bytes")
    print(f"{'total':12s} {total:19d} bytes")


def make(tmp):
    T = os.path.join(tmp, "corpus_tool")
    cc = os.environ.get("CC", "cc")
    host = [f"common/{s}.c" for s in ("tensor", "files", "json", "config", "safetensors", "model", "ckpt", "sha256", "rendezvous")]
    run(cc, "-std=c11", "-D_DEFAULT_SOURCE", "-O1", "-Icommon", "-o", T, "tests/fuzz/corpus_tool.c", *host, "-lm",
        "-lpthread")
    if not os.access(os.path.join(ROOT, "build", "check_stage"), os.X_OK):
        run("make", "build/check_stage")
    CS = os.path.join(ROOT, "build", "check_stage")
    bad = os.path.join(tmp, "bad")
    run(sys.executable, "tests/make_bad_inputs.py", bad)
    golden = sorted(d for d in glob.glob(os.path.join(ROOT, "tests", "golden", "*")) if os.path.isdir(d))
    gname = {d: os.path.basename(d) for d in golden}

    # ---- config.json: the golden ones, the refused ones, and what config_write_json writes
    configs = {}
    for d in golden:
        configs[f"golden-{gname[d]}.json"] = read(os.path.join(d, "config.json"))
    for p in sorted(glob.glob(os.path.join(ROOT, "tests", "bad_configs", "*", "config.json"))):
        configs[f"bad_configs-{os.path.basename(os.path.dirname(p))}.json"] = read(p)
    for p in sorted(glob.glob(os.path.join(bad, "*", "config.json"))):
        if os.path.isfile(p):
            configs[f"bad-{os.path.basename(os.path.dirname(p))}.json"] = read(p)
    written = [(s, s, None) for s in ("0.6B", "1.7B", "4B", "8B", "14B", "32B", "30B-A3B")]
    written += [("32B-yarn32", "32B", ("32", "32768")), ("0.6B-yarn4", "0.6B", ("4", "0"))]
    written += [(f"golden-{gname[d]}", d, None) for d in golden]
    written += [(f"golden-{gname[golden[0]]}-yarn8", golden[0], ("8", "512"))]
    for name, model, yarn in written:
        out = os.path.join(tmp, "c.json")
        run(T, "config", out, model, *(yarn or ()))
        configs[f"written-{name}.json"] = read(out)
    for k, v in configs.items():
        put("config", k, v)
        put("json", k, v)

    # ---- safetensors
    st = {}
    for d in golden:
        for f in ("model.safetensors", "golden.safetensors"):
            if os.path.isfile(os.path.join(d, f)):
                st[f"golden-{gname[d]}-{f}"] = st_seed(os.path.join(d, f))
    st[f"golden-{gname[golden[0]]}-dir"] = st_dir_seed(golden[0])
    st[f"golden-{gname[golden[0]]}-raw-cut"] = st_raw_seed(os.path.join(golden[0], "model.safetensors"), 600)
    for m in ("m_good", "m_missing", "m_shape", "m_int", "m_dup", "m_huge"):
        st[f"bad-{m}"] = st_seed(os.path.join(bad, m, "model.safetensors"))
    for m in ("m_two_shards", "m_wrong_shard", "m_good"):
        st[f"bad-{m}-dir"] = st_dir_seed(os.path.join(bad, m))
    for r in ("r_good", "r_step_neg", "r_step_abc", "r_step_late", "r_no_master", "r_other_model"):
        st[f"bad-{r}-state"] = st_seed(os.path.join(bad, r, "step-1", "trainer_state.safetensors"))
    # as the trainers write them (st_plan_*): a sharded model, a trainer state, a gradient dump
    sh = os.path.join(tmp, "sharded")
    run(T, "model", os.path.join(bad, "m_good"), sh, 40000)
    st["written-tiny-sharded-dir"] = st_dir_seed(sh)
    for d in golden:
        if os.path.isfile(os.path.join(d, "model.safetensors")):
            p = os.path.join(tmp, "s.safetensors")
            run(T, "state", d, p, 3)
            st[f"written-{gname[d]}-state"] = st_seed(p)
    p = os.path.join(tmp, "s.safetensors")
    run(T, "dump", golden[-1], p)
    st[f"written-{gname[golden[-1]]}-dump"] = st_seed(p)
    # a whole file, raw: a micro model of 8-wide everything (its zeros are the data)
    micro = os.path.join(tmp, "micro")
    os.makedirs(micro)
    with open(os.path.join(micro, "config.json"), "w") as f:
        f.write('{"model_type": "qwen3", "vocab_size": 16, "hidden_size": 8, "intermediate_size": 8, '
                '"num_hidden_layers": 1, "num_attention_heads": 1, "head_dim": 8, "tie_word_embeddings": true}')
    run(T, "model", micro, p)
    st["written-micro-raw"] = st_raw_seed(p)
    for k, v in st.items():
        put("safetensors", k, v)
        body = v[4:]
        if v[0] == 0:  # the header's JSON
            put("json", k + ".json", body)
        elif v[0] == 2 and body.split(b"\0")[0]:  # the index
            put("json", k + "-index.json", body.split(b"\0")[0])

    # ---- token files
    for d in golden:
        p = os.path.join(tmp, "t.tok")
        run(CS, "tokens", d, p)
        put("tokens", f"golden-{gname[d]}.tok", read(p))
        if gname[d].startswith("masked") or d == golden[0]:
            run(CS, "mask", p, os.path.join(tmp, "m.tok"), 10, 50)
            put("tokens", f"golden-{gname[d]}-mask10-50.tok", read(os.path.join(tmp, "m.tok")))
    p = os.path.join(tmp, "t.tok")
    run(CS, "random", 256, 600, 1, p)
    put("tokens", "random-v256-n600.tok", read(p))
    run(CS, "random", 256, 600, 2, p, "masked")
    put("tokens", "random-v256-n600-masked.tok", read(p))
    run(CS, "random", 151936, 300, 3, p)
    put("tokens", "random-v151936-n300.tok", read(p))
    run(CS, "random", 256, 0, 4, p)
    put("tokens", "random-empty.tok", read(p))
    books = os.path.join(ROOT, "data", "books.tok")
    count = (os.path.getsize(books) - 24) // 4
    run(CS, "slice", books, p, count - 500)
    put("tokens", "books-last500.tok", read(p))
    put("tokens", "bad-short.tok", read(os.path.join(bad, "short.tok")))
    run(CS, "slice", os.path.join(bad, "tiny.tok"), p, 8800)
    put("tokens", "bad-tiny-last200.tok", read(p))

    # ---- command lines: tests/test_cli.sh's, one word a line
    text = read(os.path.join(ROOT, "tests", "test_cli.sh")).decode()
    subst = {"$gpus": "--gpus 1 --attn-groups 1", "$keep": "--keep-attn gpu:28", '"$big"': "/tmp/rand.tok",
             '"$long"': "/tmp/long", '"$cap"': "1.25", "$J": "--gpus 8 --seq 1M --gpu-gib 74.5 --host-gib 2048 --dry-run",
             "$5": "139.8", "$6": "100"}
    lines = set()
    for m in re.finditer(r'check_refusal "[^"]*" "[^"]*" (.*)', text):
        lines.add(m.group(1))
    for m in re.finditer(r'\$\((?:NCCL_NVLS_ENABLE=0 )?(?:\$bin|\./stage5) ([^)]*?) 2>&1\)', text):
        lines.add(m.group(1))
    for m in re.finditer(r'"(bogus|gpu:x|host:-1|gpu:1,disk:2)\|', text):
        lines.add(f"--gpus 8 --seq 1M --keep-attn {m.group(1)} --dry-run")
    lines.update(["--help", "--seq 128K --steps 0 --save /tmp/s", "--offload ckpt,states --keep-attn --dry-run",
                  "--seq=9223372036854775807 --lr=1e-300", "--node-rank -1 --rehearse 67108863 --comm-timeout 1e9"])
    for i, line in enumerate(sorted(lines)):
        for k, v in subst.items():
            line = line.replace(k, v)
        line = line.replace('"${bad%%|*}"', "bogus").replace("\\", "").strip()
        if "$" in line:  # a line of the script's own plumbing ("$@")
            continue
        try:
            words = shlex.split(line, comments=False)
        except ValueError:
            continue
        put("cli", f"test_cli-{i:02d}", "\n".join(words))

    # ---- save roots: written by ckpt_begin/ckpt_commit, then read back as fuzz_ckpt.c's entries
    layouts = [("steps-1-2-3", ["1", "2", "3"], [0, 2, 4]), ("partial", ["1", "2", "3.partial"], [0, 3]),
               ("old", ["4", "8", "8.old"], [0, 1]), ("one", ["7"], [2, 3, 4])]
    for name, steps, picks in layouts:
        r = os.path.join(tmp, "save-" + name)
        run(T, "ckpt", r, *steps)
        for pick in picks:
            put("ckpt", f"written-{name}-path{pick}", ckpt_seed(r, pick))
    r = os.path.join(tmp, "save-one")
    os.unlink(os.path.join(r, "latest"))  # latest missing: the newest complete step-N
    for s in ("3", "12", "5.partial"):
        run(T, "ckpt", r, s)
    os.unlink(os.path.join(r, "latest"))
    put("ckpt", "written-no-latest", ckpt_seed(r, 0))
    put("ckpt", "written-latest-broken", ckpt_seed(r, 0, b"\nlstep-99"))
    put("ckpt", "written-latest-absolute", ckpt_seed(r, 1, b"\nastep-12"))
    put("ckpt", "written-older-layout", ckpt_seed(r, 0, b"\nr"))

    rendezvous_seeds(T, tmp)


def rendezvous_seeds(T, tmp):
    """fuzz_rendezvous's seeds: byte 0 the reader; for TCP, byte 1 bit 0: the harness proves the message"""
    p = os.path.join(tmp, "r")
    for name, run_id, nn, g in (("ours", "fuzz-run", 2, 8), ("other-run", "another", 2, 8),
                                ("other-shape", "fuzz-run", 4, 8), ("no-run-id", "", 2, 8)):
        run(T, "rdv-file", p, run_id, nn, g)
        put("rendezvous", f"file-{name}", b"\0" + read(p))
    run(T, "rdv-file", p, "fuzz-run", 2, 8)
    f = read(p)
    put("rendezvous", "file-fresh-no-id", b"\0" + f + b"\x03")
    put("rendezvous", "file-fresh-given-id", b"\0" + f + b"\x05fuzz-run")
    put("rendezvous", "file-open-to-all", b"\0" + f + b"\x08")
    put("rendezvous", "file-truncated", b"\0" + f[:100])
    specs = ["tcp://10.0.0.1:29500", "tcp://node-a17.cluster:65535", "/shared/run7/rdv", "rdv"]
    specs += re.findall(r'\{"((?:tcp|udp)://[^"]*)", "', read(os.path.join(ROOT, "tests", "test_rendezvous.c")).decode())
    for i, s in enumerate(specs):
        put("rendezvous", f"spec-{i:02d}", b"\1" + s.encode())
    hello = {}
    for name, run_id, rank, nn, g in (("n1of2", "fuzz-run", 1, 2, 8), ("n1of3", "fuzz-run", 1, 3, 8),
                                      ("n2of3", "fuzz-run", 2, 3, 8), ("n5of3", "fuzz-run", 5, 3, 8),
                                      ("other-run", "another", 1, 3, 8), ("other-shape", "fuzz-run", 1, 3, 4)):
        run(T, "rdv-hello", p, run_id, rank, nn, g)
        hello[name] = read(p)
    for name in ("n1of3", "n2of3", "n5of3", "other-run", "other-shape"):
        put("rendezvous", f"hello-{name}", b"\3\1" + hello[name])
    put("rendezvous", "hello-n1of3-twice", b"\3\1" + hello["n1of3"] * 2)
    put("rendezvous", "hello-n1of3-unproved", b"\3\0" + hello["n1of3"])
    put("rendezvous", "hello-short", b"\3\1" + hello["n1of3"][:40])
    hp = os.path.join(tmp, "h")
    for name, hname, run_id, nn, g in (("welcome", "n1of2", "fuzz-run", 2, 8), ("refused-run", "n1of2", "another", 2, 8),
                                       ("refused-shape", "n1of2", "fuzz-run", 3, 8),
                                       ("welcome-other-run", "other-run", "another", 3, 8)):
        with open(hp, "wb") as fh:
            fh.write(hello[hname])
        run(T, "rdv-answer", p, hp, run_id, nn, g, stderr=subprocess.DEVNULL)  # node 0 logs its refusals
        put("rendezvous", f"answer-{name}", b"\2\1" + read(p))
    put("rendezvous", "answer-welcome-unproved", b"\2\0" + read(os.path.join(OUT, "rendezvous", "answer-welcome"))[2:])
    put("rendezvous", "answer-short", b"\2\1" + read(p)[:100])
    put("rendezvous", "answer-older-node0", b"\2\0" + b"LCRDT01\0" + bytes(80))

if __name__ == "__main__":
    if len(sys.argv) != 1:
        sys.exit(__doc__)
    main()
