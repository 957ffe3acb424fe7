#!/usr/bin/env bash
# Preemption (on an H100/H200): a run with --save that receives SIGTERM or SIGUSR1 -- what SLURM
# sends before a time limit or a preemption -- finishes the step in flight, saves it, says so and
# exits 75 (a job script requeues on it; 0 is a finished run); --resume continues from that save.
# Stage 1 (one rank), stage 3 and stage 5 at 2 local ranks (the ranks agree on the step through a
# collective). A second signal ends the run at once, status 128 + the signal, the last complete save
# kept and resumable. The first step's line says how long a stop can take. A run without --save
# keeps the signals' default: SIGTERM ends it at once. Prints "N passed, M failed". PREEMPT_TMP:
# where the runs go.
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
    ok "$name: exits 75 after $sig (exit $rc)" "[ $rc -eq 75 ]"
    ok "$name: says it stopped after step $n, saved, and how to go on" \
        "grep -q '^stopping after step $n on $sig (a time limit or a preemption): saved to $tmp/$name/ck/step-$n; --resume $tmp/$name/ck continues from it (exit status 75)' '$tmp/$name/a.log'"
    ok "$name: the first step says how long a stop can take, and the --signal it needs" \
        "grep -q '^a stop on SIGTERM/SIGUSR1 takes up to a step (.*): under Slurm, --signal=USR1@[0-9]* or more' '$tmp/$name/a.log'"
    ok "$name: the save says its time" "grep -q '^saved step $n to $tmp/$name/ck/step-$n in [0-9.]* s (' '$tmp/$name/a.log'"
    ok "$name: latest is step-$n, complete" \
        "[ \"\$(readlink '$tmp/$name/ck/latest')\" = step-$n ] && [ -s '$tmp/$name/ck/step-$n/trainer_state.safetensors' ] && ! ls -d '$tmp/$name/ck/'*.partial > /dev/null 2>&1"
    $A --steps $((n + 2)) --resume "$tmp/$name/ck" --log "$tmp/$name/b.jsonl" > "$tmp/$name/b.log" 2>&1
    ok "$name: --resume continues after step $n to step $((n + 2))" \
        "[ $? -eq 0 ] && grep -q 'resumed from $tmp/$name/ck/step-$n after step $n' '$tmp/$name/b.log' && [ \"\$(last_step '$tmp/$name/b.jsonl')\" = $((n + 2)) ]"
}
case_ s1_term SIGTERM stage1
case_ s3_term SIGTERM stage3 --local-ranks 2
case_ s5_usr1 SIGUSR1 stage5 --local-ranks 2

echo "== a second SIGTERM ends the run at once; the last complete save stays and resumes"
# 0.6B cut to 2 layers: its 2.2 GB save takes long enough for the second signal to land inside it
name=s1_twice
rm -rf "$tmp/$name"; mkdir -p "$tmp/$name"
A="./stage1 --model 0.6B --layers 2 --data $tmp/rand.tok --seq 8192 --lr 1e-3 --warmup 0 --schedule constant"
$A --steps 100000 --save "$tmp/$name/ck" --save-every 2 --log "$tmp/$name/a.jsonl" > "$tmp/$name/a.log" 2>&1 &
pid=$!
for i in $(seq 1 3000); do
    [ "$(last_step "$tmp/$name/a.jsonl")" -ge 3 ] 2>/dev/null && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.02
done
kill -TERM $pid; sleep 0.3; kill -TERM $pid
wait $pid; rc=$?
tail -2 "$tmp/$name/a.log" | sed 's/^/  /'
ok "$name: exits 143 (128 + SIGTERM) at once (exit $rc)" "[ $rc -eq 143 ]"
ok "$name: says why, last" "tail -1 '$tmp/$name/a.log' | grep -q '^stage1: a second SIGTERM: stopping at once, status 143'"
n=$(readlink "$tmp/$name/ck/latest" | sed 's/step-//')
ok "$name: latest is the last complete save (step-$n)" "[ '$n' = 2 ] && [ -s '$tmp/$name/ck/step-2/trainer_state.safetensors' ]"
$A --steps 3 --resume "$tmp/$name/ck" --log "$tmp/$name/b.jsonl" > "$tmp/$name/b.log" 2>&1
ok "$name: --resume continues after step 2" "[ $? -eq 0 ] && [ \"\$(last_step '$tmp/$name/b.jsonl')\" = 3 ]"

echo "== without --save, SIGTERM keeps its default: the run ends at once"
./stage1 --model $g --data "$tmp/rand.tok" --seq 1000 --steps 100000 --log "$tmp/n.jsonl" > "$tmp/n.log" 2>&1 &
pid=$!
for i in $(seq 1 1500); do [ "$(last_step "$tmp/n.jsonl")" -ge 2 ] 2>/dev/null && break; sleep 0.02; done
kill -TERM $pid; wait $pid; rc=$?
ok "a run without --save dies of SIGTERM (exit $rc = 128 + 15)" "[ $rc -eq 143 ]"
[ -n "${PREEMPT_TMP:-}" ] || rm -rf "$tmp"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
