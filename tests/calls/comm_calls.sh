#!/usr/bin/env bash
# Every several-GPU stage's collectives, recorded rank by rank on a CPU (no GPU needed; make test
# runs it): TREE's stages built against the faked GPU and NCCL (tests/calls/build.sh), run on the
# golden fixtures -- dense, MoE, a Qwen3.5 hybrid, packed documents, and a run that evaluates and
# saves, then one resumed from its save -- with 2 and 4 local ranks, 2 and 4 ranks on faked NCCL
# (one thread per "GPU", the path a node runs) and a rehearsed rank of 4, and each run checked by
# tests/calls/check_comm.py:
#   - every rank issues the same sequence of collectives and fences (kind, count, type, peers);
#   - the NCCL run issues the local run's collectives, a rehearsed rank its local rank's;
#   - every allocation and free of a rank thread keeps the rule of common/comm.h (inside an
#     allocation phase, fenced from every collective of the process's other rank threads);
# and first tests/calls/comm_cpu (the communicator alone: ranks that disagree stop by name).
#   bash tests/calls/comm_calls.sh [TREE]     # TREE: another checkout, to see what it breaks
# Prints one line per case and "N passed, M failed".
set -u
cd "$(dirname "$0")/../.."
tree=${1:-.}
out=${CALLS_OUT:-build/calls}/comm
mkdir -p "$out"
bash tests/calls/build.sh "$tree" "$out/bin" > "$out/build.log" 2>&1 || { cat "$out/build.log"; echo "0 passed, 1 failed"; exit 1; }
bin=$(cd "$out/bin" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
G=$PWD/tests/golden
for g in untied_gqa4_s100 moe_e8_k2 q35_l2_s112 packed_gqa4_s128; do
    ./build/check_stage tokens "$G/$g" "$tmp/$g.tok" > "$tmp/$g.seq"
done
pass=0; fail=0
echo "-- the communicator alone (tests/calls/comm_cpu)"
CALLS_DIR=$tmp "$bin/comm_cpu" > "$tmp/cpu.txt" 2>&1
line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$tmp/cpu.txt" | tail -1)
grep -E '^FAIL|^  ' "$tmp/cpu.txt"
if [ -n "$line" ]; then pass=$((pass + ${line%% *})); f=${line#*, }; fail=$((fail + ${f%% *})); else fail=$((fail + 1)); echo "FAIL comm_cpu printed no result"; tail -3 "$tmp/cpu.txt"; fi

# run NAME STAGE ENV ARGS...: the stage in $tmp/NAME, its record checked (CHECK: check_comm.py's flags)
run() {
    local name=$1 st=$2 env=$3; shift 3
    local dir=$tmp/$name
    rm -rf "$dir"; mkdir -p "$dir"
    (cd "$tmp" && env CALLS_DIR="$dir" $env timeout 120 "$bin/$st" "$@" > "$dir.out" 2>&1)
    local rc=$?
    if [ $rc -ne 0 ]; then
        fail=$((fail + 1)); echo "FAIL $name: exit $rc: $(tail -1 "$dir.out" | cut -c1-200)"; return
    fi
    if python3 tests/calls/check_comm.py "$dir" $CHECK > "$dir.check" 2>&1; then
        pass=$((pass + 1)); echo "ok   $name:$(tail -1 "$dir.check")"
    else
        fail=$((fail + 1)); echo "FAIL $name:"; head -12 "$dir.check"
    fi
}
HP="--steps 2 --lr 1e-3 --warmup 0"
for st in stage2 stage3 stage4 stage5; do
    [ -x "$bin/$st" ] || { fail=$((fail + 1)); echo "FAIL $st not built"; continue; }
    extra=; [ $st = stage5 ] && extra="--mlp-tile 24 --yarn-factor 0"
    echo "-- $st"
    for b in local2 local4 nccl2 nccl4 rehearse; do
        case $b in
            local2) R="--local-ranks 2"; E=; P=2 ;;
            local4) R="--local-ranks 4"; E=; P=4 ;;
            nccl2) R="--gpus 2"; E="CALLS_GPUS=2"; P=2 ;;
            nccl4) R="--gpus 4"; E="CALLS_GPUS=4"; P=4 ;;
            rehearse) R="--gpus 4 --rehearse 1"; E=; P=4 ;;
        esac
        CHECK=
        case $b in nccl*) CHECK="--like $tmp/$st.local$P" ;; rehearse) CHECK="--like $tmp/$st.local4 --no-order" ;; esac
        for m in dense moe q35 packed saved resumed; do
            case $m in
                dense) g=untied_gqa4_s100; more= ;;
                moe) g=moe_e8_k2; more= ;;
                q35) g=q35_l2_s112; more= ;;
                packed) g=packed_gqa4_s128; more="--packing 7" ;;
                saved) g=untied_gqa4_s100; more="--save $tmp/$st.$b.save --save-every 1 --eval-data $tmp/$g.tok --eval-windows 1" ;;
                resumed) g=untied_gqa4_s100; more="--resume $tmp/$st.$b.save --steps 3" ;;
            esac
            [ $b = rehearse ] && case $m in saved|resumed) continue ;; esac # a rehearsal saves nothing
            S=$(cat "$tmp/$g.seq")
            if [ $st = stage2 ]; then S=12; else S=$((S / 16 * 16)); fi # stage 2: a window a rank
            name=$st.$b; [ $m = dense ] || name=$name.$m
            c=$CHECK; [ $m = dense ] || c=${CHECK/$tmp\/$st.local$P/$tmp/$st.local$P.$m}
            CHECK=$c run "$name" $st "$E" $R --model "$G/$g" --data "$tmp/$g.tok" --seq $S $HP $extra $more
        done
    done
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
