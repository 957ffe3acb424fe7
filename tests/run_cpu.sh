#!/usr/bin/env bash
# The CPU test suite (what CI runs): the C tests, check_stage's checks, the data tests, stage
# --dry-run/--help checks; prints one closing line "N passed, M failed" summing them all.
set -u
cd "$(dirname "$0")/.."
pass=0; fail=0
count() { # add the last "N passed, M failed" line of a log
    local line; line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -1)
    if [ -z "$line" ]; then fail=$((fail + 1)); echo "FAIL $2 printed no result line"; return; fi
    pass=$((pass + $(echo "$line" | cut -d' ' -f1))); fail=$((fail + $(echo "$line" | cut -d' ' -f3)))
}
log=$(mktemp -d)
echo "== C tests (build/test_cpu)"
./build/test_cpu tests/golden | tee "$log/c.txt"; count "$log/c.txt" test_cpu
echo "== the chunked gated delta rule's GPU kernels in a CPU emulation, against fp64 (build/test_gdn_chunked_emu)"
./build/test_gdn_chunked_emu | tee "$log/ge.txt"; count "$log/ge.txt" test_gdn_chunked_emu
echo "== the TCP rendezvous across processes on loopback, a node's place from Slurm (build/test_rendezvous)"
./build/test_rendezvous | tee "$log/t.txt"; count "$log/t.txt" test_rendezvous
echo "== rank counting with a stubbed device count (build/test_ranks)"
./build/test_ranks | tee "$log/r.txt"; count "$log/r.txt" test_ranks
echo "== stopping on SIGTERM/SIGUSR1: exit statuses and messages (build/test_run)"
./build/test_run | tee "$log/p.txt"; count "$log/p.txt" test_run
echo "== check_stage's checks on the reference's own dump and broken copies (tests/check_stage_cpu.sh)"
bash tests/check_stage_cpu.sh | tee "$log/k.txt"; count "$log/k.txt" check_stage_cpu
echo "== data tests (tests/test_data.py)"
python3 tests/test_data.py | tee "$log/d.txt"; count "$log/d.txt" test_data
echo "== trainer command-line tests (tests/test_cli.sh)"
bash tests/test_cli.sh | tee "$log/s.txt"; count "$log/s.txt" test_cli
echo "== the course's shape: stage 1's length, each diff's size, the sections, nothing outside the repository (tests/course.sh)"
bash tests/course.sh | tee "$log/o.txt"; count "$log/o.txt" course
echo "== bench/lever_count.py's rules on synthetic diffs, and planted mis-rules caught (tests/test_lever_count.py)"
python3 tests/test_lever_count.py | tee "$log/l.txt"; count "$log/l.txt" test_lever_count
echo "== packed runs of stages 3-5 on a faked GPU: each rank's rows and ring blocks are common/layout.c's, the collectives the same on every rank; planted (tests/calls/layout_calls.sh)"
PLANT=1 bash tests/calls/layout_calls.sh | tee "$log/y.txt"; count "$log/y.txt" layout_calls
echo "== --keep-attn with a Qwen3.5 hybrid, stages 1-5 on the faked GPU: only its full attention layers kept, each at its place; planted (tests/calls/keep_calls.sh)"
BIN=build/calls_layout/new PLANT=1 bash tests/calls/keep_calls.sh | tee "$log/kc.txt"; count "$log/kc.txt" keep_calls
echo "== the README's exercises that need no GPU (tests/exercises.sh)"
bash tests/exercises.sh | tee "$log/e.txt"; count "$log/e.txt" exercises
echo "== every figure the README quotes, from the command beside it (tests/readme_figures.sh)"
bash tests/readme_figures.sh | tee "$log/m.txt"; count "$log/m.txt" readme_figures
echo "== bad input refused by name before the GPU, every stage (tests/refusals.sh)"
bash tests/refusals.sh | tee "$log/f.txt"; count "$log/f.txt" refusals
echo "== the front door without a GPU or matplotlib: make test-gpu, the workshop, the SFT demo, the plots (tests/no_gpu.sh)"
bash tests/no_gpu.sh | tee "$log/g.txt"; count "$log/g.txt" no_gpu
echo "== every rank's collectives, fences and allocations, stages 2-5 on the faked GPU and NCCL (tests/calls/comm_calls.sh)"
bash tests/calls/comm_calls.sh | tee "$log/n.txt"; count "$log/n.txt" comm_calls
echo "== the input readers under libFuzzer + ASan/UBSan: the corpus replayed, then each fuzzed briefly (tests/fuzz/ci.sh)"
FUZZ_SECONDS=${FUZZ_SECONDS:-15} bash tests/fuzz/ci.sh | tee "$log/z.txt"; count "$log/z.txt" fuzz
rm -rf "$log"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
