#!/usr/bin/env bash
# What a new user meets at the front door on a machine without a GPU, and without matplotlib:
# `make test-gpu` refuses at once with one line saying why; bench/workshop.sh and bench/sft_demo.sh
# run, fail, and say so by their exit status and their last line; each plot script names what to
# install instead of a traceback. Prints "N passed, M failed".
# With a GPU device node present (/dev/nvidia0) the GPU cases are left out: there they would run
# the GPU suite and the workshop.
set -u
cd "$(dirname "$0")/.."
pass=0; fail=0
ok() { if eval "$2"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1"; fi; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the last line of "$@"'s output (stdout and stderr), its exit status and seconds; LIMIT s at most
LIMIT=${LIMIT:-120}
run() {
    local t0; t0=$(date +%s)
    timeout "$LIMIT" "$@" > "$tmp/out" 2>&1; rc=$?
    secs=$(( $(date +%s) - t0 ))
    last=$(tail -1 "$tmp/out")
    sed 's/^/  | /' "$tmp/out" | tail -4
}

if ls /dev/nvidia[0-9]* > /dev/null 2>&1; then
    echo "a GPU device node is here: make test-gpu, the workshop and the SFT demo are not run"
else
    echo "== make test-gpu with no usable GPU"
    run make --no-print-directory test-gpu
    ok "make test-gpu exits non-zero (got $rc)" "[ $rc -ne 0 ] && [ $rc -ne 124 ]"
    ok "make test-gpu refuses within 20 s (took $secs s)" "[ $secs -le 20 ]"
    ok "make test-gpu says why in one line" \
        "grep -qE '^make test-gpu: no usable GPU: [^ ].* -- it runs on an H100/H200; \`make test\` is the CPU suite\$' '$tmp/out'"
    ok "make test-gpu runs no test" "! grep -qE '^(== |FAIL |[0-9]+ passed)' '$tmp/out'"

    echo "== tests/run_gpu.sh alone with no usable GPU"
    run bash tests/run_gpu.sh
    ok "tests/run_gpu.sh exits non-zero (got $rc)" "[ $rc -ne 0 ] && [ $rc -ne 124 ]"
    ok "tests/run_gpu.sh says why in its one line (got: $last)" \
        "[ \$(wc -l < '$tmp/out') -eq 1 ] && grep -qE '^tests/run_gpu.sh: no usable GPU: [^ ].* -- it runs on an H100/H200' '$tmp/out'"

    echo "== bench/workshop.sh with no usable GPU: every step that needs one fails, the plan runs"
    run bash bench/workshop.sh "$tmp/ws"
    ok "workshop exits non-zero (got $rc)" "[ $rc -ne 0 ] && [ $rc -ne 124 ]"
    ok "workshop's last line names the failed steps (got: $last)" \
        "[[ \"\$last\" == 'workshop: 7 of 8 steps failed: stage1 stage1_keep stage2 stage3 stage4_none stage4_all stage5_rehearse'* ]]"
    ok "workshop ran the steps after the first failure (stage5_plan's plan)" "grep -q 'total (peak)' '$tmp/ws/stage5_plan.txt'"

    echo "== bench/sft_demo.sh with no usable GPU: training fails (token files given, so no tokenizer needed)"
    mkdir -p "$tmp/sft" && cp data/books.tok "$tmp/sft/train.tok" && cp data/books.tok "$tmp/sft/eval.tok"
    run bash bench/sft_demo.sh "$tmp/sft" 5
    ok "sft_demo exits non-zero (got $rc)" "[ $rc -ne 0 ] && [ $rc -ne 124 ]"
    ok "sft_demo's last line names the failed step (got: $last)" \
        "[[ \"\$last\" == 'sft_demo: training (./stage1) failed (exit '*\"); its output is in $tmp/sft/sft.log\" ]]"
fi

echo "== the plot scripts without matplotlib"
# a matplotlib that is not there, even where one is installed
mkdir -p "$tmp/nompl/matplotlib"
echo 'raise ModuleNotFoundError("No module named '"'matplotlib'"'", name="matplotlib")' > "$tmp/nompl/matplotlib/__init__.py"
ok "bench/requirements.txt names matplotlib" "grep -qE '^matplotlib' bench/requirements.txt"
for cmd in "plot.py $tmp" "plot_sft.py $tmp" "plot_timeline.py $tmp/none.tsv $tmp/t.png" "plot_zigzag.py 2 $tmp/z.png" "plot_layout.py $tmp/l.png" \
           "memory_chart.py $tmp/m.png" "memory_by_seq.py $tmp/s.png"; do
    script=bench/${cmd%% *}
    PYTHONPATH=$tmp/nompl run python3 bench/$cmd
    ok "$script without matplotlib exits 2 (got $rc)" "[ $rc -eq 2 ]"
    ok "$script without matplotlib prints one line naming the install (got: $last)" \
        "[ \$(wc -l < '$tmp/out') -eq 1 ] && [ \"\$last\" = '$script needs matplotlib: python3 -m pip install -r bench/requirements.txt' ]"
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
