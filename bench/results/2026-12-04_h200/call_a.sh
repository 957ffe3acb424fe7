#!/usr/bin/env bash
# Device call A (2026-12-04, one H200): build; preemption with local ranks (tests/preempt_gpu.sh);
# every refusal on a machine with a GPU, before the GPU (tests/refusals.sh); MoE in stages 1-4
# against the reference and stage 5 (tests/moe_stages_gpu.sh); a stream timeline of rank 0 of an
# 8-GPU job (8B, 512K, 2 layers). Logs under $OUT, tarred into $OUT/call_a.tgz.
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; L=$O/call_a; mkdir -p "$L"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
{ time make -j16 all; } > "$L/build.log" 2>&1 || { tail -30 "$L/build.log"; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$L/gpu.txt" 2>&1
echo "build $(( $(date +%s) - t0 )) s"
for t in preempt_gpu refusals moe_stages_gpu; do
    s=$(date +%s); bash tests/$t.sh > "$L/$t.log" 2>&1
    echo "$t: $(tail -1 "$L/$t.log") ($(( $(date +%s) - s )) s)"
done
s=$(date +%s)
./stage5 --model 8B --seq 512K --gpus 8 --rehearse 0 --layers 2 --steps 2 --timeline "$L/timeline.tsv" > "$L/timeline.log" 2>&1
echo "timeline: exit $? $(grep -c . "$L/timeline.tsv" 2>/dev/null) spans ($(( $(date +%s) - s )) s)"
grep -E "^step|timeline" "$L/timeline.log"
tar czf "$O/call_a.tgz" -C "$O" call_a
echo "all $(( $(date +%s) - t0 )) s"
