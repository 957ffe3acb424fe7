#!/usr/bin/env bash
# refusals.sh -- every stage refuses bad input by name before the GPU is touched: numbers out of
# range, token files too short for the job's windows, files that are directories or FIFOs,
# config.json fields past their bounds, weights and saves wrong in one way each (made by
# tests/make_bad_inputs.py), a MoE release's fused experts (planned) and one missing a tensor. Each case is a real run (no --dry-run: the run must refuse it, not
# only its plan) and passes when the program exits non-zero with the expected words on the LAST
# line of its output (stdout and stderr together, as a log holds them), printed as "stageN: ..."
# with no source line. A message written before buffered stdout reached the log sat above the plan
# where nobody reads it: that is how a run once "failed with no message". Each case then runs again
# with --dry-run, which must refuse it too, with no line ending in "fits" above the refusal: the
# inputs are checked before the plan is printed, so a plan's verdict never precedes its refusal.
# Needs no GPU: the refusals come before any CUDA call. BIN=DIR runs DIR's binaries instead (an
# older build, to see which cases it misses). Prints "N passed, M failed".
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-.}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
python3 tests/make_bad_inputs.py "$T" || { echo "0 passed, 1 failed"; exit 1; }
mkfifo "$T/fifo.tok"
mkdir "$T/m_fifo_index"; cp "$T/m_good/config.json" "$T/m_fifo_index/"; mkfifo "$T/m_fifo_index/model.safetensors.index.json"
pass=0; fail=0
ok() { if eval "$2"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1"; fi; }

# refuse BIN WHAT WORDS ARGS...: the run exits non-zero and its last line is "stageN: ...WORDS..."
refuse() {
    local bin=$1 what=$2 words=$3; shift 3
    local out rc last
    out=$(timeout 60 "$BIN/$bin" "$@" 2>&1 < /dev/null); rc=$?
    last=$(tail -n 1 <<< "$out")
    ok "$bin refuses $what" "[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qF -- \"\$words\" <<< \"\$last\" && [[ \"\$last\" == $bin:* ]]"
    echo "  $bin ${*:0:0}-> ${last:0:220}"
    out=$(timeout 60 "$BIN/$bin" "$@" --dry-run 2>&1 < /dev/null); rc=$?
    last=$(tail -n 1 <<< "$out")
    ok "$bin --dry-run refuses $what, with no plan's \"fits\" above it" \
        "[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qF -- \"\$words\" <<< \"\$last\" && ! grep -qE 'fits\$' <<< \"\$out\""
}

good="--model $T/m_good --data $T/tiny.tok --seq 64 --steps 2"
./build/check_stage stamp "$T/r_meta/step-1" "$T/m_good" "$T/tiny.tok" 64 -1 || { echo "0 passed, 1 failed"; exit 1; }
LONG="$T/$(printf 'x%.0s' $(seq 1 5000))"
LONG_TAIL="xxxxxxxxxx: " # the end of the name, shown, and the reason after it
for n in 1 2 3 4 5; do
    bin=stage$n
    [ -x "$BIN/$bin" ] || { fail=$((fail + 1)); echo "FAIL $BIN/$bin not built"; continue; }
    R=; [ $n -ge 2 ] && R="--local-ranks 2" # several ranks as threads: no GPU counted
    # the good case runs up to the GPU: a test that refuses everything must fail here
    out=$("$BIN/$bin" $good $R --dry-run 2>&1); rc=$?
    ok "$bin plans the good tiny model (exit $rc)" "[ $rc -eq 0 ] && grep -q 'total (peak)' <<< \"\$out\""
    out=$("$BIN/$bin" $good $R --resume "$T/r_good" --dry-run 2>&1); rc=$?
    ok "$bin plans a resume of a good save (exit $rc)" "[ $rc -eq 0 ]"
    out=$("$BIN/$bin" $good $R --resume "$T/r_good" --model "$T/r_good" --dry-run 2>&1); rc=$?
    ok "$bin plans --resume R --model R, R a save's root (exit $rc)" "[ $rc -eq 0 ]"
    # windows: a step reads seq + 1 tokens (every data-parallel rank its own, in stage 2)
    refuse $bin "a window longer than its token file" "holds 100 tokens" $good $R --data "$T/short.tok" --seq 128
    refuse $bin "an evaluation longer than its eval file" "--eval-data $T/short.tok holds 1 window of" $good $R --eval-data "$T/short.tok"
    [ $n -ge 3 ] && refuse $bin "--seq 2M on the shipped books (1.27M tokens)" "holds 1270101 tokens" \
        --model 0.6B --layers 1 --seq 2097152 --steps 1 $R
    # files that are not token files
    refuse $bin "a directory as --data" "a directory, where a token file" $good $R --data "$T/dir.tok"
    refuse $bin "a FIFO as --data" "a FIFO, where a token file" $good $R --data "$T/fifo.tok"
    refuse $bin "a missing --data" "no such file" $good $R --data "$T/none.tok"
    refuse $bin "a directory as --eval-data" "a directory, where a token file" $good $R --eval-data "$T/dir.tok"
    # config.json
    refuse $bin "vocab_size 2^62" '"vocab_size" must be an integer in [1, 8388608]' $good $R --model "$T/cfg_vocab_2p62"
    refuse $bin "an integer past int64" "outside int64's range" $good $R --model "$T/cfg_int_past_int64"
    refuse $bin "num_hidden_layers 2^40" '"num_hidden_layers" must be an integer in [1, 1024]' $good $R --model "$T/cfg_layers_2p40"
    refuse $bin "rope_theta 1" "rope_theta 1 must be a finite number above 1" $good $R --model "$T/cfg_theta_1"
    refuse $bin "rope_theta 0" '"rope_theta" must be a number in' $good $R --model "$T/cfg_theta_0"
    refuse $bin "rope_theta -1" '"rope_theta" must be a number in' $good $R --model "$T/cfg_theta_neg"
    refuse $bin "a YaRN factor of 1e300" '"factor" must be a number in [1, 1e+06]' $good $R --model "$T/cfg_yarn_1e300"
    refuse $bin "a YaRN factor of 1e400 (inf)" "too large for a double" $good $R --model "$T/cfg_yarn_inf"
    refuse $bin "YaRN's beta_fast below beta_slow" "must be larger than beta_slow" $good $R --model "$T/cfg_yarn_betas"
    refuse $bin "a negative rms_norm_eps" '"rms_norm_eps" must be a number in' $good $R --model "$T/cfg_eps_neg"
    refuse $bin "head_dim 0" '"head_dim" must be an integer in [1, 256]' $good $R --model "$T/cfg_head_dim_0"
    refuse $bin "a config.json that is a directory" "a directory, where a config.json" $good $R --model "$T/cfg_is_dir"
    refuse $bin "--model Qwen3 (not a size)" "neither a size" $good $R --model Qwen3
    # weights
    refuse $bin "a model missing a tensor" 'tensor "model.norm.weight" is missing' $good $R --model "$T/m_missing"
    refuse $bin "a tensor of the wrong shape" 'tensor "model.norm.weight" has the shape [65' $good $R --model "$T/m_shape"
    refuse $bin "an integer weight" "not a float type" $good $R --model "$T/m_int"
    refuse $bin "a tensor named twice in one header" "is named twice in its header" $good $R --model "$T/m_dup"
    refuse $bin "a shape of 2^80 elements" "implausibly large" $good $R --model "$T/m_huge"
    refuse $bin "a tensor in two shards" "is in two shards" $good $R --model "$T/m_two_shards"
    refuse $bin "a tensor in another shard than its index names" "found in another shard" $good $R --model "$T/m_wrong_shard"
    refuse $bin "model.safetensors that is a directory" "a directory, where a safetensors file" $good $R --model "$T/m_st_dir"
    refuse $bin "an index that is a directory" "a directory, where a safetensors index" $good $R --model "$T/m_index_dir"
    # saves
    refuse $bin "a save whose step is -3" 'step "-3" is not a non-negative integer' $good $R --resume "$T/r_step_neg"
    refuse $bin "a save whose step is abc" 'step "abc" is not a non-negative integer' $good $R --resume "$T/r_step_abc"
    refuse $bin "a save after the run's last step" "nothing to train" $good $R --resume "$T/r_step_late"
    refuse $bin "a save without master weights" 'tensor "master.model.embed_tokens.weight" is missing' $good $R \
        --resume "$T/r_no_master"
    refuse $bin "--resume of another model's save" "resume the save with its own model" $good $R --resume "$T/r_other_model"
    refuse $bin "--save onto a file" "exists and is not a directory" $good $R --save "$T/save_is_file"
    refuse $bin "--save under a missing directory" "does not exist" $good $R --save "$T/none/ck"
    refuse $bin "--log under a missing directory" "does not exist" $good $R --log "$T/none/log.jsonl"
    refuse $bin "--save FILE/ (a file named as a directory)" "Not a directory" $good $R --save "$T/save_is_file/"
    refuse $bin "--log DIR/ (no file name)" "ends in '/'" $good $R --log "$T/none/"
    refuse $bin "--log under a file" "Not a directory" $good $R --log "$T/save_is_file/log.jsonl"
    refuse $bin "--save where nothing can be created (/proc)" "cannot create it in /proc" $good $R --save /proc/ck
    refuse $bin "--trace under a missing directory" "--trace $T/none/t.txt: its directory" $good $R --trace "$T/none/t.txt"
    refuse $bin "--timeline under a missing directory" "--timeline $T/none/t.tsv: its directory" $good $R --timeline "$T/none/t.tsv"
    refuse $bin "--dump-grads under a missing directory" "--dump-grads $T/none/g: its directory" $good $R --dump-grads "$T/none/g"
    refuse $bin "a FIFO as the safetensors index" "model.safetensors.index.json: a FIFO" $good $R --model "$T/m_fifo_index"
    refuse $bin "a config.json that is not JSON (the file, line, column and field)" \
        "$T/cfg_syntax/config.json: JSON: expected ',' or '}' at line 3, column 31 (byte 57), in \"rope_scaling\".\"factor\"" \
        $good $R --model "$T/cfg_syntax"
    # training data with nothing to learn: every step would be skipped
    refuse $bin "--data whose every loss weight is 0" "carries loss (every loss weight in the file is 0)" $good $R \
        --data "$T/zero_weights.tok"
    refuse $bin "--packing 5 on a file of token 5 alone" "with --packing 5, each label follows an end of text" $good $R \
        --data "$T/all_eot.tok" --packing 5
    refuse $bin "--eval-data of token 5 alone with --packing 5" "--eval-data $T/all_eot.tok: no label" $good $R \
        --eval-data "$T/all_eot.tok" --packing 5
    refuse $bin "--packing -1 (a negative id, by name)" "--packing -1: the end-of-text token id" $good $R --packing -1
    # a save records --seq, --data's tokens, --packing and the model: --resume compares each
    refuse $bin "--resume with another --seq" "saved with --seq 64, this run has --seq 32" $good $R --resume "$T/r_meta" --seq 32
    refuse $bin "--resume with another --data" "saved with --data $T/tiny.tok (9000 tokens), this run has --data $T/other.tok" \
        $good $R --resume "$T/r_meta" --data "$T/other.tok"
    refuse $bin "--resume with --packing" "saved with --packing none, this run has --packing 5" $good $R --resume "$T/r_meta" --packing 5
    refuse $bin "--resume with another YaRN" "saved with no YaRN, this run has YaRN x4" $good $R --resume "$T/r_meta" --yarn-factor 4
    refuse $bin "--resume with another --seq and --data, --packing allowed" "(--resume-changes seq,data)" $good $R \
        --resume "$T/r_meta" --seq 32 --data "$T/other.tok" --packing 5 --resume-changes packing
    refuse $bin "--resume-changes with an unknown word" '--resume-changes: "tokens" is not one of' $good $R \
        --resume "$T/r_meta" --resume-changes tokens
    refuse $bin "--resume-changes without --resume" "give --resume DIR too" $good $R --resume-changes seq
    out=$("$BIN/$bin" $good $R --resume "$T/r_meta" --dry-run 2>&1); rc=$?
    ok "$bin plans a resume of its own run's save, noting nothing (exit $rc)" "[ $rc -eq 0 ] && ! grep -q 'note: --resume' <<< \"\$out\""
    out=$("$BIN/$bin" $good $R --resume "$T/r_meta" --seq 32 --data "$T/other.tok" --resume-changes seq,data --dry-run 2>&1); rc=$?
    ok "$bin plans a resume with --resume-changes seq,data, noting both (exit $rc)" \
        "[ $rc -eq 0 ] && [ \$(grep -c 'allowed by --resume-changes' <<< \"\$out\") -eq 2 ]"
    # a name of 5000 bytes leaves the reason room: its head and tail, the reason after them
    for f in --data --model --resume --save --log; do
        refuse $bin "a 5000-byte $f" "$LONG_TAIL" $good $R $f "$LONG"
    done
    out=$("$BIN/$bin" $good $R --log /dev/null --trace "$T/tr_$n.txt" --timeline "$T/tl_$n.tsv" --dry-run 2>&1); rc=$?
    ok "$bin plans with --log /dev/null, and its dry-run creates no --trace or --timeline file (exit $rc)" \
        "[ $rc -eq 0 ] && [ ! -e '$T/tr_$n.txt' ] && [ ! -e '$T/tl_$n.tsv' ]"
    # numbers
    refuse $bin "--seq 17179869185G (a suffix past int64)" "is not an integer" $good $R --seq 17179869185G
    refuse $bin "--seq 2^63-1" "is outside [2,2G)" $good $R --seq 9223372036854775807
    refuse $bin "--lr -1" "is outside (0,1]" $good $R --lr -1
    refuse $bin "--lr nan" "is not a finite number" $good $R --lr nan
    refuse $bin "--layers -3" "is outside [0,1K]" $good $R --layers -3
    refuse $bin "--gpu-gib nan" "is not a finite number" $good $R --gpu-gib nan
    refuse $bin "--save-every -1" "is outside [0,1G]" $good $R --save-every -1
    refuse $bin "--steps -1" "is outside [0,1G]" $good $R --steps -1
    refuse $bin "--beta2 1" "is outside [0,1)" $good $R --beta2 1
    refuse $bin "--yarn-factor 0.5" "0 (as the config says) or at least 1" $good $R --yarn-factor 0.5
    if [ $n -ge 2 ]; then
        refuse $bin "--gpus 4294967304" "is outside [0,1K]" $good --gpus 4294967304
        refuse $bin "--local-ranks 100" "is outside [0,16]" $good --local-ranks 100
        # several GPUs and nodes: what cannot run is refused before the GPU, not once a node waits
        refuse $bin "--gpus 17 (one rank thread a GPU, 16 at most)" "--gpus 17: at most 16 GPUs a node" $good --gpus 17
        refuse $bin "--local-ranks 17" "is outside [0,16]" $good --local-ranks 17
        N2="--gpus 2 --nnodes 2 --node-rank 0"
        refuse $bin "two nodes without --rendezvous" "2 nodes (from --nnodes) need --rendezvous" $good $N2
        refuse $bin "node 0's rendezvous file in a missing directory" "$T/none/rdv: its directory $T/none does not exist" \
            $good $N2 --rendezvous "$T/none/rdv"
        refuse $bin "a rendezvous path that is a directory" "--rendezvous $T/dir.tok is a directory" $good $N2 --rendezvous "$T/dir.tok"
        refuse $bin "a rendezvous host that does not resolve" 'the host "node..0" does not resolve' $good $N2 --rendezvous tcp://node..0:29500
        SLURM_NNODES=2 SLURM_NODEID=1 SLURM_PROCID=0 refuse $bin "two Slurm tasks on one node (SLURM_PROCID 0 on node 1)" \
            "Slurm's task 0 (SLURM_PROCID) runs on node 1" $good --gpus 2 --rendezvous tcp://127.0.0.1:29500
        SLURM_STEP_NUM_NODES=2 SLURM_NNODES=3 SLURM_NODEID=1 SLURM_PROCID=1 SLURM_NTASKS=4 SLURM_STEP_ID=0 refuse $bin \
            "a step of 4 tasks on 2 nodes" "runs 4 task(s) (SLURM_NTASKS) on 2 node(s) (SLURM_STEP_NUM_NODES)" $good --gpus 2 \
            --rendezvous tcp://127.0.0.1:29500
    fi
done
# the commands a user would type: stage 5 on the books at 2M, one GPU, a rehearsal, two nodes
for R in "--gpus 1" "--gpus 8 --rehearse 0" "--local-ranks 2" "--gpus 8 --nnodes 2 --rehearse 0"; do
    refuse stage5 "0.6B at 2M on the books ($R)" "holds 1270101 tokens" --model 0.6B --seq 2097152 --layers 1 --steps 1 $R
done
refuse stage5 "8B at 2M on the books over 2 nodes (the recipe's row)" "holds 1270101 tokens" \
    --model 8B --seq 2097152 --gpus 8 --nnodes 2 --rehearse 0
# Qwen3.5 hybrids: what this build does not do with them yet is refused by name, before the GPU
Q=tests/golden/q35_l2_s112
./build/check_stage tokens "$Q" "$T/q35.tok" > /dev/null
for run in "stage1" "stage3 --local-ranks 2" "stage5 --local-ranks 2"; do
    set -- $run
    refuse $1 "--packing alone with a Qwen3.5 hybrid and an untagged file (its end of text is not Qwen3's)" \
        "name its end-of-text id" --model "$Q" --data "$T/q35.tok" --seq 112 --steps 1 --packing ${2:-} ${3:-}
done
refuse stage3 "zigzag chunks shorter than the conv's halo" "a chunk needs at least 3" --model "$Q" --data "$T/q35.tok" \
    --seq 32 --local-ranks 8
# a token file records its tokenizer (versions 3 and 4): another tokenizer's ids are refused by name, in
# range or not (Qwen3's are all inside Qwen3.5's vocabulary)
tag() { python3 -c 'import struct, sys
src, dst, tag = sys.argv[1:4]; b = open(src, "rb").read()
v = struct.unpack("<I", b[8:12])[0]
open(dst, "wb").write(b[:8] + struct.pack("<I", v + 2) + b[12:24] + tag.encode().ljust(32, b"\0") + b[24:])' "$@"; }
tag "$T/q35.tok" "$T/q35_qwen3.tok" qwen3
refuse stage1 "Qwen3's token ids for a Qwen3.5 hybrid" "ids are the Qwen3 tokenizer's" --model "$Q" --data "$T/q35_qwen3.tok" --seq 112
refuse stage3 "Qwen3's token ids for a Qwen3.5 hybrid (--eval-data)" "ids are the Qwen3 tokenizer's" --model "$Q" \
    --data "$T/q35.tok" --eval-data "$T/q35_qwen3.tok" --seq 112 --local-ranks 2
# ... and --packing alone takes the end of text a tagged file names (data/prepare.py --tokenizer writes it)
tag "$T/q35.tok" "$T/q35_eot7.tok" "eot=7,vocab=256"
./stage1 --model "$Q" --data "$T/q35_eot7.tok" --seq 112 --steps 1 --packing --dry-run > "$T/p7.txt" 2>&1
ok "--packing alone takes a tagged file's end of text (eot=7)" "grep -q 'a document ends at token 7 ' '$T/p7.txt'" ||
    tail -3 "$T/p7.txt"
tag "$T/q35.tok" "$T/q35_eot999.tok" "eot=999,vocab=1000"
refuse stage1 "--packing alone, the tag's end of text past the vocabulary" "past this model's vocabulary" --model "$Q" \
    --data "$T/q35_eot999.tok" --seq 112 --steps 1 --packing
tag "$T/q35.tok" "$T/q35_v1000.tok" "eot=7,vocab=1000"
refuse stage1 "a token file whose tokenizer is larger than the model's vocabulary" "has 1000 ids" --model "$Q" \
    --data "$T/q35_v1000.tok" --seq 112 --steps 1
U=tests/golden/untied_gqa4_s100
./build/check_stage tokens "$U" "$T/u.tok" > /dev/null
tag "$T/u.tok" "$T/u_other.tok" "eot=248044,vocab=248077"
refuse stage1 "another tokenizer's ids for a Qwen3 model" "ids are another tokenizer's" --model "$U" --data "$T/u_other.tok" --seq 100
refuse stage4 "another tokenizer's ids for a Qwen3 model" "reads Qwen3's" --model "$U" --data "$T/u_other.tok" --seq 100 \
    --local-ranks 2
# the shipped books in Qwen3.5's ids (data/prepare.py --tokenizer qwen3.5): a Qwen3.5 model plans them with no note,
# its end of text from the tag; a Qwen3 model refuses them
out=$("$BIN/stage1" --model Qwen3.5-0.8B --data data/books_q35.tok --seq 4096 --steps 1 --packing --dry-run 2>&1); rc=$?
ok "stage1 plans data/books_q35.tok for Qwen3.5-0.8B, documents ending at 248044 (exit $rc)" \
    "[ $rc -eq 0 ] && grep -q 'a document ends at token 248044 ' <<< \"\$out\" && ! grep -q 'records no tokenizer' <<< \"\$out\""
refuse stage1 "data/books_q35.tok for a Qwen3 model" "tokenized for another model" --model 0.6B --data data/books_q35.tok \
    --seq 4096 --steps 1
# a Qwen3.5 MoE release holds each layer's routed experts fused (gate_up_proj, down_proj; tests/fuse_experts.py
# writes the MoE fixture so): every stage plans it, and a release missing one of them is refused by both names
F=$T/q35moe_fused
python3 tests/fuse_experts.py tests/golden/q35moe_l2_s112 "$F" > /dev/null
./build/check_stage tokens "$F" "$T/fused.tok" > /dev/null
for run in "stage1" "stage2 --local-ranks 1" "stage3 --local-ranks 2" "stage4 --local-ranks 2" "stage5 --local-ranks 2"; do
    set -- $run
    out=$(timeout 60 "$BIN/$1" --model "$F" --data "$T/fused.tok" --seq 112 --steps 1 ${2:-} ${3:-} --dry-run 2>&1); rc=$?
    ok "$1 plans a release's fused experts (exit $rc)" "[ $rc -eq 0 ] && grep -q 'total (peak)' <<< \"\$out\""
done
mkdir -p "$T/fused_bad" && cp "$F/config.json" "$T/fused_bad/"
python3 -c 'import json, struct, sys
src, dst, drop = sys.argv[1:4]; b = open(src, "rb").read(); n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); h.pop("__metadata__", None); data = b[8 + n:]; out, blobs, off = {}, [], 0
for k, v in h.items():
    if k == drop: continue
    x = data[v["data_offsets"][0]:v["data_offsets"][1]]; out[k] = dict(v, data_offsets=[off, off + len(x)]); off += len(x); blobs.append(x)
j = json.dumps(out).encode(); j += b" " * (-len(j) % 8)
open(dst, "wb").write(struct.pack("<Q", len(j)) + j + b"".join(blobs))' "$F/model.safetensors" "$T/fused_bad/model.safetensors" \
    model.layers.1.mlp.experts.down_proj
for run in "stage1" "stage3 --local-ranks 2"; do
    set -- $run
    refuse $1 "a fused release missing a layer's down_proj" 'and so is the fused "model.layers.1.mlp.experts.down_proj"' \
        --model "$T/fused_bad" --data "$T/fused.tok" --seq 112 --steps 1 ${2:-} ${3:-}
done
# several nodes: the rendezvous's job secret, node 0's address and the run id, refused by name before
# the GPU (stages 2-4 reach their ranks without one; stage 5 stops at its advice first)
printf 'a-secret-of-this-test-job-0123456789\n' > "$T/secret" && chmod 600 "$T/secret"
printf 'a-secret-anyone-may-read-0123456789\n' > "$T/secret644" && chmod 644 "$T/secret644"
LONG=$(printf 'r%.0s' $(seq 70))
NODES="--gpus 1 --nnodes 2 --rendezvous tcp://127.0.0.1:29500"
for n in 2 3 4; do
    LONGCTX_JOB_SECRET= LONGCTX_JOB_SECRET_FILE= refuse stage$n "several nodes over TCP without a job secret" \
        "need a job secret that only this job's nodes hold: on every node export LONGCTX_JOB_SECRET_FILE" $good $NODES --node-rank 1
    LONGCTX_JOB_SECRET= LONGCTX_JOB_SECRET_FILE="$T/secret644" refuse stage$n "a job secret file others can read" \
        "can be read or changed by group or others (mode 0644)" $good $NODES --node-rank 1
    LONGCTX_JOB_SECRET= LONGCTX_JOB_SECRET_FILE="$T/secret" refuse stage$n "node 0 given another machine's address" \
        "(192.0.2.1) is not one of this machine's addresses" $good --gpus 1 --nnodes 2 --node-rank 0 --rendezvous tcp://192.0.2.1:29500
    LONGCTX_RUN_ID= refuse stage$n "a --run-id of 70 characters" "has 70 characters, at most 63" $good --local-ranks 2 --run-id "$LONG"
    LONGCTX_RUN_ID="$LONG" LONGCTX_JOB_SECRET_FILE="$T/secret" refuse stage$n "a LONGCTX_RUN_ID of 70 characters" \
        "LONGCTX_RUN_ID=\"rrrr" $good $NODES --node-rank 1
    refuse stage$n "a --rendezvous host of 5000 characters" "the host is 5000 characters, at most 255" $good \
        --gpus 1 --nnodes 2 --rendezvous "tcp://$(printf 'h%.0s' $(seq 5000)):29500"
done
# the tools beside the stages: build/gdn_rate's options (before any CUDA call) and tests/fuse_experts.py's
# inputs, each refused by name on its last line, exit 2, no source line
tool_refuses() { # WHAT WORDS PROG CMD...: CMD exits 2 and its last line holds WORDS and no source line
    local what=$1 words=$2 prog=$3; shift 3
    local out rc last
    out=$(timeout 60 "$@" 2>&1 < /dev/null); rc=$?
    last=$(tail -n 1 <<< "$out")
    ok "$prog refuses $what" "[ $rc -eq 2 ] && grep -qF -- \"\$words\" <<< \"\$last\" && ! grep -qE '[a-z]\\.(c|py):[0-9]' <<< \"\$last\""
    echo "  $prog -> ${last:0:200}"
}
G="$BIN/build/gdn_rate"; [ -x "$G" ] || G=./build/gdn_rate
tool_refuses "--seq 32k" "comma-separated (32k)" gdn_rate "$G" --seq 32k
tool_refuses "--seq with 17 lengths" "at most 16 lengths" gdn_rate "$G" --seq 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17
tool_refuses "--tile 4" "--tile takes 8 or 16 (4)" gdn_rate "$G" --tile 4
tool_refuses "--hv 0" "--hv takes a number of 1 to 4096 (0)" gdn_rate "$G" --hv 0
tool_refuses "--hv with no value" "--hv needs a value" gdn_rate "$G" --hv
tool_refuses "an unknown option" "unknown option --bogus" gdn_rate "$G" --bogus 1
tool_refuses "a directory without model.safetensors" "is not a file" fuse_experts python3 tests/fuse_experts.py "$T" "$T/fx1"
tool_refuses "a model without per-expert tensors" "no per-expert tensors" fuse_experts python3 tests/fuse_experts.py "$Q" "$T/fx2"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
