#!/usr/bin/env bash
# Every stage's calls to the GPU against an older tree's, call for call, on a CPU (no GPU needed):
# what a refactor must leave alone. Both trees are built against the faked GPU (tests/calls/
# fake_cuda.c: every kernel launch, GEMM, attention call, copy, memset, event and stream op logged
# with its arguments, pointers by tensor name), run on the golden fixtures -- dense, MoE, Qwen3.5
# hybrids, packed documents, loss masks, YaRN; one rank, local ranks, rehearsed ranks; kept
# attention, offload, tiles, evaluation, saving -- and each rank's log compared.
#   bash tests/calls/same_calls.sh OLD_TREE        # e.g. a `git worktree add /tmp/old HEAD~3`
# Prints one line per case and "N same, M differ"; a differing case prints its first differences.
# Nothing is computed: this sees the order and the arguments of the work, not its numbers (those are
# tests/same_as_gpu.sh's, on a GPU). Packed documents in stages 3-5 run on the zigzag layout
# (--layout zigzag, given to a tree whose stages take it): the balanced layout's calls are checked
# against common/layout.c's blocks by tests/calls/layout_calls.sh.
set -u
cd "$(dirname "$0")/../.."
old=${1:?usage: same_calls.sh OLD_TREE}
out=${CALLS_OUT:-build/calls}
mkdir -p "$out" && out=$(cd "$out" && pwd) # the cases run elsewhere
bash tests/calls/build.sh . "$out/new" > "$out.new.log" 2>&1 || { mkdir -p "$out"; cat "$out.new.log"; exit 1; }
bash tests/calls/build.sh "$old" "$out/old" > "$out.old.log" 2>&1 || { cat "$out.old.log"; exit 1; }
[ -x build/check_stage ] || { echo "same_calls: build/check_stage is missing: run make all first"; exit 1; }
tmp=$(mktemp -d)
for g in tests/golden/*/; do g=${g%/}; ./build/check_stage tokens "$g" "$tmp/$(basename "$g").tok" > "$tmp/$(basename "$g").seq"; done
same=0; differ=0; missing=0
# case NAME STAGE ARGS...: run both builds, compare every rank's log. LAYOUT=WORD: --layout WORD too,
# to each build whose stage takes it
case_() {
    local name=$1 st=$2; shift 2
    local a="$tmp/$name.old" b="$tmp/$name.new" la= lb=
    mkdir -p "$a" "$b" "$a.save" "$b.save"
    if [ -n "${LAYOUT:-}" ]; then
        "$out/old/$st" --help 2>/dev/null | grep -q -- '--layout' && la="--layout $LAYOUT"
        "$out/new/$st" --help 2>/dev/null | grep -q -- '--layout' && lb="--layout $LAYOUT"
    fi
    (cd "$tmp" && CALLS_DIR="$a" timeout 120 "$out/old/$st" "$@" $la ${SAVE:+--save "$a.save"} > "$a.out" 2>&1)
    local ra=$?
    (cd "$tmp" && CALLS_DIR="$b" timeout 120 "$out/new/$st" "$@" $lb ${SAVE:+--save "$b.save"} > "$b.out" 2>&1)
    local rb=$?
    local bad=
    [ $ra -eq $rb ] || bad="exit $ra vs $rb"
    if [ $ra -ne 0 ]; then # both refuse: the same refusal is the same behaviour
        [ "$(tail -1 "$a.out")" = "$(tail -1 "$b.out" | sed "s|$b|$a|g")" ] || bad="${bad:+$bad; }refusals differ"
        if [ -z "$bad" ]; then same=$((same + 1)); echo "same    $name (refused: $(tail -1 "$a.out" | cut -c1-100))"; return; fi
    fi
    for f in "$a"/*.log; do
        [ -f "$f" ] || { bad="${bad:+$bad; }no calls logged"; break; }
        cmp -s "$f" "$b/$(basename "$f")" || bad="${bad:+$bad; }$(basename "$f") differs"
    done
    [ "$(ls "$a"/*.log | wc -l)" = "$(ls "$b"/*.log | wc -l)" ] || bad="${bad:+$bad; }ranks logged differ"
    if [ -z "$bad" ]; then
        same=$((same + 1)); echo "same    $name ($(cat "$a"/*.log | wc -l) calls)"
    else
        differ=$((differ + 1)); echo "DIFFERS $name: $bad"
        for f in "$a"/*.log; do diff "$f" "$b/$(basename "$f")" 2>&1 | head -8; done
    fi
}
G=$PWD/tests/golden
# stages 3-5 take a multiple of 2P tokens: 16 divides every P here
tok() { local S; S=$(cat "$tmp/$1.seq"); [ $st = stage1 ] || [ $st = stage2 ] || S=$((S / 16 * 16)); echo "--model $G/$1 --data $tmp/$1.tok --seq $S --loss-chunk 7"; }
HP="--steps 2 --lr 1e-3 --warmup 0"
for st in stage1 stage2 stage3 stage4 stage5; do
    [ -x "$out/old/$st" ] && [ -x "$out/new/$st" ] || { echo "MISSING $st (not built in both trees)"; missing=$((missing + 1)); continue; }
    case $st in
        stage1) ranks=("") ;;
        stage2) ranks=("--local-ranks 1" "--local-ranks 2" "--gpus 4 --rehearse 1") ;;
        *) ranks=("--local-ranks 1" "--local-ranks 2" "--gpus 4 --rehearse 1" "--gpus 8 --rehearse 6") ;;
    esac
    extra=; [ $st = stage5 ] && extra="--mlp-tile 24 --yarn-factor 0"
    for r in "${ranks[@]}"; do
        tag="$st${r:+.$(echo $r | tr -c 'a-z0-9\n' _)}"
        case_ "$tag.dense" $st $r $(tok untied_gqa4_s100) $HP $extra
        case_ "$tag.tied" $st $r $(tok tied_gqa2_hd128) $HP $extra --keep-attn
        case_ "$tag.masked" $st $r $(tok masked_gqa4_s128) $HP $extra --eval-data "$tmp/masked_gqa4_s128.tok" --eval-windows 1
        case_ "$tag.yarn" $st $r $(tok yarn4_orig32) $HP $extra
        case_ "$tag.moe" $st $r $(tok moe_e8_k2) $HP $extra
        LAYOUT=zigzag case_ "$tag.packed" $st $r $(tok packed_gqa4_s128) $HP $extra --packing 7
        case_ "$tag.q35" $st $r $(tok q35_l2_s112) $HP $extra
        case_ "$tag.q35packed" $st $r $(tok q35_packed_l2_s112) $HP $extra --packing 7
        case_ "$tag.q35moe" $st $r $(tok q35moe_l2_s112) $HP $extra
        [[ $r == *rehearse* ]] || SAVE=1 case_ "$tag.save" $st $r $(tok untied_gqa4_s100) $HP $extra --save-every 1
    done
    case $st in
        stage4|stage5)
            for k in "--keep-attn gpu:1,host:1" "--keep-attn 1 --offload ckpt" "--keep-attn none --offload states" "--offload none --keep-attn all"; do
                case_ "$st.$(echo $k | tr -c 'a-z0-9\n' _)" $st --local-ranks 2 $(tok untied_gqa4_s100) $HP $extra $k
                LAYOUT=zigzag case_ "$st.packed.$(echo $k | tr -c 'a-z0-9\n' _)" $st --local-ranks 2 $(tok packed_gqa4_s128) $HP $extra $k --packing 7
            done ;;
    esac
    [ $st = stage5 ] && case_ stage5.groups stage5 --local-ranks 2 $(tok untied_gqa4_s100) $HP --mlp-tile 16 --attn-groups 2
done
echo "$same same, $differ differ$([ $missing -gt 0 ] && echo ", $missing stages not built")"
rm -rf "$tmp"
# a comparison that compared nothing is a failure, not a pass
[ $differ -eq 0 ] && [ $missing -eq 0 ] && [ $same -gt 0 ]
