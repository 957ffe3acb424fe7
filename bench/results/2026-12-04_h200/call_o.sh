#!/usr/bin/env bash
# Device call O (2026-12-04, session 9, one H200): the gated delta rule's kernels with a row split over
# a quad of lanes (4x the warps of call N's); build/test_gpu --quick again; then against the PyTorch
# peer in the same call: a 4-layer Qwen3.5-9B shape (3 linear + 1 full attention layers) at
# 8K and longer, stage 1 (--model Qwen3.5-9B --layers 4) and bench/peer_qwen35.py (transformers 5.17,
# its torch fallback for the rule), step time and peak memory.
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; L=$O/call_o; mkdir -p "$L"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
{ time make -j16 all; } > "$L/build.log" 2>&1 || { tail -30 "$L/build.log"; exit 1; }
s=$(date +%s); timeout 150 ./build/test_gpu --quick > "$L/test_gpu.log" 2>&1
echo "test_gpu --quick: $(tail -1 "$L/test_gpu.log") ($(( $(date +%s) - s )) s)"; grep -E "^FAIL" "$L/test_gpu.log" | head
for S in 8192 32768 131072; do
    timeout 150 ./stage1 --model Qwen3.5-9B --layers 4 --seq $S --steps 3 --profile > "$L/s1_9b4_$S.log" 2>&1
    echo "stage1 9B x4 layers seq $S: $(grep -E '^step +3' "$L/s1_9b4_$S.log" | cut -c1-150)"; grep -A1 -E '^step +3' "$L/s1_9b4_$S.log" | tail -1
    grep -E "error|DOES NOT" "$L/s1_9b4_$S.log" | head -2
done
timeout 240 python3 bench/peer_qwen35.py --seq 8192 16384 32768 --steps 2 > "$L/peer.jsonl" 2> "$L/peer.err"
cat "$L/peer.jsonl" | cut -c1-400
tar czf "$O/call_o.tgz" -C "$O" call_o
echo "all $(( $(date +%s) - t0 )) s"
