#!/usr/bin/env bash
# Device call V (2026-12-04, session 10, one H200): after call U, the bands its MoE-hybrid fixture
# showed were bf16's (check_stage's EXPERT_* for a Qwen3.5 MoE's routed experts, from transformers'
# own bf16 floor; stage 2's random-token case left out for the MoE fixture, whose routers are solved
# for its own tokens) and the resume check measured against a second uninterrupted run:
# tests/hybrid_gpu.sh whole again; then run_gpu.sh's own loops (Qwen3: stage 1 vs reference, resume,
# stages 2-4, memory plans, traces, failure drills, transformers) with the separate suites left out.
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; L=$O/call_v; mkdir -p "$L"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
el() { echo "($(( $(date +%s) - t0 )) s)"; }
{ time make -j16 all; } > "$L/build.log" 2>&1 || { tail -30 "$L/build.log"; exit 1; }
echo "built $(el)"
CASE_TIMEOUT=60 timeout 250 bash tests/hybrid_gpu.sh > "$L/hybrid_gpu.log" 2>&1
echo "hybrid_gpu: $(tail -1 "$L/hybrid_gpu.log") $(el)"; grep -E "^FAIL|^  s3_|after resume|transformers loss" "$L/hybrid_gpu.log" | head -20
grep -A6 "stage 1 vs reference: q35moe" "$L/hybrid_gpu.log" | grep -E "loss|worst"
SKIP_STAGE5=1 SKIP_KILL=1 SKIP_LONG=1 SKIP_HYBRID=1 SKIP_MOE=1 SKIP_PACKING=1 SKIP_KEEP=1 SKIP_MASK=1 QUICK=2 \
    CASE_TIMEOUT=120 timeout 290 bash tests/run_gpu.sh > "$L/run_gpu.log" 2>&1
echo "run_gpu (QUICK=2, suites apart): $(tail -1 "$L/run_gpu.log") $(el)"; grep -E "^FAIL|^== " "$L/run_gpu.log" | tail -25
tar czf "$O/call_v.tgz" -C "$O" call_v && rm -rf "$L"
echo "all $(el)"
