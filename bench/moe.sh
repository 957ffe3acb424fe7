#!/usr/bin/env bash
# The MoE row on one GPU, in one device call: the first 4 layers of Qwen3-30B-A3B at 32,768 tokens,
# stage 5 (everything on the GPU: --offload none, as the peer; attention outputs kept, as stage 5
# does by default) against transformers' Qwen3MoeForCausalLM (bench/peer_moe.py), step 2-3 of 3.
# Writes $OUT/moe_*.txt and .jsonl.
set -u
cd "$(dirname "$0")/.."
O=${OUT:-bench_out}; mkdir -p "$O"
echo "== ./stage5 --model 30B-A3B --layers 4 --seq 32768 --offload none"
timeout 240 ./stage5 --model 30B-A3B --layers 4 --seq 32768 --steps 3 --offload none --profile --log "$O/moe_stage5.jsonl" \
    > "$O/moe_stage5.txt" 2>&1 || echo "   (exit $?)"
grep -E "^step|error|total \(peak\)|model 30B|profile:" "$O/moe_stage5.txt" | tail -9
echo "== python3 bench/peer_moe.py --layers 4 --seq 32768 --steps 2"
timeout 300 python3 bench/peer_moe.py --layers 4 --seq 32768 --steps 2 2>&1 | grep -v Warning | tee "$O/moe_peer.txt" | tail -3
