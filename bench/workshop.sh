#!/usr/bin/env bash
# The ladder on one GPU in about a quarter of an hour: each stage's lever, run small enough to
# finish, with what to look at and the figure it showed on an H200 (RESULTS.md). Writes each
# stage's output to OUT/ (default workshop_out/) and a summary to the terminal.
#   make all && bash bench/workshop.sh [OUT]
# Every step runs even when one before it failed; the script exits 1 if any failed, and its last
# line names them (their output is in OUT/NAME.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
O=${1:-workshop_out}; mkdir -p "$O"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
t_all=$(date +%s)
steps=0; failed=()
part() { # name, what to look at, the H200's figure, command...
    local name=$1 look=$2 expect=$3; shift 3
    echo
    echo "== $name"
    echo "   \$ $*"
    local t0 rc=0; t0=$(date +%s)
    timeout 300 "$@" > "$O/$name.txt" 2>&1 || rc=$?
    local shown last
    shown=$({ grep -E "^step|total \(peak\)|attention kept:|tiling saves|rehearsal, rank|all-gather|error" "$O/$name.txt" || true; } | tail -6)
    [ -z "$shown" ] || sed 's/^/   /' <<< "$shown"
    steps=$((steps + 1))
    local status="exit 0"
    if [ $rc -ne 0 ]; then # and its last line, unless shown already
        failed+=("$name"); status="exit $rc: FAILED"
        last=$(tail -1 "$O/$name.txt"); [ $rc -ne 124 ] || last="stopped after 300 s"
        grep -qxF -- "$last" <<< "$shown" || echo "   $last"
    fi
    echo "   ($(( $(date +%s) - t0 )) s, $status) look at: $look"
    echo "   on an H200: $expect"
}
for s in stage1 stage2 stage3 stage4 stage5; do
    [ -x ./$s ] || { echo "workshop: ./$s is not built: make all" >&2; exit 1; }
done

part stage1 "the loss falling; the plan's checkpoints row (2 L S D)" \
    "loss 12.14 at step 1, 6.95 by step 30 (0.15 s a step)" \
    ./stage1 --seq 8192 --steps 30
part stage1_keep "--keep-attn: the same step 1 loss, a faster step, the kept-attention row" \
    "0.6B at 64K: 4.55 s a step plain, 3.74 s with --keep-attn (+7 GiB)" \
    ./stage1 --seq 65536 --steps 3 --keep-attn
part stage2 "two ranks on one GPU: the states rows halve, the checkpoints do not" \
    "weights/grads/optimizer at 1/P; the loss averages both ranks' windows" \
    ./stage2 --local-ranks 2 --seq 8192 --steps 5
part stage3 "four ranks share one sequence: checkpoints and working set at 1/4" \
    "the loss matches stage 1 on the same window within the tests' bounds" \
    ./stage3 --local-ranks 4 --seq 32768 --steps 3 --keep-attn
part stage4_none "offload off: the GPU holds states and checkpoints (stage 4 keeps no attention unless asked)" \
    "0.6B at 128K, stage 4 with --offload none plans ~16 GiB more than with all" \
    ./stage4 --seq 131072 --steps 2 --offload none
part stage4_all "offload on: pinned host memory rows appear, the GPU's shrink; the step barely moves" \
    "everything offloaded costs ~1.6% of the step for 15.8 GiB" \
    ./stage4 --seq 131072 --steps 2 --offload all
part stage5_plan "the headline's plan without running it: what each tiling saves" \
    "32B at 1M on 8 GPUs: 33.5 GiB per GPU with attention recomputed; tiles save 15.5 GiB, groups 12.3" \
    ./stage5 --seq 1M --gpus 8 --keep-attn 0 --dry-run
part stage5_rehearse "rank 0 of the 8-GPU job, two of its 64 layers, on this GPU: the ring's hops hide" \
    "2 layers: ~30.7 s a step in ~35 GiB; per layer 14.4 s kept, 18.0 s recomputed; 946 s projected for 64" \
    ./stage5 --seq 1M --gpus 8 --rehearse 0 --layers 2 --gpu-gib 74.5 --steps 1
echo
if [ ${#failed[@]} -gt 0 ]; then
    echo "workshop: ${#failed[@]} of $steps steps failed: ${failed[*]} (each one's output: $O/NAME.txt)" >&2
    exit 1
fi
echo "workshop done in $(( $(date +%s) - t_all )) s; outputs in $O/"
