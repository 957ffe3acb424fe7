#!/usr/bin/env bash
# Preemption (on an H100/H200): a run with --save that receives SIGTERM or SIGUSR1 -- what SLURM
# sends before a time limit or a preemption -- finishes the step in flight, saves it, says so and
# exits 0; --resume continues from that save. Stage 1 (one rank), stage 3 and stage 5 at 2 local
# ranks (the ranks agree on the step through a collective). A run without --save keeps the signals'
# default: SIGTERM ends it at once. Prints "N passed, M failed". PREEMPT_TMP: where the runs go.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
tmp=${PREEMPT_TMP:-$(mktemp -d)}
mkdir -p "$tmp"
g=tests/golden/untied_gqa4_s100
./build/check_stage random 320 200000 7 "$tmp/rand.tok" > /dev/null
last_step() { grep -o '"step":[0-9]*,"loss"' "$1" 2>/dev/null | tail -1 | grep -o '[0-9]*'; }

# case NAME SIGNAL STAGE ARGS...: start a long run, signal it after its third step, check the stop
case_() {
    local name=$1 sig=$2 bin=$3; shift 3
    local A="./$bin --model $g --data $tmp/rand.tok --seq 1000 --lr 1e-3 --warmup 0 --schedule constant $*"
    echo "== $name: $bin $*, $sig after step 3"
    rm -rf "$tmp/$name"; mkdir -p "$tmp/$name"
    $A --steps 100000 --save "$tmp/$name/ck" --log "$tmp/$name/a.jsonl" > "$tmp/$name/a.log" 2>&1 &
    local pid=$! i
    for i in $(seq 1 1500); do
        [ "$(last_step "$tmp/$name/a.jsonl")" -ge 3 ] 2>/dev/null && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.02
    done
    kill -s "$sig" $pid
    wait $pid; local rc=$?
    local n; n=$(last_step "$tmp/$name/a.jsonl")
    tail -2 "$tmp/$name/a.log" | sed 's/^/  /'
    ok "$name: exits 0 after $sig (exit $rc)" "[ $rc -eq 0 ]"
    ok "$name: says it stopped after step $n, saved, and how to go on" \
        "grep -q '^stopping after step $n on $sig (a time limit or a preemption): saved to $tmp/$name/ck/step-$n; --resume $tmp/$name/ck continues' '$tmp/$name/a.log'"
    ok "$name: latest is step-$n, complete" \
        "[ \"\$(readlink '$tmp/$name/ck/latest')\" = step-$n ] && [ -s '$tmp/$name/ck/step-$n/trainer_state.safetensors' ] && ! ls -d '$tmp/$name/ck/'*.partial > /dev/null 2>&1"
    $A --steps $((n + 2)) --resume "$tmp/$name/ck" --log "$tmp/$name/b.jsonl" > "$tmp/$name/b.log" 2>&1
    ok "$name: --resume continues after step $n to step $((n + 2))" \
        "[ $? -eq 0 ] && grep -q 'resumed from $tmp/$name/ck/step-$n after step $n' '$tmp/$name/b.log' && [ \"\$(last_step '$tmp/$name/b.jsonl')\" = $((n + 2)) ]"
}
case_ s1_term SIGTERM stage1
case_ s3_term SIGTERM stage3 --local-ranks 2
case_ s5_usr1 SIGUSR1 stage5 --local-ranks 2

echo "== without --save, SIGTERM keeps its default: the run ends at once"
./stage1 --model $g --data "$tmp/rand.tok" --seq 1000 --steps 100000 --log "$tmp/n.jsonl" > "$tmp/n.log" 2>&1 &
pid=$!
for i in $(seq 1 1500); do [ "$(last_step "$tmp/n.jsonl")" -ge 2 ] 2>/dev/null && break; sleep 0.02; done
kill -TERM $pid; wait $pid; rc=$?
ok "a run without --save dies of SIGTERM (exit $rc = 128 + 15)" "[ $rc -eq 143 ]"
[ -n "${PREEMPT_TMP:-}" ] || rm -rf "$tmp"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
