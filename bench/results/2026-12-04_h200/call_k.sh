#!/usr/bin/env bash
# Device call K (2026-12-04, session 9, one H200): the first run of Qwen3.5's kernels (kernels/gdn.cu,
# kernels/gated_attn.cu) in build/test_gpu --quick: the conv, the gates, the l2 norms, the gated delta
# rule forward and backward, the gated RMSNorm, the gated attention's partial RoPE and output gate,
# each against fp64 (the rule against tests/ref_gdn.c, document by document). 241 passed, 0 failed.
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; mkdir -p "$O/k"
make -j16 build/test_gpu > "$O/k/build.txt" 2>&1
./build/test_gpu --quick > "$O/k/test_gpu.txt" 2>&1; echo rc $?
grep -A60 "Qwen3.5" "$O/k/test_gpu.txt" | head -70; tail -3 "$O/k/test_gpu.txt"
