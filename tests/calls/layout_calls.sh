#!/usr/bin/env bash
# Packed runs of stages 3-5 on the faked GPU (tests/calls/fake_cuda.c) against what common/layout.c
# predicts (tests/calls/expect_layout.c, which builds the layout from the window's documents itself):
#   - each rank's rows: the digests of the ids, labels, label weights and RoPE positions it uploads
#     each step are those of layout_positions' rows (the balanced layout's, or the zigzag's);
#   - each ring step's attention call, every layer, forward and backward: its shape (balanced: Sq =
#     Skv = S/P) and its blocks, [q0 nq k0 nk causal] as a set, are layout_blocks' for that rank and
#     step (the count and every size);
#   - every rank calls the same collectives in the same order (kind, count, stream, peers).
# Dense and MoE models take the balanced layout by default and the zigzag with --layout zigzag; a
# Qwen3.5 hybrid stays on the zigzag whatever is asked. Local ranks P = 1, 2, 3, 4, 8, and rank 6 of
# 8 rehearsed; stage 4's kept attention and offload, stage 5's tiles and head groups.
#   bash tests/calls/layout_calls.sh          (after make all; no GPU)
# Prints one line per case and "N passed, M failed". Planted: a stage whose rows are the zigzag's
# while its blocks are the balanced layout's fails the row check (PLANT=1 runs it).
set -u
cd "$(dirname "$0")/../.."
out=${CALLS_OUT:-build/calls_layout}
mkdir -p "$out"
bash tests/calls/build.sh . "$out/new" > "$out/build.log" 2>&1 || { cat "$out/build.log"; exit 1; }
[ -x build/check_stage ] || { echo "layout_calls: build/check_stage is missing: run make all first"; exit 1; }
mk() { make -s --eval "print-it: ; @echo @@ \$($1)" print-it 2>/dev/null | sed -n 's/^@@ //p'; }
gcc -O1 -std=c11 -D_DEFAULT_SOURCE -w -I. -o "$out/expect_layout" tests/calls/expect_layout.c $(mk HOST_OBJ) -lm -lpthread ||
    { echo "layout_calls: expect_layout does not build"; exit 1; }
tmp=$(mktemp -d)
pass=0; fail=0
G=$PWD/tests/golden
./build/check_stage tokens "$G/packed_gqa4_s128" "$tmp/p.tok" > /dev/null      # 128 tokens, documents end at 7
./build/check_stage tokens "$G/q35_packed_l2_s112" "$tmp/q.tok" > /dev/null    # 112, documents end at 7
./build/check_stage random 320 6200 5 "$tmp/d.tok" docs 7 40 > /dev/null        # three windows of 2K, about 50 documents each
./build/check_stage random 256 6200 6 "$tmp/m.tok" docs 7 40 > /dev/null        # the MoE fixture's vocabulary
HP="--steps 2 --lr 1e-3 --warmup 0 --loss-chunk 7"

# case NAME STAGE LAYOUT(expected) P(of the layout) SEQ TOKENS EOT ARGS...
case_() {
    local name=$1 st=$2 lay=$3 P=$4 seq=$5 tok=$6 eot=$7; shift 7
    local d="$tmp/$name"
    mkdir -p "$d"
    (cd "$tmp" && CALLS_DIR="$d" timeout 120 "$OLDPWD/${BIN:-$out/new}/$st" --seq "$seq" --data "$tok" --packing "$eot" \
        $HP "$@" > "$d.out" 2>&1)
    local rc=$?
    "$out/expect_layout" "$tok" "$seq" "$P" "$eot" "$lay" 2 > "$d.expect" || { echo "FAIL $name: no prediction"; fail=$((fail + 1)); return; }
    local res
    res=$(python3 - "$d" "$d.expect" "$P" $rc <<'EOF'
import glob, os, re, sys
d, expect, P, rc = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if rc:
    print(f"FAIL exit {rc}: " + open(d + ".out").read().strip().splitlines()[-1][:200]); sys.exit()
data, calls = {}, {}
for line in open(expect):
    f = line.split()
    if f[0] == "data":
        data[(int(f[1]), int(f[2]))] = {"ids": f[4], "labels": f[6], "label weights": f[8], "pos": f[10]}
    else:
        blocks = sorted(tuple(map(int, b.split())) for b in re.findall(r"\[([-0-9 ]+)\]", line))
        calls[(int(f[1]), int(f[2]), int(f[3]))] = (int(f[4]), int(f[5]), blocks)
bad, ncalls, colls = [], 0, {}
logs = sorted(glob.glob(d + "/rank*.log"))
ranks = [int(re.search(r"rank(-?\d+)\.log$", p).group(1)) for p in logs]
for path, r in zip(logs, ranks):
    if r < 0:
        continue
    segs, cur = [], None
    colls[r] = []
    for line in open(path):
        if line.startswith("collective "):
            colls[r].append(line)
        m = re.match(r"copy (ids|labels|label weights|pos)\+0 <- host \d+ bytes ([0-9a-f]{16}) ", line)
        if m and m.group(1) == "ids":
            cur = {"ids": m.group(2), "fwd": [], "bwd": []}
            segs.append(cur)
        elif m and cur is not None and m.group(1) not in cur:
            cur[m.group(1)] = m.group(2)
        m = re.match(r"sdpa_blocks_(fwd|bwd) p=\{(\d+) (\d+) (\d+) (\d+) .*? bl=\{n(\d+)(.*?) lens ", line)
        if m and cur is not None:
            blocks = sorted(tuple(map(int, b.split())) for b in re.findall(r"\[([-0-9 ]+)\]", m.group(7)))
            if len(blocks) != int(m.group(6)):
                bad.append(f"rank {r}: a call's {m.group(6)} blocks logged as {len(blocks)} (the log truncates)")
            cur[m.group(1)].append((int(m.group(4)), int(m.group(5)), blocks))
    if len(segs) != 2:
        bad.append(f"rank {r}: {len(segs)} windows loaded, not 2")
    for step, s in enumerate(segs):
        for k in ("ids", "labels", "label weights", "pos"):
            want = data[(step, r)][k]
            if s.get(k) != want:
                bad.append(f"rank {r} step {step}: its {k} {s.get(k)} are not the layout's rows' {want}")
        for kind in ("fwd", "bwd"):
            cs = s[kind]
            if not cs or len(cs) % P:
                bad.append(f"rank {r} step {step}: {len(cs)} {kind} calls, not a positive multiple of P = {P}")
            for j, got in enumerate(cs):
                want = calls[(step, r, j % P)]
                ncalls += 1
                if got != want:
                    bad.append(f"rank {r} step {step} {kind} call {j} (ring step {j % P}): {got[0]}x{got[1]}, "
                               f"{len(got[2])} blocks {got[2][:4]}... vs the layout's {want[0]}x{want[1]}, "
                               f"{len(want[2])} blocks {want[2][:4]}...")
ranks = sorted(colls)
if not ranks:
    bad.append("no rank logged")
for r in ranks[1:]:
    if colls[r] != colls[ranks[0]]:
        i = next((i for i, (a, b) in enumerate(zip(colls[r], colls[ranks[0]])) if a != b), min(len(colls[r]), len(colls[ranks[0]])))
        bad.append(f"rank {r}'s collectives differ from rank {ranks[0]}'s at #{i} ({len(colls[r])} vs {len(colls[ranks[0]])})")
if bad:
    print(f"FAIL {len(bad)} mismatches: " + " | ".join(bad[:3]))
else:
    print(f"ok {len(ranks)} ranks, {ncalls} ring calls match the layout's blocks, {len(colls[ranks[0]])} collectives the same on every rank")
EOF
)
    if [[ $res == ok* ]]; then pass=$((pass + 1)); echo "ok   $name: ${res#ok }"
    else fail=$((fail + 1)); echo "FAIL $name: ${res#FAIL }"; fi
}
gold() { echo "--model $G/packed_gqa4_s128"; }
for st in stage3 stage4 stage5; do
    extra=; [ $st = stage5 ] && extra="--mlp-tile 24 --yarn-factor 0"
    for P in 1 2 3 4 8; do
        S=128; [ $P = 3 ] && S=126 # a multiple of 2P
        case_ "$st.P$P.balanced" $st balanced $P $S "$tmp/p.tok" 7 --local-ranks $P $(gold) $extra
        case_ "$st.P$P.docs2k" $st balanced $P 2016 "$tmp/d.tok" 7 --local-ranks $P $(gold) $extra
    done
    for P in 2 4; do case_ "$st.P$P.zigzag" $st zigzag $P 2048 "$tmp/d.tok" 7 --local-ranks $P $(gold) --layout zigzag $extra; done
    case_ "$st.rehearse6of8" $st balanced 8 2048 "$tmp/d.tok" 7 --gpus 8 --rehearse 6 $(gold) $extra
    case_ "$st.moe.P4" $st balanced 4 2048 "$tmp/m.tok" 7 --local-ranks 4 --model "$G/moe_e8_k2" $extra
    case_ "$st.moe.P3.keep" $st balanced 3 1026 "$tmp/m.tok" 7 --local-ranks 3 --model "$G/moe_e8_k2" --keep-attn $extra
    # a hybrid stays on the zigzag, balanced asked or not
    case_ "$st.q35.P2" $st zigzag 2 112 "$tmp/q.tok" 7 --local-ranks 2 --model "$G/q35_packed_l2_s112" $extra
    case_ "$st.q35.P4.asked" $st zigzag 4 112 "$tmp/q.tok" 7 --local-ranks 4 --model "$G/q35_packed_l2_s112" --layout balanced $extra
done
for k in "--keep-attn gpu:1,host:1" "--keep-attn 1 --offload ckpt" "--keep-attn none --offload states" "--offload none --keep-attn all"; do
    case_ "stage4.$(echo $k | tr -c 'a-z0-9\n' _)" stage4 balanced 2 2048 "$tmp/d.tok" 7 --local-ranks 2 $(gold) $k
done
case_ stage5.groups stage5 balanced 4 2048 "$tmp/d.tok" 7 --local-ranks 4 $(gold) --mlp-tile 16 --attn-groups 2
# planted, each in a copy of the tree: (rows) the zigzag's rows under the balanced layout's blocks; (calls)
# the zigzag's ring calls (ring_block's rows) on the balanced layout's rows, which lose blocks
plant() { # NAME SED-EXPRESSION
    rm -rf "$tmp/tree" && mkdir -p "$tmp/tree" && cp -r Makefile common kernels stage[1-5]_*.c "$tmp/tree/"
    sed -i "$2" "$tmp/tree/common/layout.c"
    if grep -q planted "$tmp/tree/common/layout.c" && bash tests/calls/build.sh "$tmp/tree" "$out/plant" > "$out/plant.log" 2>&1; then
        local r; r=$(BIN=$out/plant case_ "planted.$1" stage3 balanced 4 2016 "$tmp/d.tok" 7 --local-ranks 4 $(gold))
        echo "  caught (planted): ${r#FAIL }" | cut -c1-400
        if [[ $r == FAIL* ]]; then pass=$((pass + 1)); echo "ok   planted ($1) is caught"
        else fail=$((fail + 1)); echo "FAIL planted ($1) passes"; fi
    else fail=$((fail + 1)); echo "FAIL the plant ($1) did not apply or build"; fi
}
if [ "${PLANT:-0}" = 1 ]; then
    plant rows 's|for (int r = 0; r < P; r++) layout_positions(&L, r, d->rows + r \* n);|for (int r = 0; r < P; r++) zigzag_positions(seq, P, r, d->rows + r * n); /* planted */|'
    plant calls 's|if (!balanced) return ring_block(seq, P, r, step);|return ring_block(seq, P, r, step); /* planted */|'
fi
rm -rf "$tmp"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
