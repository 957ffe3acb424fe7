#!/usr/bin/env python3
"""Turn UTF-8 text, or prompt/completion pairs, into a longctx token file (DESIGN.md section 6)
with the Qwen tokenizer.

  python3 data/prepare.py BOOK.txt [MORE.txt | DIR ...] -o data/mine.tok [--tokenizer PATH]
  python3 data/prepare.py --jsonl PAIRS.jsonl -o data/sft.tok
  python3 data/prepare.py --jsonl CHATS.jsonl --template chatml -o data/chat.tok

Text: each input file is one document; a directory contributes its *.txt files in name order.
Documents are concatenated, each followed by <|endoftext|> (id 151643); no packing masks. Every
label carries loss (a version-1 file: ids only).

--jsonl: one example per line, concatenated the same way, with a loss weight per token (a
version-2 file: ids, then one byte per token, 0 or 1; weight 1 means the token is a label the loss
counts). Two shapes of line:
  {"prompt": "...", "completion": "..."}        prompt tokens weight 0; the completion and the
                                                <|endoftext|> after it weight 1 (completion-only loss)
  {"messages": [{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}]}
      with --template chatml (Qwen's chat format): each message is <|im_start|>ROLE\n CONTENT
      <|im_end|>\n; an assistant message's content and its <|im_end|> weight 1, everything else 0
      (assistant-only loss); <|endoftext|> after each conversation, weight 0.
The prompt and the completion are tokenized separately, so the tokens are exactly the prompt's
followed by the completion's.
--tokenizer takes the Qwen `qwen.tiktoken` ranks file (default: data/qwen.tiktoken, which
data/get_tokenizer.sh fetches) or a model folder's `tokenizer.json`.
--decode FILE.tok prints a token file back as text (documents separated by <|endoftext|>);
with --show-loss the tokens that carry loss are printed between [[ and ]].
"""
import argparse, json, os, struct, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen_tokenizer import ENDOFTEXT, SPECIAL, QwenTokenizer, TokenizerError  # noqa: E402

MAGIC, VERSION, VERSION_WEIGHTS, HEADER = b"LCTOKENS", 1, 2, 24
HERE = os.path.dirname(os.path.abspath(__file__))
IM_START, IM_END = SPECIAL["<|im_start|>"], SPECIAL["<|im_end|>"]
TEMPLATES = ("chatml",)


def write_tokens(path, ids, weights=None):
    """Version 1 (ids), or version 2 (ids, then a 0/1 loss weight per token) when weights are given."""
    import array
    a = array.array("I", ids)
    if sys.byteorder != "little":
        a.byteswap()
    if weights is not None and len(weights) != len(a):
        raise ValueError(f"{len(weights)} weights for {len(a)} tokens")
    tmp = path + ".partial"
    with open(tmp, "wb") as f:
        f.write(MAGIC + struct.pack("<IIq", VERSION if weights is None else VERSION_WEIGHTS, 4, len(a)))
        a.tofile(f)
        if weights is not None:
            f.write(bytes(weights))
    os.replace(tmp, path)  # never leave a half-written token file under the real name


def read_token_file(path):
    """(ids, weights): weights is None for a version-1 file."""
    import array
    with open(path, "rb") as f:
        head = f.read(HEADER)
        if len(head) < HEADER or head[:8] != MAGIC:
            raise ValueError(f"{path}: not a longctx token file (wrong magic)")
        version, width, count = struct.unpack("<IIq", head[8:])
        if version not in (VERSION, VERSION_WEIGHTS) or width != 4:
            raise ValueError(f"{path}: unsupported version {version} / width {width}")
        a = array.array("I")
        a.frombytes(f.read(4 * count))
        weights = f.read() if version == VERSION_WEIGHTS else None
        if len(a) != count or (weights is not None and len(weights) != count):
            raise ValueError(f"{path}: truncated ({len(a)} of {count} tokens)")
        if weights is not None and any(w > 1 for w in weights):
            raise ValueError(f"{path}: a loss weight other than 0 or 1")
    if sys.byteorder != "little":
        a.byteswap()
    return a, weights


def read_tokens(path):
    return read_token_file(path)[0]


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


def encode_example(tok, obj, template, where):
    """(ids, weights) of one JSONL example, <|endoftext|> included."""
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: not a JSON object")
    if "messages" in obj:
        if template not in TEMPLATES:
            raise ValueError(f"{where}: a chat (\"messages\") needs --template ({', '.join(TEMPLATES)})")
        msgs = obj["messages"]
        if not isinstance(msgs, list) or not msgs:
            raise ValueError(f"{where}: \"messages\" must be a non-empty list")
        ids, w, trained = [], [], 0
        for k, m in enumerate(msgs):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                raise ValueError(f"{where}: message {k} needs string \"role\" and \"content\"")
            head = [IM_START] + tok.encode(m["role"] + "\n")
            body = tok.encode(m["content"]) + [IM_END]
            on = int(m["role"] == "assistant")
            ids += head + body + tok.encode("\n")
            w += [0] * len(head) + [on] * len(body) + [0]
            trained += on
        if not trained:
            raise ValueError(f"{where}: no assistant message, so no token would carry loss")
        return ids + [ENDOFTEXT], w + [0]
    if template:
        raise ValueError(f"{where}: --template {template} reads chats (\"messages\"), not prompt/completion pairs")
    p, c = obj.get("prompt"), obj.get("completion")
    if not isinstance(p, str) or not isinstance(c, str):
        raise ValueError(f"{where}: needs string \"prompt\" and \"completion\" (or \"messages\" with --template)")
    if not c:
        raise ValueError(f"{where}: empty completion, so no token would carry loss")
    pi, ci = tok.encode(p), tok.encode(c)
    return pi + ci + [ENDOFTEXT], [0] * len(pi) + [1] * (len(ci) + 1)


def tokenize_jsonl(tok, path, template, log=print):
    ids, weights, n, t0 = [], [], 0, time.time()
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: not JSON ({e.msg})") from None
            i, w = encode_example(tok, obj, template, where)
            ids += i
            weights += w
            n += 1
            if n % 10000 == 0:
                log(f"  {n:,} examples, {len(ids):,} tokens [{time.time() - t0:.1f} s]")
    if not n:
        raise ValueError(f"{path}: no examples")
    return ids, weights, n


def decode_marked(tok, ids, weights):
    """The text with the tokens that carry loss between [[ and ]]."""
    out, run, on = [], [], None
    for i, w in zip(ids, weights):
        if w != on and run:
            out.append(("[[" if on else "") + tok.decode(run) + ("]]" if on else ""))
            run = []
        on = w
        run.append(i)
    if run:
        out.append(("[[" if on else "") + tok.decode(run) + ("]]" if on else ""))
    return "".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="*", help="text files or directories of *.txt")
    ap.add_argument("-o", "--out", help="output token file")
    ap.add_argument("--jsonl", metavar="FILE", help="prompt/completion pairs or chats, one JSON object a line")
    ap.add_argument("--template", choices=TEMPLATES, help="chat template for \"messages\" lines")
    ap.add_argument("--tokenizer", default=os.path.join(HERE, "qwen.tiktoken"),
                    help="qwen.tiktoken or tokenizer.json (default: data/qwen.tiktoken)")
    ap.add_argument("--decode", metavar="FILE.tok", help="print a token file as text and exit")
    ap.add_argument("--show-loss", action="store_true", help="with --decode: mark the tokens that carry loss [[...]]")
    a = ap.parse_args(argv)
    try:
        tok = QwenTokenizer(a.tokenizer)
        if a.decode:
            ids, weights = read_token_file(a.decode)
            if a.show_loss and weights is not None:
                sys.stdout.write(decode_marked(tok, ids, weights))
            else:
                sys.stdout.write(tok.decode(ids))
            return 0
        if not a.out or (not a.inputs and not a.jsonl) or (a.inputs and a.jsonl):
            ap.error("give input text files or --jsonl FILE, and -o OUT (or --decode FILE)")
        if a.jsonl:
            print(f"tokenizing {a.jsonl} with {tok.kind} ({a.tokenizer})")
            ids, weights, n = tokenize_jsonl(tok, a.jsonl, a.template)
            write_tokens(a.out, ids, weights)
            k = sum(weights)
            print(f"wrote {a.out}: {len(ids):,} tokens ({n:,} examples, <|endoftext|> after each); "
                  f"{k:,} carry loss ({100 * k / len(ids):.1f}%)")
            return 0
        if a.template:
            ap.error("--template applies to --jsonl chats")
        files = list_inputs(a.inputs)
        if not files:
            raise ValueError("no input text files found")
        print(f"tokenizing {len(files)} document(s) with {tok.kind} ({a.tokenizer})")
        ids = tokenize_files(tok, files)
        write_tokens(a.out, ids)
        print(f"wrote {a.out}: {len(ids):,} tokens ({len(files)} documents, <|endoftext|> after each)")
    except (TokenizerError, ValueError, FileNotFoundError, UnicodeDecodeError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
