#!/usr/bin/env bash
# Device call I (2026-12-04, session 8, one H200): what packing saves. A 1M window of documents
# of log-uniform lengths in [1K, 256K] (bench/packed_window.py, seed 1: 23 documents, mean 45,590
# tokens; 9.9% of the unpacked attention pairs), Qwen3-8B (2 layers) and Qwen3-32B (1 layer) in
# stage 5, rehearsed as rank 5 of 8 (the rank with the most pairs: build/docs_attn ... pairs; a
# step waits for it), packed and the same tokens unpacked, 3 steps each (step 3 reported). Then
# the PyTorch peer on a packed 32K window (documents of 512-8K tokens) with flex attention, and
# stage 1 --packing on the same window, 0.6B.
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; L=$O/call_i; mkdir -p "$L"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
[ -x ./stage5 ] || make -j16 all > "$L/build.log" 2>&1
python3 bench/packed_window.py /tmp/w1m.tok | tee "$L/window.txt"
./build/docs_attn 1048576 8 8 1 128 1 /tmp/w1m.tok pairs | tee -a "$L/window.txt"
R=$(grep -o 'busiest rank: [0-9]*' "$L/window.txt" | awk '{print $3}')
run() { # tag, args...
    local tag=$1; shift
    s=$(date +%s)
    timeout 200 ./stage5 --seq 1M --gpus 8 --rehearse "$R" --data /tmp/w1m.tok --steps 3 --log "$L/$tag.jsonl" "$@" > "$L/$tag.log" 2>&1
    echo "$tag (rc $?, $(( $(date +%s) - s )) s): $(grep -E '^step +3 ' "$L/$tag.log" | cut -c1-230)"
}
run 8B_packed --model 8B --layers 2 --packing
run 8B_unpacked --model 8B --layers 2
run 32B_packed --model 32B --layers 1 --packing
run 32B_unpacked --model 32B --layers 1
python3 bench/packed_window.py /tmp/w32k.tok --tokens 32769 --seq 32768 --min 512 --max 8192 --seed 2 | tee -a "$L/window.txt"
s=$(date +%s); timeout 240 python3 bench/peer_packed.py --peer .out/peer_torch.py --data /tmp/w32k.tok --model 0.6B --seq 32768 \
    --attn flex_attention --steps 2 > "$L/peer_packed.jsonl" 2> "$L/peer_err.txt"
echo "peer packed ($(( $(date +%s) - s )) s): $(cat "$L/peer_packed.jsonl")"; tail -3 "$L/peer_err.txt"
./stage1 --seq 32768 --data /tmp/w32k.tok --packing --steps 3 --log "$L/s1_32k_packed.jsonl" > "$L/s1_32k_packed.log" 2>&1
echo "stage1 0.6B 32K packed: $(grep -E '^step +3 ' "$L/s1_32k_packed.log" | cut -c1-200)"
tar czf "$O/call_i.tgz" -C "$O" call_i
echo "all $(( $(date +%s) - t0 )) s"
