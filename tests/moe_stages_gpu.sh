#!/usr/bin/env bash
# MoE is the model's, not a lever's (on an H100/H200): every stage trains the MoE golden config
# (Qwen3MoE, 8 experts, top-2, the load-balancing loss; tests/golden/moe_e8_k2) -- stage 1 on one
# GPU, stage 2 on one rank (its ranks read other windows), stages 3 and 4 at P = 1 and 2 local
# ranks, stage 5 in tiles -- and each equals the CPU reference (check_stage grads: the loss, every
# gradient, the weights after one AdamW step) and stage 5's own gradients (check_stage same).
# Prints "N passed, M failed".
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
T="timeout ${CASE_TIMEOUT:-300}"
tmp=$(mktemp -d)
HP="--lr 1e-3 --warmup 0 --schedule constant --wd 0.1 --beta1 0.9 --beta2 0.95 --eps 1e-8 --clip 1.0"
HPV="1e-3 0.1 0.9 0.95 1e-8 1.0"
# the bands check_stage grads holds a stage to against the reference (cosine 0.999, loss 1e-3, norm ratio
# 1e-2): two stages that both meet the reference meet each other within them
SAME="0.999 1e-3 1e-2"
g=tests/golden/moe_e8_k2
S=$(./build/check_stage tokens "$g" "$tmp/moe.tok")
A="--model $g --data $tmp/moe.tok --seq $S --steps 1 --loss-chunk 7 $HP"
run() { # NAME BIN ARGS...: one step, its gradients and save checked against the CPU reference
    local name=$1 bin=$2; shift 2
    rm -rf "$tmp/$name.grads" "$tmp/$name.ck"
    $T ./$bin $A "$@" --dump-grads "$tmp/$name.grads" --save "$tmp/$name.ck" > "$tmp/$name.log" 2>&1
    ok "$name runs (MoE: $(grep -o 'MoE GEMMs [a-z]*' "$tmp/$name.log" | head -1))" "[ $? -eq 0 ] && grep -q 'MoE GEMMs' $tmp/$name.log" ||
        tail -5 "$tmp/$name.log"
    ./build/check_stage grads "$g" "$tmp/$name.grads" "$tmp/$name.ck" $HPV 2>&1 | tail -3 > "$tmp/c.txt"; cat "$tmp/c.txt"
    count "$tmp/c.txt" "$name vs the CPU reference"
}
run s5 stage5 --local-ranks 1 --mlp-tile 7
run s1 stage1
run s1_grouped stage1 --moe-gemm grouped
run s1_keep stage1 --keep-attn
run s2 stage2 --local-ranks 1
for P in 1 2; do
    run s3_P$P stage3 --local-ranks $P
    run s4_P$P stage4 --local-ranks $P --keep-attn gpu:1,host:1
done
echo "== every stage's gradients against stage 5's"
for r in s1 s1_grouped s1_keep s2 s3_P1 s3_P2 s4_P1 s4_P2; do
    ./build/check_stage same "$tmp/s5.grads" "$tmp/$r.grads" $SAME 2>&1 | tail -2 > "$tmp/c.txt"; cat "$tmp/c.txt"
    count "$tmp/c.txt" "$r vs stage 5"
done
rm -rf "$tmp"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
