#!/usr/bin/env bash
# On one GPU: a kernel spinning in one thread (a collective waiting for another rank thread) while
# the other thread allocates or frees, with and without the communicator's allocation phases
# (tests/alloc_order_gpu.c says what each case shows). make test-gpu runs it; it needs a GPU.
# Prints the calls that waited for the kernel and "N passed, M failed" (the phased cases).
set -u
cd "$(dirname "$0")/.."
[ -x build/alloc_order_gpu ] || { echo "build/alloc_order_gpu is not built (make)"; echo "0 passed, 1 failed"; exit 1; }
timeout 300 ./build/alloc_order_gpu
rc=$?
[ $rc -eq 124 ] && { echo "alloc_order_gpu did not end within 300 s: a call hung"; echo "0 passed, 1 failed"; }
exit $rc
