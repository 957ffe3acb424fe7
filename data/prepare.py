#!/usr/bin/env python3
"""Turn UTF-8 text into a longctx token file (DESIGN.md section 6) with the Qwen tokenizer.

  python3 data/prepare.py BOOK.txt [MORE.txt | DIR ...] -o data/mine.tok [--tokenizer PATH]

Each input file is one document; a directory contributes its *.txt files in name order.
Documents are concatenated, each followed by <|endoftext|> (id 151643); no packing masks.
--tokenizer takes the Qwen `qwen.tiktoken` ranks file (default: data/qwen.tiktoken, which
data/get_tokenizer.sh fetches) or a model folder's `tokenizer.json`.
--decode FILE.tok prints a token file back as text (documents separated by <|endoftext|>).
"""
import argparse, os, struct, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen_tokenizer import ENDOFTEXT, QwenTokenizer, TokenizerError  # noqa: E402

MAGIC, VERSION, HEADER = b"LCTOKENS", 1, 24
HERE = os.path.dirname(os.path.abspath(__file__))


def write_tokens(path, ids):
    import array
    a = array.array("I", ids)
    if sys.byteorder != "little":
        a.byteswap()
    tmp = path + ".partial"
    with open(tmp, "wb") as f:
        f.write(MAGIC + struct.pack("<IIq", VERSION, 4, len(a)))
        a.tofile(f)
    os.replace(tmp, path)  # never leave a half-written token file under the real name


def read_tokens(path):
    import array
    with open(path, "rb") as f:
        head = f.read(HEADER)
        if len(head) < HEADER or head[:8] != MAGIC:
            raise ValueError(f"{path}: not a longctx token file (wrong magic)")
        version, width, count = struct.unpack("<IIq", head[8:])
        if version != VERSION or width != 4:
            raise ValueError(f"{path}: unsupported version {version} / width {width}")
        a = array.array("I")
        a.frombytes(f.read())
        if len(a) != count:
            raise ValueError(f"{path}: truncated ({len(a)} of {count} tokens)")
    if sys.byteorder != "little":
        a.byteswap()
    return a


def list_inputs(paths):
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(os.path.join(p, n) for n in os.listdir(p) if n.endswith(".txt"))
        elif os.path.isfile(p):
            files.append(p)
        else:
            raise FileNotFoundError(f"input {p} does not exist")
    return files


def tokenize_files(tok, files, log=print):
    ids, t0 = [], time.time()
    total_bytes = sum(os.path.getsize(f) for f in files)
    done = 0
    for f in files:
        with open(f, encoding="utf-8", newline="") as fh:  # keep \r\n: the file decodes back byte for byte
            text = fh.read()
        if not text.strip():
            raise ValueError(f"{f} is empty")
        doc = tok.encode(text)
        ids += doc
        ids.append(ENDOFTEXT)
        done += os.path.getsize(f)
        log(f"  {os.path.basename(f)}: {len(doc):,} tokens  [{100 * done / total_bytes:5.1f}% of "
            f"{total_bytes / 1e6:.1f} MB, {time.time() - t0:.1f} s]")
    return ids


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="*", help="text files or directories of *.txt")
    ap.add_argument("-o", "--out", help="output token file")
    ap.add_argument("--tokenizer", default=os.path.join(HERE, "qwen.tiktoken"),
                    help="qwen.tiktoken or tokenizer.json (default: data/qwen.tiktoken)")
    ap.add_argument("--decode", metavar="FILE.tok", help="print a token file as text and exit")
    a = ap.parse_args(argv)
    try:
        tok = QwenTokenizer(a.tokenizer)
        if a.decode:
            sys.stdout.write(tok.decode(read_tokens(a.decode)))
            return 0
        if not a.inputs or not a.out:
            ap.error("give input files and -o OUT (or --decode FILE)")
        files = list_inputs(a.inputs)
        if not files:
            raise ValueError("no input text files found")
        print(f"tokenizing {len(files)} document(s) with {tok.kind} ({a.tokenizer})")
        ids = tokenize_files(tok, files)
        write_tokens(a.out, ids)
        print(f"wrote {a.out}: {len(ids):,} tokens ({len(files)} documents, <|endoftext|> after each)")
    except (TokenizerError, ValueError, FileNotFoundError, UnicodeDecodeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
