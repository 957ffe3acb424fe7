#!/usr/bin/env bash
# Device call U (2026-12-04, session 10, one H200): the MoE hybrid (Qwen3.5's shared expert in the MoE
# block, tests/golden/q35moe_l2_s112) and the ranks' digest fixed to 52 bits (call T: every run of 2+
# local ranks refused its own identical data). build/test_gpu --quick; tests/hybrid_gpu.sh whole (all
# four fixtures, stages 1-5, P = 1..8, the plants, resume, transformers loading both saves);
# tests/moe_stages_gpu.sh (Qwen3's MoE, as the MoE block's pointers now come from moe_weights); then
# the peer in transformers' plain fp32 script at 8K (its memory: call T's file did not come back) and
# stage 1 at 64K on the 4-layer Qwen3.5-9B shape (call T measured the peer there).
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; L=$O/call_u; mkdir -p "$L"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
el() { echo "($(( $(date +%s) - t0 )) s)"; }
{ time make -j16 all; } > "$L/build.log" 2>&1 || { tail -30 "$L/build.log"; exit 1; }
echo "built $(el)"
timeout 120 ./build/test_gpu --quick > "$L/test_gpu.log" 2>&1
echo "test_gpu --quick: $(tail -1 "$L/test_gpu.log") $(el)"; grep -E "^FAIL" "$L/test_gpu.log" | head
CASE_TIMEOUT=60 timeout 260 bash tests/hybrid_gpu.sh > "$L/hybrid_gpu.log" 2>&1
echo "hybrid_gpu: $(tail -1 "$L/hybrid_gpu.log") $(el)"; grep -E "^FAIL|^  s3_|q35moe.*worst|hf_check" "$L/hybrid_gpu.log" | head -30
CASE_TIMEOUT=60 timeout 90 bash tests/moe_stages_gpu.sh > "$L/moe_stages_gpu.log" 2>&1
echo "moe_stages_gpu: $(tail -1 "$L/moe_stages_gpu.log") $(el)"; grep -E "^FAIL" "$L/moe_stages_gpu.log" | head
timeout 50 python3 bench/peer_qwen35.py --plain --dtype fp32 --seq 8192 --steps 2 > "$L/peer_plain_fp32.jsonl" 2> "$L/peer_plain_fp32.err"
cut -c1-420 "$L/peer_plain_fp32.jsonl"; echo "$(el)"
timeout 45 ./stage1 --model Qwen3.5-9B --layers 4 --seq 65536 --steps 2 > "$L/s1_9b4_65536.log" 2>&1
grep -E '^step +[12]' "$L/s1_9b4_65536.log" | cut -c1-200; echo "$(el)"
tar czf "$O/call_u.tgz" -C "$O" call_u && rm -rf "$L"
echo "all $(el)"
