#!/usr/bin/env bash
# Device call D (2026-12-04, one H200): the tree as it lands (the packed-document probe of call C
# taken out): kernels, GEMMs and attention (build/test_gpu --quick); --yarn-factor alone in every
# stage against a config that says YaRN (tests/yarn_gpu.sh: losses bit for bit, gradients by cosine).
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; L=$O/call_d; mkdir -p "$L"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
{ time make -j16 all; } > "$L/build.log" 2>&1 || { tail -30 "$L/build.log"; exit 1; }
for t in "./build/test_gpu --quick" "bash tests/yarn_gpu.sh"; do
    s=$(date +%s); f=$L/$(basename "${t##* }" .sh).log
    [ "$t" = "./build/test_gpu --quick" ] && f=$L/test_gpu.log
    $t > "$f" 2>&1
    echo "$t: $(tail -1 "$f") ($(( $(date +%s) - s )) s)"
    grep -E "^FAIL" "$f" | head
done
tar czf "$O/call_d.tgz" -C "$O" call_d
echo "all $(( $(date +%s) - t0 )) s"
