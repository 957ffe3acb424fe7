#!/usr/bin/env bash
# Packed documents (--packing) on the GPU, every stage against the truth: transformers running each
# document alone (tests/golden/packed_gqa4_s128: documents end at token 7; 1-token documents, ends
# on zigzag chunk edges, prompt spans, one across a boundary), through the CPU reference that
# test_cpu checks against it (check_stage grads picks the packed reference for a packed fixture).
#   1. stage 1 (plain and --keep-attn) and stage 2 against the reference; the traced positions
#      against the token file's documents; the attention FLOPs the step reports against the
#      documents' pairs; --eval-data evaluates packed too (its loss before the first step is the
#      reference loss)
#   2. stages 3, 4, 5 on P = 1, 2, 3, 4, 8 local ranks against the reference, in both layouts
#      (--layout balanced, the default: common/layout.h; --layout zigzag), P = 3 on 126 tokens (a
#      multiple of 2P); rank 0's traced positions against its rows' in that layout (build/layout_grid;
#      its zigzag rows checked against the token file first); stage 4 with O and LSE kept on the GPU
#      and on the host too
#   3. a 2-layer Qwen3-0.6B slice at 16K with documents of 1-4K tokens: stages 3-5 at P = 2, 4, 8
#      against stage 1 (stage 3 at P = 4 on the zigzag too), and the packed loss differs from the
#      unpacked one
#   4. the MoE golden config on a window of documents: stages 3-5 balanced at P = 2, 3, 4 against
#      stage 1 (each document alone there too)
#   5. planted bugs: positions not restarted (stage 1: its traced positions miss), a document
#      boundary one token late in the blocks (stage 3: its gradients miss the reference)
# Prints "N passed, M failed".
set -u
cd "$(dirname "$0")/.."
T="timeout ${CASE_TIMEOUT:-300}"
. tests/lib.sh
tmp=$(mktemp -d)
HP="--lr 1e-3 --warmup 0 --schedule constant --wd 0.1 --beta1 0.9 --beta2 0.95 --eps 1e-8 --clip 1.0"
HPV="1e-3 0.1 0.9 0.95 1e-8 1.0"
g=tests/golden/packed_gqa4_s128
EOT=7
S=$(./build/check_stage tokens "$g" "$tmp/p.tok")

# the window's positions (each token's offset in its document) summed, its attention pairs (sum len
# (len+1) / 2) against S^2 / 2, and rank 0's positions summed on P = 2, 4, 8 zigzag ranks (chunks 0
# and 2P-1 of 2P), from the token file itself
read want_sum want_frac r0_2 r0_4 r0_8 < <(python3 - "$tmp/p.tok" "$S" "$EOT" <<'EOF'
import struct, sys
path, S, eot = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(path, "rb") as f:
    head = f.read(24)
    n = struct.unpack("<q", head[16:24])[0]
    f.seek(24 + (32 if struct.unpack("<I", head[8:12])[0] >= 3 else 0))  # versions 3, 4: the tag first
    ids = struct.unpack(f"<{n}I", f.read(4 * n))[:S]
pos, p, lens, cur = [], 0, [], 0
for t in ids:
    pos.append(p); p += 1; cur += 1
    if t == eot:
        p = 0; lens.append(cur); cur = 0
if cur: lens.append(cur)
r0 = [sum(pos[:S // (2 * P)]) + sum(pos[S - S // (2 * P):]) for P in (2, 4, 8)]
print(sum(pos), sum(l * (l + 1) // 2 for l in lens) / (S * S / 2), *r0)
EOF
)
echo "packed golden window: seq $S, positions sum $want_sum (rank 0 of 2, 4, 8: $r0_2 $r0_4 $r0_8), attention pairs $want_frac of unpacked"
# rank 0's RoPE positions summed on P ranks of a SEQ-token window in a layout (zigzag | balanced): its pieces
# as build/layout_grid prints them ("piece LAYOUT RANK DOC START LEN POS ROW"), each len * pos + len (len - 1) / 2
r0_of() { ./build/layout_grid --pieces --eot $EOT --seq "$2" "$1" --tok "$tmp/p.tok" |
    awk -v L="$3" '$1 == "piece" && $2 == L && $3 == 0 {s += $6 * $7 + $6 * ($6 - 1) / 2} END {print s + 0}'; }
for P in 2 4 8; do
    want=$(eval echo "\$r0_$P"); got=$(r0_of $P "$S" zigzag)
    ok "layout_grid's zigzag rank 0 of $P: positions sum $got = the token file's $want" "[ '$got' = '$want' ]"
done

echo "== stage 1 and stage 2 against the packed reference"
for run in "stage1" "stage1 --keep-attn" "stage2 --local-ranks 1"; do
    set -- $run; st=$1; shift; tag=$(echo "$run" | tr -c 'a-z0-9\n' _)
    $T ./$st "$@" --packing $EOT --model "$g" --data "$tmp/p.tok" --seq "$S" --steps 1 --loss-chunk 7 $HP \
        --dump-grads "$tmp/$tag.grads" --save "$tmp/$tag.ck" --trace "$tmp/$tag.trace" --log "$tmp/$tag.jsonl" \
        > "$tmp/$tag.log" 2>&1
    ok "$run --packing runs" "[ $? -eq 0 ]" || tail -5 "$tmp/$tag.log"
    ./build/check_stage grads "$g" "$tmp/$tag.grads" "$tmp/$tag.ck" $HPV 2>&1 | tee "$tmp/c.txt" | grep -E "loss|FAIL|reference"
    count "$tmp/c.txt" "$run packed"
    got=$(grep -m1 -o 'positions sum [0-9]*' "$tmp/$tag.trace" | awk '{print $3}')
    ok "$run: traced positions sum ${got:-none} = the token file's documents' $want_sum" "[ '${got:-x}' = '$want_sum' ]"
    frac=$(python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).readline()); print(d["attn_tflop"]/d["attn_tflop_unpacked"])' "$tmp/$tag.jsonl" 2>/dev/null)
    ok "$run: the step's attention FLOPs are the documents' share, ${frac:-none} vs $want_frac" \
        "python3 -c 'import sys; sys.exit(abs(float(sys.argv[1]) / float(sys.argv[2]) - 1) > 1e-3)' '${frac:-0}' '$want_frac'"
done
grep -m1 -o 'attention [^|]*(packed)' "$tmp/stage1.log" | sed 's/^/  stage 1 step line: /'

echo "== --eval-data evaluates packed documents: the loss before the first step is the reference loss"
./stage1 --packing $EOT --model "$g" --data "$tmp/p.tok" --eval-data "$tmp/p.tok" --eval-windows 1 --seq "$S" --steps 1 \
    --loss-chunk 7 $HP > "$tmp/ev.log" 2>&1
ok "stage1 --eval-data runs" "[ $? -eq 0 ]" || tail -5 "$tmp/ev.log"
ev=$(grep -m1 -oE 'eval loss [0-9.]+' "$tmp/ev.log" | awk '{print $3}')
ref=$(python3 -c 'import struct,json,sys
f=open(sys.argv[1]+"/golden.safetensors","rb"); n=struct.unpack("<Q",f.read(8))[0]; h=json.loads(f.read(n))
o=h["loss"]["data_offsets"][0]; f.seek(8+n+o); print(struct.unpack("<f",f.read(4))[0])' "$g")
echo "  eval loss before step 1: ${ev:-none}; transformers, each document alone: $ref"
ok "the packed eval loss ${ev:-none} is transformers' $ref (bf16: 1e-2)" \
    "python3 -c 'import sys; sys.exit(abs(float(sys.argv[1]) / float(sys.argv[2]) - 1) > 1e-2)' '${ev:-0}' '$ref'"

echo "== stages 3, 4, 5 on P local ranks against the packed reference, balanced and zigzag"
for st in stage3 stage4 stage5; do
    for lay in balanced zigzag; do
        for P in 1 2 3 4 8; do
            extra=""; [ $st = stage4 ] && [ $P = 2 ] && extra="--keep-attn gpu:1,host:1"
            seq=$S; [ $P = 3 ] && seq=$((S / 6 * 6)) # a multiple of 2P; the reference takes the same first tokens
            tag=$st.$lay.$P
            $T ./$st --local-ranks $P --packing $EOT --layout $lay $extra --model "$g" --data "$tmp/p.tok" --seq $seq --steps 1 \
                --loss-chunk 7 $HP --dump-grads "$tmp/$tag.grads" --save "$tmp/$tag.ck" --trace "$tmp/$tag.trace" > "$tmp/$tag.log" 2>&1
            ok "$st P=$P --packing --layout $lay $extra runs" "[ $? -eq 0 ]" || tail -5 "$tmp/$tag.log"
            if [ $P -gt 1 ]; then # rank 0 traces: its own rows' positions, as uploaded
                want=$(r0_of $P $seq $lay); got=$(grep -m1 -o "this rank's [0-9]*" "$tmp/$tag.trace" | awk '{print $3}')
                ok "$st P=$P $lay: rank 0's traced positions sum ${got:-none} = its rows' documents' $want" "[ '${got:-x}' = '$want' ]"
            fi
            ./build/check_stage grads "$g" "$tmp/$tag.grads" "$tmp/$tag.ck" $HPV --seq $seq > "$tmp/c.txt" 2>&1
            grep -E "^FAIL" "$tmp/c.txt" | head -3
            echo "  $st P=$P $lay $extra: $(grep -m1 -E ' loss ' "$tmp/c.txt" | sed 's/^ *//') | $(tail -1 "$tmp/c.txt")"
            count "$tmp/c.txt" "$st P=$P $lay packed"
        done
    done
done

echo "== a 2-layer Qwen3-0.6B slice at 16K, documents of 1-4K tokens: stages 3-5 against stage 1"
./build/check_stage random 151936 40000 11 "$tmp/docs.tok" docs 151643 2048
SL="--model 0.6B --layers 2 --data $tmp/docs.tok --seq 16384 --steps 1 $HP"
./stage1 $SL --packing --dump-grads "$tmp/s1.16k" --log "$tmp/s1.16k.jsonl" > "$tmp/s1.log" 2>&1
ok "stage1 0.6B slice --packing runs" "[ $? -eq 0 ]" || tail -5 "$tmp/s1.log"
./stage1 $SL --dump-grads "$tmp/s1.16k.unpacked" > "$tmp/s1u.log" 2>&1
lp=$(grep -m1 -oE 'loss [0-9.]+' "$tmp/s1.log" | awk '{print $2}'); lu=$(grep -m1 -oE 'loss [0-9.]+' "$tmp/s1u.log" | awk '{print $2}')
echo "  stage 1 step 1: packed loss ${lp:-none}, unpacked ${lu:-none}; $(grep -m1 -o 'attention [^|]*(packed)' "$tmp/s1.log")"
ok "packing changes the loss (${lp:-none} vs ${lu:-none})" "[ -n '$lp' ] && [ -n '$lu' ] && [ '$lp' != '$lu' ]"
for run in "stage3 2" "stage3 4" "stage3 8" "stage3 4 zigzag" "stage4 2" "stage4 4" "stage4 8" "stage5 2" "stage5 4" "stage5 8"; do
    set -- $run; st=$1; P=$2; lay=${3:-balanced}
    $T ./$st --local-ranks $P $SL --packing --layout $lay --dump-grads "$tmp/$st.16k" > "$tmp/$st.16k.log" 2>&1
    ok "$st 0.6B slice P=$P --packing --layout $lay runs" "[ $? -eq 0 ]" || tail -5 "$tmp/$st.16k.log"
    grep -m1 "^balance:" "$tmp/$st.16k.log" | sed "s/^/  $st P=$P $lay: /"
    ./build/check_stage same "$tmp/s1.16k" "$tmp/$st.16k" 0.999 1e-2 > "$tmp/c.txt" 2>&1
    echo "  $st P=$P $lay: $(tail -1 "$tmp/c.txt")"; grep -E "^FAIL" "$tmp/c.txt" | head -3
    count "$tmp/c.txt" "$st 0.6B slice P=$P $lay packed"
done

echo "== MoE (tests/golden/moe_e8_k2) on a window of ~40 documents: stages 3-5 balanced at P = 2, 3, 4 against stage 1"
./build/check_stage random 256 3000 11 "$tmp/moe_docs.tok" docs $EOT 24 > /dev/null
ML="--model tests/golden/moe_e8_k2 --data $tmp/moe_docs.tok --seq 1008 --steps 1 --loss-chunk 7 $HP --packing $EOT"
$T ./stage1 $ML --dump-grads "$tmp/moe1.grads" > "$tmp/moe1.log" 2>&1
ok "stage1 MoE --packing runs" "[ $? -eq 0 ]" || tail -5 "$tmp/moe1.log"
# The band. A router's top-2 choice flips where two experts' logits nearly tie, and any change in the
# order of a sum (a ring's merges, another split of the tokens) moves a logit by a rounding: a flipped
# token's expert gradients move with it. On this window of 1008 random tokens the same model unpacked,
# stage 3 on the zigzag at P = 2, 3, 4 against stage 1, gives a worst cosine of 0.986 and gradient
# norms off by up to 2.9% (H200, measured; stage 1 twice: identical). So the balanced layout is held
# to cosine 0.98 and norms within 5% here, with that control printed beside it on this run; the
# strict bands are the dense model's above, against each document alone.
MOE_SAME="0.98 1e-3 5e-2"
worst() { grep -o 'cosine [0-9.]*' "$1" | awk '{print $2}' | sort -n | head -1; }
ML_U=${ML/ --packing $EOT/}
$T ./stage1 $ML_U --dump-grads "$tmp/moeu1.grads" > "$tmp/moeu1.log" 2>&1
for P in 2 3 4; do
    $T ./stage3 --local-ranks $P $ML_U --dump-grads "$tmp/moeu.grads" > "$tmp/moeu.log" 2>&1
    ./build/check_stage same "$tmp/moeu1.grads" "$tmp/moeu.grads" 0.999 1e-3 1e-2 > "$tmp/cu.txt" 2>&1
    echo "  control: unpacked stage3 P=$P against stage 1, worst cosine $(worst "$tmp/cu.txt")"
done
for st in stage3 stage4 stage5; do
    for P in 2 3 4; do
        $T ./$st --local-ranks $P $ML --dump-grads "$tmp/moe.$st.$P.grads" > "$tmp/moe.$st.$P.log" 2>&1
        ok "$st MoE P=$P --packing (balanced) runs" "[ $? -eq 0 ] && grep -q 'layout balanced' '$tmp/moe.$st.$P.log'" ||
            tail -5 "$tmp/moe.$st.$P.log"
        ./build/check_stage same "$tmp/moe1.grads" "$tmp/moe.$st.$P.grads" $MOE_SAME > "$tmp/c.txt" 2>&1
        echo "  $st MoE P=$P balanced: $(tail -1 "$tmp/c.txt"), worst cosine $(worst "$tmp/c.txt")"
        grep -E "^FAIL" "$tmp/c.txt" | head -3
        count "$tmp/c.txt" "$st MoE P=$P balanced packed"
    done
done

echo "== planted bugs"
mkdir -p build/plant
plant() { # plant STAGE_SRC OUT OLD NEW [OBJ_OLD OBJ_NEW]: a copy of the stage with OLD replaced, built
    python3 -c 'import sys; s=open(sys.argv[1]).read(); assert sys.argv[3] in s, "plant did not apply"
open(sys.argv[2], "w").write(s.replace(sys.argv[3], sys.argv[4], 1))' "$1" "build/plant/$2.c" "$3" "$4" || return 1
    local bin=build/$(basename "$1" .c | cut -d_ -f1) link
    link=$(MAKEFLAGS= make -s --no-print-directory -n -B "$bin" | grep -- "-o $bin ")
    link=${link/-o $bin $1/-I. -o build/plant/$2 build/plant/$2.c}
    [ -n "${5:-}" ] && link=${link/$5/$6}
    eval "$link"
}
rm -f build/plant/s1_positions build/plant/s3_boundary build/plant/docs_late.o build/plant/docs_pos.o "$tmp/pl3.grads"
# positions not restarted: the window's cut (common/docs.c) numbers its tokens 0, 1, 2, ... straight on
sed 's|    docs_positions(d->start, d->n, d->pos);|    for (int64_t t = 0; t < seq; t++) d->pos[t] = (int32_t)t; /* planted */|' common/docs.c > build/plant/docs_pos.c
ok "the positions plant applies" "! cmp -s common/docs.c build/plant/docs_pos.c"
ok "the positions plant compiles" "cc -O2 -std=c11 -Icommon -c -o build/plant/docs_pos.o build/plant/docs_pos.c"
plant stage1_single_gpu.c s1_positions "#define STAGE 1" "#define STAGE 1" build/common/docs.o build/plant/docs_pos.o
ok "the positions plant builds" "[ -x build/plant/s1_positions ]"
$T ./build/plant/s1_positions --packing $EOT --model "$g" --data "$tmp/p.tok" --seq "$S" --steps 1 --loss-chunk 7 $HP \
    --trace "$tmp/pl.trace" > "$tmp/pl.log" 2>&1
got=$(grep -m1 -o 'positions sum [0-9]*' "$tmp/pl.trace" | awk '{print $3}')
echo "  positions not restarted: traced sum ${got:-none}, the documents' $want_sum"
ok "planted: positions not restarted are caught (traced sum ${got:-none} != $want_sum)" "[ -n '$got' ] && [ '$got' != '$want_sum' ]"
sed 's|start\[n++\] = t + 1;|start[n++] = t + 2; /* planted */|' common/docs.c > build/plant/docs_late.c
ok "the boundary plant applies" "! cmp -s common/docs.c build/plant/docs_late.c"
ok "the boundary plant compiles" "cc -O2 -std=c11 -Icommon -c -o build/plant/docs_late.o build/plant/docs_late.c"
plant stage3_context_parallel.c s3_boundary "#define STAGE 3" "#define STAGE 3" \
    build/common/docs.o build/plant/docs_late.o
ok "the boundary plant builds" "[ -x build/plant/s3_boundary ]"
$T ./build/plant/s3_boundary --local-ranks 2 --packing $EOT --model "$g" --data "$tmp/p.tok" --seq "$S" --steps 1 \
    --loss-chunk 7 $HP --dump-grads "$tmp/pl3.grads" > "$tmp/pl3.log" 2>&1
ok "the planted stage 3 runs (its gradients are what must miss)" "[ $? -eq 0 ] && [ -s '$tmp/pl3.grads' ]"
./build/check_stage grads "$g" "$tmp/pl3.grads" > "$tmp/c.txt" 2>&1; rc=$?
echo "  boundary one token late: $(tail -1 "$tmp/c.txt")"
ok "planted: a document boundary one token late fails the reference check on its gradients" \
    "[ $rc -ne 0 ] && grep -q '^FAIL.*grad' '$tmp/c.txt'"

rm -rf "$tmp"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
