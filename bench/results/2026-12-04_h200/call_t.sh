#!/usr/bin/env bash
# Device call T (2026-12-04, session 10, one H200): what session 9 left unrun on a GPU (stage 3's
# compositions stopping at the last chunk, the ranks' model digest: tests/hybrid_gpu.sh whole, plants
# included); then the peer as the issue may have measured it (transformers' plain script: the loss
# from labels, no checkpointing, forward and backward only; in fp32, what from_config gives, and in
# bf16) to explain the quoted 3.6 s at 8K; then the longest lengths: the peer (bf16, checkpointed)
# at 64K and 128K, stage 1 at 256K, on the 4-layer Qwen3.5-9B shape.
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; L=$O/call_t; mkdir -p "$L"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
el() { echo "($(( $(date +%s) - t0 )) s)"; }
{ time make -j16 all; } > "$L/build.log" 2>&1 || { tail -30 "$L/build.log"; exit 1; }
echo "built $(el)"
CASE_TIMEOUT=60 timeout 220 bash tests/hybrid_gpu.sh > "$L/hybrid_gpu.log" 2>&1
echo "hybrid_gpu: $(tail -1 "$L/hybrid_gpu.log") $(el)"; grep -E "^FAIL|^  s3_" "$L/hybrid_gpu.log" | head
for dt in fp32 bf16; do
    timeout 90 python3 bench/peer_qwen35.py --plain --dtype $dt --seq 8192 32768 --steps 2 > "$L/peer_plain_$dt.jsonl" 2> "$L/peer_plain_$dt.err"
    cut -c1-330 "$L/peer_plain_$dt.jsonl"; echo "$(el)"
done
timeout 100 python3 bench/peer_qwen35.py --seq 65536 131072 --steps 1 > "$L/peer_long.jsonl" 2> "$L/peer_long.err"
cut -c1-330 "$L/peer_long.jsonl"; echo "$(el)"
timeout 100 ./stage1 --model Qwen3.5-9B --layers 4 --seq 262144 --steps 2 > "$L/s1_9b4_262144.log" 2>&1
grep -E '^step +[12]' "$L/s1_9b4_262144.log" | cut -c1-200; grep -iE "peak|error|DOES NOT" "$L/s1_9b4_262144.log" | head -3; echo "$(el)"
tar czf "$O/call_t.tgz" -C "$O" call_t
echo "all $(el)"
