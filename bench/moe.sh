#!/usr/bin/env bash
# The MoE row on one GPU, in one device call: the first 4 layers of Qwen3-30B-A3B at 32,768 tokens,
# stage 5 (everything on the GPU: --offload none, as the peer; attention outputs kept, as stage 5
# does by default) against transformers' Qwen3MoeForCausalLM (bench/peer_moe.py).
# Stage 5 runs its two expert-GEMM paths (--moe-gemm loop | grouped), each at the default MLP tile
# and at one tile of the whole sequence (--mlp-tile 32768: ~2048 rows per expert instead of ~560),
# 4 steps with --profile (the last step's line is the figure; step 1 includes the heuristic queries),
# then the fastest setting without --profile. Writes $OUT/moe_*.txt and .jsonl.
#   bash bench/moe.sh            MOE_VARIANTS="loop grouped" to run fewer
set -u
cd "$(dirname "$0")/.."
O=${OUT:-bench_out}; mkdir -p "$O"
A="--model 30B-A3B --layers 4 --seq 32768 --steps 4 --offload none"
run() { # NAME ARGS...: one stage-5 run, its last step
    local name=$1; shift
    echo "== ./stage5 $A $*"
    timeout 240 ./stage5 $A "$@" --log "$O/moe_$name.jsonl" > "$O/moe_$name.txt" 2>&1 || echo "   (exit $?)"
    grep -E "error|total \(peak\)|MLP tiles of" "$O/moe_$name.txt" | head -3
    grep -E "^step|profile:|heuristic" "$O/moe_$name.txt" | tail -3
}
for v in ${MOE_VARIANTS:-loop loop_t32k grouped grouped_t32k}; do
    case $v in
    loop) run loop --profile ;;
    loop_t32k) run loop_t32k --mlp-tile 32768 --profile ;;
    grouped) run grouped --moe-gemm grouped --profile ;;
    grouped_t32k) run grouped_t32k --moe-gemm grouped --mlp-tile 32768 --profile ;;
    esac
done
best=$(for f in "$O"/moe_*.jsonl; do
    [ -s "$f" ] && echo "$(tail -1 "$f" | grep -o "\"step_s\":[0-9.]*" | cut -d: -f2) $(basename "$f" .jsonl)"
done | sort -n | head -1 | cut -d' ' -f2 | sed 's/^moe_//')
echo "fastest: $best"
case $best in
loop) run best ;;
loop_t32k) run best --mlp-tile 32768 ;;
grouped) run best --moe-gemm grouped ;;
grouped_t32k) run best --moe-gemm grouped --mlp-tile 32768 ;;
esac
echo "== python3 bench/peer_moe.py --layers 4 --seq 32768 --steps 3"
timeout 300 python3 bench/peer_moe.py --layers 4 --seq 32768 --steps 3 2>&1 | grep -v Warning | tee "$O/moe_peer.txt" | tail -3
