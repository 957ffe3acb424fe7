#!/usr/bin/env bash
# Device call S (2026-12-04, session 9, one H200): after the review's mends (the conv's grid strides
# over tiles past 65535; the stage-3 state copy as one function, if_ours; config fields) the kernel
# tests and tests/hybrid_gpu.sh whole again, its planted bugs included.
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; L=$O/call_s; mkdir -p "$L"
export NCCL_NVLS_ENABLE=0
make -j16 all > "$L/build.log" 2>&1 || { tail -30 "$L/build.log"; exit 1; }
timeout 100 ./build/test_gpu --quick > "$L/test_gpu.log" 2>&1; echo "test_gpu --quick: $(tail -1 "$L/test_gpu.log")"
grep -E "^FAIL" "$L/test_gpu.log" | head
CASE_TIMEOUT=60 timeout 200 bash tests/hybrid_gpu.sh > "$L/hybrid_gpu.log" 2>&1
echo "hybrid_gpu: $(tail -1 "$L/hybrid_gpu.log")"; grep -E "^FAIL|^  s3_" "$L/hybrid_gpu.log" | head
