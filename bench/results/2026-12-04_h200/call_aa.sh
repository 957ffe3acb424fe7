#!/usr/bin/env bash
# Device call AA (2026-12-04, session 11, one H200): the tiled rule after call Z's ncu reading (one warp
# a scheduler issuing every 2.4 cycles: the kernels are short of instructions, not of bandwidth): 16-byte
# shared loads of k and q, the backward's row sums through shared memory, no 64-bit modulo a token, a
# lane's conversion columns fixed. test_gpu --quick (plain and tiled against tests/ref_gdn.c), the
# kernels' times, stage 1 against the PyTorch peer in the same call (a 4-layer Qwen3.5-9B
# shape; 8K, 32K, 64K; the peer at 8K and 32K), and bench/cp_linear_cost.sh (context parallelism's
# cost for the linear layers: Qwen3.5-27B's first 3 layers, one rank's share against rank 0 of 8 at 1M).
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; L=$O/call_aa; mkdir -p "$L"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
el() { echo "($(( $(date +%s) - t0 )) s)"; }
make -j16 all > "$L/build.log" 2>&1 || { tail -30 "$L/build.log"; exit 1; }
echo "built $(el)"
timeout 150 ./build/test_gpu --quick > "$L/test_gpu_quick.log" 2>&1
echo "test_gpu --quick: $(tail -1 "$L/test_gpu_quick.log") $(el)"
if grep -qE "^FAIL" "$L/test_gpu_quick.log"; then grep -E "^FAIL" "$L/test_gpu_quick.log" | head -20
    tar czf "$O/call_aa.tgz" -C "$O" call_aa && rm -rf "$L"; exit 1; fi
timeout 120 ./build/gdn_rate --seq 8192,32768 > "$L/gdn_rate.log" 2>&1
cat "$L/gdn_rate.log"
for S in 8192 32768 65536; do
    timeout 150 ./stage1 --model Qwen3.5-9B --layers 4 --seq $S --steps 3 --profile > "$L/s1_9b4_$S.log" 2>&1
    echo "stage1 9B/4 $S: $(grep -E '^step +3' "$L/s1_9b4_$S.log" | tail -1)"
    grep "profile:" "$L/s1_9b4_$S.log" | tail -1
done
echo "$(el)"
timeout 200 python3 bench/peer_qwen35.py --seq 8192 32768 --steps 2 > "$L/peer.jsonl" 2> "$L/peer.err"
cut -c1-330 "$L/peer.jsonl"
echo "$(el)"
OUT=$L timeout 240 bash bench/cp_linear_cost.sh > "$L/cp_linear_cost.log" 2>&1
cat "$L/cp_linear_cost.log"
for f in "$L"/cp_linear_*.txt; do echo "-- $f"; grep -E "^step|profile:|error|DOES NOT" "$f" | tail -4; done
echo "all $(el)"
tar czf "$O/call_aa.tgz" -C "$O" call_aa && rm -rf "$L"
