#!/usr/bin/env bash
# A run's record of itself, and the nodes of a job agreeing (on an H100/H200; the node cases need 2
# GPUs, and run two processes on one host as nodes 0 and 1, a GPU each, over a TCP rendezvous):
#   - a save whose --data is a hostile path (quotes, a backslash, a newline, UTF-8, ~4000 bytes)
#     resumes, and its metadata holds the path as it was;
#   - --resume with another --seq is refused by name before the GPU; --resume-changes seq lets it go on;
#   - nodes started with other options (--seq) are refused by both, naming a rank of each side, before
#     either allocates;
#   - a --save DIR that node 1 does not see (a relative path from another working directory: a
#     node-local disk) is refused at the start, naming rank 1 and node 1, not at the first save;
#   - nodes that resume from saves of different steps (a node-local --resume) both stop promptly,
#     naming the steps: every rank issues both of the step check's collectives.
# Prints "N passed, M failed". JOB_TMP: where the runs go.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
R=$PWD
tmp=${JOB_TMP:-$(mktemp -d)}
mkdir -p "$tmp"
g=$R/tests/golden/untied_gqa4_s100
./build/check_stage random 320 200000 7 "$tmp/rand.tok" > /dev/null
last_step() { grep -o '"step":[0-9]*,"loss"' "$1" 2>/dev/null | tail -1 | grep -o '[0-9]*'; }
A="--model $g --seq 1000 --lr 1e-3 --warmup 0 --schedule constant"

echo "== a save whose --data is a hostile path resumes"
d=$(printf '%s/we"ird\\dir\nline \xc3\xa9\xe6\x96\x87' "$tmp")
for k in $(seq 1 16); do d="$d/$(printf 'p%.0s' $(seq 1 240))"; done # ~3900 bytes, each part under 255
mkdir -p "$d" && cp "$tmp/rand.tok" "$d/rand.tok"
./stage1 $A --data "$d/rand.tok" --steps 2 --save "$tmp/h" > "$tmp/h.log" 2>&1
ok "stage1 saves with --data of $(printf %s "$d/rand.tok" | wc -c) bytes" "[ $? -eq 0 ] && [ -d '$tmp/h/step-2' ]" || tail -3 "$tmp/h.log"
./stage1 $A --data "$d/rand.tok" --steps 3 --resume "$tmp/h" --log "$tmp/h.jsonl" > "$tmp/h2.log" 2>&1
ok "... and resumes from it" "[ $? -eq 0 ] && [ \"\$(last_step '$tmp/h.jsonl')\" = 3 ]" || tail -3 "$tmp/h2.log"
python3 - "$tmp/h/step-2/trainer_state.safetensors" "$d/rand.tok" <<'EOF'
import json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]
m = json.loads(b[8:8 + n])["__metadata__"]
sys.exit(0 if m["data"] == sys.argv[2] and m["seq"] == "1000" and m["step"] == "2" else 1)
EOF
ok "its metadata is JSON that holds the path as it was" "[ $? -eq 0 ]"
./stage1 $A --data "$d/rand.tok" --seq 500 --steps 4 --resume "$tmp/h" > "$tmp/h3.log" 2>&1; rc=$?
ok "--resume with another --seq is refused by name (exit $rc)" \
    "[ $rc -eq 2 ] && tail -1 '$tmp/h3.log' | grep -q 'saved with --seq 1000, this run has --seq 500'"
./stage1 $A --data "$d/rand.tok" --seq 500 --steps 4 --resume "$tmp/h" --resume-changes seq --log "$tmp/h4.jsonl" > "$tmp/h4.log" 2>&1
ok "--resume-changes seq lets it go on, with a note" \
    "[ $? -eq 0 ] && grep -q 'allowed by --resume-changes' '$tmp/h4.log' && [ \"\$(last_step '$tmp/h4.jsonl')\" = 4 ]"

ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$ngpu" -lt 2 ]; then
    echo "  (one GPU here: the two-node cases need 2; skipped)"
else
    port=$((29600 + RANDOM % 300))
    # nodes DIR0 DIR1 ARGS0 -- ARGS1: stage2 as nodes 0 and 1 (a GPU each), from working directories
    # DIR0 and DIR1; their logs n0.log, n1.log and statuses n0.rc, n1.rc in tmp; the seconds they took
    nodes() {
        local d0=$1 d1=$2; shift 2
        local a0=() a1=() side=0
        for w in "$@"; do [ "$w" = -- ] && { side=1; continue; }; [ $side = 0 ] && a0+=("$w") || a1+=("$w"); done
        port=$((port + 1))
        local J="--gpus 1 --nnodes 2 --rendezvous tcp://127.0.0.1:$port --run-id job$port --comm-timeout 60"
        local t0=$(date +%s)
        (cd "$d0" && CUDA_VISIBLE_DEVICES=0 timeout 300 "$R/stage2" $J --node-rank 0 "${a0[@]}" > "$tmp/n0.log" 2>&1; echo $? > "$tmp/n0.rc") &
        (cd "$d1" && CUDA_VISIBLE_DEVICES=1 timeout 300 "$R/stage2" $J --node-rank 1 "${a1[@]}" > "$tmp/n1.log" 2>&1; echo $? > "$tmp/n1.rc") &
        wait
        secs=$(($(date +%s) - t0))
        tail -1 "$tmp/n0.log" | sed 's/^/  node 0: /'; tail -1 "$tmp/n1.log" | sed 's/^/  node 1: /'
    }
    B="$A --data $tmp/rand.tok --steps 3"
    echo "== nodes started with other options are refused, naming a rank of each"
    nodes "$tmp" "$tmp" $B -- $B --seq 500
    ok "both nodes stop with exit 2, naming ranks 0 and 1 ($secs s)" \
        "[ \$(cat $tmp/n0.rc) = 2 ] && [ \$(cat $tmp/n1.rc) = 2 ] && tail -1 $tmp/n0.log | grep -q 'rank 0 (node 0) and rank 1 (node 1) were started with other options' && tail -1 $tmp/n1.log | grep -q 'were started with other options'"
    echo "== a --save DIR node 1 does not see is refused at the start, naming it"
    mkdir -p "$tmp/w0" "$tmp/w1"
    nodes "$tmp/w0" "$tmp/w1" $B --save ck -- $B --save ck
    ok "both stop before the first step, naming rank 1 on node 1 ($secs s)" \
        "[ \$(cat $tmp/n0.rc) = 2 ] && [ \$(cat $tmp/n1.rc) = 2 ] && tail -1 $tmp/n0.log | grep -q -- '--save ck: rank 1 (node 1) cannot open the file rank 0 made there (No such file or directory)' && ! grep -q '^step ' $tmp/n0.log"
    ok "... and leave no probe file behind" "! ls -A '$tmp/w0/ck' | grep -q probe"
    nodes "$tmp" "$tmp" $B --save "$tmp/shared" -- $B --save "$tmp/shared"
    ok "a --save DIR both see trains and saves ($secs s)" \
        "[ \$(cat $tmp/n0.rc) = 0 ] && [ \$(cat $tmp/n1.rc) = 0 ] && [ -d '$tmp/shared/step-3' ]"
    echo "== nodes resuming from saves of different steps stop promptly, naming the steps"
    rm -rf "$tmp/w0/ck" "$tmp/w1/ck"
    (cd "$tmp/w0" && "$R/stage1" $A --data "$tmp/rand.tok" --steps 1 --save ck > "$tmp/s0.log" 2>&1)
    (cd "$tmp/w1" && "$R/stage1" $A --data "$tmp/rand.tok" --steps 2 --save ck > "$tmp/s1.log" 2>&1)
    nodes "$tmp/w0" "$tmp/w1" $B --steps 5 --resume ck -- $B --steps 5 --resume ck
    ok "both stop within the comm timeout's first seconds, naming steps 1 to 2 ($secs s)" \
        "[ $secs -lt 50 ] && [ \$(cat $tmp/n0.rc) = 1 ] && [ \$(cat $tmp/n1.rc) = 1 ] && grep -q 'resumed from different steps (this rank: 1; steps 1 to 2)' $tmp/n0.log && grep -q 'resumed from different steps (this rank: 2; steps 1 to 2)' $tmp/n1.log"
fi
[ -n "${JOB_TMP:-}" ] || rm -rf "$tmp"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
