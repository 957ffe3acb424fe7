#!/usr/bin/env bash
# check_stage's own checks, on the CPU (no trainer, no GPU): a dump written from the reference
# model itself (check_stage refdump) must pass `grads` and `same`, and copies of it with one
# tensor broken (check_stage edit) must fail, each on the check meant to catch it: a gradient
# scaled by a constant (cosine 1: only the norm ratio sees it), a NaN or inf, an all-zero
# gradient, a sign flip, a loss off by 2e-3. Prints "N passed, M failed".
set -u
cd "$(dirname "$0")/.."
pass=0; fail=0
ok() { if eval "$2"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1"; fi; }
cs=./build/check_stage
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# run check_stage into $tmp/out; show its output indented (so its own "N passed" line is not this
# script's). A planted bug's FAIL lines are what this script wants: shown as "caught (planted)", so
# a green run prints no FAIL line at all.
run() { "$cs" "$@" > "$tmp/out" 2>&1; }
show() { sed "s/^FAIL /$1/; s/^/    /" "$tmp/out"; }
# expect_pass DESCRIPTION ARGS...: exit 0 and "0 failed"
expect_pass() {
    local what=$1; shift
    run "$@"; local r=$?
    show "FAIL "
    ok "$what passes" "[ $r -eq 0 ] && grep -qE '^[0-9]+ passed, 0 failed' '$tmp/out'"
}
# expect_fail DESCRIPTION PATTERN ARGS...: non-zero exit, at least one failure counted, and a FAIL
# line matching PATTERN (the check that should catch it, not any check)
expect_fail() {
    local what=$1 pat=$2; shift 2
    run "$@"; local r=$?
    show "caught (planted): "
    ok "$what fails ($pat)" "[ $r -ne 0 ] && grep -qE '^[0-9]+ passed, [1-9][0-9]* failed' '$tmp/out' && grep -E '^FAIL' '$tmp/out' | grep -qE -- '$pat'"
}

for g in tests/golden/*/; do
    g=${g%/}; name=$(basename "$g")
    echo "== $name: the reference's own dump"
    "$cs" refdump "$g" "$tmp/$name.ref" | sed 's/^/    /'
    expect_pass "grads $name on the reference's dump" grads "$g" "$tmp/$name.ref"
done

g=tests/golden/untied_gqa4_s100
ref=$tmp/untied_gqa4_s100.ref
down=model.layers.1.mlp.down_proj.weight
edit() { "$cs" edit "$ref" "$tmp/$1" "$2" "$3" || { fail=$((fail + 1)); echo "FAIL check_stage edit $*"; }; }
edit x2 grad.$down scale=2
edit half grad.$down scale=0.5
edit x1.005 grad.$down scale=1.005
edit neg grad.model.layers.0.self_attn.q_proj.weight scale=-1
edit nan grad.model.layers.0.self_attn.k_proj.weight nan
edit inf grad.model.layers.0.mlp.up_proj.weight inf
edit zero grad.model.norm.weight zero
edit loss2e-3 loss scale=1.002
edit loss5e-4 loss scale=1.0005

echo "== grads: broken copies of the reference's dump"
expect_fail "a gradient x2" "gradient $down: norm ratio" grads "$g" "$tmp/x2"
expect_fail "a gradient x0.5" "gradient $down: norm ratio" grads "$g" "$tmp/half"
expect_pass "a gradient x1.005 (inside the norm-ratio tolerance 1e-2)" grads "$g" "$tmp/x1.005"
expect_fail "a gradient x-1" "q_proj.weight: cosine" grads "$g" "$tmp/neg"
expect_fail "a NaN in a gradient" "k_proj.weight: 1 NaN/inf values in the dump" grads "$g" "$tmp/nan"
expect_fail "an inf in a gradient" "up_proj.weight: 1 NaN/inf values in the dump" grads "$g" "$tmp/inf"
expect_fail "an all-zero gradient" "model.norm.weight: all zeros in the dump" grads "$g" "$tmp/zero"
expect_fail "a loss off by 2e-3" "^FAIL .*: loss .* > 0.001" grads "$g" "$tmp/loss2e-3"
expect_pass "a loss off by 5e-4 (inside the loss tolerance 1e-3)" grads "$g" "$tmp/loss5e-4"

echo "== same: two dumps"
expect_pass "same on one dump twice" same "$ref" "$ref" 0.99999
expect_fail "same with a gradient x2" "grad.$down: norm ratio" same "$ref" "$tmp/x2" 0.99999 1e-2
expect_fail "same with a gradient x2, default norm-ratio tolerance" "grad.$down: norm ratio" same "$ref" "$tmp/x2" 0.99999
expect_pass "same with a gradient x2 when allowed (norm-ratio deviation 1.5)" same "$ref" "$tmp/x2" 0.99999 1e-6 1.5
expect_fail "same with a NaN (in the second dump)" "k_proj.weight: 1 NaN/inf values in the second" same "$ref" "$tmp/nan" 0.99999
expect_fail "same with a NaN (in the first dump)" "k_proj.weight: 1 NaN/inf values in the first" same "$tmp/nan" "$ref" 0.99999
expect_fail "same with an all-zero tensor in the second" "model.norm.weight: all zeros in the second" same "$ref" "$tmp/zero" 0.99999
expect_fail "same with an all-zero tensor in the first" "model.norm.weight: all zeros in the first" same "$tmp/zero" "$ref" 0.99999
expect_pass "same with the tensor zero in both (zero equals zero)" same "$tmp/zero" "$tmp/zero" 0.99999
expect_fail "same with a sign flip" "q_proj.weight: cosine" same "$ref" "$tmp/neg" 0.99999
expect_fail "same with a loss off by 2e-3" "^FAIL .*: loss " same "$ref" "$tmp/loss2e-3" 0.99999 1e-3

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
