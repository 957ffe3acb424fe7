# lib.sh -- what the GPU test scripts share (sourced by tests/run_gpu.sh and tests/stage5_gpu.sh):
# the running pass/fail counts, a check, adding a sub-test's "N passed, M failed" line.
pass=0; fail=0
# count FILE WHAT: add FILE's last "N passed, M failed" line; no such line is one failure
count() {
    local line; line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -1)
    if [ -z "$line" ]; then fail=$((fail + 1)); echo "FAIL $2 (no result line)"; return; fi
    pass=$((pass + $(echo "$line" | cut -d' ' -f1))); fail=$((fail + $(echo "$line" | cut -d' ' -f3)))
}
# ok WHAT CONDITION: one check (CONDITION is eval'd); returns 1 when it fails
ok() { if eval "$2"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1"; return 1; fi; }
