#!/usr/bin/env bash
# Device call E (2026-12-04, session 8, one H200): padded cuDNN SDPA plans (run-time lengths) for
# packed documents. Build; build/test_gpu --quick (every attention case again, plus packed
# documents on 1, 2, 4 simulated zigzag ranks against each document alone); then the saving at 1M
# on 8 ranks: build/docs_attn for one K/V head group of Qwen3-32B (8 q heads) and of Qwen3-8B (4).
# Logs under $OUT/call_e, tarred into $OUT/call_e.tgz.
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; L=$O/call_e; mkdir -p "$L"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
{ time make -j16 build/test_gpu build/docs_attn; } > "$L/build.log" 2>&1 || { tail -30 "$L/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
s=$(date +%s); CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=$L/cudnn_err.log timeout 400 ./build/test_gpu --quick > "$L/test_gpu.log" 2>&1
echo "test_gpu --quick: $(tail -1 "$L/test_gpu.log") ($(( $(date +%s) - s )) s)"
grep -E "packed|^FAIL|error" "$L/test_gpu.log" | head -40
if grep -q "packed docs" "$L/test_gpu.log"; then
    for shape in "8 1 128 1" "4 1 128 1"; do
        s=$(date +%s); timeout 300 ./build/docs_attn 1048576 8 $shape > "$L/docs_attn_${shape// /_}.log" 2>&1
        cat "$L/docs_attn_${shape// /_}.log"; echo "($(( $(date +%s) - s )) s)"
    done
fi
tail -c 20000 "$L/cudnn_err.log" > "$L/cudnn_err_tail.log" 2>/dev/null; rm -f "$L/cudnn_err.log"
tar czf "$O/call_e.tgz" -C "$O" call_e
echo "all $(( $(date +%s) - t0 )) s"
