#!/usr/bin/env bash
# Stage 1 against the PyTorch peer, in one device call. Writes JSON lines under $OUT (or
# ./bench_out): c_<case>.jsonl from ./stage1 --log, peer.jsonl from the peer script, and the
# 30-step loss comparison (c_books.jsonl vs hf_books.jsonl).
#   bash bench/bench_stage1.sh [cases...]        (PEER=another.py: another peer script, the same options)
# cases: short (0.6B 16K, 64K), keep64 (0.6B and 1.7B 64K --keep-attn), 128k (0.6B 128K keep-attn and plain), 1.7b (64K), loss (30 steps),
#        512k (0.6B 512K, one step, with its --dry-run plan), peer (peer at the same sizes)
set -u
cd "$(dirname "$0")/.."
O=${OUT:-bench_out}; mkdir -p "$O"
PEER=${PEER:-bench/peer_dense.py}
c() { # name, args...
    local name=$1; shift
    echo "== stage1 $name: $*"
    timeout 400 ./stage1 "$@" --log "$O/c_$name.jsonl" > "$O/c_$name.txt" 2>&1 || echo "   (exit $?)"
    grep -E "^step|total \(peak\)|error" "$O/c_$name.txt" | tail -4
}
peer() { # model, seqs...
    local m=$1; shift
    echo "== peer $m $*"
    timeout 500 python3 "$PEER" --model "$m" --seq "$@" --steps 2 2>>"$O/peer_err.txt" | tee -a "$O/peer.jsonl"
}
for case in "${@:-short 128k 1.7b loss peer}"; do for cs in $case; do case $cs in
short) c 0.6B_16k --seq 16384 --steps 6; c 0.6B_64k --seq 65536 --steps 3 ;;
128k) c 0.6B_128k_keep --seq 131072 --steps 3 --keep-attn; c 0.6B_128k --seq 131072 --steps 3 ;;
1.7b) c 1.7B_64k --model 1.7B --seq 65536 --steps 3 ;;
keep64) c 0.6B_64k_keep --seq 65536 --steps 3 --keep-attn; c 1.7B_64k_keep --model 1.7B --seq 65536 --steps 3 --keep-attn ;;
512k) ./stage1 --seq 524288 --dry-run > "$O/c_0.6B_512k_plan.txt"; tail -1 "$O/c_0.6B_512k_plan.txt"
      c 0.6B_512k --seq 524288 --steps 1 ;;
loss) rm -rf /tmp/lc_init; ./stage1 --seq 8192 --steps 0 --save /tmp/lc_init > "$O/c_init.txt" 2>&1
      c books --resume /tmp/lc_init --seq 8192 --steps 30
      echo "== transformers, same init, data, hyper-parameters"
      timeout 300 python3 tests/hf_train.py /tmp/lc_init data/books.tok --seq 8192 --steps 30 > "$O/hf_books.jsonl" 2>"$O/hf_err.txt"
      tail -2 "$O/hf_books.jsonl"; tail -3 "$O/hf_err.txt" ;;
peer) peer 0.6B 16384 65536 131072; peer 1.7B 65536 ;;
peer512) peer 0.6B 524288 ;;
esac; done; done
