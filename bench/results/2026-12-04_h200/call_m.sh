#!/usr/bin/env bash
# Device call M (2026-12-04, session 9, one H200): stage 1 on Qwen3.5 hybrids, again (call L's fixtures
# were 4 layers deep, noisier in bf16 than the bands allow; the fixtures are now 2 layers, a linear
# and a full attention one, as deep as the Qwen3 fixtures): tests/hybrid_gpu.sh; and stage 1 on the
# Qwen3 fixtures against the reference (run_gpu.sh's first loop), as the attention's code moved.
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; L=$O/call_m; mkdir -p "$L"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
make -j16 all > "$L/build.log" 2>&1 || { tail -30 "$L/build.log"; exit 1; }
s=$(date +%s); CASE_TIMEOUT=120 timeout 300 bash tests/hybrid_gpu.sh > "$L/hybrid_gpu.log" 2>&1
echo "hybrid_gpu: $(tail -1 "$L/hybrid_gpu.log") ($(( $(date +%s) - s )) s)"; grep -E "^FAIL|^  loss|worst|transformers" "$L/hybrid_gpu.log" | head -20
HP="--lr 1e-3 --warmup 0 --schedule constant --wd 0.1 --beta1 0.9 --beta2 0.95 --eps 1e-8 --clip 1.0"
for g in tests/golden/*/; do
    g=${g%/}; name=$(basename "$g"); case $name in moe*|q35*) continue ;; esac
    S=$(./build/check_stage tokens "$g" "/tmp/$name.tok"); pk=; case $name in packed*) pk="--packing 7" ;; esac
    ./stage1 --model "$g" --data "/tmp/$name.tok" --seq "$S" --steps 1 --loss-chunk 7 $HP $pk --dump-grads "/tmp/$name.grads" \
        --save "/tmp/$name.ck" > "$L/s1_$name.log" 2>&1
    ./build/check_stage grads "$g" "/tmp/$name.grads" "/tmp/$name.ck" 1e-3 0.1 0.9 0.95 1e-8 1.0 > "$L/cs_$name.log" 2>&1
    echo "qwen3 $name: $(tail -1 "$L/cs_$name.log")"
done
tar czf "$O/call_m.tgz" -C "$O" call_m
echo "all $(( $(date +%s) - t0 )) s"
