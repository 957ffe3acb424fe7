#!/usr/bin/env bash
# Device call Y (2026-12-04, session 11, one H200): the tiled gated delta rule (kernels/gdn.cu) against
# the plain one -- each against tests/ref_gdn.c (build/test_gpu --quick), then their times
# (build/gdn_rate) -- and stage 1's step on a 4-layer Qwen3.5-9B shape at 8K and 32K with the
# tiled kernels (session 9's, plain: 0.360 s and 1.427 s).
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; L=$O/call_y; mkdir -p "$L"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
make -j16 all > "$L/build.log" 2>&1 || { tail -30 "$L/build.log"; exit 1; }
echo "built ($(( $(date +%s) - t0 )) s)"
timeout 240 ./build/test_gpu --quick > "$L/test_gpu_quick.log" 2>&1
echo "test_gpu --quick: $(tail -1 "$L/test_gpu_quick.log") ($(( $(date +%s) - t0 )) s)"
grep -E "FAIL" "$L/test_gpu_quick.log" | head -20
grep -E "gdn_rule|gdn_compose" "$L/test_gpu_quick.log" | head -60 > "$L/rule_lines.txt"
timeout 120 ./build/gdn_rate --seq 8192,32768 > "$L/gdn_rate.log" 2>&1
cat "$L/gdn_rate.log"
for S in 8192 32768; do
    timeout 120 ./stage1 --model Qwen3.5-9B --layers 4 --seq $S --steps 3 --profile > "$L/s1_9b4_$S.log" 2>&1
    echo "stage1 9B/4 $S: $(grep -E '^step +3' "$L/s1_9b4_$S.log" | tail -1)"
    grep "profile:" "$L/s1_9b4_$S.log" | tail -1
done
echo "($(( $(date +%s) - t0 )) s)"
tar czf "$O/call_y.tgz" -C "$O" call_y && rm -rf "$L"
