#!/usr/bin/env bash
# same_plans.sh OLD_DIR -- every stage's --dry-run plan, as this tree's binaries print it and as
# OLD_DIR's (an older tree, built) print it, for the configurations a refactor must not change: the
# whole plan table and the lines after it, byte for byte. For refactors that claim "plans identical"
# (no GPU needed). Prints "N passed, M failed".
set -u
cd "$(dirname "$0")/.."
old=${1:?usage: tests/same_plans.sh OLD_TREE}
pass=0; fail=0
ok() { if eval "$2"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1"; fi; }
# the plan and its reports, without the lines that name the machine or the options' spelling
plan() { "$@" --dry-run 2>&1 | grep -v '^planned for' ; }
CONFIGS=(
  "--model 0.6B --seq 131072"
  "--model 0.6B --seq 131072 --keep-attn all"
  "--model 8B --seq 65536 --gpus 8"
  "--model 32B --seq 1M --gpus 8 --gpu-gib 74.5"
  "--model 32B --seq 1M --gpus 8 --gpu-gib 74.5 --host-gib 2048 --keep-attn none"
  "--model 32B --seq 1M --gpus 8 --nnodes 2 --rehearse 0 --layers 2 --gpu-gib 80"
  "--model tests/golden/untied_gqa4_s100 --seq 100 --local-ranks 2"
)
for n in 1 2 3 4 5; do
    for c in "${CONFIGS[@]}"; do
        args=$c
        if [ $n -eq 1 ]; then args=$(sed -E 's/--gpus [0-9]+|--local-ranks [0-9]+|--nnodes [0-9]+|--rehearse [0-9]+|--host-gib [0-9]+//g' <<< "$c"); fi
        [ $n -le 3 ] && args=$(sed 's/--host-gib [0-9]*//' <<< "$args")
        a=$(plan ./stage$n $args); b=$(cd "$old" && plan ./stage$n $args)
        ok "stage$n $args: the same plan" "[ -n \"\$a\" ] && [ \"\$a\" = \"\$b\" ]" || diff <(echo "$b") <(echo "$a") | head -6
    done
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
