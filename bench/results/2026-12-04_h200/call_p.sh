#!/usr/bin/env bash
# Device call P (2026-12-04, session 9, one H200): call O's kernels through tests/hybrid_gpu.sh again
# (stages 1-5, P = 1..8, against the reference), and Qwen3.5-27B at 1M tokens on 8 GPUs rehearsed as
# rank 0 of 8 at 4 and 8 layers (each 3 linear + 1 full attention per 4), for the full-depth projection
# (bench/rehearse.sh s5_q35_27b, two steps each).
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; L=$O/call_p; mkdir -p "$L"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
{ time make -j16 all; } > "$L/build.log" 2>&1 || { tail -30 "$L/build.log"; exit 1; }
s=$(date +%s); CASE_TIMEOUT=120 timeout 240 bash tests/hybrid_gpu.sh > "$L/hybrid_gpu.log" 2>&1
echo "hybrid_gpu: $(tail -1 "$L/hybrid_gpu.log") ($(( $(date +%s) - s )) s)"; grep -E "^FAIL" "$L/hybrid_gpu.log" | head -10
grep -E "s3.P8|s5.P8" "$L/hybrid_gpu.log" | head -12
OUT=$L STEPS=2 timeout 330 bash bench/rehearse.sh s5_q35_27b
tar czf "$O/call_p.tgz" -C "$O" call_p
echo "all $(( $(date +%s) - t0 )) s"
