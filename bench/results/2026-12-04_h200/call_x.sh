#!/usr/bin/env bash
# Device call X (2026-12-04, session 10, one H200; the session's last ~3 minutes of device time):
# run_gpu.sh's last sections, which calls V and W did not reach (memory plans against the measured,
# rehearsed traces against local ranks, the failure drills, transformers loading a save), with every
# separate suite left out (they ran in calls U-W).
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; L=$O/call_x; mkdir -p "$L"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
make -j16 all > "$L/build.log" 2>&1 || { tail -30 "$L/build.log"; exit 1; }
LATE_ONLY=1 SKIP_STAGE5=1 SKIP_KEEP=1 SKIP_LONG=1 SKIP_MASK=1 SKIP_HYBRID=1 SKIP_MOE=1 SKIP_PACKING=1 SKIP_PREEMPT=1 \
    SKIP_KILL=1 QUICK=2 CASE_TIMEOUT=60 timeout 170 bash tests/run_gpu.sh > "$L/run_gpu_last.log" 2>&1
echo "run_gpu last sections: $(tail -1 "$L/run_gpu_last.log") ($(( $(date +%s) - t0 )) s)"
grep -E "^FAIL|^== " "$L/run_gpu_last.log" | head -30
tar czf "$O/call_x.tgz" -C "$O" call_x && rm -rf "$L"
