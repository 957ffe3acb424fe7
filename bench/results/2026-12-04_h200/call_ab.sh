#!/usr/bin/env bash
# Device call AB (2026-12-04, session 11, one H200): tests/hybrid_gpu.sh with the tiled rule -- every
# stage against the reference on the four hybrid fixtures (P = 1..8 local ranks), save/resume,
# transformers loading the saves, the planted bugs -- and, new, a release's fused experts
# (tests/fuse_experts.py) loaded by stages 1-5; then bench/cp_linear_cost.sh again, now with stage 1's
# one rank's share (call AA's baseline was stage 5 at P = 1, itself already doing the maps).
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; L=$O/call_ab; mkdir -p "$L"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
el() { echo "($(( $(date +%s) - t0 )) s)"; }
make -j16 all > "$L/build.log" 2>&1 || { tail -30 "$L/build.log"; exit 1; }
echo "built $(el)"
CASE_TIMEOUT=60 timeout 370 bash tests/hybrid_gpu.sh > "$L/hybrid_gpu.log" 2>&1
echo "hybrid_gpu: $(tail -1 "$L/hybrid_gpu.log") $(el)"
grep -E "^FAIL|^  s3_|^  moe_|after resume|transformers loss" "$L/hybrid_gpu.log" | head -30
grep -A12 "fused experts" "$L/hybrid_gpu.log" | grep -E "loss|worst|FAIL" | head -12
OUT=$L timeout 190 bash bench/cp_linear_cost.sh > "$L/cp_linear_cost.log" 2>&1
cat "$L/cp_linear_cost.log"
for f in "$L"/cp_linear_*.txt; do echo "-- $f"; grep -E "^step|profile:|error|DOES NOT" "$f" | tail -2; done
echo "all $(el)"
tar czf "$O/call_ab.tgz" -C "$O" call_ab && rm -rf "$L"
