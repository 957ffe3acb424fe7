#!/usr/bin/env bash
# A masked fine-tune and its eval curve, on one GPU (minutes): a copy task made from the shipped
# books (bench/sft_pairs.py), prompt/completion pairs turned into a loss-masked token file by
# data/prepare.py --jsonl, stage 1 training on the completions only and evaluating the held-out
# tenth of the books every 25 steps. Writes OUT/sft.jsonl (the step and eval lines) and OUT/sft.log;
# bench/plot_sft.py OUT draws OUT/sft_curve.png.
#   bash bench/sft_demo.sh [OUT] [STEPS]        (OUT default bench/results/sft; the token files are
#                                                made there unless OUT/train.tok exists)
# Each step needs the one before it: the first to fail stops the demo, its last line names it, exit 1.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench/results/sft}
STEPS=${2:-600}
# step WHAT LOG COMMAND...: run it; if it fails, say which step and stop
step() {
    local what=$1 log=$2 rc=0; shift 2
    "$@" || rc=$?
    [ $rc -eq 0 ] || { echo "sft_demo: $what failed (exit $rc)${log:+; its output is in $log}" >&2; exit 1; }
}
[ -x ./stage1 ] || { echo "sft_demo: ./stage1 is not built: make all" >&2; exit 1; }
mkdir -p "$OUT"
if [ ! -f "$OUT/train.tok" ]; then # needs the tokenizer (tiktoken): made on a CPU machine if need be
    step "making the pairs (bench/sft_pairs.py)" "" python3 bench/sft_pairs.py --train "$OUT/train.jsonl" --eval "$OUT/eval.jsonl"
    step "tokenizing the training pairs (data/prepare.py)" "" python3 data/prepare.py --jsonl "$OUT/train.jsonl" -o "$OUT/train.tok"
    step "tokenizing the eval pairs (data/prepare.py)" "" python3 data/prepare.py --jsonl "$OUT/eval.jsonl" -o "$OUT/eval.tok"
fi
rm -f "$OUT/sft.jsonl"
# a 4-layer slice of Qwen3-0.6B from random init: about 20 ms a step at 4096 tokens on an H200
train() {
    ./stage1 --model 0.6B --layers 4 --data "$OUT/train.tok" --seq 4096 --steps "$STEPS" --lr 6e-4 --warmup 30 \
        --eval-data "$OUT/eval.tok" --eval-every 25 --eval-windows 8 --log "$OUT/sft.jsonl" 2>&1 | tee "$OUT/sft.log"
}
step "training (./stage1)" "$OUT/sft.log" train
echo "sft_demo: done: $OUT/sft.jsonl; python3 bench/plot_sft.py $OUT draws the curve"
