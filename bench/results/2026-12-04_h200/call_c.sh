#!/usr/bin/env bash
# Device call C (2026-12-04, one H200), after the review mends: build; kernels, GEMMs and attention
# with the new packed-document mask cases (build/test_gpu --quick); the communicator (comm_min_i64
# keeps its buffer now); preemption on 2 local ranks again;
# --yarn-factor alone in every stage against a config that says YaRN (tests/yarn_gpu.sh).
# Logs under $OUT, tarred into $OUT/call_c.tgz.
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; L=$O/call_c; mkdir -p "$L"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
{ time make -j16 all; } > "$L/build.log" 2>&1 || { tail -30 "$L/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
s=$(date +%s); ./build/test_gpu --quick > "$L/test_gpu.log" 2>&1
echo "test_gpu --quick: $(tail -1 "$L/test_gpu.log") ($(( $(date +%s) - s )) s)"
grep -E "docs|informational|^FAIL" "$L/test_gpu.log"
s=$(date +%s); timeout 300 ./build/test_comm > "$L/test_comm.log" 2>&1
echo "test_comm: $(tail -1 "$L/test_comm.log") ($(( $(date +%s) - s )) s)"
for t in yarn_gpu preempt_gpu; do
    s=$(date +%s); bash tests/$t.sh > "$L/$t.log" 2>&1
    echo "$t: $(tail -1 "$L/$t.log") ($(( $(date +%s) - s )) s)"
    grep -E "^FAIL" "$L/$t.log" | head
done
tar czf "$O/call_c.tgz" -C "$O" call_c
echo "all $(( $(date +%s) - t0 )) s"
