#!/usr/bin/env bash
# Build TREE's stages against the CPU-faked GPU (tests/calls/fake_cuda.c) into OUT/stageN.
#   bash tests/calls/build.sh TREE OUT
# TREE's host sources are compiled as they are; its kernels are replaced by logging stubs
# (gen_stubs.py, from TREE's own headers), and its GEMM and attention entry points are wrapped.
# NCCL is faked on the host (fake_nccl.c: --gpus N with CALLS_GPUS=N runs the NCCL path), and the
# communicator's collectives that TREE's comm.h declares are wrapped to record them.
# Also builds OUT/comm_cpu (tests/calls/comm_cpu.c: the communicator alone, against TREE).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tree=$(cd "$1" && pwd)
out=$2
mkdir -p "$out/obj"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
mk() { make -s -C "$tree" --eval "print-it: ; @echo @@ \$($1)" print-it 2>/dev/null | sed -n 's/^@@ //p'; }
inc=$(mk GPU_INC)
libs=$(mk GPU_LIBS)
[ -n "$inc" ] || inc="-I$CUDA_HOME/include"
libs=$(echo "$libs" | sed 's/-lcudart//')
cflags="-std=c11 -D_DEFAULT_SOURCE -O1 -g -w -I$tree $inc"
python3 "$here/gen_stubs.py" "$tree" > "$out/stubs.c"
wrap="-Wl,--wrap=arena_take"
for n in $(python3 "$here/gen_stubs.py" "$tree" --wrap); do wrap="$wrap -Wl,--wrap=$n"; done
have=
for n in comm_all_gather_bf16 comm_reduce_scatter_f32 comm_all_reduce_f64 comm_sendrecv comm_barrier comm_min_i64 \
         comm_same_i64 comm_warm_up; do
    grep -q "\b$n(" "$tree/common/comm.h" && { wrap="$wrap -Wl,--wrap=$n"; have="$have -DHAVE_$n"; }
done
objs=()
for c in "$tree"/common/*.c; do
    o="$out/obj/$(basename "${c%.c}").o"
    gcc $cflags -c -o "$o" "$c" &
    objs+=("$o")
done
gcc $cflags -I"$here" -I"$tree" -c -o "$out/obj/stubs.o" "$out/stubs.c" &
gcc $cflags -I"$here" -c -o "$out/obj/fake_cuda.o" "$here/fake_cuda.c" &
gcc $cflags $have -I"$here" -c -o "$out/obj/fake_nccl.o" "$here/fake_nccl.c" &
gcc $cflags -I"$here" -I"$here/../.." -c -o "$out/obj/comm_cpu.o" "$here/comm_cpu.c" &
wait
fakes=("$out/obj/stubs.o" "$out/obj/fake_cuda.o" "$out/obj/fake_nccl.o")
gcc $cflags -o "$out/comm_cpu" "$out/obj/comm_cpu.o" "${objs[@]}" "${fakes[@]}" $wrap $libs -lpthread -lm -lstdc++ ||
    { echo "comm_cpu does not build"; exit 1; }
for s in "$tree"/stage[1-5]_*.c; do
    n=$(basename "$s" | cut -c1-6)
    gcc $cflags -o "$out/$n" "$s" "${objs[@]}" "${fakes[@]}" $wrap $libs -lpthread -lm -lstdc++ ||
        { echo "$n does not build: left out"; rm -f "$out/$n"; }
done
echo "built $(ls "$out" | grep -c '^stage') stages of $tree in $out"
