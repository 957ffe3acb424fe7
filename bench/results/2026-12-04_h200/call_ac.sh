#!/usr/bin/env bash
# Device call AC (2026-12-04, session 11, one H200; the session's last device minutes): the tiled rule
# after a review (a tile of 8 tokens where 16's shared memory would leave part of the grid for a second
# wave; S = 0, dq/dk alignment, dout NULL guarded) -- test_gpu --quick (plain, tiled 16 and tiled 8 each
# against tests/ref_gdn.c), the kernels' times at 9B's and 27B's linear shapes; then less memory than
# the peer? The issue's 4-layer Qwen3.5-9B at 8K and 32K: stage 1 (everything on the GPU), stage 4
# (--offload all: fp32 master weights, moments and checkpoints on the host, AdamW on its 16 cores), and
# the PyTorch peer, in this one call; bench/cp_linear_cost.sh again if time is left.
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; L=$O/call_ac; mkdir -p "$L"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
el() { echo "($(( $(date +%s) - t0 )) s)"; }
fin() { tar czf "$O/call_ac.tgz" -C "$O" call_ac && rm -rf "$L"; }
make -j16 all > "$L/build.log" 2>&1 || { tail -30 "$L/build.log"; exit 1; }
echo "built $(el)"
timeout 130 ./build/test_gpu --quick > "$L/test_gpu_quick.log" 2>&1
echo "test_gpu --quick: $(tail -1 "$L/test_gpu_quick.log") $(el)"
if grep -qE "^FAIL" "$L/test_gpu_quick.log"; then grep -E "^FAIL" "$L/test_gpu_quick.log" | head -20; fin; exit 1; fi
timeout 60 ./build/gdn_rate --seq 32768 > "$L/gdn_rate_9b.log" 2>&1
timeout 60 ./build/gdn_rate --seq 32768 --hk 16 --hv 48 > "$L/gdn_rate_27b.log" 2>&1
grep tiled "$L"/gdn_rate_*.log; grep -c plain "$L"/gdn_rate_*.log
echo "$(el)"
for S in 8192 32768; do
    for s in stage1 stage4; do
        timeout 100 ./$s --model Qwen3.5-9B --layers 4 --seq $S --steps 3 --profile > "$L/${s}_9b4_$S.log" 2>&1
        echo "$s 9B/4 $S: $(grep -E '^step +3' "$L/${s}_9b4_$S.log" | tail -1 | cut -c1-200)"
        grep -E "error|DOES NOT" "$L/${s}_9b4_$S.log" | head -2
    done
done
echo "$(el)"
timeout 150 python3 bench/peer_qwen35.py --seq 8192 32768 --steps 2 > "$L/peer.jsonl" 2> "$L/peer.err"
python3 -c "import json,sys
for l in open(sys.argv[1]): d=json.loads(l); print('peer', d['seq'], d['step_s'], 's', d['peak_alloc_gib'], 'GiB alloc', d['peak_reserved_gib'], 'reserved')" "$L/peer.jsonl"
echo "$(el)"
left=$(( 560 - ($(date +%s) - t0) ))
if [ $left -gt 150 ]; then
    OUT=$L timeout $left bash bench/cp_linear_cost.sh > "$L/cp_linear_cost.log" 2>&1; cat "$L/cp_linear_cost.log"
else echo "cp_linear_cost: skipped ($left s left)"; fi
echo "all $(el)"
fin
