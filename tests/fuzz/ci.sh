#!/usr/bin/env bash
# tests/fuzz/ci.sh -- the fuzzers in CI (tests/fuzz/README.md): check that clang builds a libFuzzer
# target with ASan/UBSan, build the harnesses (make fuzz-build), replay each one's committed corpus
# (one check each), then fuzz each for FUZZ_SECONDS (default 20; one check each). Prints "N passed,
# M failed" last, like the other test scripts. A crash's reproducer is kept under $FUZZ_OUT (default
# a fresh temporary directory, printed) and shown in base64 so it survives the CI log.
#   bash tests/fuzz/ci.sh            FUZZ_SECONDS=5 bash tests/fuzz/ci.sh
set -u
cd "$(dirname "$0")/../.."
FUZZ_SECONDS=${FUZZ_SECONDS:-20}
FUZZ_CC=${FUZZ_CC:-clang}
NAMES="json config safetensors tokens cli ckpt rendezvous"
pass=0; fail=0
ok() { if eval "$2"; then pass=$((pass + 1)); echo "ok   $1"; else fail=$((fail + 1)); echo "FAIL $1"; fi; }
out=${FUZZ_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/longctx-fuzz-ci-XXXXXX")}
mkdir -p "$out"
echo "fuzz: logs and reproducers in $out"

# 1. the toolchain: clang with the fuzzer runtime (Debian: clang and libclang-rt-NN-dev)
cat > "$out/probe.c" <<'EOF'
#include <stddef.h>
#include <stdint.h>
int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return n > 0 && d[0] == 7 && n > 100000; }
EOF
if ! command -v "$FUZZ_CC" > /dev/null; then
    echo "FAIL $FUZZ_CC not found: install clang (Debian: apt-get install clang libclang-rt-dev)"
    echo "0 passed, 1 failed"; exit 1
fi
if ! "$FUZZ_CC" -fsanitize=fuzzer,address,undefined -o "$out/probe" "$out/probe.c" > "$out/probe.log" 2>&1 ||
   ! "$out/probe" -runs=100 > "$out/probe-run.log" 2>&1; then
    echo "FAIL $FUZZ_CC cannot build or run a libFuzzer target with -fsanitize=fuzzer,address,undefined:"
    cat "$out/probe.log" "$out/probe-run.log" 2> /dev/null | sed 's/^/  /' | tail -15
    echo "  (the fuzzer runtime libclang_rt.fuzzer is in Debian's libclang-rt-NN-dev, e.g. libclang-rt-14-dev)"
    echo "0 passed, 1 failed"; exit 1
fi
echo "fuzz: $FUZZ_CC builds and runs a libFuzzer target with ASan and UBSan"

# 2. build
if ! make --no-print-directory fuzz-build FUZZ_CC="$FUZZ_CC" > "$out/build.log" 2>&1; then
    fail=$((fail + 1)); echo "FAIL make fuzz-build:"; grep -v '^longctx.c:' "$out/build.log" | tail -30
    echo "$pass passed, $fail failed"; exit 1
fi
echo "fuzz: make fuzz-build done"

# a crash's reproducer, shown so that the CI log alone can reproduce it
show() { # log artifact-prefix
    grep -E 'ERROR|SUMMARY|runtime error|fuzz harness|fatal path|^    #[0-9] ' "$1" | head -30 | sed 's/^/  /'
    for f in "$2"*; do
        [ -f "$f" ] || continue
        echo "  reproducer $f ($(wc -c < "$f") bytes; base64 below; replay: build/fuzz/fuzz_NAME FILE)"
        head -c 4096 "$f" | base64 | sed 's/^/    /'
    done
}
# stderr closed while fuzzing (rdv_tcp_serve logs every refusal); libFuzzer and the sanitizers keep
# their own copy of it for their reports
RUN="-timeout=5 -rss_limit_mb=2048 -close_fd_mask=2"

# 3. replay: every committed input once
for n in $NAMES; do
    files=$(ls tests/fuzz/corpus/$n 2> /dev/null | wc -l)
    build/fuzz/fuzz_$n -runs=0 $RUN -artifact_prefix="$out/replay-$n-" tests/fuzz/corpus/$n > "$out/replay-$n.log" 2>&1
    rc=$?
    ok "fuzz_$n replays its corpus ($files inputs)" "[ $rc -eq 0 ] && [ $files -gt 0 ]"
    [ $rc -eq 0 ] || show "$out/replay-$n.log" "$out/replay-$n-"
done

# 4. fuzz each for FUZZ_SECONDS, from its corpus (new inputs go to $out, never to tests/fuzz/corpus)
for n in $NAMES; do
    mkdir -p "$out/corpus-$n"
    dict=; [ -f tests/fuzz/$n.dict ] && dict=-dict=tests/fuzz/$n.dict
    build/fuzz/fuzz_$n -max_total_time="$FUZZ_SECONDS" $RUN $dict -print_final_stats=1 \
        -artifact_prefix="$out/fuzz-$n-" "$out/corpus-$n" tests/fuzz/corpus/$n > "$out/fuzz-$n.log" 2>&1
    rc=$?
    stats=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$out/fuzz-$n.log" | tail -1 | sed 's/^#\([0-9]*\)[[:space:]]*DONE */\1 runs, /')
    ok "fuzz_$n for ${FUZZ_SECONDS}s: ${stats:-no DONE line}" "[ $rc -eq 0 ]"
    [ $rc -eq 0 ] || show "$out/fuzz-$n.log" "$out/fuzz-$n-"
done

[ -n "${FUZZ_OUT:-}" ] || [ "$fail" -gt 0 ] || rm -rf "$out"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
