#!/usr/bin/env bash
# The long-window bounds must catch a real defect: stage 5 built with the RoPE positions of each
# rank's tail chunk one chunk too far (zigzag chunk 2P-1-r rotated as if it were chunk 2P-r) runs
# tests/long_grad_gpu.sh at 64K; its bounds (cosine against fp32 >= 0.975, 0.02 above the bf16
# reference, loss within 1e-4) must FAIL. Prints "1 passed, 0 failed" when they do.
set -u
cd "$(dirname "$0")/.."
mkdir -p build/plant
old='    for (int64_t t = 0; t < M->S; t++) pos[t] = (int32_t)zz[t];'
new='    for (int64_t t = 0; t < M->S; t++) pos[t] = (int32_t)(zz[t] + (t >= M->S / 2 ? M->S / 2 : 0)); /* PLANTED */'
grep -qF "$old" stage5_tiling_yarn.c || { echo "0 passed, 1 failed (the plant's line is not in stage5_tiling_yarn.c)"; exit 1; }
python3 - "$old" "$new" <<'PY'
import sys
s = open("stage5_tiling_yarn.c").read()
open("build/plant/stage5_planted.c", "w").write(s.replace(sys.argv[1], sys.argv[2], 1))
PY
link=$(make -s -n -B build/stage5 | tail -1)   # the stage's own compile-and-link line, on the planted copy
eval "${link/-o build\/stage5 stage5_tiling_yarn.c/-I. -o build/plant/stage5_planted build/plant/stage5_planted.c}" || exit 1
tmp=$(mktemp -d)
STAGE5=build/plant/stage5_planted bash tests/long_grad_gpu.sh "$tmp" 65536 > "$tmp/log" 2>&1
grep -E "^FAIL" "$tmp/log" | head -6
line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$tmp/log" | tail -1); echo "  the planted build: $line"
rm -rf "$tmp"
case $line in
*" 0 failed" | "") echo "0 passed, 1 failed (the planted RoPE positions were not caught)"; exit 1 ;;
*) echo "1 passed, 0 failed (the planted RoPE positions fail the long-window bounds)" ;;
esac
