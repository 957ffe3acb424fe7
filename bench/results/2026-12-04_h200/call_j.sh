#!/usr/bin/env bash
# Device call J (2026-12-04, session 8, one H200): padded plans bucketed to powers of two (from
# 1024) instead of the ring call's extent. The tests again (build/test_gpu --quick,
# tests/packing_gpu.sh); the 32K window of call I: bench/docs_attn (0.6B's heads, P = 1) and stage 1
# 0.6B --packing against unpacked (--profile); Qwen3-8B packed at 1M rehearsed as rank 5 again.
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; L=$O/call_j; mkdir -p "$L"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
make -j16 all > "$L/build.log" 2>&1 || { tail -30 "$L/build.log"; exit 1; }
s=$(date +%s); timeout 120 ./build/test_gpu --quick > "$L/test_gpu.log" 2>&1
echo "test_gpu --quick: $(tail -1 "$L/test_gpu.log") ($(( $(date +%s) - s )) s)"; grep -E "^FAIL" "$L/test_gpu.log" | head -5
s=$(date +%s); CASE_TIMEOUT=120 timeout 240 bash tests/packing_gpu.sh > "$L/packing_gpu.log" 2>&1
echo "packing_gpu: $(tail -1 "$L/packing_gpu.log") ($(( $(date +%s) - s )) s)"; grep -E "^FAIL" "$L/packing_gpu.log" | head -5
python3 bench/packed_window.py /tmp/w32k.tok --tokens 32769 --seq 32768 --min 512 --max 8192 --seed 2 > /dev/null
./build/docs_attn 32768 1 16 8 128 2 /tmp/w32k.tok > "$L/docs_attn_32k.log" 2>&1; tail -2 "$L/docs_attn_32k.log"
for p in "--packing" ""; do
    ./stage1 --seq 32768 --data /tmp/w32k.tok $p --steps 3 --profile > "$L/s1_32k${p:+_packed}.log" 2>&1
    echo "stage1 0.6B 32K ${p:-unpacked}: $(grep -E '^step +3' "$L/s1_32k${p:+_packed}.log" | cut -c1-120)"; grep -A1 -E '^step +3' "$L/s1_32k${p:+_packed}.log" | tail -1
done
python3 bench/packed_window.py /tmp/w1m.tok > /dev/null
timeout 120 ./stage5 --seq 1M --gpus 8 --rehearse 5 --data /tmp/w1m.tok --steps 3 --model 8B --layers 2 --packing > "$L/8B_packed.log" 2>&1
echo "8B packed rank 5: $(grep -E '^step +3' "$L/8B_packed.log" | cut -c1-120)"
tar czf "$O/call_j.tgz" -C "$O" call_j
echo "all $(( $(date +%s) - t0 )) s"
