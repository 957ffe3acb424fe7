#!/usr/bin/env bash
# One rank of an N-GPU job, rehearsed on this GPU (stages 3 to 5), at two depths (--layers) so the
# full-depth step can be projected (per layer = t(d2) - t(d1), over d2 - d1 layers; the rest --
# embedding, loss, optimizer -- is what the line leaves at zero layers). Each case writes
# $OUT/r_<case>_L<d>.txt (stdout: plan, step lines, collective bytes, ring hop checks) and .jsonl.
#   bash bench/rehearse.sh case...        (see the case list below; STEPS=1 by default)
# One step per run by default (device time): step 1 includes building the cuDNN plans, whose times
# the plan cache prints ("built in"); the per-layer difference of two depths cancels them.
set -u
cd "$(dirname "$0")/.."
# the plans count NCCL's buffers; the project's GPUs run NCCL without NVLS (its 2.25 GiB row), as
# the device machines are set up -- a call that lost the setting planned 2.25 GiB more
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
O=${OUT:-bench_out}; mkdir -p "$O"
STEPS=${STEPS:-1}
run() { # stage, case name, depth, args...
    local stage=$1 name=$2 d=$3; shift 3
    local f="$O/r_${name}_L$d"
    echo "== ./$stage --layers $d $* --steps $STEPS"
    timeout 580 ./$stage --layers "$d" "$@" --steps "$STEPS" --log "$f.jsonl" > "$f.txt" 2>&1 || echo "   (exit $?)"
    grep -E "^step|error|total \(peak\)|pinned host memory per node|rehearsal|ring (for|back)|all-gather" "$f.txt" | tail -8
}
two() { # stage, name, d1, d2, args...
    local stage=$1 name=$2 d1=$3 d2=$4; shift 4
    run "$stage" "$name" "$d1" "$@"
    run "$stage" "$name" "$d2" "$@"
}
J8="--gpus 8 --rehearse 0 --seq 1M"
[ -s "$O/rand.tok" ] || ./build/check_stage random 151936 4194400 1 "$O/rand.tok" > /dev/null # 2M and 4M need more than the books
for c in "$@"; do case $c in
s3_06b) two stage3 s3_06b 2 4 $J8 --model 0.6B ;;
s3_06b_keep) two stage3 s3_06b_keep 2 4 $J8 --model 0.6B --keep-attn ;;
s3_8b) two stage3 s3_8b 1 2 $J8 --model 8B ;;
s3_8b_keep) two stage3 s3_8b_keep 1 2 $J8 --model 8B --keep-attn ;;
s3_8b_2m) two stage3 s3_8b_2m 1 2 --gpus 8 --nnodes 2 --rehearse 0 --seq 2M --model 8B --data "$O/rand.tok" ;;
s3_8b_4m) two stage3 s3_8b_4m 1 2 --gpus 8 --nnodes 4 --rehearse 0 --seq 4M --model 8B --data "$O/rand.tok" ;;
s4_8b_keep) two stage4 s4_8b_keep 1 2 $J8 --model 8B --keep-attn auto --gpu-gib 80 ;;
s4_32b) two stage4 s4_32b 1 2 $J8 --model 32B --gpu-gib 80 ;;
s4_32b_keep) two stage4 s4_32b_keep 1 2 $J8 --model 32B --keep-attn auto --gpu-gib 80 ;;
s5_32b) two stage5 s5_32b 1 2 $J8 --model 32B --keep-attn 0 --gpu-gib 80 ;;
s5_32b_keep) two stage5 s5_32b_keep 1 2 $J8 --model 32B --keep-attn auto --gpu-gib 80 ;;
s5_32b_2m) run stage5 s5_32b_2m 1 --gpus 8 --rehearse 0 --seq 2M --model 32B --keep-attn 0 --gpu-gib 80 --data "$O/rand.tok" ;;
s5_06b_4m) run stage5 s5_06b_4m 1 --gpus 8 --rehearse 0 --seq 4M --model 0.6B --keep-attn 0 --gpu-gib 40 --data "$O/rand.tok" ;;
s5_06b_4m_2) run stage5 s5_06b_4m 2 --gpus 8 --rehearse 0 --seq 4M --model 0.6B --keep-attn 0 --gpu-gib 40 --data "$O/rand.tok" ;;
s5_8b_4m) run stage5 s5_8b_4m 1 --gpus 8 --rehearse 0 --seq 4M --model 8B --keep-attn 0 --gpu-gib 80 --data "$O/rand.tok" ;;
s5_moe) two stage5 s5_moe 1 2 $J8 --model 30B-A3B --keep-attn 0 --gpu-gib 80 ;;
s5_32b_kgpu) two stage5 s5_32b_kgpu 1 2 $J8 --model 32B --keep-attn gpu:2 --gpu-gib 74.5 ;;
s5_32b_khost) two stage5 s5_32b_khost 1 2 $J8 --model 32B --keep-attn host:2 --gpu-gib 74.5 ;;
s5_32b_rec) two stage5 s5_32b_rec 1 2 $J8 --model 32B --keep-attn 0 --gpu-gib 74.5 ;;
s5_32b_place) run stage5 s5_32b_place 20 $J8 --model 32B --keep-attn gpu:18,host:1 --gpu-gib 74.5 ;; # the 64-layer job's GPU memory (18 on the GPU, slots, one recompute)
s5_06b_4m_kgpu) two stage5 s5_06b_4m_kgpu 1 2 --gpus 8 --rehearse 0 --seq 4M --model 0.6B --keep-attn gpu:2 --gpu-gib 74.5 --data "$O/rand.tok" ;;
s5_06b_4m_khost) two stage5 s5_06b_4m_khost 1 2 --gpus 8 --rehearse 0 --seq 4M --model 0.6B --keep-attn host:2 --gpu-gib 74.5 --data "$O/rand.tok" ;;
s5_moe_keep) two stage5 s5_moe_keep 1 2 $J8 --model 30B-A3B --keep-attn auto --gpu-gib 80 ;;
s5_q35_27b) two stage5 s5_q35_27b 4 8 $J8 --model Qwen3.5-27B --gpu-gib 74.5 --keep-attn 0 ;; # Qwen3.5: 4 layers = 3 linear + 1 full; attention recomputed, as rehearsed
s5_q35_27b_keep) two stage5 s5_q35_27b_keep 4 8 $J8 --model Qwen3.5-27B --gpu-gib 74.5 --keep-attn all ;; # its full attention layers kept
s5_q35moe) two stage5 s5_q35moe 4 8 $J8 --model Qwen3.5-35B-A3B --gpu-gib 74.5 --keep-attn 0 ;; # the MoE hybrid: 256 experts and a shared one
s5_q35moe_keep) two stage5 s5_q35moe_keep 4 8 $J8 --model Qwen3.5-35B-A3B --gpu-gib 74.5 --keep-attn all ;; # its full attention layers kept
*) echo "unknown case $c" ;;
esac; done
