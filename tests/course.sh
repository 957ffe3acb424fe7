#!/usr/bin/env bash
# The course's shape, checked on every change (no GPU): stage 1 is a first read (at most 700 lines),
# each stage-to-stage diff stays within its size, the README and RESULTS.md stay short, every stage has the same sections in the same
# order, and the repository stands alone -- no file points outside it (to a sibling folder) or into its work
# history (issue numbers, sessions, device calls by letter, "the issue's", old/new wordings). Dated
# logs under bench/results/ keep their names, their notes (*.md) are checked; the committed diffs are
# the stage files'.
# Prints "N passed, M failed".
set -u
cd "$(dirname "$0")/.."
pass=0; fail=0
ok() { if eval "$2"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1"; fi; }

n1=$(wc -l < stage1_single_gpu.c)
ok "stage 1 is a first read: at most 700 lines (has $n1)" "[ $n1 -le 700 ]"
# the most lines each diff may change (`diff stageA stageB`, lines marked < or >)
limits=(250 400 300 300)
i=0; prev=
for s in $(ls stage[1-5]_*.c | sort); do
    if [ -n "$prev" ]; then
        n=$(diff "$prev" "$s" | grep -cE '^[<>]')
        ok "$prev -> $s changes at most ${limits[$i]} lines (changes $n)" "[ $n -le ${limits[$i]} ]"
        i=$((i + 1))
    fi
    prev=$s
done
# the front pages stay short: a README a learner reads in an afternoon, one page of results
w=$(wc -w < README.md); r=$(wc -l < RESULTS.md)
ok "README.md is at most 4,500 words (has $w)" "[ $w -le 4500 ]"
ok "RESULTS.md is one page: at most 400 lines (has $r)" "[ $r -le 400 ]"
# the section banners, in order, the same in every stage
want=$(grep -E '^/\* =+ ' stage1_single_gpu.c | sed 's/=//g')
for s in stage[2-5]_*.c; do
    got=$(grep -E '^/\* =+ ' "$s" | sed 's/=//g')
    ok "$s has stage 1's sections in stage 1's order" "[ \"\$got\" = \"\$want\" ]"
done
# every fence opened is closed, and names its own stage or an earlier one
for s in stage[1-5]_*.c; do
    k=$(echo "$s" | cut -c6)
    open=$(grep -cE '^\s*/\* ---- stage [0-9]+: ' "$s"); close=$(grep -cE '^\s*/\* ---- end stage [0-9]+ ---- \*/' "$s")
    ok "$s: $open fences opened, $close closed" "[ $open -eq $close ]"
    later=$(grep -oE '/\* ---- (end )?stage [0-9]+' "$s" | grep -oE '[0-9]+$' | awk -v k="$k" '$1 > k' | head -1)
    ok "$s names no later stage in its fences" "[ -z \"$later\" ]"
done

# the repository stands alone: tracked files, less this check's own patterns; under bench/results/
# only the prose (*.md) -- the dated logs and scripts keep their names (session5/, call_j.sh)
pat='\.\./shared|\b[Ii]ssue [0-9]+|\b[Ii]ssue'"'"'s|\b[Ss]ession [0-9]+\b|\b[Cc]alls? [A-Z]{1,2}\b|the issue.s|(old|new) wording'
tracked() { git ls-files | grep -vE '^bench/results/|^tests/course\.sh$'; git ls-files 'bench/results/*.md'; }
hits=$(tracked 2>/dev/null | xargs -d '\n' grep -nEI "$pat" 2>/dev/null | head -5)
[ -n "$(git ls-files 2>/dev/null | head -1)" ] || hits=$( { grep -rnEI "$pat" --exclude-dir=.git --exclude-dir=build \
    --exclude-dir=results --exclude=course.sh .; grep -rnEI "$pat" --include='*.md' bench/results; } | head -5)
ok "no file points outside the repository or into its work history${hits:+: }$hits" "[ -z \"\$hits\" ]"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
