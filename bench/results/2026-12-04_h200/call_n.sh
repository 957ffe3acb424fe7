#!/usr/bin/env bash
# Device call N (2026-12-04, session 9, one H200): Qwen3.5 hybrids in every stage, and context
# parallelism for linear attention. build/test_gpu --quick (the state maps and their composition,
# the conv's halo, against the token-by-token rule); tests/hybrid_gpu.sh (stages 1-5 on the hybrid
# fixtures against the reference, stages 3-5 at P = 1, 2, 4, 8).
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; L=$O/call_n; mkdir -p "$L"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
{ time make -j16 all; } > "$L/build.log" 2>&1 || { tail -30 "$L/build.log"; exit 1; }
echo "builds $(( $(date +%s) - t0 )) s"
s=$(date +%s); timeout 150 ./build/test_gpu --quick > "$L/test_gpu.log" 2>&1
echo "test_gpu --quick: $(tail -1 "$L/test_gpu.log") ($(( $(date +%s) - s )) s)"; grep -E "^FAIL|halo|maps|compose|c_only" "$L/test_gpu.log" | head -20
s=$(date +%s); CASE_TIMEOUT=120 timeout 400 bash tests/hybrid_gpu.sh > "$L/hybrid_gpu.log" 2>&1
echo "hybrid_gpu: $(tail -1 "$L/hybrid_gpu.log") ($(( $(date +%s) - s )) s)"; grep -E "^FAIL|^==" "$L/hybrid_gpu.log" | head -40
tar czf "$O/call_n.tgz" -C "$O" call_n
echo "all $(( $(date +%s) - t0 )) s"
