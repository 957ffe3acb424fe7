#!/usr/bin/env bash
# YaRN from the command line (on an H100/H200): --yarn-factor 4 alone must train exactly the model
# whose config.json says YaRN x4 from the original context (min(max_position_embeddings, 32768)),
# in every stage, and its save must load back for --resume. Stages 1-4 once stretched from 0: no
# interpolation at all, only the attention factor, and a save with max_position_embeddings 0 that
# the resume refused. Each stage's step-1 loss is compared bit for bit with the same stage on the
# config that says YaRN, its gradients by cosine (cuDNN's backward accumulates in a varying order,
# so gradients are not bit-reproducible); a config that is the old behaviour (x4 from 2^30: the
# attention factor, every frequency left alone) must give another loss, so the check can fail.
# Prints "N passed, M failed".
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
g=tests/golden/untied_gqa4_s100 # max_position_embeddings 4096: YaRN x4 from 4096
./build/check_stage random 320 20000 7 "$tmp/rand.tok" > /dev/null
yarn_config() { # DIR ORIGINAL: the golden model with YaRN x4 from ORIGINAL in its config.json
    mkdir -p "$1"; cp "$g/model.safetensors" "$1/"
    python3 - "$g/config.json" "$1/config.json" "$2" <<'PY'
import json, sys
c, orig = json.load(open(sys.argv[1])), int(sys.argv[3])
c["max_position_embeddings"] = 4 * orig
c["rope_parameters"] = {"rope_type": "yarn", "rope_theta": c["rope_parameters"]["rope_theta"], "factor": 4.0,
                        "original_max_position_embeddings": orig}
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
}
yarn_config "$tmp/yarn" 4096
yarn_config "$tmp/oldbug" $((1 << 30))
loss_of() { grep -o '"loss":[-0-9.e]*' "$1" 2>/dev/null | head -1 | cut -d: -f2; }
A="--data $tmp/rand.tok --seq 1000 --lr 1e-3 --warmup 0 --schedule constant"
run() { # NAME BIN ARGS...: one step; its loss in the log, its gradients in NAME.grads
    local name=$1 bin=$2; shift 2
    ./$bin $A --steps 1 "$@" --log "$tmp/$name.jsonl" --dump-grads "$tmp/$name.grads" > "$tmp/$name.log" 2>&1
    ok "$name runs" "[ $? -eq 0 ]" || tail -5 "$tmp/$name.log"
    echo "  $name: $(grep -o 'YaRN x[^,]*' "$tmp/$name.log" | head -1), loss $(loss_of "$tmp/$name.jsonl")"
}
run oldbug stage1 --model "$tmp/oldbug"
for n in 1 2 3 4 5; do
    bin=stage$n; R=; [ $n -ge 2 ] && R="--gpus 1"
    run "$bin.config" $bin --model "$tmp/yarn" $R
    want=$(loss_of "$tmp/$bin.config.jsonl")
    [ $n -eq 1 ] && ok "the old behaviour gives another loss ($(loss_of "$tmp/oldbug.jsonl") vs $want): the check can fail" \
        "[ -n '$want' ] && [ '$want' != '$(loss_of "$tmp/oldbug.jsonl")' ]"
    run "$bin.flag" $bin --model "$g" $R --yarn-factor 4 --save "$tmp/$bin.ck"
    ok "$bin --yarn-factor 4 trains the YaRN x4 config's model: step 1's loss bit for bit ($(loss_of "$tmp/$bin.flag.jsonl") vs $want)" \
        "[ -n '$want' ] && [ '$(loss_of "$tmp/$bin.flag.jsonl")' = '$want' ]"
    ./build/check_stage same "$tmp/$bin.config.grads" "$tmp/$bin.flag.grads" 0.99999 0 > "$tmp/same.txt" 2>&1
    count "$tmp/same.txt" "$bin gradients, --yarn-factor 4 against the config"
    grep -E "worst|loss" "$tmp/same.txt" | sed 's/^/  /'
    ok "$bin's save says YaRN x4 from 4096" \
        "grep -q '\"original_max_position_embeddings\": 4096' '$tmp/$bin.ck/latest/config.json'"
    ./$bin --resume "$tmp/$bin.ck" $R $A --steps 2 > "$tmp/$bin.resume.log" 2>&1
    ok "$bin resumes its YaRN save" "[ $? -eq 0 ]" || tail -3 "$tmp/$bin.resume.log"
done
echo "$pass passed, $fail failed"
