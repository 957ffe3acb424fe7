#!/usr/bin/env bash
# --keep-attn with a Qwen3.5 hybrid, every stage, on the faked GPU (tests/calls/fake_cuda.c): a hybrid
# keeps the O and LSE of its full attention layers only, each at its place among them.
# The model: the golden hybrid's two layers (linear, full) repeated to eight, so the kept layers are
# layers 1, 3, 5 and 7, the full attention layers 0-3. For each stage (stages 2-5 on 2 local
# ranks; stages 4-5 also with the kept layers split over the GPU and the host, gpu:1,host:1) the
# same run with attention kept and without:
#   - kept: every attention forward (sdpa_fwd) runs once a layer and step, not again in the backward
#     (without: twice), and writes its O into the kept buffer at the layer's place (layer 1 at
#     "kept O+0", layer 3 one layer's rows further on; host-kept layers: their staging slot);
#   - the backward (sdpa_bwd) of each attention layer reads the LSE its forward wrote, and the kept O
#     of the same layer (host-kept: the same slot);
#   - the output gate and the queries' norms run as often kept as not (a kept layer recomputes them);
#   - the linear layers' work (every gdn_* call, with its arguments) is the same kept or not.
#   bash tests/calls/keep_calls.sh      (after make all; BIN=DIR: stages built by tests/calls/build.sh)
# Prints one line per case and "N passed, M failed". Planted (PLANT=1): the stages' kept layers
# placed by layer index instead of their place among the full attention layers fails the check.
set -u
cd "$(dirname "$0")/../.."
out=${CALLS_OUT:-build/calls_keep}
if [ -z "${BIN:-}" ]; then
    mkdir -p "$out"
    bash tests/calls/build.sh . "$out/new" > "$out/build.log" 2>&1 || { cat "$out/build.log"; exit 1; }
    BIN=$out/new
fi
BIN=$(cd "$BIN" && pwd)
[ -x build/check_stage ] || { echo "keep_calls: build/check_stage is missing: run make all first"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
G=$PWD/tests/golden/q35_l2_s112
./build/check_stage random 256 1000 5 "$tmp/q.tok" > /dev/null # two windows and more of the fixture's vocabulary
# the four-layer hybrid: layer k takes the golden's layer k % 2
python3 - "$G" "$tmp/m4" <<'EOF'
import json, os, struct, sys
src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst, exist_ok=True)
c = json.load(open(os.path.join(src, "config.json")))
c["num_hidden_layers"], c["layer_types"] = 8, ["linear_attention", "full_attention"] * 4
json.dump(c, open(os.path.join(dst, "config.json"), "w"), indent=1)
f = open(os.path.join(src, "model.safetensors"), "rb")
n = struct.unpack("<Q", f.read(8))[0]
head, base = json.loads(f.read(n)), 8 + n
raw = open(os.path.join(src, "model.safetensors"), "rb").read()
out, blobs, at = {}, [], 0
for k, v in sorted(head.items()):
    if k == "__metadata__":
        continue
    names = [k] if ".layers." not in k else [k.replace(f".layers.{l % 2}.", f".layers.{l}.") for l in range(8)
                                              if k.split(".layers.")[1].split(".")[0] == str(l % 2)]
    b = raw[base + v["data_offsets"][0]:base + v["data_offsets"][1]]
    for name in names:
        out[name] = {"dtype": v["dtype"], "shape": v["shape"], "data_offsets": [at, at + len(b)]}
        blobs.append(b); at += len(b)
h = json.dumps(out).encode()
h += b" " * ((8 - len(h) % 8) % 8)
with open(os.path.join(dst, "model.safetensors"), "wb") as w:
    w.write(struct.pack("<Q", len(h))); w.write(h)
    for b in blobs: w.write(b)
EOF
pass=0; fail=0
HP="--steps 2 --lr 1e-3 --warmup 0 --loss-chunk 7"
# run DIR STAGE ARGS...: one run's call logs in DIR
run() {
    local d=$1 st=$2; shift 2
    mkdir -p "$d"
    (cd "$tmp" && CALLS_DIR="$d" timeout 120 "$BIN/$st" --model "$tmp/m4" --data "$tmp/q.tok" --seq 112 $HP "$@" \
        > "$d.out" 2>&1)
}
# case NAME STAGE "KEEP ARGS" "NO-KEEP ARGS" ARGS...
case_() {
    local name=$1 st=$2 keep=$3 none=$4; shift 4
    run "$tmp/$name.k" $st $keep "$@"; local rk=$?
    run "$tmp/$name.n" $st $none "$@"; local rn=$?
    local res
    res=$(python3 - "$tmp/$name.k" "$tmp/$name.n" $rk $rn <<'EOF'
import glob, re, sys
k, n, rk, rn = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if rk or rn:
    d = k if rk else n
    last = (open(d + ".out").read().strip().splitlines() or ["(no output)"])[-1]
    print(f"FAIL exit {rk}/{rn}: {last[:200]}"); sys.exit()
CALL = re.compile(r"^sdpa_(blocks_)?(fwd|bwd)(_padded)? ")
def attn(path, kind):  # the attention calls of one kind, each as its arguments {name: "tensor+offset"}
    out = []
    for line in open(path):
        m = CALL.match(line)
        if m and m.group(2) == kind:
            parts = re.split(r" (\w+)=", " " + line.rstrip("\n").split(" ", 1)[1])
            out.append(dict(zip(parts[1::2], parts[2::2])))
    return out
def place(p):  # "kept LSE+896" -> ("kept LSE", 896); a pointer in no tensor ("host", "null") -> (it, -1)
    name, _, off = p.rpartition("+")
    return (name, int(off)) if name and off.isdigit() else (p, -1)
bad, nf = [], 0
logs = sorted(glob.glob(k + "/rank*.log"))
ranks = [p for p in logs if not p.endswith("rank-1.log")] or logs  # rank -1: the main thread, before the ranks
for pk in ranks:
    pn, r = n + pk[len(k):], pk[len(k) + 1:]
    fk, fn, bk = attn(pk, "fwd"), attn(pn, "fwd"), attn(pk, "bwd")
    nf += len(fk)
    if not fk or 2 * len(fk) != len(fn):
        bad.append(f"{r}: {len(fk)} attention forwards kept, {len(fn)} without (want half)")
    lse = sorted({place(a["lse"]) for a in fk})
    gpu = sorted(off for name, off in lse if name == "kept LSE")
    if any(name != "kept LSE" and not name.startswith("slots for host") for name, off in lse):
        bad.append(f"{r}: forwards write LSE outside the kept buffers: {lse}")
    elif len(lse) < 2:
        bad.append(f"{r}: the two full attention layers share one place: {lse}")
    elif gpu:  # the GPU's kept layers end to end from its start: offsets 0, u, 2u, ...
        u = min(b - a for a, b in zip(gpu, gpu[1:])) if len(gpu) > 1 else None
        if gpu[0] != 0 or (u and gpu != list(range(0, gpu[-1] + 1, u))):
            bad.append(f"{r}: kept LSE at offsets {gpu}, not the kept layers end to end from 0")
    for a in bk:
        if place(a["lse"]) not in lse:
            bad.append(f"{r}: a backward reads LSE at {a['lse']}, which no forward wrote"); break
    # where the backward reads O from the kept buffers: the same layer as its LSE. On the GPU the kept
    # layers' O lie end to end in LSE's order; a host-kept layer's O and LSE share one slot
    pairs = sorted({(place(a["lse"]), place(a["o"])) for a in bk})
    og = [o for l, o in pairs if l[0] == "kept LSE" and o[0] == "kept O"]
    if og and [x[1] for x in og] != sorted({x[1] for x in og}) or og and og[0][1] != 0:
        bad.append(f"{r}: the backward's kept O at {[x[1] for x in og]}, not the layers' places in LSE's order")
    if any(l[0].startswith("slots for host") and o[0] != l[0] for l, o in pairs if not o[0].startswith("group O")):
        bad.append(f"{r}: a host-kept layer's O and LSE read from different slots")
    # everything else a kept layer does is done as often: the output gate (Qwen3.5) among it
    for call in ("ga_gate_fwd", "ga_qk_fwd"):
        a, b = sum(l.startswith(call) for l in open(pk)), sum(l.startswith(call) for l in open(pn))
        if a != b:
            bad.append(f"{r}: {call} runs {a} times kept, {b} without")
    gk = [l for l in open(pk) if l.startswith("gdn_")]
    gn = [l for l in open(pn) if l.startswith("gdn_")]
    if gk != gn or not gk:
        bad.append(f"{r}: the linear layers' calls differ kept or not ({len(gk)} against {len(gn)})")
print(("FAIL " + "; ".join(bad[:3])) if bad else f"ok {nf} attention forwards (half of those without), each kept layer's LSE at its own place, read back by its backward")
EOF
)
    case $res in ok*) pass=$((pass + 1)); echo "ok   $name: ${res#ok }" ;; *) fail=$((fail + 1)); echo "FAIL $name: ${res#FAIL }" ;; esac
}
case_ stage1 stage1 "--keep-attn" ""
case_ stage2 stage2 "--keep-attn" "" --local-ranks 2
case_ stage3 stage3 "--keep-attn" "" --local-ranks 2
case_ stage4 stage4 "--keep-attn all" "--keep-attn none" --local-ranks 2 --offload none
case_ stage4.host stage4 "--keep-attn gpu:1,host:3" "--keep-attn none" --local-ranks 2 --offload attn
case_ stage5 stage5 "--keep-attn all" "--keep-attn none" --local-ranks 2 --offload none --mlp-tile 24
case_ stage5.host stage5 "--keep-attn gpu:1,host:3" "--keep-attn none" --local-ranks 2 --offload attn --mlp-tile 24
if [ -n "${PLANT:-}" ]; then # the kept layers at their layer index: layer 3's O past the kept buffer
    pb="$out/plant"
    mkdir -p "$pb/src"
    git ls-files -z | xargs -0 -I{} cp --parents {} "$pb/src/" 2>/dev/null
    sed -i 's/static inline int64_t config_full_ix(const Qwen3Config \*c, int64_t l) {/&\n    if (c) return l;/' "$pb/src/common/config.h"
    if bash tests/calls/build.sh "$pb/src" "$pb/bin" > "$pb/build.log" 2>&1; then
        saved=$BIN BIN=$(cd "$pb/bin" && pwd)
        p0=$pass f0=$fail
        case_ planted.stage1 stage1 "--keep-attn" "" > "$pb/plant.txt" 2>&1
        pass=$p0 fail=$f0
        if grep -q "^FAIL.*not the kept layers end to end\|^FAIL.*outside the kept buffers" "$pb/plant.txt"; then pass=$((pass + 1)); echo "ok   planted: kept at the layer index is caught ($(cut -c1-160 "$pb/plant.txt"))"
        else fail=$((fail + 1)); echo "FAIL planted: kept at the layer index passed the check"; fi
        BIN=$saved
    else fail=$((fail + 1)); echo "FAIL planted: the planted tree does not build ($pb/build.log)"; fi
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
