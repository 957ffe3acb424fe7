#!/usr/bin/env bash
# Device call L (2026-12-04, session 9, one H200): stage 1 runs Qwen3.5 hybrids (rerun as call M with
# the 2-layer fixtures: call L's 4-layer ones were bf16-noisier than the bands; see call_m/README.md). tests/hybrid_gpu.sh
# (the three hybrid fixtures against the reference, one AdamW step; save + resume; transformers loads
# the save); a first timing of the 4-layer Qwen3.5-9B shape (3 linear + 1 full attention) at 8K.
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; L=$O/call_l; mkdir -p "$L"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
make -j16 all > "$L/build.log" 2>&1 || { tail -30 "$L/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
s=$(date +%s); CASE_TIMEOUT=120 timeout 300 bash tests/hybrid_gpu.sh > "$L/hybrid_gpu.log" 2>&1
echo "hybrid_gpu: $(tail -1 "$L/hybrid_gpu.log") ($(( $(date +%s) - s )) s)"; grep -E "^FAIL|loss|transformers" "$L/hybrid_gpu.log" | head -20
timeout 120 ./stage1 --model Qwen3.5-9B --layers 4 --seq 8192 --steps 4 --profile > "$L/s1_9b4_8k.log" 2>&1
grep -E "^step|profile|GEMM|attention|elementwise|peak" "$L/s1_9b4_8k.log" | tail -12
tar czf "$O/call_l.tgz" -C "$O" call_l
echo "all $(( $(date +%s) - t0 )) s"
