#!/usr/bin/env bash
# Device call Z (2026-12-04, session 11, one H200): the tiled rule with vector atomics in the backward's
# sums and a two-at-a-time conversion of a tile's k and q; test_gpu --quick again (plain and tiled each
# against tests/ref_gdn.c); the kernels' times (gdn_rate); ncu's stall reasons for the tiled forward and
# backward at 8K; then stage 1 against the PyTorch peer in the same call: a 4-layer
# Qwen3.5-9B shape at 8K, 32K and 64K (the peer at 8K and 32K).
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; L=$O/call_z; mkdir -p "$L"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
make -j16 all > "$L/build.log" 2>&1 || { tail -30 "$L/build.log"; exit 1; }
echo "built ($(( $(date +%s) - t0 )) s)"
timeout 150 ./build/test_gpu --quick > "$L/test_gpu_quick.log" 2>&1
echo "test_gpu --quick: $(tail -1 "$L/test_gpu_quick.log") ($(( $(date +%s) - t0 )) s)"
grep -E "FAIL" "$L/test_gpu_quick.log" | head -20
timeout 120 ./build/gdn_rate --seq 8192,32768 > "$L/gdn_rate.log" 2>&1
cat "$L/gdn_rate.log"
if command -v ncu > /dev/null; then
    for k in gdn_fwd_tiled_kernel gdn_bwd_tiled_kernel; do
        timeout 100 ncu --clock-control none -k "regex:$k" -c 1 --section WarpStateStats --section SchedulerStats \
            --section Occupancy --section MemoryWorkloadAnalysis --section LaunchStats \
            ./build/gdn_rate --seq 8192 --iters 1 > "$L/ncu_$k.txt" 2>&1
        echo "ncu $k: $(grep -cE 'Warp Cycles|Stall' "$L/ncu_$k.txt") lines"
    done
fi
echo "($(( $(date +%s) - t0 )) s)"
for S in 8192 32768 65536; do
    timeout 150 ./stage1 --model Qwen3.5-9B --layers 4 --seq $S --steps 3 --profile > "$L/s1_9b4_$S.log" 2>&1
    echo "stage1 9B/4 $S: $(grep -E '^step +3' "$L/s1_9b4_$S.log" | tail -1)"
    grep "profile:" "$L/s1_9b4_$S.log" | tail -1
done
echo "($(( $(date +%s) - t0 )) s)"
timeout 200 python3 bench/peer_qwen35.py --seq 8192 32768 --steps 2 > "$L/peer.jsonl" 2> "$L/peer.err"
cut -c1-400 "$L/peer.jsonl"; tail -3 "$L/peer.err"
echo "all $(( $(date +%s) - t0 )) s"
tar czf "$O/call_z.tgz" -C "$O" call_z && rm -rf "$L"
