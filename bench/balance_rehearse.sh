#!/usr/bin/env bash
# The balanced layout against the zigzag, measured: every rank of an 8-GPU job rehearsed alone on this
# GPU (--gpus 8 --rehearse R, R = 0..7), stage 5, Qwen3-8B cut to 2 layers, --seq 1M, --packing, in both
# layouts (--layout zigzag, the old one; --layout balanced, the default), on two 1M windows of
# bench/packed_window.py:
#   long:  seed 1, documents of 1K-256K tokens (23 in the window; zigzag's busiest rank 1.79x the mean
#          rank's pairs, balanced 1.02x, 8 documents split: docs/packed_balance.md, sections 1 and 8)
#   short: --min 256 --max 16384 --seed 1 (249 documents; 1.09x on the zigzag, which the balanced layout
#          takes for this window: any split costs more in blocks than it evens)
# One line a rank: its step time (step 2; step 1 builds the cuDNN plans), its attention pairs (the
# plan's line for that rank), the attention TFLOP its step reports and its ring blocks' times (one
# layer, forward and backward, measured). Then per window and layout: the busiest rank's step time
# over the mean, against the pairs' balance. A job's step waits for its slowest rank (the ring passes
# K/V at every hop), so the busiest rank's time is the job's step.
#   bash bench/balance_rehearse.sh [long] [short]   (both by default; BIN=PATH: another stage 5 build)
# Estimated on an H200: 32 runs of 12-18 s (start-up and plans, two steps of 3-5 s): 6-9 minutes;
# one window alone, 3-5 minutes. Writes $OUT (default bench_out/balance): each run's output,
# <window>_<layout>_r<R>.txt, and summary.txt.
set -u
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} # as bench/rehearse.sh: the plans count NCCL's buffers without NVLS
O=${OUT:-bench_out/balance}; mkdir -p "$O"
[ -x "${BIN:-./stage5}" ] || { echo "balance_rehearse.sh: ./stage5 is not built (make stage5)"; exit 1; }
[ -s "$O/long.tok" ] || python3 bench/packed_window.py "$O/long.tok" > "$O/long.mix"
[ -s "$O/short.tok" ] || python3 bench/packed_window.py "$O/short.tok" --min 256 --max 16384 --seed 1 > "$O/short.mix"
S="$O/summary.txt"; : > "$S"
say() { echo "$*" | tee -a "$S"; }
for w in ${*:-long short}; do
    say "== $w window: $(cat "$O/$w.mix" 2>/dev/null)"
    for lay in zigzag balanced; do
        rows=
        for R in 0 1 2 3 4 5 6 7; do
            f="$O/${w}_${lay}_r$R.txt"
            timeout 180 ${BIN:-./stage5} --model 8B --layers 2 --seq 1M --gpus 8 --rehearse $R --data "$O/$w.tok" --packing \
                --layout $lay --steps 2 > "$f" 2>&1 || echo "  (rank $R: exit $?; $(tail -1 "$f" | cut -c1-160))"
            line=$(grep -E '^step +2 ' "$f" | head -1)
            t=$(sed -nE 's/.*\| ([0-9.]+) s \|.*/\1/p' <<< "$line")
            pairs=$(grep -E "^rank $R: " "$f" | head -1 | awk '{print $5}')
            att=$(grep -oE 'attention [0-9.e+]+ of' <<< "$line" | awk '{print $2}')
            ring=$(awk '/^step +2 /{s=1} s && /ring (forward|backward)/ {match($0, /blocks of [0-9.]+-[0-9.]+ ms/); d = $2; sub(",", "", d); printf "%s %s; ", d, substr($0, RSTART + 10, RLENGTH - 10)}' "$f")
            say "$w $lay rank $R: step ${t:-?} s | pairs ${pairs:-?} | attention ${att:-?} TFLOP | ring ${ring:-?}"
            rows="$rows${t:-0} ${pairs:-0}"$'\n'
        done
        say "$w $lay: $(grep -m1 '^balance:' "$O/${w}_${lay}_r0.txt")"
        awk -v w="$w" -v lay="$lay" 'NF == 2 { n++; t += $1; p += $2; if ($1 > tm) { tm = $1; r = n - 1 } if ($2 > pm) pm = $2 }
            END { if (n && t > 0) printf "%s %s: busiest rank %d at %.3f s, mean %.3f s: %.3fx the mean step time (pairs: %.3fx)\n",
                  w, lay, r, tm, t / n, tm * n / t, pm * n / p }' <<< "$rows" | tee -a "$S"
    done
    say "$w balanced: $(grep -m1 '^split:' "$O/${w}_balanced_r0.txt")"
    awk -v w="$w" '$1 == w && $3 == "busiest" { k = $2; sub(":", "", k); m[k] = $7 } END { if (m["zigzag"] && m["balanced"])
        printf "%s: the job'"'"'s step (its busiest rank) %.3f s zigzag, %.3f s balanced: %.1f%% less\n", w, m["zigzag"],
               m["balanced"], 100 * (1 - m["balanced"] / m["zigzag"]) }' "$S" | tee -a "$S"
done
# the same tokens unpacked: one causal sequence of 1M, every rank the same work (rank 0)
f="$O/unpacked_r0.txt"
timeout 240 ${BIN:-./stage5} --model 8B --layers 2 --seq 1M --gpus 8 --rehearse 0 --data "$O/long.tok" --steps 2 > "$f" 2>&1 ||
    echo "  (unpacked: exit $?; $(tail -1 "$f" | cut -c1-160))"
tu=$(grep -E '^step +2 ' "$f" | sed -nE 's/.*\| ([0-9.]+) s \|.*/\1/p')
model=$(grep -oE '\(([0-9.e+]+) model TFLOP per rank' "$f" | head -1 | tr -d '(' | awk '{print $1}')
say "unpacked rank 0: step ${tu:-?} s, ${model:-?} model TFLOP a rank a step"
for w in ${*:-long short}; do
    for lay in zigzag balanced; do
        # the busiest rank: its step time and its attention TFLOP (of the unpacked attention's)
        best=$(for R in 0 1 2 3 4 5 6 7; do grep -E '^step +2 ' "$O/${w}_${lay}_r$R.txt" | head -1 |
            sed -nE 's/.*\| ([0-9.]+) s \|.*attention ([0-9.e+]+) of ([0-9.e+]+) TFLOP.*/\1 \2 \3/p'; done | sort -g | tail -1)
        awk -v w="$w" -v lay="$lay" -v tu="${tu:-0}" -v m="${model:-0}" -v b="$best" 'BEGIN { split(b, x, " ");
            if (tu > 0 && m > 0 && x[1] > 0) { fs = (x[3] - x[2]) / m; ts = (tu - x[1]) / tu;
            printf "%s %s: busiest rank %.3f s against %.3f s unpacked: time saved %.1f%%, FLOPs saved %.1f%% (attention %s of %s TFLOP): %.2f of the FLOPs saved\n",
                w, lay, x[1], tu, 100 * ts, 100 * fs, x[2], x[3], ts / fs } }' | tee -a "$S"
    done
done
