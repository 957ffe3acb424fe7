#!/usr/bin/env bash
# Stage 4's lever measured on one GPU, in one device call: Qwen3-0.6B at 131,072 tokens, stage 3
# against stage 4 with checkpoint offload alone and with everything offloaded (step 2 of 2 each: step
# 1 builds cuDNN plans), then the host side (bench/offload.c: pinned bandwidth, host AdamW).
# Writes $OUT/s4_*.txt and .jsonl.
set -u
cd "$(dirname "$0")/.."
O=${OUT:-bench_out}; mkdir -p "$O"
one() { # name, binary, args...
    local name=$1 bin=$2; shift 2
    echo "== ./$bin $*"
    timeout 300 ./$bin --seq 131072 --steps 2 "$@" --log "$O/s4_$name.jsonl" > "$O/s4_$name.txt" 2>&1 || echo "   (exit $?)"
    grep -E "^step|error|total \(peak\)|pinned host memory per node" "$O/s4_$name.txt" | tail -4
}
one stage3 stage3
one ckpt stage4 --offload ckpt
one all stage4 --offload all
one all_keep stage4 --offload all --keep-attn auto
echo "== host side"
./build/offload 4 512 | tee "$O/s4_offload_bench.txt"
