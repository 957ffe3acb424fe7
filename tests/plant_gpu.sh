#!/usr/bin/env bash
# A planted bug must fail its GPU test: stage 2 built with its reduce-scatter averaging the ranks'
# gradients (1/P) where it must sum them (each rank's loss is already divided by the whole step's
# label count: every gradient halved at P = 2) is checked against the reference as make test-gpu
# checks it; check_stage must FAIL on the norm ratio (the cosine alone cannot see a constant factor).
set -u
cd "$(dirname "$0")/.."
mkdir -p build/plant
sed 's|su->shard, 1.f,|su->shard, 1.f / (float)M->P,|' stage2_fsdp.c > build/plant/stage2_planted.c
cmp -s stage2_fsdp.c build/plant/stage2_planted.c && { echo "FAIL the plant did not apply"; exit 1; }
link=$(make -s -n -B build/stage2 | tail -1)   # the stage's own compile-and-link line, on the planted copy
eval "${link/-o build\/stage2 stage2_fsdp.c/-I. -o build/plant/stage2_planted build/plant/stage2_planted.c}" || exit 1
tmp=$(mktemp -d)
g=tests/golden/tied_gqa2_hd128
./build/check_stage random 384 20000 8 "$tmp/r.tok"
HP="--lr 1e-3 --warmup 0 --schedule constant --steps 1 --loss-chunk 7"
./build/plant/stage2_planted --local-ranks 2 --model $g --data "$tmp/r.tok" --seq 64 $HP --dump-grads "$tmp/p.grads" > "$tmp/p.log" 2>&1
./build/check_stage grads $g "$tmp/p.grads" --tokens "$tmp/r.tok" --windows 2 --seq 64 > "$tmp/c.txt" 2>&1; rc=$?
grep -m3 FAIL "$tmp/c.txt"; tail -1 "$tmp/c.txt"
caught=$(grep -c "norm ratio" "$tmp/c.txt")
rm -rf "$tmp"
if [ $rc -ne 0 ] && [ "$caught" -gt 0 ]; then echo "1 passed, 0 failed (the planted bug fails on the norm ratio)"
else echo "0 passed, 1 failed (the planted bug was not caught)"; exit 1; fi
