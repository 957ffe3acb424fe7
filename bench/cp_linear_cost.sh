#!/usr/bin/env bash
# What context parallelism costs the linear attention layers (the target: "at P ranks the linear layers'
# time stays within about 2x of one rank's share"). Qwen3.5-27B cut to its first 3 layers, all linear
# attention, so the profile's "attention" part is the gated delta rule alone (the conv, gates and norms
# are in their own parts). Three runs, each 3 steps, the last step's profile read:
#   share    stage 1 on one GPU with S/P tokens: one rank's share of the work, no state exchanged, no
#            maps (what a single GPU would spend on S/P tokens);
#   share5   stage 5 on one GPU with S/P tokens: already context parallelism's work at P = 1 (two
#            zigzag chunks, their maps, the composition, the chunks run again);
#   rank 0   rank 0 of P at S, rehearsed alone: the same S/P tokens as its two zigzag chunks, the maps,
#            their all-gather (modelled), the compositions, and its chunks run again from their true states.
# "rank 0 / share" is the cost asked about; "rank 0 / share5" says whether it grows with P. Needs a GPU
# (one H200: ~2 minutes at the default size; stage 1's run plans 101 GiB).
#   bash bench/cp_linear_cost.sh [SEQ] [P]        (default 1M over 8)
set -u
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
S=${1:-1048576}; P=${2:-8}; O=${OUT:-bench_out}; mkdir -p "$O"
M="--model Qwen3.5-27B --layers 3 --steps 3 --profile"
./stage1 $M --seq $((S / P)) > "$O/cp_linear_share.txt" 2>&1 || echo "(share: exit $?)"
./stage5 $M --seq $((S / P)) --gpus 1 > "$O/cp_linear_share5.txt" 2>&1 || echo "(share5: exit $?)"
./stage5 $M --seq "$S" --gpus "$P" --rehearse 0 > "$O/cp_linear_rank0.txt" 2>&1 || echo "(rank 0: exit $?)"
attn() { grep "profile:" "$1" | tail -1 | grep -o 'attention [0-9.]* ms' | grep -o '[0-9.]*'; }
a=$(attn "$O/cp_linear_share.txt"); a5=$(attn "$O/cp_linear_share5.txt"); b=$(attn "$O/cp_linear_rank0.txt")
echo "the linear layers' rule a step (profile: attention): one rank's share ($((S / P)) tokens, stage 1) ${a:-?} ms;" \
     "the same on stage 5 (P = 1) ${a5:-?} ms; rank 0 of $P at $S, rehearsed: ${b:-?} ms"
[ -n "$a" ] && [ -n "$a5" ] && [ -n "$b" ] &&
    python3 -c "print(f'rank 0 / share {float(\"$b\") / float(\"$a\"):.2f}x (the target: about 2x); rank 0 / stage 5 at P = 1 {float(\"$b\") / float(\"$a5\"):.2f}x')"
