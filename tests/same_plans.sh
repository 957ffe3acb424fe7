#!/usr/bin/env bash
# same_plans.sh OLD_DIR -- every stage's --dry-run plan, as this tree's binaries print it and as
# OLD_DIR's (an older tree, built) print it, for the configurations a refactor must not change: the
# whole plan table and the lines after it, byte for byte. For refactors that claim "plans identical"
# (no GPU needed). Prints "N passed, M failed".
set -u
cd "$(dirname "$0")/.."
old=${1:?usage: tests/same_plans.sh OLD_TREE}
pass=0; fail=0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# token files the plans' runs could read: 8 windows of 1M (stage 2's data parallelism), the golden config's own
./build/check_stage random 151936 16800000 1 "$tmp/rand.tok" > /dev/null # 16 windows of 1M
G=tests/golden/untied_gqa4_s100
S=$(./build/check_stage tokens "$G" "$tmp/g1.tok")
./build/check_stage random "$(python3 -c "import json; print(json.load(open('$G/config.json'))['vocab_size'])")" 1000 1 "$tmp/g.tok" > /dev/null
ok() { if eval "$2"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1"; fi; }
# the plan and its reports, without the lines that name the machine or the options' spelling
plan() { "$@" --dry-run 2>&1 | grep -v '^planned for' ; }
CONFIGS=(
  "--model 0.6B --seq 131072"
  "--model 0.6B --seq 131072 --keep-attn all"
  "--model 8B --seq 65536 --gpus 8"
  "--model 32B --seq 1M --gpus 8 --gpu-gib 74.5 --data $tmp/rand.tok"
  "--model 32B --seq 1M --gpus 8 --gpu-gib 74.5 --host-gib 2048 --keep-attn none --data $tmp/rand.tok"
  "--model 32B --seq 1M --gpus 8 --nnodes 2 --rehearse 0 --layers 2 --gpu-gib 80 --data $tmp/rand.tok"
  "--model $G --seq $S --local-ranks 2 --data $tmp/g.tok"
)
for n in 1 2 3 4 5; do
    for c in "${CONFIGS[@]}"; do
        args=$c
        if [ $n -eq 1 ]; then args=$(sed -E 's/--gpus [0-9]+|--local-ranks [0-9]+|--nnodes [0-9]+|--rehearse [0-9]+|--host-gib [0-9]+//g' <<< "$c"); fi
        [ $n -le 3 ] && args=$(sed 's/--host-gib [0-9]*//' <<< "$args")
        a=$(plan ./stage$n $args); b=$(cd "$old" && plan ./stage$n $args)
        ok "stage$n $args: the same plan" "grep -q 'total (peak)' <<< \"\$a\" && [ \"\$a\" = \"\$b\" ]" || diff <(echo "$b") <(echo "$a") | head -6
    done
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
