#!/usr/bin/env bash
# Build TREE's stages against the CPU-faked GPU (tests/calls/fake_cuda.c) into OUT/stageN.
#   bash tests/calls/build.sh TREE OUT
# TREE's host sources are compiled as they are; its kernels are replaced by logging stubs
# (gen_stubs.py, from TREE's own headers), and its GEMM and attention entry points are wrapped; its
# collectives too (logged, then run: fake_cuda.c).
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
for n in all_gather_bf16 reduce_scatter_f32 all_reduce_f64 sendrecv barrier; do wrap="$wrap -Wl,--wrap=comm_$n"; done # logged collectives
for n in $(python3 "$here/gen_stubs.py" "$tree" --wrap); do wrap="$wrap -Wl,--wrap=$n"; done
objs=()
for c in "$tree"/common/*.c; do
    o="$out/obj/$(basename "${c%.c}").o"
    gcc $cflags -c -o "$o" "$c" &
    objs+=("$o")
done
gcc $cflags -I"$here" -I"$tree" -c -o "$out/obj/stubs.o" "$out/stubs.c" &
gcc $cflags -I"$here" -c -o "$out/obj/fake_cuda.o" "$here/fake_cuda.c" &
wait
for s in "$tree"/stage[1-5]_*.c; do
    n=$(basename "$s" | cut -c1-6)
    gcc $cflags -o "$out/$n" "$s" "${objs[@]}" "$out/obj/stubs.o" "$out/obj/fake_cuda.o" $wrap $libs -lpthread -lm -lstdc++ ||
        { echo "$n does not build: left out"; rm -f "$out/$n"; }
done
echo "built $(ls "$out" | grep -c '^stage') stages of $tree in $out"
