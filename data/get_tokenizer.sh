#!/usr/bin/env bash
# Put the Qwen tokenizer ranks at data/qwen.tiktoken (not committed: 2.5 MB, Apache-2.0).
# Sources, in order: the file already there; ../shared/data/qwen.tiktoken (developer machines);
# the PyPI wheel of `dashscope`, which ships it as dashscope/resources/qwen.tiktoken.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dst=$here/qwen.tiktoken
want=b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186
ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$want" ]; }
if ok "$dst"; then echo "data/qwen.tiktoken present"; exit 0; fi
if ok "$here/../../shared/data/qwen.tiktoken"; then
    cp "$here/../../shared/data/qwen.tiktoken" "$dst"; echo "data/qwen.tiktoken copied from ../shared"; exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" dashscope
unzip -q -p "$tmp"/dashscope-*.whl dashscope/resources/qwen.tiktoken > "$dst.partial"
if ! ok "$dst.partial"; then rm -f "$dst.partial"; echo "error: qwen.tiktoken from dashscope has an unexpected sha256" >&2; exit 1; fi
mv "$dst.partial" "$dst"
echo "data/qwen.tiktoken extracted from the dashscope wheel"
