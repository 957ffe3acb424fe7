#!/usr/bin/env bash
# Device call G (2026-12-04, session 8, one H200): --packing in every stage. Build; build/test_gpu
# --quick (the padded SDPA blocks asserted with 256 rows of slack); tests/packing_gpu.sh (every
# stage against transformers' each-document-alone truth, P = 1..8, stage 1 against stages 3-5 on a
# 0.6B slice, the planted bugs). Logs under $OUT/call_g, tarred into $OUT/call_g.tgz.
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; L=$O/call_g; mkdir -p "$L"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
{ time make -j16 all; } > "$L/build.log" 2>&1 || { tail -30 "$L/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
s=$(date +%s); timeout 200 ./build/test_gpu --quick > "$L/test_gpu.log" 2>&1
echo "test_gpu --quick: $(tail -1 "$L/test_gpu.log") ($(( $(date +%s) - s )) s)"
grep -E "^FAIL" "$L/test_gpu.log" | head
s=$(date +%s); CASE_TIMEOUT=120 timeout 420 bash tests/packing_gpu.sh > "$L/packing_gpu.log" 2>&1
echo "packing_gpu: $(tail -1 "$L/packing_gpu.log") ($(( $(date +%s) - s )) s)"
grep -E "^FAIL|^==|^  " "$L/packing_gpu.log" | head -80
tar czf "$O/call_g.tgz" -C "$O" call_g
echo "all $(( $(date +%s) - t0 )) s"
