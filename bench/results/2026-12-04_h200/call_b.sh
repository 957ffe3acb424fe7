#!/usr/bin/env bash
# Device call B (2026-12-04, one H200): behaviour unchanged against the session's starting tree
# (cce3c05, carried as .out/old.tgz): step 1's loss bit for bit on the golden configs and a 0.6B slice
# (tests/same_as_gpu.sh); then the workshop (bench/workshop.sh), which must end within 15 minutes.
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; L=$O/call_b; mkdir -p "$L"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
[ -x ./stage5 ] || make -j16 all > "$L/build.log" 2>&1
mkdir -p /tmp/old && tar xzf .out/old.tgz -C /tmp/old && (cd /tmp/old && make -j16 stage1 stage2 stage3 stage4 stage5) > "$L/old_build.log" 2>&1 ||
    { tail -20 "$L/old_build.log"; exit 1; }
echo "builds $(( $(date +%s) - t0 )) s"
s=$(date +%s); bash tests/same_as_gpu.sh /tmp/old > "$L/same_as.log" 2>&1
echo "same_as_gpu: $(tail -1 "$L/same_as.log") ($(( $(date +%s) - s )) s)"
grep -E "^FAIL" "$L/same_as.log" | head
s=$(date +%s); bash bench/workshop.sh "$L/workshop" > "$L/workshop.log" 2>&1
echo "workshop: $(tail -1 "$L/workshop.log") ($(( $(date +%s) - s )) s)"
tar czf "$O/call_b.tgz" -C "$O" call_b
echo "all $(( $(date +%s) - t0 )) s"
