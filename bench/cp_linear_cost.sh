#!/usr/bin/env bash
# What context parallelism costs the linear attention layers (issue 33: "at P ranks the linear layers'
# time stays within about 2x of one rank's share"). Qwen3.5-27B cut to its first 3 layers, all linear
# attention, so the profile's "attention" part is the gated delta rule alone (and the conv, gates, norms
# in their own parts):
#   one rank's share: stage 5 on one GPU with S/P tokens, nothing exchanged;
#   rank 0 of P, rehearsed: the same S/P tokens as its two zigzag chunks, the maps, their all-gather
#   (modelled), the compositions, and its chunks run again from their true states.
# The ratio of the two "attention" times is the cost asked about. Needs a GPU (one H200: ~3 minutes);
# written in session 10 after its device time was spent: not run yet (both plans fit: --dry-run).
#   bash bench/cp_linear_cost.sh [SEQ] [P]        (default 1M over 8)
set -u
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
S=${1:-1048576}; P=${2:-8}; O=${OUT:-bench_out}; mkdir -p "$O"
M="--model Qwen3.5-27B --layers 3 --steps 3 --profile"
./stage5 $M --seq $((S / P)) --gpus 1 > "$O/cp_linear_share.txt" 2>&1 || echo "(share: exit $?)"
./stage5 $M --seq "$S" --gpus "$P" --rehearse 0 > "$O/cp_linear_rank0.txt" 2>&1 || echo "(rank 0: exit $?)"
attn() { grep "profile:" "$1" | tail -1 | grep -o 'attention [0-9.]* ms' | grep -o '[0-9.]*'; }
a=$(attn "$O/cp_linear_share.txt"); b=$(attn "$O/cp_linear_rank0.txt")
echo "one rank's share ($((S / P)) tokens, one GPU): attention ${a:-?} ms a step; rank 0 of $P at $S, rehearsed: ${b:-?} ms"
[ -n "$a" ] && [ -n "$b" ] && python3 -c "print(f'ratio {float(\"$b\") / float(\"$a\"):.2f}x (issue 33 asks for about 2x)')"
