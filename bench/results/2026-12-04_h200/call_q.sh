#!/usr/bin/env bash
# Device call Q (2026-12-04, session 9, one H200): Qwen3 behaviour unchanged by the session's changes
# (tests/same_as_gpu.sh against the session's starting tree, 2f6d6d6, carried as .out/old.tgz: step 1's
# loss bit for bit, gradients as close as two runs of one build); tests/hybrid_gpu.sh with the resume
# check made a tolerance; the 27B rehearsal at 4 layers again, two steps (call P's stopped after step 1
# on a ring timer set on a linear layer).
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; L=$O/call_q; mkdir -p "$L"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
{ time make -j16 all; } > "$L/build.log" 2>&1 || { tail -30 "$L/build.log"; exit 1; }
mkdir -p /tmp/old && tar xzf .out/old.tgz -C /tmp/old && (cd /tmp/old && make -j16 stage1 stage2 stage3 stage4 stage5) > "$L/old_build.log" 2>&1 ||
    { tail -20 "$L/old_build.log"; exit 1; }
echo "builds $(( $(date +%s) - t0 )) s"
s=$(date +%s); CASE_TIMEOUT=100 timeout 250 bash tests/same_as_gpu.sh /tmp/old > "$L/same_as.log" 2>&1
echo "same_as_gpu: $(tail -1 "$L/same_as.log") ($(( $(date +%s) - s )) s)"; grep -E "^FAIL" "$L/same_as.log" | head
s=$(date +%s); CASE_TIMEOUT=60 timeout 120 bash tests/hybrid_gpu.sh > "$L/hybrid_gpu.log" 2>&1
echo "hybrid_gpu: $(tail -1 "$L/hybrid_gpu.log") ($(( $(date +%s) - s )) s)"; grep -E "^FAIL|resume" "$L/hybrid_gpu.log" | head -6
timeout 110 ./stage5 --layers 4 --gpus 8 --rehearse 0 --seq 1M --model Qwen3.5-27B --gpu-gib 74.5 --steps 2 \
    --log "$L/r_L4.jsonl" > "$L/r_L4.txt" 2>&1; echo "rehearsal L4 exit $?"
grep -E "^step|ring (for|back)" "$L/r_L4.txt"
tar czf "$O/call_q.tgz" -C "$O" call_q
echo "all $(( $(date +%s) - t0 )) s"
