#!/usr/bin/env bash
# The MoE row on one GPU, in one device call: the first 4 layers of Qwen3-30B-A3B at 32,768 tokens,
# stage 5 against transformers' Qwen3MoeForCausalLM (bench/peer_moe.py: bf16 weights and AdamW
# states, per-layer checkpointing, cuDNN attention). Stage 5 keeps its states on the GPU as the peer
# does (--offload none) and runs 4 steps; the last step's line is the figure (step 1 includes the
# cuBLASLt heuristic queries and cuDNN plans). Cases:
#   keep          attention outputs kept (--keep-attn: no attention recompute), with --profile
#   keep_noprof   the same without --profile: the step time quoted against the peer
#   plain         plain per-layer checkpointing, as the peer (attention recomputed)
#   grouped       --keep-attn --moe-gemm grouped: cuBLAS's grouped GEMM instead of one call per expert
#   tile8960      --keep-attn --mlp-tile 8960: the tile the attention backward's memory alone would give
#   offload       the defaults (--offload all: states, checkpoints, kept outputs on the host): memory
# Writes $OUT/moe_<case>.txt and .jsonl, $OUT/moe_peer.txt.   MOE_CASES="keep plain" to run fewer.
set -u
cd "$(dirname "$0")/.."
O=${OUT:-bench_out}; mkdir -p "$O"
A="--model 30B-A3B --layers 4 --seq 32768 --steps 4"
run() { # NAME ARGS...: one stage-5 run, its plan's line and last step
    local name=$1; shift
    echo "== ./stage5 $A $*"
    timeout 240 ./stage5 $A "$@" --log "$O/moe_$name.jsonl" > "$O/moe_$name.txt" 2>&1 || echo "   (exit $?)"
    grep -E "error|total \(peak\)" "$O/moe_$name.txt" | head -2
    grep -E "^step|profile:|heuristic" "$O/moe_$name.txt" | tail -3
}
for c in ${MOE_CASES:-keep keep_noprof plain grouped tile8960 offload}; do
    case $c in
    keep) run keep --offload none --keep-attn auto --profile ;;
    keep_noprof) run keep_noprof --offload none --keep-attn auto ;;
    plain) run plain --offload none --keep-attn 0 ;;
    grouped) run grouped --offload none --keep-attn auto --moe-gemm grouped --profile ;;
    tile8960) run tile8960 --offload none --keep-attn auto --mlp-tile 8960 --profile ;;
    offload) run offload ;;
    *) echo "unknown case $c" ;;
    esac
done
echo "== python3 bench/peer_moe.py --layers 4 --seq 32768 --steps 3"
timeout 300 python3 bench/peer_moe.py --layers 4 --seq 32768 --steps 3 2>&1 | grep -v Warning | tee "$O/moe_peer.txt" | tail -3
