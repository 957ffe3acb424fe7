#!/usr/bin/env bash
# What a new user meets at the front door on a machine without a GPU: `make test-gpu` (and
# tests/run_gpu.sh alone) refuses at once with one line saying why. Prints "N passed, M failed".
# With a GPU device node present (/dev/nvidia0) the GPU cases are left out: there they would run
# the GPU suite.
set -u
cd "$(dirname "$0")/.."
pass=0; fail=0
ok() { if eval "$2"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1"; fi; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the last line of "$@"'s output (stdout and stderr), its exit status and seconds; LIMIT s at most
LIMIT=${LIMIT:-120}
run() {
    local t0; t0=$(date +%s)
    timeout "$LIMIT" "$@" > "$tmp/out" 2>&1; rc=$?
    secs=$(( $(date +%s) - t0 ))
    last=$(tail -1 "$tmp/out")
    sed 's/^/  | /' "$tmp/out" | tail -4
}

if ls /dev/nvidia[0-9]* > /dev/null 2>&1; then
    echo "a GPU device node is here: make test-gpu, the workshop and the SFT demo are not run"
else
    echo "== make test-gpu with no usable GPU"
    run make --no-print-directory test-gpu
    ok "make test-gpu exits non-zero (got $rc)" "[ $rc -ne 0 ] && [ $rc -ne 124 ]"
    ok "make test-gpu refuses within 20 s (took $secs s)" "[ $secs -le 20 ]"
    ok "make test-gpu says why in one line" \
        "grep -qE '^make test-gpu: no usable GPU: [^ ].* -- it runs on an H100/H200; \`make test\` is the CPU suite\$' '$tmp/out'"
    ok "make test-gpu runs no test" "! grep -qE '^(== |FAIL |[0-9]+ passed)' '$tmp/out'"

    echo "== tests/run_gpu.sh alone with no usable GPU"
    run bash tests/run_gpu.sh
    ok "tests/run_gpu.sh exits non-zero (got $rc)" "[ $rc -ne 0 ] && [ $rc -ne 124 ]"
    ok "tests/run_gpu.sh says why in its one line (got: $last)" \
        "[ \$(wc -l < '$tmp/out') -eq 1 ] && grep -qE '^tests/run_gpu.sh: no usable GPU: [^ ].* -- it runs on an H100/H200' '$tmp/out'"

fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
