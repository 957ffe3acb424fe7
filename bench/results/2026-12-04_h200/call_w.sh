#!/usr/bin/env bash
# Device call W (2026-12-04, session 10, one H200): the review's mends (the parameter table sized for a
# Qwen3.5 MoE layer; the resume band capped) and the new planted bugs in the shared expert
# (PLANTS_ONLY=1 tests/hybrid_gpu.sh: both, and stage 3's three, must fail); Qwen3.5-35B-A3B (the MoE hybrid) at 1M rehearsed as
# rank 0 of 8 (4 and 8 layers: 3 linear + 1 full each 4); run_gpu.sh's late sections (save + resume,
# memory plans against the measured, rehearsed traces against local ranks, failure drills,
# transformers), which call V's 290 s did not reach; tests/packing_gpu.sh (its token readers skip a
# tag since session 9).
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; L=$O/call_w; mkdir -p "$L"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
el() { echo "($(( $(date +%s) - t0 )) s)"; }
{ time make -j16 all; } > "$L/build.log" 2>&1 || { tail -30 "$L/build.log"; exit 1; }
echo "built $(el)"
CASE_TIMEOUT=60 PLANTS_ONLY=1 timeout 100 bash tests/hybrid_gpu.sh > "$L/plants.log" 2>&1
echo "plants: $(tail -1 "$L/plants.log") $(el)"; grep -E "^FAIL|^  (s3|moe)_" "$L/plants.log"
OUT=$L timeout 160 bash bench/rehearse.sh s5_q35moe 2>&1 | tee "$L/rehearse.txt" | grep -E "^==|^step|total|per node|exit"
echo "$(el)"
LATE_ONLY=1 SKIP_STAGE5=1 SKIP_KILL=1 QUICK=2 CASE_TIMEOUT=100 timeout 150 bash tests/run_gpu.sh > "$L/run_gpu_late.log" 2>&1
echo "run_gpu late: $(tail -1 "$L/run_gpu_late.log") $(el)"; grep -E "^FAIL" "$L/run_gpu_late.log" | head
CASE_TIMEOUT=60 timeout 110 bash tests/packing_gpu.sh > "$L/packing_gpu.log" 2>&1
echo "packing_gpu: $(tail -1 "$L/packing_gpu.log") $(el)"; grep -E "^FAIL" "$L/packing_gpu.log" | head
rm -f "$L/rand.tok"
tar czf "$O/call_w.tgz" -C "$O" call_w && rm -rf "$L"
echo "all $(el)"
