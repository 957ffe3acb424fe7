#!/usr/bin/env bash
# Trainer checks that need no GPU: --help documents exactly the flags listed below, bad input is
# refused with a message, --dry-run prints the memory plan. Prints "N passed, M failed".
set -u
cd "$(dirname "$0")/.."
pass=0; fail=0
ok() { if eval "$2"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1"; fi; }

# Every stage's flags, written here by hand (NOT read from the stage's option table, which is
# what prints --help: a check against it could not fail). Each stage has its predecessor's flags
# plus its own. A flag added to a stage must be added here (to the first stage that has it), and
# one removed or renamed must be changed here, or the --help checks below fail.
STAGE1_FLAGS=(--model --data --seq --steps --lr --warmup --schedule --min-lr-frac --wd --beta1 --beta2 --eps
              --clip --loss-chunk --keep-attn --layers --seed --save --save-every --save-keep --resume --resume-changes --dry-run --gpu-gib
              --log --eval-data --eval-every --eval-windows --dump-grads --profile --trace --timeline --yarn-factor --yarn-original --moe-gemm
              --packing --help)
STAGE2_FLAGS=("${STAGE1_FLAGS[@]}" --gpus --local-ranks --nnodes --node-rank --rendezvous --run-id --comm-timeout
              --rehearse --link-gbps --net-gbps)
STAGE3_FLAGS=("${STAGE2_FLAGS[@]}" --merge --layout)
STAGE4_FLAGS=("${STAGE3_FLAGS[@]}" --offload --host-gib)
STAGE5_FLAGS=("${STAGE4_FLAGS[@]}" --mlp-tile --attn-groups)

for s in stage[1-5]_*.c; do
    bin=./$(echo "$s" | cut -d_ -f1)
    [ -x "$bin" ] || { fail=$((fail + 1)); echo "FAIL $bin not built"; continue; }
    out=$($bin --help 2>&1); rc=$?
    ok "$bin --help exits 0" "[ $rc -eq 0 ]"
    n=$(echo "$s" | cut -c6)
    list="STAGE${n}_FLAGS[@]"
    if ! declare -p "STAGE${n}_FLAGS" > /dev/null 2>&1; then
        fail=$((fail + 1)); echo "FAIL $bin: no STAGE${n}_FLAGS list in tests/test_cli.sh"; continue
    fi
    want=("${!list}")
    # the flags --help prints: the first word of each option line (the lines after "options:")
    opts=$(sed -n '/^options:/,$p' <<< "$out")
    printed=$(grep -oE '^[[:space:]]+--[a-z0-9-]+' <<< "$opts" | sed 's/^[[:space:]]*//' | tr '\n' ' ')
    for flag in "${want[@]}"; do
        # a whole flag: an option line starting with it and then whitespace (--seq never matches --seq-foo)
        ok "$bin --help documents $flag" "grep -qE -- '^[[:space:]]+$flag([[:space:]]|\$)' <<< \"\$opts\""
    done
    for flag in $printed; do
        ok "$bin --help prints $flag, which tests/test_cli.sh lists for stage $n" \
            "printf '%s\\n' \"\${want[@]}\" | grep -qxF -- '$flag'"
    done
    ok "$bin --help prints ${#want[@]} flags (got $(wc -w <<< "$printed"))" "[ $(wc -w <<< "$printed") -eq ${#want[@]} ]"
    check_refusal() { # description, expected message, args...
        local what=$1 msg=$2; shift 2
        local o; o=$($bin "$@" 2>&1); local r=$?
        ok "$bin refuses $what" "[ $r -ne 0 ] && grep -q -- '$msg' <<< \"\$o\""
        echo "  $bin $* -> $(echo "$o" | tail -1)"
    }
    check_refusal "an unknown flag" "unknown option" --sqe 4
    check_refusal "a bad number" "not an integer" --seq 12x
    check_refusal "an unknown model" "neither a size" --model 7B --dry-run
    check_refusal "an MoE config.json without num_experts_per_tok" "num_experts_per_tok" --model tests/bad_configs/moe --dry-run
    out=$($bin --model 30B-A3B --layers 2 --seq 4096 --dry-run 2>&1); rc=$?
    ok "$bin plans the MoE 30B-A3B (MoE is the model: every stage trains it)" "[ $rc -eq 0 ] && grep -q 'MoE GEMMs loop' <<< \"\$out\""
    check_refusal "a model directory with sliding windows" "use_sliding_window" --model tests/bad_configs/sliding --dry-run
    # Qwen3.5 config.json: what the model cannot be, and what the kernels do not run, by name
    check_refusal "a qwen3_5 config.json without its text_config" "without a \"text_config\"" --model tests/bad_configs/q35_no_text_config --dry-run
    check_refusal "a Qwen3.5 MoE config.json without its experts" "missing required field \"num_experts\"" \
        --model tests/bad_configs/q35_moe --dry-run
    check_refusal "a layer kind neither linear nor full" "sliding_attention" --model tests/bad_configs/q35_layer_kind --dry-run
    check_refusal "value heads not a multiple of key heads" "is not a multiple of linear_num_key_heads" \
        --model tests/bad_configs/q35_value_heads --dry-run
    check_refusal "a linear key head dim the kernels do not take" "take 32, 64 or 128" --model tests/bad_configs/q35_key_dim96 --dry-run
    check_refusal "a partial rotation of an odd count of dims" "must be even" --model tests/bad_configs/q35_odd_rotary --dry-run
    check_refusal "a too-long layer count" "--layers" --layers 99 --dry-run
    check_refusal "resuming from an incomplete save, by name" "step-3.partial: an incomplete save" \
        --resume /tmp/nowhere/step-3.partial --dry-run
    check_refusal "resuming from a missing directory" "no such directory" --resume /tmp/nowhere/ck --dry-run
    check_refusal "a negative --save-keep" "save-keep: -1 is outside" --save-keep -1 --dry-run
    check_refusal "--eval-every without --eval-data" "needs --eval-data" --eval-every 5 --dry-run
    check_refusal "--eval-windows 0" "eval-windows: 0 is outside" --eval-data x.tok --eval-windows 0 --dry-run
    gpus=
    [[ " ${want[*]} " == *" --gpus "* ]] && gpus="--gpus 1" # several-GPU stages: name the ranks so no GPU is counted
    [[ " ${want[*]} " == *" --attn-groups "* ]] && gpus="$gpus --attn-groups 1" # stage 5: all heads in one call
    check_refusal "a 2^31+ attention call" "2^31" --model 32B --seq 1M $gpus
    if grep -q zigzag_check "$s"; then
        check_refusal "a sequence not divisible by 2P" "divisible by 2 x 4" --seq 100 --gpus 4 --dry-run
    fi
    out=$($bin --model 0.6B --seq 131072 --dry-run 2>&1); rc=$?
    ok "$bin --dry-run 0.6B 128K exits 0" "[ $rc -eq 0 ]"
    ok "$bin --dry-run prints the plan" "grep -q 'total (peak)' <<< \"\$out\" && grep -q 'checkpoints' <<< \"\$out\""
    echo "$out" | sed 's/^/  /'
    out=$($bin --model 0.6B --seq 1M --keep-attn all $gpus --dry-run 2>&1)
    ok "$bin --dry-run says when a plan does not fit" "grep -q 'DOES NOT FIT' <<< \"\$out\""
    # --keep-attn: one meaning everywhere (alone or all: every layer; none or 0: none); stage 4 adds N, auto, gpu:,host:
    for w in "" all none 0; do
        out=$($bin --model 0.6B --layers 4 --seq 4096 $gpus --keep-attn $w --dry-run 2>&1); rc=$?
        want=4; [ "$w" = none ] || [ "$w" = 0 ] && want=0
        got=$(grep -c 'kept O\|kept attention (O, LSE)' <<< "$out")
        ok "$bin --keep-attn ${w:-(alone)} keeps $want layers" "[ $rc -eq 0 ] && [ $(( want > 0 )) -eq $(( got > 0 )) ]"
    done
    # --yarn-factor alone: every stage stretches Qwen3 from the 32768 positions it trained on (once
    # stages 1-4 took 0, no interpolation at all, and wrote a config.json that would not load back)
    out=$($bin --model 0.6B --seq 4096 $gpus --yarn-factor 4 --dry-run 2>&1); rc=$?
    ok "$bin --yarn-factor 4 is YaRN x4 from 32768, as in every stage" "[ $rc -eq 0 ] && grep -q 'YaRN x4 from 32768' <<< \"\$out\""
    [ "$n" -le 4 ] && # (stage 5 takes it as where its YaRN from the sequence starts)
        check_refusal "--yarn-original for a model without YaRN, alone" "give --yarn-factor too" --yarn-original 4096 --dry-run
    check_refusal "YaRN past the positions config.json may hold" "reaches past" --model tests/golden/yarn4_orig32 \
        --yarn-factor 1e6 --yarn-original 4G --dry-run
    check_refusal "--seq 2G (RoPE positions are int32)" "outside \[2,2G)" --seq 2G --dry-run
    # an MoE pass of 512K tokens x top-32 = 2^24 pairs: stages 1-4 in one pass, stage 5 in a tile that big
    tile=; [ "$n" -eq 5 ] && tile="--mlp-tile 512K"
    check_refusal "an MoE pass of 2^24 (token, expert) pairs, before the GPU" "2^24" --model tests/bad_configs/moe_topk32 \
        --seq 512K $gpus $tile
    out=$($bin --model tests/bad_configs/moe_topk32 --seq 512K $gpus $tile --dry-run 2>&1)
    ok "$bin --dry-run of 2^24 MoE pairs says the run would stop" "grep -q '2^24' <<< \"\$out\""
    if [ "$n" -le 3 ]; then
        check_refusal "--keep-attn 2 with the stage that adds it" "come in stage 4" --keep-attn 2 --dry-run
        check_refusal "--keep-attn auto with the stage that adds it" "come in stage 4" --keep-attn auto --dry-run
    fi
done
# stage 5: the headline's defaults, its refusal without a GPU, YaRN from the sequence, tiling's bounds
if [ -x ./stage5 ]; then
    out=$(./stage5 --seq 1M 2>&1); rc=$?
    ok "./stage5 --seq 1M is Qwen3-32B with YaRN x32 on 8 GPUs (planned here)" \
       "grep -q 'model 32B.*YaRN x32 from 32768' <<< \"\$out\" && grep -q 'over 8 ranks' <<< \"\$out\""
    ok "./stage5 --seq 1M without a GPU stops, names what is short and the command that plans it" \
       "[ $rc -ne 0 ] && grep -q 'GPUs: the job needs 8 on this node, 0 visible' <<< \"\$out\" && grep -q -- '--dry-run' <<< \"\$out\""
    echo "$out" | sed -n '/cannot run/,$p' | sed 's/^/  /'
    out=$(./stage5 --gpus 8 --seq 1M --keep-attn 0 --dry-run 2>&1)
    peak=$(sed -n 's/.*total (peak) *\([0-9.]*\) GiB.*/\1/p' <<< "$out")
    ok "Qwen3-32B at 1M on 8 GPUs, attention recomputed, plans within 40 GiB per GPU (got $peak)" "awk -v p='$peak' 'BEGIN{exit !(p > 0 && p <= 40)}'"
    big=$(mktemp -d)/rand.tok # past the books' 1.27M tokens: 2M and 4M windows need a longer file
    ./build/check_stage random 151936 4194400 1 "$big" > /dev/null
    out=$(./stage5 --gpus 8 --seq 2M --gpu-gib 74.5 --host-gib 2048 --data "$big" --dry-run 2>&1)
    peak=$(sed -n 's/.*total (peak) *\([0-9.]*\) GiB.*/\1/p' <<< "$out")
    ok "Qwen3-32B at 2M on 8 GPUs plans within 80 GB (74.5 GiB) per GPU (got $peak) and 2 TiB of host" \
       "awk -v p='$peak' 'BEGIN{exit !(p > 0 && p <= 74.5)}' && grep -q 'of 2048.0 GiB (--host-gib): fits' <<< \"\$out\""
    # kept attention's placement: 32B at 1M, 80 GB GPUs, a 2 TiB node, NCCL without NVLS (as on the
    # H200 here): per rank a layer's O and LSE are 2.03 GiB; the GPU's room above the plan holds 20,
    # or 18 beside the two slots of the 40 layers the host holds (0.9 x 2048 GiB less the states and
    # checkpoints, over 8 ranks)
    J="--gpus 8 --seq 1M --gpu-gib 74.5 --host-gib 2048 --dry-run"
    out=$(NCCL_NVLS_ENABLE=0 ./stage5 $J 2>&1)
    peak=$(sed -n 's/.*total (peak) *\([0-9.]*\) GiB.*/\1/p' <<< "$out")
    ok "32B at 1M, 80 GB GPUs and 2 TiB: 18 layers' attention on the GPU, 40 on the host, 6 recompute, within 74.5 GiB ($peak)" \
       "grep -q 'attention kept: 18 layers on the GPU, 40 on the host, 6 recompute' <<< \"\$out\" && awk -v p='$peak' 'BEGIN{exit !(p > 70 && p <= 74.5)}'"
    grep "attention kept:" <<< "$out" | sed 's/^/  /'
    out=$(NCCL_NVLS_ENABLE=0 ./stage5 $J --keep-attn 20 2>&1)
    ok "--keep-attn 20: all on the GPU (no slots needed)" "grep -q 'attention kept: 20 layers on the GPU, 0 on the host, 44 recompute' <<< \"\$out\""
    out=$(NCCL_NVLS_ENABLE=0 ./stage5 $J --keep-attn 21 2>&1)
    ok "--keep-attn 21: 18 on the GPU beside the host's slots, 3 on the host" "grep -q 'attention kept: 18 layers on the GPU, 3 on the host, 43 recompute' <<< \"\$out\""
    out=$(./stage5 --gpus 8 --seq 1M --keep-attn gpu:2,host:70 --dry-run 2>&1)
    ok "--keep-attn gpu:2,host:70 forces 2 and the other 62" "grep -q 'attention kept: 2 layers on the GPU, 62 on the host, 0 recompute' <<< \"\$out\""
    for bad in "bogus|not all, none, auto, a count" "gpu:x|\"gpu:x\" is not gpu:N" "host:-1|\"host:-1\" is not gpu:N" \
               "gpu:1,disk:2|\"disk:2\" is not gpu:N"; do
        out=$(./stage5 --gpus 8 --seq 1M --keep-attn "${bad%%|*}" --dry-run 2>&1); rc=$?
        ok "stage5 refuses --keep-attn ${bad%%|*} (${bad#*|})" "[ $rc -ne 0 ] && grep -qF -- '${bad#*|}' <<< \"\$out\""
    done
    # auto where the GPU holds less than the host's two slots: the rest recompute (a host layer would not fit)
    one=$(./stage5 --model 0.6B --layers 4 --seq 4096 --gpus 1 --keep-attn 0 --dry-run | sed -n 's/.*total (peak) *\([0-9.]*\) GiB.*/\1/p')
    cap=$(awk -v b="$one" 'BEGIN { printf "%.4f", b + 1.5 * (4096 * 2048 * 2 + 16 * 4096 * 4) / 2^30 }')
    out=$(./stage5 --model 0.6B --layers 4 --seq 4096 --gpus 1 --keep-attn auto --gpu-gib "$cap" --dry-run 2>&1)
    ok "auto with room for 1.5 layers keeps 1 on the GPU and none on the host" \
       "grep -q 'attention kept: 1 layers on the GPU, 0 on the host, 3 recompute' <<< \"\$out\" && grep -q 'on the device: fits' <<< \"\$out\""
    out=$(./stage5 --model 0.6B --layers 4 --seq 4096 --gpus 1 --keep-attn auto --gpu-gib 1e5 --host-gib 1e6 --dry-run 2>&1)
    ok "auto under a huge --gpu-gib keeps every layer on the GPU" "grep -q 'attention kept: 4 layers on the GPU, 0 on the host' <<< \"\$out\""
    out=$(./stage5 --gpus 8 --seq 1M --offload ckpt --keep-attn host:3 --dry-run 2>&1); rc=$?
    ok "stage5 refuses layers on the host without --offload attn" "[ $rc -ne 0 ] && grep -q 'need --offload attn' <<< \"\$out\""
    out=$(./stage5 --gpus 8 --seq 1M --offload none --keep-attn gpu:999,host:4 --dry-run 2>&1); rc=$?
    ok "stage5 refuses host layers without --offload attn even when the GPU part takes them all" "[ $rc -ne 0 ] && grep -q 'need --offload attn' <<< \"\$out\""
    out=$(./stage5 --model 0.6B --seq 16K --dry-run 2>&1)
    ok "stage5 at 16K: no YaRN (below 32768)" "! grep -q YaRN <<< \"\$out\""
    out=$(./stage5 --model 0.6B --seq 128K --yarn-factor 1 --dry-run 2>&1)
    ok "stage5 --yarn-factor 1 turns YaRN off" "! grep -q YaRN <<< \"\$out\""
    out=$(./stage5 --model tests/golden/yarn4_orig32 --seq 96 --dry-run 2>&1)
    ok "stage5 keeps a config's own YaRN" "grep -q 'YaRN x4 from 32' <<< \"\$out\""
    out=$(./stage5 --gpus 8 --yarn-factor 32 --dry-run 2>&1)
    ok "stage5 --yarn-factor 32 scales from Qwen3's 32768 too" "grep -q 'YaRN x32 from 32768' <<< \"\$out\""
    long=$(mktemp -d); sed 's/"max_position_embeddings": 4096/"max_position_embeddings": 262144/' \
        tests/golden/untied_gqa4_s100/config.json > "$long/config.json"
    out=$(./stage5 --model "$long" --seq 128K --dry-run 2>&1); rm -rf "$long"
    ok "stage5 leaves RoPE alone for a model trained on 262144 positions at 128K" "grep -q '^model' <<< \"\$out\" && ! grep -q YaRN <<< \"\$out\""
    out=$(./stage5 --gpus 8 --offload ckpt,states --gpu-gib 40 --dry-run 2>&1)
    ok "stage5's default keeps on the GPU only what fits when O is not offloaded" "grep -q 'attention kept: 2 layers on the GPU, 0 on the host, 62 recompute' <<< \"\$out\""
    out=$(./stage5 --gpus 8 --rehearse 0 --layers 4 2>&1)
    ok "stage5 without a GPU: a rehearsal's advice plans the rehearsal" "grep -q -- '--gpus 8 --nnodes 1 --rehearse 0 --layers 4 --dry-run' <<< \"\$out\""
    # the nearest commands on a machine with a GPU (common/advice.c; pretend memory, no GPU needed):
    # each suggestion, planned by its own --dry-run on that memory, fits; each says its step time
    for ask in "32B 1048576 8 1 139.8 100" "32B 1048576 8 1 74.5 2048" "8B 262144 2 1 139.8 120" "0.6B 4194304 1 1 139.8 100"; do
        set -- $ask
        out=$(./build/test_advice ./stage5 $ask "$big" 2>&1)
        n=$(grep -c '^  .*: \./stage5 ' <<< "$out")
        ok "advice for $1 at $2 over $3 ranks on $4 GPU of $5 GiB, $6 GiB host: suggestions ($n)" "[ $n -ge 1 ]"
        echo "$out" | sed 's/^/  /'
        while read -r line; do
            cmd=${line%%   (~*}
            plan=$(${cmd#*: } --gpu-gib $5 --host-gib $6 --dry-run 2>&1)
            host=$(sed -n '/^pinned host memory per rank/,/^  total/s/^  total *\([0-9.]*\).*/\1/p' <<< "$plan")
            g=$(sed -n 's/.*--gpus \([0-9]*\).*/\1/p' <<< "$cmd"); grep -q -- --rehearse <<< "$cmd" && g=1
            ok "  its plan fits $5 GiB and $6 GiB host: ${cmd#*: }" \
               "grep -q 'on the device: fits' <<< \"\$plan\" && awk -v h='${host:-0}' -v g=$g -v b=$6 'BEGIN { exit !(h * g <= b) }'"
            ok "  it says its step time and a --steps" "grep -qE 'a step here; --steps [0-9]+ (ends in about 5 minutes|takes about)' <<< '$line'"
        done < <(grep '^  .*: \./stage5 ' <<< "$out")
    done
    out=$(./stage5 --model 0.6B --seq 128K --gpus 1 --dry-run 2>&1)
    ok "stage5 0.6B at 128K tiles the MLP in 92160 rows and groups heads by 8" "grep -q '8 head groups, MLP tiles of 92160' <<< \"\$out\""
    out=$(./stage5 --model 32B --seq 1M --gpus 8 --mlp-tile 100000 --dry-run 2>&1); rc=$?
    ok "stage5 refuses an MLP tile past 2^31 elements" "[ $rc -ne 0 ] && grep -q '2^31' <<< \"\$out\""
    out=$(./stage5 --model 0.6B --attn-groups 3 --dry-run 2>&1); rc=$?
    ok "stage5 refuses head groups that do not divide the K/V heads" "[ $rc -ne 0 ] && grep -q 'must divide' <<< \"\$out\""
    out=$(./stage5 --model 30B-A3B --moe-gemm batched --dry-run 2>&1); rc=$?
    ok "stage5 refuses an unknown --moe-gemm" "[ $rc -ne 0 ] && grep -q 'loop or grouped' <<< \"\$out\""
    rm -rf "$(dirname "$big")"
fi
# --packing: alone <|endoftext|>, or a token id below the vocabulary, or none; the plan says so
for s in 1 2 3 4 5; do
    out=$(./stage$s --model 0.6B --packing --dry-run 2>&1); rc=$?
    ok "stage$s --packing plans a packed run" "[ $rc -eq 0 ] && grep -q -- ', --packing' <<< \"\$out\""
    out=$(./stage$s --model 0.6B --packing none --dry-run 2>&1); rc=$?
    ok "stage$s --packing none plans an unpacked run" "[ $rc -eq 0 ] && ! grep -q -- ', --packing' <<< \"\$out\""
    for bad in 151936 abc 12x; do
        out=$(./stage$s --model 0.6B --packing $bad --dry-run 2>&1); rc=$?
        ok "stage$s refuses --packing $bad, naming the range" "[ $rc -ne 0 ] && grep -q 'the end-of-text token id, in \[0, 151936)' <<< \"\$out\""
    done
    out=$(./stage$s --model tests/golden/untied_gqa4_s100 --packing --dry-run 2>&1); rc=$?
    ok "stage$s refuses --packing alone for a vocabulary without <|endoftext|>" "[ $rc -ne 0 ] && grep -q 'past this model' <<< \"\$out\""
done
echo "  ./stage1 --model 0.6B --packing 151936 -> $(./stage1 --model 0.6B --packing 151936 --dry-run 2>&1 | tail -1)"
# the front door: a dry-run plans the headline's machine when no GPU is here, and says so first
out=$(./stage5 --seq 1048576 --dry-run 2>&1); rc=$?
ok "./stage5 --seq 1048576 --dry-run plans 8 GPUs of 80 GB and a 2 TiB node, and says so on its first line" \
   "[ $rc -eq 0 ] && head -1 <<< \"\$out\" | grep -q '^planned for 8 GPUs of 74.5 GiB and 2048 GiB of host memory per node: the headline' && grep -q 'over 8 ranks' <<< \"\$out\" && grep -q 'on the device: fits' <<< \"\$out\""
out=$(./stage5 --seq 1M --gpus 1 --dry-run 2>&1)
ok "a dry-run that does not fit prints the run's verdict and advice" \
   "grep -q 'the planned machine cannot run it' <<< \"\$out\" && grep -q 'nearest commands that fit the planned machine' <<< \"\$out\""
# a --layers cut is the job: the advice plans and prints the cut, not the whole model (it did not)
out=$(./stage5 --model 8B --layers 2 --seq 1M --gpus 1 --dry-run 2>&1)
ok "the advice for a --layers cut keeps the cut" \
   "grep -q 'fewer tokens: ./stage5 --model 8B --seq [0-9]* --gpus 1 --layers 2 ' <<< \"\$out\" && grep -q 'rehearse rank 0 of 8 GPUs: .* --layers [12] ' <<< \"\$out\""
# ... and the job's own plan-changing options: --offload none planned as --offload all suggested jobs
# that did not fit (a front-door probe found it)
out=$(./stage5 --model 0.6B --seq 1M --gpus 1 --offload none --dry-run 2>&1)
ok "the advice plans and prints the job's --offload none" \
   "grep -q 'fewer tokens: ./stage5 --model 0.6B --seq 524288 --gpus 1 --offload=none ' <<< \"\$out\" && grep -q 'rehearse rank 0 of 8 GPUs: .* --offload=none ' <<< \"\$out\""
out=$(./stage5 --model 0.6B --seq 1M --gpus 1 --yarn-factor -0 --offload none --dry-run 2>&1) # a value starting with '-'
ok "the advice reads the job's options as the parser does (--yarn-factor -0 kept, --offload not taken as its value)" \
   "grep -q 'fewer tokens: .* --yarn-factor=-0 --offload=none ' <<< \"\$out\""
out=$(./stage5 --model Qwen3.5-27B --seq 256K --gpus 1 --dry-run 2>&1)
ok "a Qwen3.5 model's smaller-model advice is a smaller Qwen3.5 (its tokenizer, its data)" \
   "grep -q 'a smaller model: ./stage5 --model Qwen3.5-9B --seq 262144 --gpus 1 ' <<< \"\$out\""
out=$(./stage1 --dry-run 2>&1)
ok "stage 1's dry-run plans one GPU of 80 GB" "head -1 <<< \"\$out\" | grep -q '^planned for 1 GPU of 74.5 GiB: the headline'"
out=$(./stage5 --seq 1M --gpus 8 --rehearse 0 --layers 2 --dry-run 2>&1)
ok "a rehearsal plans the host memory of its one rank" "grep -q 'pinned host memory per node (1 rank): 7.8 GiB of 2048.0 GiB' <<< \"\$out\""
out=$(./stage5 --seq 1M --gpus 2 --gpu-gib 139.8 --host-gib 100 --dry-run 2>&1)
ok "flags given set the planned machine" "head -1 <<< \"\$out\" | grep -q '^planned for 2 GPUs of 139.8 GiB and 100 GiB of host memory per node'"
# the committed stage diffs are what `make diffs` writes from the stage files now
prev=
for s in $(ls stage[1-5]_*.c | sort); do
    if [ -n "$prev" ]; then
        name=diffs/stage$(echo $prev | cut -c6)-stage$(echo $s | cut -c6).diff
        ok "$name is fresh (make diffs)" "diff -u --label $prev --label $s $prev $s | cmp -s - $name"
    fi
    prev=$s
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
