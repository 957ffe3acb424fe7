#!/usr/bin/env bash
# tests/exercises.sh -- the README's exercises, as far as --dry-run can answer them (no GPU): each
# runs the commands docs/answers.md gives and checks what the answer claims. Where the claim is a
# relation between printed numbers (a row equals a formula of the model's shape, two plans differ
# by exactly one term), that relation is checked, to the plan's printed precision; the numbers the
# answer quotes are checked too ("quoted"), so an answer that has gone stale fails. Every
# command passes --gpus/--gpu-gib/--host-gib where the stage has them, and NCCL_NVLS_ENABLE=0 is
# set as the README's figures assume, so nothing depends on the machine or on --dry-run's defaults.
#   bash tests/exercises.sh            prints each check and "N passed, M failed"
#   PLANT=ID bash tests/exercises.sh   check ID's expected value is off by one: it must FAIL
#                                      (PLANT=all: every check; PLANT="ID1 ID2": those)
set -u
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
pass=0; fail=0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
G=1073741824 # bytes in a GiB

for b in stage1 stage2 stage3 stage4 stage5; do [ -x ./$b ] || { echo "FAIL ./$b not built (make all)"; echo "0 passed, 1 failed"; exit 1; }; done

# run NAME CMD...: the command's output in $tmp/NAME; a non-zero exit is one failure
run() {
    local n=$1; shift
    "$@" > "$tmp/$n" 2>&1
    local rc=$?
    [ $rc -eq 0 ] || { fail=$((fail + 1)); echo "FAIL $n: '$*' exited $rc"; tail -3 "$tmp/$n"; }
}
# gpu NAME LABEL / host NAME LABEL: the GiB of a row of the GPU plan / the host plan ("" if absent)
row() { # FILE LABEL PART(0 GPU, 1 host)
    awk -v l="$2" -v part="$3" '
        /^pinned host memory per rank/ { h = 1; next }
        h == part && index($0, "  " l " ") == 1 {
            split(substr($0, length(l) + 3), a, " ")
            if (a[1] ~ /^[0-9.]+$/) { print a[1]; exit }
        }' "$1"
}
gpu() { row "$tmp/$1" "$2" 0; }
host() { row "$tmp/$1" "$2" 1; }
# calc EXPR: awk arithmetic, 6 decimals
calc() { awk "BEGIN { printf \"%.6f\", $1 }"; }
# shape NAME: L D I Hq Hkv hd V from the plan's "model ..." line
shape() {
    sed -n 's/^model [^:]*: \([0-9]*\) layers, hidden \([0-9]*\), intermediate \([0-9]*\), heads \([0-9]*\)\/\([0-9]*\) x \([0-9]*\), vocab \([0-9]*\),.*/\1 \2 \3 \4 \5 \6 \7/p' "$tmp/$1" | head -1
}
# kept NAME: "G H R" from "attention kept: G layers on the GPU, H on the host, R recompute"
kept() { sed -n 's/^attention kept: \([0-9]*\) layers on the GPU, \([0-9]*\) on the host, \([0-9]*\) recompute.*/\1 \2 \3/p' "$tmp/$1" | head -1; }
# saves NAME: "T X G Y Z" from "tiling saves per GPU: MLP tiles of T rows X GiB, G head groups Y GiB (untiled peak Z GiB)"
saves() { sed -n 's/^tiling saves per GPU: MLP tiles of \([0-9]*\) rows \([0-9.]*\) GiB, \([0-9]*\) head groups \([0-9.]*\) GiB (untiled peak \([0-9.]*\) GiB).*/\1 \2 \3 \4 \5/p' "$tmp/$1" | head -1; }

# check ID WHAT GOT WANT TOL: |GOT - WANT| <= TOL; anything not a number fails
check() {
    local id=$1 what=$2 got=$3 want=$4 tol=$5
    case " ${PLANT:-} " in *" $id "* | " all ") want=$(calc "$want + 1") ;; esac
    if awk -v a="$got" -v e="$want" -v t="$tol" 'BEGIN {
            num = "^-?[0-9]+(\\.[0-9]*)?$"
            exit !(a ~ num && e ~ num && a - e <= t && e - a <= t) }'; then
        pass=$((pass + 1)); echo "  ok   $id: $what: $got"
    else
        fail=$((fail + 1)); echo "FAIL $id: $what: got '$got', want $want (within $tol)"
    fi
}
# quotes ID WHAT "NAME|gpu or host|LABEL|GiB" ...: every number a table of docs/answers.md quotes,
# as printed; one check, the count of those that differ (each printed)
quotes() {
    local id=$1 what=$2 q bad=0 n part l v got; shift 2
    for q in "$@"; do
        IFS='|' read -r n part l v <<< "$q"
        got=$($part "$n" "$l")
        [ "$got" = "$v" ] || { bad=$((bad + 1)); echo "     $n: $part row '$l' is '$got', docs/answers.md says $v"; }
    done
    check "$id" "$what: rows that differ from docs/answers.md (of $#)" "$bad" 0 0
}
# the GPU rows of two plans that differ, other than those named: a count
rows_differ() { # NAME1 NAME2 LABEL...
    local a=$1 b=$2; shift 2
    local n=0 l
    for l in "weights (bf16)" "gradients (fp32)" "optimizer (fp32 master, m, v)" "checkpoints (layer inputs)" \
             "kept attention (O, LSE)" "working set" "cuDNN workspace" "NCCL buffers (estimate)" "CUDA/cuBLAS/cuDNN runtime"; do
        case " $* " in *"|$l|"*) continue ;; esac
        [ "$(gpu "$a" "$l")" = "$(gpu "$b" "$l")" ] || n=$((n + 1))
    done
    echo $n
}

echo "== stage 1, exercise 1: --keep-attn adds 2 L S Hq hd bytes of O and 4 L Hq S of LSE"
S=65536
run s1e1_plain ./stage1 --seq $S --gpu-gib 80 --dry-run
run s1e1_keep ./stage1 --seq $S --gpu-gib 80 --dry-run --keep-attn
read -r L D I Hq Hkv hd V <<< "$(shape s1e1_plain)"
want=$(calc "(2 * $L * $S * $Hq * $hd + 4 * $L * $Hq * $S) / $G")
check s1e1.row "the kept-attention row is (2 L S Hq hd + 4 L Hq S) / 2^30" "$(gpu s1e1_keep "kept attention (O, LSE)")" "$want" 0.0006
check s1e1.total "the total grows by that much" "$(calc "$(gpu s1e1_keep "total (peak)") - $(gpu s1e1_plain "total (peak)")")" "$want" 0.0011
check s1e1.rest "no other row moves" "$(rows_differ s1e1_plain s1e1_keep "|kept attention (O, LSE)|")" 0 0
quotes s1e1.quote "quoted" "s1e1_keep|gpu|kept attention (O, LSE)|7.109" "s1e1_plain|gpu|total (peak)|19.534" \
    "s1e1_keep|gpu|total (peak)|26.644"

echo "== stage 1, exercise 3: the working set is the larger of a layer's phases and the loss chunk's (6 V bytes a row)"
for C in 1024 4096 16384; do run s1e3_$C ./stage1 --seq 16384 --loss-chunk $C --gpu-gib 80 --dry-run; done
read -r L D I Hq Hkv hd V <<< "$(shape s1e3_1024)"
ws() { gpu "$1" "working set"; }
check s1e3.d16384 "working set at chunk 16384 - at 1024 = 6 V (16384 - 1024) / 2^30" \
    "$(calc "$(ws s1e3_16384) - $(ws s1e3_1024)")" "$(calc "6 * $V * 15360 / $G")" 0.0011
check s1e3.d4096 "working set at chunk 4096 - at 1024 = 6 V (4096 - 1024) / 2^30" \
    "$(calc "$(ws s1e3_4096) - $(ws s1e3_1024)")" "$(calc "6 * $V * 3072 / $G")" 0.0011
check s1e3.only "only the working set moves" "$(rows_differ s1e3_1024 s1e3_16384 "|working set|")" 0 0
quotes s1e3.q "the table, quoted" "s1e3_1024|gpu|working set|1.026" "s1e3_4096|gpu|working set|3.634" \
    "s1e3_16384|gpu|working set|14.067" "s1e3_1024|gpu|total (peak)|13.550" "s1e3_4096|gpu|total (peak)|16.158" \
    "s1e3_16384|gpu|total (peak)|26.591"
run s1e3_1 ./stage1 --seq 16384 --loss-chunk 1 --gpu-gib 80 --dry-run
check s1e3.layer "a layer's phases alone (--loss-chunk 1), quoted: 0.785 GiB" "$(ws s1e3_1)" 0.785 0
check s1e3.peak "at 16K the loss phase of 1024 rows is above them (1 if so)" "$(awk -v a="$(ws s1e3_1024)" -v b="$(ws s1e3_1)" 'BEGIN { print (a > b) }')" 1 0
for C in 1024 4096; do run s1e3_long_$C ./stage1 --seq 131072 --loss-chunk $C --gpu-gib 80 --dry-run; done
check s1e3.long "at --seq 131072 the layer is the peak: chunks of 1024 and 4096 plan the same working set" \
    "$(calc "$(ws s1e3_long_4096) - $(ws s1e3_long_1024)")" 0 0
run s1e3_long_16384 ./stage1 --seq 131072 --loss-chunk 16384 --gpu-gib 80 --dry-run
quotes s1e3.qlong "at 128K, quoted" "s1e3_long_1024|gpu|working set|5.842" "s1e3_long_16384|gpu|working set|14.725"

echo "== stage 2, exercise 2: what FSDP divides by 8 and what it does not"
run s2e2_p8 ./stage2 --gpus 8 --model 8B --seq 65536 --gpu-gib 80 --dry-run
run s2e2_p1 ./stage2 --gpus 1 --model 8B --seq 65536 --gpu-gib 80 --dry-run
run s2e2_s1 ./stage1 --model 8B --seq 65536 --gpu-gib 80 --dry-run
read -r L D I Hq Hkv hd V <<< "$(shape s2e2_p8)"
Q=$((Hq * hd)); KV=$((Hkv * hd))
layer=$((2 * D * Q + 2 * D * KV + 3 * D * I + 2 * D + 2 * hd)) # one decoder layer's parameters
gathered=$(calc "2 * (2 * $layer + $V * $D + $V * $D + $D) / $G") # bf16: two layers, the embedding, the tail (untied)
check s2e2.optim "optimizer at P = 8 is stage 1's / 8" "$(gpu s2e2_p8 "optimizer (fp32 master, m, v)")" \
    "$(calc "$(gpu s2e2_s1 "optimizer (fp32 master, m, v)") / 8")" 0.0011
check s2e2.weights "weights: P = 1 minus P = 8 is 7/8 of stage 1's (the gathered buffers cancel)" \
    "$(calc "$(gpu s2e2_p1 "weights (bf16)") - $(gpu s2e2_p8 "weights (bf16)")")" "$(calc "$(gpu s2e2_s1 "weights (bf16)") * 7 / 8")" 0.002
check s2e2.grads "gradients: P = 1 minus P = 8 is 7/8 of stage 1's" \
    "$(calc "$(gpu s2e2_p1 "gradients (fp32)") - $(gpu s2e2_p8 "gradients (fp32)")")" "$(calc "$(gpu s2e2_s1 "gradients (fp32)") * 7 / 8")" 0.002
check s2e2.gw "weights at P = 8 = shard (stage 1's / 8) + bf16 buffers of 2 layers, embedding and tail" \
    "$(calc "$(gpu s2e2_p8 "weights (bf16)") - $(gpu s2e2_s1 "weights (bf16)") / 8")" "$gathered" 0.002
check s2e2.gg "gradients at P = 8 = shard + the same buffers in fp32" \
    "$(calc "$(gpu s2e2_p8 "gradients (fp32)") - $(gpu s2e2_s1 "gradients (fp32)") / 8")" "$(calc "2 * $gathered")" 0.003
check s2e2.seq "checkpoints, working set, cuDNN workspace: P = 8 as stage 1 (rows that differ)" \
    "$(rows_differ s2e2_s1 s2e2_p8 "|weights (bf16)|gradients (fp32)|optimizer (fp32 master, m, v)|NCCL buffers (estimate)|")" 0 0
check s2e2.nccl "NCCL's buffers at P = 8 without NVLS: (24 ring + 32 p2p channels) x 12 MiB + 64 MiB" \
    "$(gpu s2e2_p8 "NCCL buffers (estimate)")" "$(calc "(56 * 12 + 64) / 1024")" 0.0006
t=()
for l in "weights (bf16)|15.256|18.294|4.944" "gradients (fp32)|30.513|36.587|9.888" \
         "optimizer (fp32 master, m, v)|91.539|91.539|11.442" "checkpoints (layer inputs)|18.500|18.500|18.500" \
         "working set|8.956|8.956|8.956" "cuDNN workspace|1.001|1.001|1.001" "total (peak)|167.265|176.377|56.951"; do
    IFS='|' read -r lab a b c <<< "$l"
    t+=("s2e2_s1|gpu|$lab|$a" "s2e2_p1|gpu|$lab|$b" "s2e2_p8|gpu|$lab|$c")
done
quotes s2e2.q "the table, quoted" "${t[@]}"

echo "== stage 3, exercise 2 (memory): bf16 accumulators, 2 bytes instead of 4"
run s3e2_fp32 ./stage3 --gpus 8 --seq 1M --merge fp32 --gpu-gib 80 --dry-run
run s3e2_bf16 ./stage3 --gpus 8 --seq 1M --merge bf16 --gpu-gib 80 --dry-run
read -r L D I Hq Hkv hd V <<< "$(shape s3e2_fp32)"
n=$((1048576 / 8))
check s3e2.ws "working set fp32 - bf16 = 2 bytes x (running O + dQ [n, Hq hd] + two travelling dK/dV [2, n, Hkv hd])" \
    "$(calc "$(gpu s3e2_fp32 "working set") - $(gpu s3e2_bf16 "working set")")" "$(calc "2 * (2 * $n * $Hq * $hd + 4 * $n * $Hkv * $hd) / $G")" 0.0011
quotes s3e2.q "quoted" "s3e2_fp32|gpu|working set|11.850" "s3e2_bf16|gpu|working set|9.850"
run s3e2_l32 ./stage3 --local-ranks 8 --merge fp32 --gpu-gib 80 --dry-run
run s3e2_l16 ./stage3 --local-ranks 8 --merge bf16 --gpu-gib 80 --dry-run
check s3e2.small "at the exercise's 16K over 8 local ranks the loss chunk is the peak: no row moves" \
    "$(rows_differ s3e2_l32 s3e2_l16)" 0 0

echo "== stage 3, exercise 3 (memory): a rank of 1M over 8 holds what stage 1 holds at 128K"
run s3e3 ./stage3 --gpus 8 --model 0.6B --seq 1M --keep-attn --gpu-gib 80 --dry-run
run s3e3_s1 ./stage1 --seq 131072 --keep-attn --gpu-gib 80 --dry-run
read -r L D I Hq Hkv hd V <<< "$(shape s3e3)"
check s3e3.ckpt "checkpoints = 2 (L+1) (S/P) D bytes" "$(gpu s3e3 "checkpoints (layer inputs)")" "$(calc "2 * ($L + 1) * 131072 * $D / $G")" 0.0006
check s3e3.ckpt1 "... as stage 1's at 131072" "$(gpu s3e3 "checkpoints (layer inputs)")" "$(gpu s3e3_s1 "checkpoints (layer inputs)")" 0
check s3e3.kept "kept attention as stage 1's at 131072" "$(gpu s3e3 "kept attention (O, LSE)")" "$(gpu s3e3_s1 "kept attention (O, LSE)")" 0
quotes s3e3.q "quoted" "s3e3|gpu|total (peak)|38.325" "s3e3|gpu|working set|11.342" "s3e3_s1|gpu|working set|5.334"

echo "== stage 4, exercise 1 (memory): what --offload all moves to the host"
A4="--model 0.6B --seq 131072 --gpus 1 --gpu-gib 80 --host-gib 2048 --dry-run"
run s4e1_none ./stage4 $A4 --offload none
run s4e1_all ./stage4 $A4 --offload all
run s4e1_s1 ./stage1 --seq 131072 --gpu-gib 80 --dry-run
read -r L D I Hq Hkv hd V <<< "$(shape s4e1_all)"
check s4e1.slots "checkpoints on the GPU: two slots of one layer input, 2 x 2 S D bytes" "$(gpu s4e1_all "checkpoints (layer inputs)")" "$(calc "4 * 131072 * $D / $G")" 0.0006
check s4e1.hostck "checkpoints on the host: L layer inputs" "$(host s4e1_all "checkpoints (layer inputs)")" "$(calc "2 * $L * 131072 * $D / $G")" 0.0006
check s4e1.states "states on the host = stage 1's weights + gradients + optimizer (18 bytes a parameter)" \
    "$(host s4e1_all "weights, grads, optimizer")" \
    "$(calc "$(gpu s4e1_s1 "weights (bf16)") + $(gpu s4e1_s1 "gradients (fp32)") + $(gpu s4e1_s1 "optimizer (fp32 master, m, v)")")" 0.003
check s4e1.noopt "no optimizer row on the GPU" "$(gpu s4e1_all "optimizer (fp32 master, m, v)" | wc -w)" 0 0
check s4e1.same "working set and cuDNN workspace unchanged" \
    "$(rows_differ s4e1_none s4e1_all "|weights (bf16)|gradients (fp32)|optimizer (fp32 master, m, v)|checkpoints (layer inputs)|")" 0 0
quotes s4e1.qrows "quoted" "s4e1_none|gpu|total (peak)|32.638" "s4e1_all|gpu|total (peak)|16.766" \
    "s4e1_none|gpu|checkpoints (layer inputs)|7.250" "s4e1_all|gpu|weights (bf16)|0.638" "s4e1_all|gpu|gradients (fp32)|1.276"
check s4e1.q "GPU plan none - all, quoted: 15.872 GiB" "$(calc "$(gpu s4e1_none "total (peak)") - $(gpu s4e1_all "total (peak)")")" 15.872 0.0000001

echo "== stage 4, exercise 2 (memory): --keep-attn gpu:2,host:2 of 6 layers"
A4="--seq 16384 --layers 6 --gpus 1 --gpu-gib 80 --host-gib 2048 --dry-run"
run s4e2 ./stage4 $A4 --keep-attn gpu:2,host:2
run s4e2_0 ./stage4 $A4 --keep-attn 0
read -r L D I Hq Hkv hd V <<< "$(shape s4e2)"
per=$(calc "(2 * 16384 * $Hq * $hd + 4 * $Hq * 16384) / $G")
read -r kg kh kr <<< "$(kept s4e2)"
check s4e2.split "the plan's split: 2 on the GPU, 2 on the host, 2 recompute (as G*100 + H*10 + R)" "$((kg * 100 + kh * 10 + kr))" 222 0
check s4e2.gpu "kept on the GPU: 2 layers + the host's 2 slots, 4 x (2 S Hq hd + 4 Hq S)" "$(gpu s4e2 "kept attention (O, LSE)")" "$(calc "4 * $per")" 0.0006
check s4e2.host "kept on the host: 2 layers" "$(host s4e2 "kept attention (O, LSE)")" "$(calc "2 * $per")" 0.0006
quotes s4e2.q "quoted" "s4e2|gpu|total (peak)|7.491" "s4e2_0|gpu|total (peak)|7.237" "s4e2|gpu|kept attention (O, LSE)|0.254" \
    "s4e2|host|kept attention (O, LSE)|0.127"
check s4e2.total "the GPU plan grows by exactly the kept row" "$(calc "$(gpu s4e2 "total (peak)") - $(gpu s4e2_0 "total (peak)")")" "$(calc "4 * $per")" 0.0011

echo "== stage 4, exercise 3: how many layers move to the GPU (--gpu-gib 64, then 74.5)"
A4="--model 32B --seq 1M --gpus 8 --host-gib 2048 --dry-run"
run s4e3_base ./stage4 $A4 --keep-attn 0 --gpu-gib 64
run s4e3_64 ./stage4 $A4 --keep-attn auto --gpu-gib 64
run s4e3_74 ./stage4 $A4 --keep-attn auto --gpu-gib 74.5
read -r L D I Hq Hkv hd V <<< "$(shape s4e3_base)"
per=$(calc "(2 * 131072 * $Hq * $hd + 4 * $Hq * 131072) / $G")
# the rule (choose_kept, kept_split): g = the layers the room above the plan holds; with layers on
# the host two of them are the host's slots; the host holds what 90% of --host-gib / 8 ranks leaves
split() { # BASE_TOTAL BASE_HOST CAP HOST_GIB RANKS L -> "G H"
    awk -v b="$1" -v hb="$2" -v cap="$3" -v hg="$4" -v P="$5" -v L="$6" -v per="$per" 'BEGIN {
        g = int((cap - b) / per); if (g > L) g = L; if (g < 0) g = 0
        h = int((0.9 * hg / P - hb) / per); if (h < 0) h = 0
        if (L <= g || g < 2) { print g, 0; exit }
        g2 = g - 2; hh = L - g2; if (hh > h) hh = h
        if (g2 + hh > g) print g2, hh; else print g, 0 }'
}
b=$(gpu s4e3_base "total (peak)"); hb=$(host s4e3_base "total")
for cap in 64 74; do
    c=$cap; [ $cap = 74 ] && c=74.5
    read -r wg wh <<< "$(split "$b" "$hb" $c 2048 8 "$L")"
    read -r kg kh kr <<< "$(kept s4e3_$cap)"
    check s4e3.g$cap "--gpu-gib $c: layers on the GPU = floor((cap - plan) / per layer), less the host's 2 slots" "$kg" "$wg" 0
    check s4e3.h$cap "--gpu-gib $c: layers on the host = floor((0.9 x 2048 / 8 - host plan) / per layer)" "$kh" "$wh" 0
done
check s4e3.slots "--gpu-gib 74.5: kept on the GPU = (its layers + 2 slots) x per layer" "$(gpu s4e3_74 "kept attention (O, LSE)")" "$(calc "($(kept s4e3_74 | cut -d' ' -f1) + 2) * $per")" 0.0011
check s4e3.q "quoted: 0 then 5 on the GPU, 40 on the host both times (as G64 G74 H64 H74)" \
    "$(kept s4e3_64 | cut -d' ' -f1)$(kept s4e3_74 | cut -d' ' -f1)$(kept s4e3_64 | cut -d' ' -f2)$(kept s4e3_74 | cut -d' ' -f2)" 054040 0
quotes s4e3.qrows "quoted" "s4e3_base|gpu|total (peak)|58.820" "s4e3_base|host|total|148.652" \
    "s4e3_64|gpu|total (peak)|62.882" "s4e3_64|gpu|kept attention (O, LSE)|4.062" "s4e3_74|gpu|total (peak)|73.038" \
    "s4e3_74|gpu|kept attention (O, LSE)|14.219"
A5="--gpus 8 --host-gib 2048 --dry-run"
run s4e3_s5base ./stage5 $A5 --keep-attn 0 --gpu-gib 56.6
run s4e3_s5_56 ./stage5 $A5 --gpu-gib 56.6
run s4e3_s5_74 ./stage5 $A5 --gpu-gib 74.5
b=$(gpu s4e3_s5base "total (peak)"); hb=$(host s4e3_s5base "total")
for cap in 56 74; do
    c=56.6; [ $cap = 74 ] && c=74.5
    read -r wg wh <<< "$(split "$b" "$hb" $c 2048 8 "$L")"
    check s4e3.s5_$cap "stage 5's headline at --gpu-gib $c: the same rule (as G*100 + H)" \
        "$(kept s4e3_s5_$cap | awk '{print $1 * 100 + $2}')" "$((wg * 100 + wh))" 0
done
quotes s4e3.s5rows "stage 5, quoted" "s4e3_s5base|gpu|total (peak)|33.518" "s4e3_s5_74|gpu|total (peak)|74.143"
check s4e3.s5q "stage 5 quoted: 9 then 18 on the GPU (as G56 * 100 + G74)" \
    "$(($(kept s4e3_s5_56 | cut -d' ' -f1) * 100 + $(kept s4e3_s5_74 | cut -d' ' -f1)))" 918 0

echo "== stage 5, exercise 1: what the tiles save"
A5="--model 0.6B --seq 131072 --gpus 1 --gpu-gib 80 --host-gib 2048 --keep-attn 0 --dry-run"
run s5e1 ./stage5 $A5
run s5e1_t8k ./stage5 $A5 --mlp-tile 8192
run s5e1_t1 ./stage5 $A5 --mlp-tile 131072
run s5e1_g1 ./stage5 $A5 --attn-groups 1
read -r L D I Hq Hkv hd V <<< "$(shape s5e1)"
read -r T X NG Y Z <<< "$(saves s5e1)"
tot() { gpu "$1" "total (peak)"; }
check s5e1.small "--mlp-tile 8192 plans the same peak as the default tile" "$(calc "$(tot s5e1_t8k) - $(tot s5e1)")" 0 0
check s5e1.mlp "one MLP tile (--mlp-tile 131072) - default = the printed MLP saving" "$(calc "$(tot s5e1_t1) - $(tot s5e1)")" "$X" 0.051
check s5e1.groups "one head group - one MLP tile = the printed head-group saving" "$(calc "$(tot s5e1_g1) - $(tot s5e1_t1)")" "$Y" 0.051
check s5e1.untiled "one head group = the printed untiled peak" "$(tot s5e1_g1)" "$Z" 0.051
rowb=$((6 * I + 4 * D)) # bytes an MLP row holds: g, u, h in bf16 [I], xn2 and dxn2 in bf16 [D]
check s5e1.tile "working set, one tile - default: (S - T) rows of 6 I + 4 D bytes, less under 256 rows' (T is the attention backward's memory, rounded down to 256)" \
    "$(calc "$(gpu s5e1_t1 "working set") - $(gpu s5e1 "working set")")" "$(calc "(131072 - $T - 128) * $rowb / $G")" "$(calc "128 * $rowb / $G + 0.001")"
check s5e1.cudnn "cuDNN's workspace shrinks by the group count (8 = K/V heads): ratio" \
    "$(calc "$(gpu s5e1_g1 "cuDNN workspace") / $(gpu s5e1 "cuDNN workspace")")" "$Hkv" 0.5
t=()
for l in "s5e1|4.517|0.126|8.558" "s5e1_t8k|4.517|0.126|8.558" "s5e1_t1|5.329|0.126|9.370" "s5e1_g1|12.850|1.001|17.766"; do
    IFS='|' read -r f a b c <<< "$l"
    t+=("$f|gpu|working set|$a" "$f|gpu|cuDNN workspace|$b" "$f|gpu|total (peak)|$c")
done
quotes s5e1.q "the table, quoted" "${t[@]}"
check s5e1.qtiles "quoted: tiles of 92160 rows save 0.8, 8 head groups 8.4, untiled 17.8 (as T X G Y Z)" \
    "$(saves s5e1 | tr -d ' .')" "$(echo 92160 0.8 8 8.4 17.8 | tr -d ' .')" 0

echo "== stage 5, exercise 2 (memory): the rehearsed rank's plan"
run s5e2 ./stage5 --seq 1M --gpus 8 --rehearse 0 --layers 2 --gpu-gib 74.5 --host-gib 2048 --dry-run
read -r L D I Hq Hkv hd V <<< "$(shape s5e2)"
per=$(calc "(2 * 131072 * $Hq * $hd + 4 * $Hq * 131072) / $G")
check s5e2.kept "both layers' O kept on the GPU, no slots: 2 x per layer" "$(gpu s5e2 "kept attention (O, LSE)")" "$(calc "2 * $per")" 0.0006
check s5e2.split "the split: 2 on the GPU, 0 on the host, 0 recompute (as G*100 + H*10 + R)" "$(kept s5e2 | awk '{print $1 * 100 + $2 * 10 + $3}')" 200 0
quotes s5e2.q "quoted (the H200 measured 34.60 GiB)" "s5e2|gpu|total (peak)|35.550" "s5e2|host|total|7.804"

echo "== stage 5, exercise 3 (memory): the MoE model's tile"
run s5e3 ./stage5 --model 30B-A3B --seq 32768 --layers 4 --gpus 1 --gpu-gib 80 --host-gib 2048 --dry-run
read -r L D I Hq Hkv hd V <<< "$(shape s5e3)"
read -r E k <<< "$(sed -n 's/.*MoE: \([0-9]*\) experts of [0-9]*, top-\([0-9]*\).*/\1 \2/p' "$tmp/s5e3" | head -1)"
read -r T X NG Y Z <<< "$(saves s5e3)"
check s5e3.tile "an MoE tile holds E/k x 2048 rows (2048 per expert on average), here the whole sequence" \
    "$T" "$(awk -v e="${E:-0}" -v k="${k:-1}" 'BEGIN { t = e / k * 2048; if (t > 32768) t = 32768; print t }')" 0
check s5e3.groups "head groups = K/V heads" "$NG" "$Hkv" 0
quotes s5e3.q "quoted" "s5e3|gpu|total (peak)|21.080" "s5e3|host|total|52.716"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
