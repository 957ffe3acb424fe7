#!/usr/bin/env bash
# tests/long_grad_gpu.sh -- stage 5's gradients at long windows against references of known
# precision (tests/long_grad_check.py says how they are built). Per length (default 64K
# and 128K): stage 5 at P = 1 and at P = 8 local ranks (the 8-rank ring), transformers' bf16
# semantics, each against the fp32 reference, per tensor (cosine, norm ratio) as JSON lines, then the
# bounds (tests/long_grad_check.py run). STAGE5=path runs another build (tests/plant_long_gpu.sh).
#   bash tests/long_grad_gpu.sh [OUTDIR] [SEQ...]
set -u
cd "$(dirname "$0")/.."
out=${1:-$(mktemp -d)}; shift || true
seqs=${*:-65536 131072}
mkdir -p "$out"
d=$out/model
python3 tests/long_grad_check.py make "$d" || exit 1
python3 tests/long_grad_check.py check "$d" 4096 || echo "FAIL the reference's forward against transformers' model"
for S in $seqs; do
    for P in 1 8; do
        ranks=; [ $P -gt 1 ] && ranks="--local-ranks $P"
        timeout 300 ${STAGE5:-./stage5} --model "$d" --data data/books.tok --seq "$S" --steps 1 $ranks \
            --dump-grads "$out/ours_p${P}_$S.safetensors" > "$out/stage5_p${P}_$S.log" 2>&1 \
            || { echo "FAIL stage5 P=$P at $S"; tail -5 "$out/stage5_p${P}_$S.log"; }
        grep -E "^step" "$out/stage5_p${P}_$S.log" | sed "s/^/  P=$P S=$S: /"
    done
done
python3 tests/long_grad_check.py run "$d" data/books.tok "$out" $seqs | tee "$out/compare.jsonl"
rm -f "$out"/*.safetensors "$out"/model/model.safetensors # 0.4 GiB a dump
