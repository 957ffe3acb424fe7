#!/usr/bin/env bash
# Qwen3.5 hybrids on the GPU: linear attention (Gated DeltaNet) and gated full attention.
#  - stage 1 against the reference (tests/ref_qwen35.c, itself equal to transformers: test_cpu) on the
#    four hybrid fixtures: plain, YaRN over the rotated quarter of each head, packed documents (the
#    state and the conv restart at each document), and the MoE hybrid (routed experts and a gated
#    shared expert); one AdamW step checked (check_stage grads);
#  - stages 2-5 on the same fixtures: stage 2 on 1 and 2 ranks (data parallel), stages 3-5 on P = 1,
#    2, 4, 8 local ranks, the linear layers' state maps and conv halos crossing ranks; each against the
#    reference on the whole sequence;
#  - a release's fused experts (tests/fuse_experts.py) load in every stage and give the same check;
#  - save + resume gives the uninterrupted run's next loss (within 1e-4), and transformers loads the
#    save and agrees on the loss (tests/hf_check.py);
#  - planted bugs in stage 3 at P = 2, each seen to fail the reference check: chunks run from a zero
#    state (the maps not composed), the conv without its halo, the backward's state gradient not
#    passed back; and in the MoE block's shared expert (stage 1): its output left out, its gate's
#    gradient not taken. PLANTS_ONLY=1 runs just these.
# The kernels' own tests are in build/test_gpu. Prints "N passed, M failed".
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
tmp=$(mktemp -d)
T="timeout ${CASE_TIMEOUT:-300}"
HP="--lr 1e-3 --warmup 0 --schedule constant --wd 0.1 --beta1 0.9 --beta2 0.95 --eps 1e-8 --clip 1.0"
HPV="1e-3 0.1 0.9 0.95 1e-8 1.0"
for g in tests/golden/q35*/; do
    [ -n "${PLANTS_ONLY:-}" ] && break
    g=${g%/}; name=$(basename "$g")
    S=$(./build/check_stage tokens "$g" "$tmp/$name.tok")
    pk=; case $name in *packed*) pk="--packing 7" ;; esac
    echo "== stage 1 vs reference: $name (seq $S${pk:+, $pk})"
    $T ./stage1 --model "$g" --data "$tmp/$name.tok" --seq "$S" --steps 1 --loss-chunk 7 $HP $pk \
        --dump-grads "$tmp/$name.grads" --save "$tmp/$name.ck" > "$tmp/$name.log" 2>&1
    ok "stage1 $name runs" "[ $? -eq 0 ]" || tail -5 "$tmp/$name.log"
    ./build/check_stage grads "$g" "$tmp/$name.grads" "$tmp/$name.ck" $HPV 2>&1 | tee "$tmp/c.txt"
    count "$tmp/c.txt" "check_stage $name"
done

# run NAME STAGE ARGS...: one step on fixture $g into $tmp/NAME.{grads,ck}, checked against the reference
# (CHECK_EXTRA: check_stage's options after the hyper-parameters)
run() {
    local tag=$1 bin=$2; shift 2
    $T ./$bin "$@" --model "$g" --seq "$S" --steps 1 --loss-chunk 7 $HP $pk --dump-grads "$tmp/$tag.grads" \
        --save "$tmp/$tag.ck" > "$tmp/$tag.log" 2>&1
    ok "$tag runs" "[ $? -eq 0 ]" || { tail -5 "$tmp/$tag.log"; return; }
    ./build/check_stage grads "$g" "$tmp/$tag.grads" "$tmp/$tag.ck" $HPV ${CHECK_EXTRA:-} > "$tmp/c.txt" 2>&1
    grep -E "^FAIL|worst|^  loss" "$tmp/c.txt" | sed "s/^/  $tag: /" | head -6
    count "$tmp/c.txt" "$tag"
    rm -rf "$tmp/$tag.ck"
}
./build/check_stage random 256 20000 7 "$tmp/rand.tok"
for g in tests/golden/q35*/; do
    [ -n "${PLANTS_ONLY:-}" ] && break
    g=${g%/}; name=$(basename "$g")
    S=$(./build/check_stage tokens "$g" "$tmp/$name.tok")
    pk=; case $name in *packed*) pk="--packing 7" ;; esac
    echo "== stages 2-5 vs reference: $name"
    run "$name.s2.P1" stage2 --local-ranks 1 --data "$tmp/$name.tok"
    # (not the MoE's: its routers are solved for wide margins on its own tokens, not on random ones,
    # where bf16 may flip a near tie to another expert: tests/make_golden_gdn.py)
    [ -z "$pk" ] && [ "$name" = "${name#q35moe}" ] &&
        CHECK_EXTRA="--tokens $tmp/rand.tok --windows 2 --seq $S" run "$name.s2.P2" stage2 --local-ranks 2 --data "$tmp/rand.tok"
    for P in 1 2 4 8; do
        run "$name.s3.P$P" stage3 --local-ranks $P --merge fp32 --data "$tmp/$name.tok"
        run "$name.s5.P$P" stage5 --local-ranks $P --mlp-tile 7 --data "$tmp/$name.tok"
    done
    for P in 1 2 4; do run "$name.s4.P$P" stage4 --local-ranks $P --data "$tmp/$name.tok"; done
done

if [ -z "${PLANTS_ONLY:-}" ]; then
    # a Qwen3.5 MoE release holds each layer's routed experts fused (gate_up_proj, down_proj): stage 1's
    # load and stages 2-5's sharded one read slices of them (params_stored)
    echo "== a release's fused experts (tests/fuse_experts.py): stages 1-5 against the reference"
    g=$tmp/q35moe_fused
    python3 tests/fuse_experts.py tests/golden/q35moe_l2_s112 "$g"
    ok "the fixture's experts fused" "[ -s '$g/model.safetensors' ]"
    S=$(./build/check_stage tokens "$g" "$tmp/fused.tok"); pk=
    run fused.s1 stage1 --data "$tmp/fused.tok"
    run fused.s2.P1 stage2 --local-ranks 1 --data "$tmp/fused.tok"
    run fused.s3.P2 stage3 --local-ranks 2 --merge fp32 --data "$tmp/fused.tok"
    run fused.s4.P2 stage4 --local-ranks 2 --data "$tmp/fused.tok"
    run fused.s5.P2 stage5 --local-ranks 2 --mlp-tile 7 --data "$tmp/fused.tok"
fi

echo "== planted bugs in stage 3's exchange, P = 2: each must fail the reference check"
mkdir -p build/plant
plant() { # plant OUT OLD NEW: a copy of stage 3 with OLD replaced, built as build/plant/OUT
    python3 -c 'import sys; s=open(sys.argv[1]).read(); assert sys.argv[3] in s, "plant did not apply"
open(sys.argv[2], "w").write(s.replace(sys.argv[3], sys.argv[4], 1))' stage3_context_parallel.c "build/plant/$1.c" "$2" "$3" ||
        return 1
    local link
    link=$(MAKEFLAGS= make -s --no-print-directory -n -B build/stage3 | grep -- "-o build/stage3 ")
    eval "${link/-o build\/stage3 stage3_context_parallel.c/-I. -o build/plant/$1 build/plant/$1.c}"
}
g=tests/golden/q35_l2_s112
S=$(./build/check_stage tokens "$g" "$tmp/plant.tok")
for p in "s3_no_compose|if_ours(M, ch, cur); /* chunk ch starts from cur */|if_ours(M, ch, NULL); /* planted */" \
         "s3_no_halo|hybrid_conv(g, &M->c, Wl, w->pos, k, halo_of(M, k), st);|hybrid_conv(g, &M->c, Wl, w->pos, k, NULL, st); /* planted */" \
         "s3_no_dstate|if_ours(M, ch, cur); /* chunk ch's final state has the gradient cur */|if_ours(M, ch, NULL); /* planted */"; do
    IFS='|' read -r name old new <<< "$p"
    rm -f "build/plant/$name"
    plant "$name" "$old" "$new" > "$tmp/plant.log" 2>&1
    ok "the plant $name builds" "[ -x build/plant/$name ]" || { tail -3 "$tmp/plant.log"; continue; }
    $T ./build/plant/$name --local-ranks 2 --merge fp32 --model "$g" --data "$tmp/plant.tok" --seq "$S" --steps 1 \
        --loss-chunk 7 $HP --dump-grads "$tmp/$name.grads" > "$tmp/$name.log" 2>&1
    ok "the planted $name runs (what it computes must miss)" "[ $? -eq 0 ] && [ -s '$tmp/$name.grads' ]"
    ./build/check_stage grads "$g" "$tmp/$name.grads" > "$tmp/c.txt" 2>&1; rc=$?
    echo "  $name: $(grep -c '^FAIL' "$tmp/c.txt") failed checks, $(grep -m1 '^  loss' "$tmp/c.txt")"
    ok "planted $name fails the reference check" "[ $rc -ne 0 ] && grep -q '^FAIL' '$tmp/c.txt'"
done
echo "== planted bugs in the MoE block's shared expert (common/moe.c), stage 1: each must fail the reference check"
plant_moe() { # plant_moe OUT OLD NEW: stage 1 linked with a copy of common/moe.c with OLD replaced, as build/plant/OUT
    python3 -c 'import sys; s=open(sys.argv[1]).read(); assert sys.argv[3] in s, "plant did not apply"
open(sys.argv[2], "w").write(s.replace(sys.argv[3], sys.argv[4], 1))' common/moe.c "build/plant/$1_moe.c" "$2" "$3" ||
        return 1
    local link
    link=$(MAKEFLAGS= make -s --no-print-directory -n -B build/stage1 | grep -- "-o build/stage1 ")
    ${link%% -o build/stage1 *} -Icommon -c "build/plant/$1_moe.c" -o "build/plant/$1_moe.o" || return 1
    link=${link/build\/common\/moe.o/build/plant/$1_moe.o}
    eval "${link/-o build\/stage1 /-o build/plant/$1 }"
}
g=tests/golden/q35moe_l2_s112
S=$(./build/check_stage tokens "$g" "$tmp/plant_moe.tok")
for p in "moe_no_shared|c->shared_inter ? m->sh_y : NULL|NULL /* planted */" \
         "moe_no_gate_grad|    moe_shared_score_bwd(dxn, G->sh_route, m->sh_ds, xn, W->sh_route, T, D, st);|    /* planted */"; do
    IFS='|' read -r name old new <<< "$p"
    rm -f "build/plant/$name"
    plant_moe "$name" "$old" "$new" > "$tmp/plant.log" 2>&1
    ok "the plant $name builds" "[ -x build/plant/$name ]" || { tail -3 "$tmp/plant.log"; continue; }
    $T ./build/plant/$name --model "$g" --data "$tmp/plant_moe.tok" --seq "$S" --steps 1 --loss-chunk 7 $HP \
        --dump-grads "$tmp/$name.grads" > "$tmp/$name.log" 2>&1
    ok "the planted $name runs (what it computes must miss)" "[ $? -eq 0 ] && [ -s '$tmp/$name.grads' ]"
    ./build/check_stage grads "$g" "$tmp/$name.grads" > "$tmp/c.txt" 2>&1; rc=$?
    echo "  $name: $(grep -c '^FAIL' "$tmp/c.txt") failed checks, $(grep -m1 '^  loss' "$tmp/c.txt")"
    ok "planted $name fails the reference check" "[ $rc -ne 0 ] && grep -q '^FAIL' '$tmp/c.txt'"
done
[ -n "${PLANTS_ONLY:-}" ] && { echo "$pass passed, $fail failed"; rm -rf "$tmp"; [ "$fail" -eq 0 ]; exit; }

echo "== save + resume: the uninterrupted run's next loss"
g=tests/golden/q35_l2_s112
R="--model $g --data $tmp/rand.tok --seq 1000 --lr 1e-3 --warmup 2 --steps 4"
$T ./stage1 $R --log "$tmp/a.jsonl" > "$tmp/a.log" 2>&1
ok "stage1 hybrid 4 steps run" "[ $? -eq 0 ]" || tail -5 "$tmp/a.log"
$T ./stage1 $R --log "$tmp/a2.jsonl" > "$tmp/a2.log" 2>&1 # the same run again: how far two runs drift apart
ok "stage1 hybrid 4 steps run again" "[ $? -eq 0 ]" || tail -5 "$tmp/a2.log"
$T ./stage1 $R --steps 2 --save "$tmp/ck2" > "$tmp/b.log" 2>&1
$T ./stage1 $R --resume "$tmp/ck2" --log "$tmp/c.jsonl" > "$tmp/c.log" 2>&1
ok "the resumed run runs" "[ $? -eq 0 ]" || tail -5 "$tmp/c.log"
# Not bit for bit: the linear layers' backward adds its sums over state rows and value heads with fp32
# atomics, whose order varies from run to run, and AdamW turns a gradient of nearly zero into a full
# step either way. Two H200 runs saw step 4 off by 1.3e-5 and 1.1e-4 relative (bench/results/2026-12-04_h200/
# call_p, call_u.tgz), so the band is what two
# uninterrupted runs drift apart in this same call (x 4), and at least 1e-4: a resume that restored
# the wrong moments is off by 3e-3 and more by step 4 (tests/kill_save_gpu.sh's planted bug).
for s in 3 4; do
    a=$(grep "\"step\":$s," "$tmp/a.jsonl" | grep -o '"loss":[0-9.e+-]*' | cut -d: -f2)
    a2=$(grep "\"step\":$s," "$tmp/a2.jsonl" | grep -o '"loss":[0-9.e+-]*' | cut -d: -f2)
    c=$(grep "\"step\":$s," "$tmp/c.jsonl" | grep -o '"loss":[0-9.e+-]*' | cut -d: -f2)
    # (capped at 1e-3: a drift that large is itself a failure, and must not widen the band past a wrong resume)
    ok "step $s's loss after resume is the uninterrupted run's within max(1e-4, 4 x two runs' drift), at most 1e-3 ($a vs $c; again $a2)" \
        "python3 -c 'import sys; a, a2, c = float(\"$a\"), float(\"$a2\"), float(\"$c\"); sys.exit(not (abs(a - a2) <= 1e-3 * abs(a) and abs(a - c) <= min(1e-3 * abs(a), max(1e-4 * abs(a), 4 * abs(a - a2)))))'"
done
echo "== transformers loads the save (Qwen3_5ForCausalLM) and agrees on the next loss"
if python3 -c 'import transformers' 2>/dev/null; then
    python3 tests/hf_check.py "$tmp/ck2" "$tmp/rand.tok" 1000 2 "$(grep '"step":3,' "$tmp/a.jsonl" | grep -o '"loss":[0-9.e+-]*' | cut -d: -f2)" 2>&1 | grep -v Loading | tee "$tmp/h.txt"
    count "$tmp/h.txt" hf_check
    echo "== the MoE hybrid: transformers loads its save (Qwen3_5MoeForCausalLM) and agrees on the next loss"
    R="--model tests/golden/q35moe_l2_s112 --data $tmp/rand.tok --seq 1000 --lr 1e-3 --warmup 2 --steps 3"
    $T ./stage1 $R --log "$tmp/m.jsonl" > "$tmp/m.log" 2>&1
    ok "stage1 MoE hybrid 3 steps run" "[ $? -eq 0 ]" || tail -5 "$tmp/m.log"
    $T ./stage1 $R --steps 2 --save "$tmp/mk2" > "$tmp/mb.log" 2>&1
    ok "stage1 MoE hybrid saves" "[ $? -eq 0 ]" || tail -5 "$tmp/mb.log"
    python3 tests/hf_check.py "$tmp/mk2" "$tmp/rand.tok" 1000 2 "$(grep '"step":3,' "$tmp/m.jsonl" | grep -o '"loss":[0-9.e+-]*' | cut -d: -f2)" 2>&1 | grep -v Loading | tee "$tmp/h.txt"
    count "$tmp/h.txt" "hf_check MoE hybrid"
else
    echo "  (transformers not installed here: skipped)"
fi
echo "$pass passed, $fail failed"
rm -rf "$tmp"
[ "$fail" -eq 0 ]
