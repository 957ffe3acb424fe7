#!/usr/bin/env bash
# Stage 5's lever measured on one GPU, in one device call: Qwen3-0.6B at 131,072 tokens, stage 4
# against stage 5 (MLP tiles and head groups as planned; both with YaRN x4 from 32768 -- named, since
# stages 1-4 take the original from max_position_embeddings -- and without kept attention, so they
# compute the same thing), then both with --keep-attn. Steps 2-3 of 3 count
# (step 1 builds cuDNN plans). Writes $OUT/s5_*.txt and .jsonl.
set -u
cd "$(dirname "$0")/.."
O=${OUT:-bench_out}; mkdir -p "$O"
one() { # name, binary, args...
    local name=$1 bin=$2; shift 2
    echo "== ./$bin $*"
    timeout 300 ./$bin --model 0.6B --seq 131072 --steps 3 --yarn-factor 4 --yarn-original 32768 "$@" --log "$O/s5_$name.jsonl" > "$O/s5_$name.txt" 2>&1 || echo "   (exit $?)"
    grep -E "^step|error|working set|total \(peak\)|pinned host memory per node|tiling saves" "$O/s5_$name.txt" | tail -7
}
one stage4 stage4 --keep-attn 0
one stage5 stage5 --keep-attn 0
one stage4_keep stage4 --keep-attn auto
one stage5_keep stage5 --keep-attn auto
