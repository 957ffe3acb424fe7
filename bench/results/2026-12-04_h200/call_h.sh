#!/usr/bin/env bash
# Device call H (2026-12-04, session 8, one H200): --packing in every stage, the tests again after
# the mends of call G (stage 5's slice names its model; the boundary plant builds), and behaviour
# unchanged where the ring now runs through the block functions: tests/same_as_gpu.sh against the
# session's starting tree (e5f9b5f, carried as .out/old.tgz) for stages 3-5 (ONLY=stage[345]).
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; L=$O/call_h; mkdir -p "$L"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
{ time make -j16 all; } > "$L/build.log" 2>&1 || { tail -30 "$L/build.log"; exit 1; }
mkdir -p /tmp/old && tar xzf .out/old.tgz -C /tmp/old && (cd /tmp/old && make -j16 stage3 stage4 stage5) > "$L/old_build.log" 2>&1 ||
    { tail -20 "$L/old_build.log"; exit 1; }
echo "builds $(( $(date +%s) - t0 )) s"
s=$(date +%s); CASE_TIMEOUT=120 timeout 330 bash tests/packing_gpu.sh > "$L/packing_gpu.log" 2>&1
echo "packing_gpu: $(tail -1 "$L/packing_gpu.log") ($(( $(date +%s) - s )) s)"
grep -E "^FAIL|^==|^  " "$L/packing_gpu.log" | head -60
s=$(date +%s); ONLY='stage[345]' CASE_TIMEOUT=120 timeout 200 bash tests/same_as_gpu.sh /tmp/old > "$L/same_as.log" 2>&1
echo "same_as_gpu (stages 3-5): $(tail -1 "$L/same_as.log") ($(( $(date +%s) - s )) s)"
grep -E "^FAIL" "$L/same_as.log" | head
tar czf "$O/call_h.tgz" -C "$O" call_h
echo "all $(( $(date +%s) - t0 )) s"
