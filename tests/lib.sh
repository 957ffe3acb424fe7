# lib.sh -- what the GPU test scripts share (sourced by tests/run_gpu.sh and tests/stage5_gpu.sh):
# the running pass/fail counts, a check, adding a sub-test's "N passed, M failed" line; and a
# refusal, at once and in one line, where no GPU is usable.
pass=0; fail=0
# count FILE WHAT: add FILE's last "N passed, M failed" line; no such line is one failure
count() {
    local line; line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -1)
    if [ -z "$line" ]; then fail=$((fail + 1)); echo "FAIL $2 (no result line)"; return; fi
    pass=$((pass + $(echo "$line" | cut -d' ' -f1))); fail=$((fail + $(echo "$line" | cut -d' ' -f3)))
}
# ok WHAT CONDITION: one check (CONDITION is eval'd); returns 1 when it fails
ok() { if eval "$2"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1"; return 1; fi; }
# need_gpu WHO: stop (exit 1) with one line saying why, unless build/gpu_probe finds a usable GPU
need_gpu() {
    local why
    [ -x build/gpu_probe ] || { echo "$1: build/gpu_probe is not built: make all" >&2; exit 1; }
    why=$(./build/gpu_probe 2>&1) && return 0
    echo "$1: no usable GPU: ${why:-build/gpu_probe said nothing}" '-- it runs on an H100/H200; `make test` is the CPU suite' >&2
    exit 1
}
