#!/usr/bin/env bash
# gdn_chunked_gpu.sh -- the chunked gated delta rule (kernels/gdn_chunked.cu) on an H100/H200:
# build/test_gdn_chunked against the fp64 recurrence (tests/ref_gdn.c) and against the tiled
# token-by-token kernels on the same inputs, in both precisions (exact, then fast). tests/run_gpu.sh
# runs it (SKIP_GDN_CHUNKED=1 leaves it out). Then it runs twice more (exact; the second with
# GDN_CHUNKED_ROWS=16, the sequential passes' other width), and the two must end on the same count
# (atomics may move the last bits of the printed errors, not a check's outcome).
# Prints "N passed, M failed".
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
need_gpu tests/gdn_chunked_gpu.sh
[ -x build/test_gdn_chunked ] || { echo "tests/gdn_chunked_gpu.sh: build/test_gdn_chunked is not built: make all" >&2; exit 1; }
tmp=$(mktemp -d)
echo "== build/test_gdn_chunked (exact and fast precision; the tiled kernels beside)"
GDN_CHUNKED_FAST=1 timeout 600 ./build/test_gdn_chunked 2>&1 | tee "$tmp/t1.txt"; count "$tmp/t1.txt" test_gdn_chunked
echo "== twice more (exact): again, and with the sequential passes at 16 state rows a CTA"
timeout 600 ./build/test_gdn_chunked > "$tmp/t2.txt" 2>&1
GDN_CHUNKED_ROWS=16 timeout 600 ./build/test_gdn_chunked > "$tmp/t3.txt" 2>&1; count "$tmp/t3.txt" "test_gdn_chunked, 16 rows a CTA"
ok "two runs of build/test_gdn_chunked end alike: $(tail -1 "$tmp/t2.txt")" "[ \"\$(tail -1 $tmp/t2.txt)\" = \"\$(tail -1 $tmp/t3.txt)\" ]"
rm -rf "$tmp"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
