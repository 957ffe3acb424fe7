#!/usr/bin/env bash
# GPU tests (make test-gpu), on an H100/H200: kernels, GEMMs and attention (build/test_gpu), the
# communicator (build/test_comm), stage 1 against the CPU reference on the golden configs,
# --keep-attn against plain checkpointing, save + resume against an uninterrupted run, stage 2 on
# local ranks and NCCL, stage 3 on local ranks against the reference and stage 1, and the saved
# directory loaded by transformers. Prints "N passed, M failed". QUICK=1 skips the 128K attention
# case; CASE_TIMEOUT (s, default 300) bounds each multi-rank run.
set -u
cd "$(dirname "$0")/.."
# a hung rank must fail its case, not the whole run
T="timeout ${CASE_TIMEOUT:-300}"
pass=0; fail=0
count() {
    local line; line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -1)
    if [ -z "$line" ]; then fail=$((fail + 1)); echo "FAIL $2 (no result line)"; return; fi
    pass=$((pass + $(echo "$line" | cut -d' ' -f1))); fail=$((fail + $(echo "$line" | cut -d' ' -f3)))
}
ok() { if eval "$2"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1"; return 1; fi; }
tmp=$(mktemp -d)
echo "== kernels, GEMM, attention"
./build/test_gpu ${QUICK:+--quick} 2>&1 | tee "$tmp/unit.txt"; count "$tmp/unit.txt" test_gpu
echo "== communicator: local backend (2-4 ranks on one GPU) and NCCL"
$T ./build/test_comm 2>&1 | tee "$tmp/comm.txt"; count "$tmp/comm.txt" test_comm

# one AdamW step: constant lr, no warmup, the hyper-parameters check_stage replays
HP="--lr 1e-3 --warmup 0 --schedule constant --wd 0.1 --beta1 0.9 --beta2 0.95 --eps 1e-8 --clip 1.0"
HPV="1e-3 0.1 0.9 0.95 1e-8 1.0"
for g in tests/golden/*/; do
    g=${g%/}; name=$(basename "$g")
    S=$(./build/check_stage tokens "$g" "$tmp/$name.tok")
    echo "== stage 1 vs reference: $name (seq $S)"
    for keep in "" "--keep-attn"; do
        tag=${keep:+keep}; tag=${tag:-plain}
        ./stage1 --model "$g" --data "$tmp/$name.tok" --seq "$S" --steps 1 --loss-chunk 7 $HP $keep \
            --dump-grads "$tmp/$name.$tag.grads" --save "$tmp/$name.$tag.ck" > "$tmp/$name.$tag.log" 2>&1
        ok "stage1 $name $tag runs" "[ $? -eq 0 ]" || tail -5 "$tmp/$name.$tag.log"
        ./build/check_stage grads "$g" "$tmp/$name.$tag.grads" "$tmp/$name.$tag.ck" $HPV 2>&1 | tee "$tmp/c.txt"
        count "$tmp/c.txt" "check_stage $name $tag"
    done
    echo "== --keep-attn equals plain checkpointing: $name"
    ./build/check_stage same "$tmp/$name.plain.grads" "$tmp/$name.keep.grads" 0.99999 2>&1 | tee "$tmp/c.txt"
    count "$tmp/c.txt" "keep-attn $name"
done

echo "== save + resume gives the uninterrupted run's next loss, bit for bit"
g=tests/golden/untied_gqa4_s100
./build/check_stage random 320 20000 7 "$tmp/rand.tok"
R="--model $g --data $tmp/rand.tok --seq 1000 --lr 1e-3 --warmup 2 --steps 4"
# the step a --save directory's trainer_state.safetensors holds (its header's __metadata__ "step")
state_step() {
    python3 -c 'import json, struct, sys
f = open(sys.argv[1] + "/trainer_state.safetensors", "rb")
print(json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))["__metadata__"]["step"])' "$1" 2>/dev/null || echo none
}
./stage1 $R --log "$tmp/a.jsonl" > "$tmp/a.log" 2>&1
ok "uninterrupted 4-step run exits 0" "[ $? -eq 0 ]" || tail -5 "$tmp/a.log"
./stage1 $R --steps 4 --save-every 2 --save "$tmp/ck" --log "$tmp/b.jsonl" > "$tmp/b.log" 2>&1
ok "--save-every 2 run exits 0" "[ $? -eq 0 ]" || tail -5 "$tmp/b.log"
grep '^saved step' "$tmp/b.log" | sed 's/^/  /'
ok "--save-every 2 --steps 4 logs a save at step 2" "grep -q '^saved step 2 to $tmp/ck ' '$tmp/b.log'"
ok "--save-every 2 --steps 4 logs the final save at step 4" "grep -q '^saved step 4 to $tmp/ck ' '$tmp/b.log'"
ck_step=$(state_step "$tmp/ck")
echo "  $tmp/ck/trainer_state.safetensors: step $ck_step"
ok "the --save directory's trainer_state holds step 4 after --steps 4 (got $ck_step)" "[ '$ck_step' = 4 ]"
# the directory now holds step 4; make a clean step-2 save to resume from
./stage1 $R --steps 2 --save "$tmp/ck2" > "$tmp/b2.log" 2>&1
ck2_step=$(state_step "$tmp/ck2")
ok "a --steps 2 save holds step 2 (got $ck2_step)" "[ '$ck2_step' = 2 ]"
./stage1 $R --resume "$tmp/ck2" --log "$tmp/c.jsonl" > "$tmp/c.log" 2>&1
ok "resumed run exits 0" "[ $? -eq 0 ]" || tail -5 "$tmp/c.log"
grep '^resumed from' "$tmp/c.log" | sed 's/^/  /'
ok "the resumed run logs \"resumed from $tmp/ck2 after step 2\"" "grep -q '^resumed from $tmp/ck2 after step 2\$' '$tmp/c.log'"
first_json=$(head -1 "$tmp/c.jsonl" 2>/dev/null | grep -o '"step":[0-9]*' | cut -d: -f2)
first_line=$(grep -m1 -oE '^step +[0-9]+' "$tmp/c.log" | awk '{print $2}')
echo "  resumed run: first step logged ${first_json:-none} (--log), ${first_line:-none} (stdout)"
ok "the resumed run's first logged step is 3 (--log: ${first_json:-none}, stdout: ${first_line:-none})" \
    "[ '$first_json' = 3 ] && [ '$first_line' = 3 ]"
a3=$(grep '"step":3,' "$tmp/a.jsonl" | grep -o '"loss_hex":"[^"]*"'); c3=$(grep '"step":3,' "$tmp/c.jsonl" | grep -o '"loss_hex":"[^"]*"')
a4=$(grep '"step":4,' "$tmp/a.jsonl" | grep -o '"loss_hex":"[^"]*"'); c4=$(grep '"step":4,' "$tmp/c.jsonl" | grep -o '"loss_hex":"[^"]*"')
echo "  uninterrupted step 3 $a3 | resumed step 3 $c3"
echo "  uninterrupted step 4 $a4 | resumed step 4 $c4"
ok "resumed step 3 loss is bit-for-bit the uninterrupted one" "[ -n '$a3' ] && [ '$a3' = '$c3' ]"
ok "resumed run writes no step <= 2" "! grep -q '\"step\":[12],' $tmp/c.jsonl"

if [ -x ./stage2 ]; then
    echo "== stage 2 (FSDP) on P local ranks against the reference mean over the P windows"
    ./build/check_stage random 384 20000 8 "$tmp/rand384.tok"
    for spec in "untied_gqa4_s100 rand.tok" "tied_gqa2_hd128 rand384.tok"; do
        set -- $spec; g=tests/golden/$1
        for P in 1 2 4; do
            $T ./stage2 --local-ranks $P --model "$g" --data "$tmp/$2" --seq 100 --steps 1 --loss-chunk 7 $HP \
                --dump-grads "$tmp/s2.$1.$P.grads" --save "$tmp/s2.$1.$P.ck" > "$tmp/s2.log" 2>&1
            ok "stage2 $1 P=$P runs" "[ $? -eq 0 ]" || tail -5 "$tmp/s2.log"
            ./build/check_stage grads "$g" "$tmp/s2.$1.$P.grads" "$tmp/s2.$1.$P.ck" $HPV --tokens "$tmp/$2" --windows $P \
                --seq 100 2>&1 | tee "$tmp/c.txt"
            count "$tmp/c.txt" "stage2 $1 P=$P"
        done
    done
    echo "== stage 2: the NCCL backend with one rank equals the local backend with one rank"
    g=tests/golden/untied_gqa4_s100
    $T ./stage2 --gpus 1 --model "$g" --data "$tmp/rand.tok" --seq 100 --steps 1 --loss-chunk 7 $HP \
        --dump-grads "$tmp/s2.nccl.grads" > "$tmp/s2n.log" 2>&1
    ok "stage2 NCCL P=1 runs" "[ $? -eq 0 ]" || tail -5 "$tmp/s2n.log"
    ./build/check_stage same "$tmp/s2.untied_gqa4_s100.1.grads" "$tmp/s2.nccl.grads" 0.99999 2>&1 | tee "$tmp/c.txt"
    count "$tmp/c.txt" "stage2 nccl vs local"
fi

if [ -x ./stage3 ]; then
    echo "== stage 3 (ring attention) on P local ranks against the reference on the same full sequence"
    for g in tests/golden/*/; do
        g=${g%/}; name=$(basename "$g")
        S=$(./build/check_stage tokens "$g" "$tmp/$name.tok")
        for P in 1 2 4 8; do
            [ $((S % (2 * P))) -eq 0 ] || { echo "  (seq $S is not divisible by 2 x $P: P=$P skipped)"; continue; }
            for run in "fp32" "bf16" "fp32 --keep-attn"; do
                set -- $run; merge=$1; shift
                $T ./stage3 --local-ranks $P --merge $merge "$@" --model "$g" --data "$tmp/$name.tok" --seq "$S" \
                    --steps 1 --loss-chunk 7 $HP --dump-grads "$tmp/s3.grads" --save "$tmp/s3.ck" > "$tmp/s3.log" 2>&1
                ok "stage3 $name P=$P merge $run runs" "[ $? -eq 0 ]" || tail -5 "$tmp/s3.log"
                ./build/check_stage grads "$g" "$tmp/s3.grads" "$tmp/s3.ck" $HPV 2>&1 | tee "$tmp/c.txt"
                count "$tmp/c.txt" "stage3 $name P=$P $run"
            done
        done
    done
    echo "== stage 3: a 2-layer Qwen3-0.6B slice at 16K tokens, P = 2, 4, 8 against stage 1"
    ./stage1 --layers 2 --data data/books.tok --seq 16384 --steps 1 $HP --dump-grads "$tmp/s1.16k" > "$tmp/s1.log" 2>&1
    for P in 2 4 8; do for merge in fp32 bf16; do
        echo "  P=$P merge $merge"
        $T ./stage3 --local-ranks $P --merge $merge --layers 2 --data data/books.tok --seq 16384 --steps 1 $HP \
            --dump-grads "$tmp/s3.16k" > "$tmp/s3.log" 2>&1
        ok "stage3 0.6B slice P=$P merge $merge runs" "[ $? -eq 0 ]" || tail -5 "$tmp/s3.log"
        ./build/check_stage same "$tmp/s1.16k" "$tmp/s3.16k" 0.999 1e-2 2>&1 | tee "$tmp/c.txt"
        count "$tmp/c.txt" "stage3 0.6B slice P=$P $merge"
    done; done
fi

echo "== transformers loads the saved directory and agrees on the loss"
if python3 -c 'import transformers' 2>/dev/null; then
    python3 tests/hf_check.py "$tmp/ck2" "$tmp/rand.tok" 1000 2 "$(grep '"step":3,' "$tmp/a.jsonl" | grep -o '"loss":[0-9.e+-]*' | cut -d: -f2)" 2>&1 | tee "$tmp/h.txt"
    count "$tmp/h.txt" hf_check
else
    echo "  (transformers not installed here: skipped)"
fi
rm -rf "$tmp"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
