#!/usr/bin/env bash
# Device call R (2026-12-04, session 9, one H200): the planted bugs of tests/hybrid_gpu.sh alone
# (PLANTS_ONLY=1): stage 3 at P = 2 with the maps not composed (chunks from a zero state), the conv
# without its halo, and the state's gradient not passed back; each must fail the reference check.
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; L=$O/call_r; mkdir -p "$L"
export NCCL_NVLS_ENABLE=0
make -j16 all > "$L/build.log" 2>&1 || { tail -30 "$L/build.log"; exit 1; }
PLANTS_ONLY=1 CASE_TIMEOUT=60 timeout 200 bash tests/hybrid_gpu.sh > "$L/plants.log" 2>&1
echo "plants: $(tail -1 "$L/plants.log")"; grep -E "^  s3_|^FAIL" "$L/plants.log"
