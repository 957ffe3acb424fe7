#!/usr/bin/env bash
# gdn_chunked_device.sh -- one call on the GPU machine (an H200; nvcc 13, torch 2.11, no network) that
# builds, tests and times the chunked gated delta rule (kernels/gdn_chunked.cu) against the tiled
# token-by-token kernels and against flash-linear-attention, in under 10 minutes:
#
#   bash bench/gdn_chunked_device.sh             # from the repository root, with .wheels/ beside it
#
# .wheels/ holds the pure-python wheels of fla-core and einops (`pip download fla-core einops --no-deps
# -d .wheels` on a machine with PyPI); it is git-ignored, so a device call must carry it. Logs go to
# $OUT (the device call's folder; /tmp/gdn_chunked_out without one), then into $OUT/gdn_chunked_logs.tgz.
# Steps (each bounded by what is left of BUDGET seconds, default 570, and by its own limit; a failed
# step does not stop the next, and each says so in steps.log):
#   1. the GPU and the toolchain (machine.txt)
#   2. make -j all (build.log); the chunked kernels' registers and shared memory (resources.txt)
#   3. build/test_gdn_chunked, exact and fast precision, beside the tiled kernels (test_gdn_chunked.log)
#   4. build/gdn_rate --rule chunked, then --rule tiled, at Qwen3.5-9B's shape (16 key heads, 32 value
#      heads, 128 x 128), 8K to 128K tokens (gdn_rate_{chunked,tiled}_9b.log)
#   5. bench/peer_gdn.py: FLA's chunk_gated_delta_rule at 9B's and 27B's shapes (peer_gdn.jsonl), after
#      its --device cpu check (peer_gdn_cpu.jsonl)
#   6. the same gdn_rate at 27B's shape (16, 48); then at 32K each chunked kernel timed on its own
#      (gdn_rate_profile.log), and with the sequential passes at 16 state rows a CTA
#      (GDN_CHUNKED_ROWS=16, gdn_rate_profile_rows16.log)
#   7. the tar
# SEQS (default 8192,16384,32768,65536,131072) and BUDGET can be set.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gdn_chunked_out}
mkdir -p "$OUT"
T0=$(date +%s)
BUDGET=${BUDGET:-570}
SEQS=${SEQS:-8192,16384,32768,65536,131072}
left() { echo $((BUDGET - ($(date +%s) - T0))); }
step() { echo "== $* (at $(($(date +%s) - T0)) s, $(left) s left)" | tee -a "$OUT/steps.log"; }
# run LOG MAXSECONDS CMD...: CMD with its output in $OUT/LOG, bounded by MAXSECONDS and the time left
run() {
    local log=$1 max=$2; shift 2
    local t; t=$(left); [ "$t" -gt "$max" ] && t=$max
    if [ "$t" -lt 10 ]; then echo "   skipped (no time left): $*" | tee -a "$OUT/steps.log"; return 1; fi
    timeout "$t" "$@" >> "$OUT/$log" 2>&1
    local rc=$?
    echo "   rc $rc after $(($(date +%s) - T0)) s: $* > $log" | tee -a "$OUT/steps.log"
    return $rc
}

step "1. the GPU"
{ nvidia-smi; nvcc --version; git log --oneline -3; } > "$OUT/machine.txt" 2>&1

step "2. make -j all"
run build.log 240 make -j"$(nproc)" all
grep -E "error|warning" "$OUT/build.log" | head -20 >> "$OUT/steps.log"
CUDA_BIN=$(dirname "${NVCC:-/usr/local/cuda/bin/nvcc}")
if [ -x "$CUDA_BIN/cuobjdump" ]; then run resources.txt 30 "$CUDA_BIN/cuobjdump" --dump-resource-usage build/kernels/gdn_chunked.o
else run resources.txt 90 "$CUDA_BIN/nvcc" -O3 -arch=sm_90 -std=c++17 --resource-usage -I"$CUDA_BIN/../include" -c -o /tmp/gdn_ru.o kernels/gdn_chunked.cu; fi
grep -E "gdn_ck|REG|SHARED" "$OUT/resources.txt" | head -60 >> "$OUT/steps.log"

step "3. build/test_gdn_chunked (the fp64 recurrence; the tiled kernels)"
export GDN_CHUNKED_FAST=1
run test_gdn_chunked.log 120 ./build/test_gdn_chunked
unset GDN_CHUNKED_FAST
tail -3 "$OUT/test_gdn_chunked.log" | tee -a "$OUT/steps.log"

# rate NAME HV RULE: build/gdn_rate at 16 key heads and HV value heads
rate() { run "gdn_rate_$3_$1.log" "$4" ./build/gdn_rate --rule "$3" --seq "$SEQS" --hk 16 --hv "$2"; }
step "4. gdn_rate at Qwen3.5-9B's shape: chunked, then tiled"
rate 9b 32 chunked 75
rate 9b 32 tiled 45

step "5. bench/peer_gdn.py: flash-linear-attention at 9B's and 27B's shapes"
PY=${PY:-/opt/torch/.venv/bin/python}
[ -x "$PY" ] || PY=python3
PYLIB=/tmp/gdn_chunked_pylib
rm -rf "$PYLIB"; mkdir -p "$PYLIB"
"$PY" - "$PYLIB" .wheels/*.whl > "$OUT/wheels.txt" 2>&1 <<'PYEOF'
import sys, zipfile   # pure-python wheels: unpacked where PYTHONPATH finds them (no pip, no network)
for w in sys.argv[2:]:
    zipfile.ZipFile(w).extractall(sys.argv[1]); print("unpacked", w)
PYEOF
cat "$OUT/wheels.txt" >> "$OUT/steps.log"
export PYTHONPATH="$PYLIB${PYTHONPATH:+:$PYTHONPATH}"
run peer_gdn_cpu.jsonl 60 "$PY" bench/peer_gdn.py --device cpu
run peer_gdn.jsonl 180 "$PY" bench/peer_gdn.py --hk 16 --hv 32 48 --seq $(echo "$SEQS" | tr , ' ')
grep '"S": 32768' "$OUT/peer_gdn.jsonl" | tee -a "$OUT/steps.log"

step "6. gdn_rate at Qwen3.5-27B's shape; the chunked kernels one by one at 32K"
rate 27b 48 chunked 75
rate 27b 48 tiled 45
grep -h "32768" "$OUT"/gdn_rate_*.log | tee -a "$OUT/steps.log"
export GDN_CHUNKED_PROFILE=1 # where the chunked rule's time goes, kernel by kernel
run gdn_rate_profile.log 40 ./build/gdn_rate --rule chunked --seq 32768 --hk 16 --hv 32 --iters 1
export GDN_CHUNKED_ROWS=16 # the sequential passes with 16 state rows a CTA (twice the CTAs): the knob to try
run gdn_rate_profile_rows16.log 40 ./build/gdn_rate --rule chunked --seq 32768 --hk 16 --hv 32 --iters 3
unset GDN_CHUNKED_PROFILE GDN_CHUNKED_ROWS
grep -h "profile\|forward\|backward " "$OUT"/gdn_rate_profile*.log | tee -a "$OUT/steps.log"

step "7. the logs"
tar czf "$OUT/gdn_chunked_logs.tgz" -C "$OUT" --exclude gdn_chunked_logs.tgz . 2>/dev/null
echo "done in $(($(date +%s) - T0)) s" | tee -a "$OUT/steps.log"
