#!/usr/bin/env python3
"""Make a prompt/completion JSONL for the masked fine-tune demo (bench/sft_demo.sh) from the shipped
books: each example's prompt is a passage and an instruction, its completion the passage again (a
copy task: learnable from scratch, and only the completion is scored). The last tenth of the books
is held out for evaluation.

  python3 bench/sft_pairs.py --train OUT/train.jsonl --eval OUT/eval.jsonl [--tokens 48]
  python3 data/prepare.py --jsonl OUT/train.jsonl -o OUT/train.tok     # then the same for eval
"""
import argparse, json, os, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "data"))
from prepare import read_token_file  # noqa: E402
from qwen_tokenizer import ENDOFTEXT, QwenTokenizer  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--books", default=os.path.join(HERE, "..", "data", "books.tok"))
    ap.add_argument("--tokenizer", default=os.path.join(HERE, "..", "data", "qwen.tiktoken"))
    ap.add_argument("--train", required=True)
    ap.add_argument("--eval", required=True)
    ap.add_argument("--tokens", type=int, default=48, help="tokens of book text per passage")
    ap.add_argument("--max-examples", type=int, default=40000, help="training examples at most")
    a = ap.parse_args()
    tok = QwenTokenizer(a.tokenizer)
    ids, _ = read_token_file(a.books)
    cut = len(ids) * 9 // 10
    for path, lo, hi, cap in ((a.train, 0, cut, a.max_examples), (a.eval, cut, len(ids), 2000)):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        n = 0
        with open(path, "w") as f:
            for at in range(lo, hi - a.tokens, a.tokens):
                span = ids[at:at + a.tokens]
                if ENDOFTEXT in span:
                    continue  # a passage within one book
                text = tok.decode(list(span))
                if "\ufffd" in text or not text.strip():
                    continue  # cut inside a character
                f.write(json.dumps({"prompt": "Passage:\n" + text + "\nRepeat the passage:\n", "completion": text}) + "\n")
                n += 1
                if n >= cap:
                    break
        print(f"wrote {path}: {n} examples of {a.tokens} book tokens (tokens {lo:,}..{hi:,} of the books)")


if __name__ == "__main__":
    main()
