#!/usr/bin/env python3
"""Turn UTF-8 text, or prompt/completion pairs, into a longctx token file (DESIGN.md section 6)
with the Qwen tokenizer.

  python3 data/prepare.py BOOK.txt [MORE.txt | DIR ...] -o data/mine.tok [--tokenizer NAME|PATH]
  python3 data/prepare.py --jsonl PAIRS.jsonl -o data/sft.tok
  python3 data/prepare.py --jsonl CHATS.jsonl --template chatml -o data/chat.tok
  python3 data/prepare.py BOOK.txt -o data/mine_q35.tok --tokenizer qwen3.5     # a Qwen3.5 model's ids

Text: each input file is one document; a directory contributes its *.txt files in name order.
Documents are concatenated, each followed by <|endoftext|> (151643; Qwen3.5's 248044): a trainer
run with --packing keeps them apart (each attends only to itself). Every label carries loss (a version-3
file: ids only, after a 32-byte tag naming the tokenizer, "qwen3"; versions 1 and 2 are the same
without the tag, as files made before it carried it are).

--jsonl: one example per line, concatenated the same way, with a loss weight per token (a
version-4 file: the tag, ids, then one byte per token, 0 or 1; weight 1 means the token is a label the loss
counts). Two shapes of line:
  {"prompt": "...", "completion": "..."}        prompt tokens weight 0; the completion and the
                                                <|endoftext|> after it weight 1 (completion-only loss)
  {"messages": [{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}]}
      with --template chatml (Qwen's chat format): each message is <|im_start|>ROLE\\n CONTENT
      <|im_end|>\\n; an assistant message's content and its <|im_end|> weight 1, everything else 0
      (assistant-only loss); <|endoftext|> after each conversation, weight 0.
The prompt and the completion are tokenized separately, so the tokens are exactly the prompt's
followed by the completion's.
Lines are split on \\n only and numbered from 1; a blank line (nothing but spaces, tabs or \\r) is
skipped, and a UTF-8 byte order mark at the start of the file is allowed. Other keys of a line
(an id, a source) are ignored, but a message may hold only "role" (system, user or assistant) and
"content": the template would silently drop anything else. Refused, as FILE:LINE: a line that is
not UTF-8 or not one JSON object, NaN or Infinity, a duplicate key, nesting too deep for the
parser, a lone surrogate escape (\\ud800), a line with both shapes, a file with no examples.
--tokenizer: qwen3 (the default: data/qwen.tiktoken) or qwen3.5 (data/qwen3_5.tiktoken), the ranks
data/get_tokenizer.sh fetches; or a .tiktoken ranks file of either by its path; or a model folder's
`tokenizer.json`. A file made for Qwen3 is tagged "qwen3"; another tokenizer (Qwen3.5's: a larger
vocabulary, its special tokens at other ids) writes its own special ids and tags the file
"eot=ID,vocab=N" (Qwen3.5's: eot=248044,vocab=248077), so a trainer refuses it for a Qwen3 model,
and a "qwen3" file for a Qwen3.5 one.
--decode FILE.tok prints a token file back as text, UTF-8 (documents separated by <|endoftext|>);
with --show-loss the tokens that carry loss are printed between [[ and ]].

Errors are one line on stderr naming the file (FILE:LINE for --jsonl). Exit 2: the command line is
wrong (argparse's code); 1: a file is missing, unreadable or malformed, or -o cannot be written;
130 / 128+N: stopped by Ctrl-C / signal N (SIGTERM, SIGHUP). The output is written to OUT.partial
and renamed when complete; on any failure or stop the partial file is removed and an existing OUT
is left as it was (only SIGKILL can leave OUT.partial behind).
"""
import argparse, array, contextlib, json, os, signal, struct, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen_tokenizer import QwenTokenizer, TokenizerError, name_for_tag, resolve  # noqa: E402

MAGIC, VERSION, VERSION_WEIGHTS, HEADER = b"LCTOKENS", 1, 2, 24
VERSION_TAGGED, VERSION_TAGGED_WEIGHTS, TAG_BYTES = 3, 4, 32  # 1 and 2 with the tokenizer's tag
TEMPLATES = ("chatml",)
ROLES = ("system", "user", "assistant")  # a "tool" turn needs Qwen's <tool_response> wrapping, not done here


class FileError(ValueError):
    """A named file is missing, unreadable or malformed, or -o cannot be written: exit 1.
    A ValueError, which is what callers of read_token_file caught before."""


class Stopped(BaseException):
    """SIGTERM or SIGHUP raised like KeyboardInterrupt, so that the cleanup runs: their default
    action ends the process at once and would leave OUT.partial behind."""


@contextlib.contextmanager
def stop_on_signals():
    def stop(signum, frame):
        raise Stopped(signum)
    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGHUP)
           if signal.getsignal(s) == signal.SIG_DFL}  # one ignored (as under nohup) stays ignored
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def blame(where):
    """Name WHERE in whatever goes wrong while reading it: an error without the file is no help."""
    try:
        yield
    except FileError:
        raise
    except OSError as e:
        raise FileError(f"{where}: cannot read ({e.strerror or e})") from None
    except Exception as e:  # e.g. MemoryError, or int()'s digit limit on a huge JSON number
        raise FileError(f"{where}: {type(e).__name__}: {e}") from None


def write_tokens(path, ids, weights=None, tag=None):
    """Version 1 (ids), or version 2 (ids, then a 0/1 loss weight per token) when weights are given;
    with the tokenizer's tag (at most 32 ASCII bytes) versions 3 and 4, the tag after the header.
    Written to PATH.partial, then renamed: a failure or a stop leaves no partial file, and PATH as it was."""
    a = array.array("I", ids)
    if sys.byteorder != "little":
        a.byteswap()
    if weights is not None and len(weights) != len(a):
        raise ValueError(f"{len(weights)} weights for {len(a)} tokens")
    tmp = path + ".partial"
    try:
        f = open(tmp, "wb")
    except OSError as e:
        raise FileError(f"{path}: cannot write {tmp} ({e.strerror})") from None
    try:
        with f:
            version = (VERSION if weights is None else VERSION_WEIGHTS) + (2 if tag else 0)
            f.write(MAGIC + struct.pack("<IIq", version, 4, len(a)))
            if tag:
                f.write(tag.encode("ascii").ljust(TAG_BYTES, b"\0"))
            a.tofile(f)
            if weights is not None:
                f.write(bytes(weights))
        os.replace(tmp, path)  # never leave a half-written token file under the real name
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise FileError(f"{path}: cannot write ({e.strerror or e}); nothing written") from None
        raise


def read_token_file(path, with_tag=False):
    """(ids, weights): weights is None for a version-1 (or 3) file; with_tag: (ids, weights, tag),
    tag "" when untagged. The size must be exactly what the header's count needs (as the C reader
    demands), checked before a corrupt count is allocated."""
    with blame(path), open(path, "rb") as f:
        head = f.read(HEADER)
        if len(head) < HEADER or head[:8] != MAGIC:
            raise FileError(f"{path}: not a longctx token file (wrong magic)")
        version, width, count = struct.unpack("<IIq", head[8:])
        if version not in (VERSION, VERSION_WEIGHTS, VERSION_TAGGED, VERSION_TAGGED_WEIGHTS) or width != 4:
            raise FileError(f"{path}: unsupported version {version} / width {width}")
        weighted, tagged = version in (VERSION_WEIGHTS, VERSION_TAGGED_WEIGHTS), version >= VERSION_TAGGED
        size = os.fstat(f.fileno()).st_size
        need = HEADER + (TAG_BYTES if tagged else 0) + (5 if weighted else 4) * count
        if count < 0:
            raise FileError(f"{path}: corrupt header (a token count of {count:,})")
        if size < need:
            raise FileError(f"{path}: truncated: {size:,} bytes, but the header's count of {count:,} tokens "
                            f"needs {need:,}")
        if size > need:
            raise FileError(f"{path}: {size - need:,} bytes after its {count:,} tokens; corrupt, or not a "
                            f"longctx token file")
        tag = f.read(TAG_BYTES).rstrip(b"\0").decode("ascii", "replace") if tagged else ""
        a = array.array("I")
        a.frombytes(f.read(4 * count))
        weights = f.read() if weighted else None
        if weights is not None and any(w > 1 for w in weights):
            raise FileError(f"{path}: a loss weight other than 0 or 1")
    if sys.byteorder != "little":
        a.byteswap()
    return (a, weights, tag) if with_tag else (a, weights)


def read_tokens(path):
    return read_token_file(path)[0]


def list_inputs(paths):
    """The text files: files as given, a directory's *.txt files in name order. A directory with
    none is refused by name: it is likelier a wrong path than a wish to add nothing."""
    files = []
    for p in paths:
        if os.path.isdir(p):
            with blame(p):
                found = [os.path.join(p, n) for n in sorted(os.listdir(p)) if n.endswith(".txt")]
            found = [f for f in found if os.path.isfile(f)]
            if not found:
                raise FileError(f"{p}: a directory with no *.txt files; give text files or a directory of them")
            files += found
        elif os.path.isfile(p):
            files.append(p)
        elif os.path.exists(p):
            raise FileError(f"input {p} is not a regular file or a directory")
        else:
            raise FileError(f"input {p} does not exist")
    return files


def check_output(out, sources):
    """Refuse an -o that cannot or must not be written before the work: a long tokenize should not
    end in 'no such directory', and a slip of the keyboard must not overwrite an input."""
    d = os.path.dirname(out) or "."
    if out.endswith(os.sep) or os.path.isdir(out):
        raise FileError(f"-o {out}: names a directory; give a file path such as {os.path.join(out, 'mine.tok')}")
    if os.path.lexists(out) and not os.path.isfile(out):
        raise FileError(f"-o {out}: exists and is not a regular file; give another path")
    if not os.path.isdir(d):
        raise FileError(f"-o {out}: {d} {'is not a directory' if os.path.exists(d) else 'does not exist'}; "
                        f"create the directory first or give another path")
    if not os.access(d, os.W_OK):
        raise FileError(f"-o {out}: directory {d} is not writable")
    for s in sources:
        if os.path.exists(out) and os.path.exists(s) and os.path.samefile(s, out):
            raise FileError(f"-o {out}: is also an input ({s}); writing would destroy it")


def read_text(path):
    """A text file's content, refused by name, line and byte offset where it is not UTF-8. No newline
    translation: \\r\\n is kept, so the file decodes back byte for byte."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise FileError(f"{path}:{line}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start:,}); "
                        f"convert it, e.g. iconv -f latin1 -t utf-8") from None


def tokenize_files(tok, files, log=print):
    ids, t0 = [], time.time()
    total_bytes = sum(os.path.getsize(f) for f in files)
    done = 0
    for f in files:
        with blame(f):
            text = read_text(f)
            if not text.strip():
                raise FileError(f"{f} is empty (nothing but whitespace); leave it out")
            doc = tok.encode(text)
            done += os.path.getsize(f)
        ids += doc
        ids.append(tok.special["<|endoftext|>"])
        log(f"  {os.path.basename(f)}: {len(doc):,} tokens  [{100 * done / total_bytes:5.1f}% of "
            f"{total_bytes / 1e6:.1f} MB, {time.time() - t0:.1f} s]")
    return ids


def json_kind(v):
    kinds = ((bool, "true/false"), (dict, "an object"), (list, "a list"), (str, "a string"), ((int, float), "a number"))
    return "null" if v is None else next(name for t, name in kinds if isinstance(v, t))


def string(v, what, where):
    """V if it is a string of valid Unicode: a lone surrogate escape (\\ud800) would be tokenized as U+FFFD."""
    if not isinstance(v, str):
        raise FileError(f"{where}: {what} must be a string, not {json_kind(v)}")
    try:
        v.encode("utf-8")
    except UnicodeEncodeError as e:
        raise FileError(f"{where}: {what} holds a lone surrogate \\u{ord(v[e.start]):04x} (half of a UTF-16 pair); "
                        f"fix the escape") from None
    return v


def message(m, where):
    """(role, content) of one chat message."""
    if not isinstance(m, dict):
        raise FileError(f'{where} must be an object {{"role", "content"}}, not {json_kind(m)}')
    extra = sorted(set(m) - {"role", "content"})
    if extra:
        raise FileError(f'{where} has "{extra[0]}": only "role" and "content" are read, so the rest would be '
                        f'dropped without a word; remove it')
    if "role" not in m or "content" not in m:
        raise FileError(f'{where} needs string "role" and "content"')
    role = string(m["role"], '"role"', where)
    if role not in ROLES:
        raise FileError(f'{where}: role "{role}" is not one of {", ".join(ROLES)}')
    return role, string(m["content"], '"content"', where)


def encode_chat(tok, msgs, where):
    """ChatML: the assistants' content and <|im_end|> weight 1, everything else 0."""
    if not isinstance(msgs, list) or not msgs:
        raise FileError(f"{where}: \"messages\" must be a non-empty list")
    ids, w, trained = [], [], 0
    for k, m in enumerate(msgs):
        role, content = message(m, f"{where}: messages[{k}]")
        head = [tok.special["<|im_start|>"]] + tok.encode(role + "\n")
        body = tok.encode(content) + [tok.special["<|im_end|>"]]
        on = int(role == "assistant")
        ids += head + body + tok.encode("\n")
        w += [0] * len(head) + [on] * len(body) + [0]
        trained += on
    if not trained:
        raise FileError(f"{where}: no assistant message, so no token would carry loss")
    return ids + [tok.special["<|endoftext|>"]], w + [0]


def encode_example(tok, obj, template, where):
    """(ids, weights) of one JSONL example, <|endoftext|> included."""
    if not isinstance(obj, dict):
        raise FileError(f"{where}: not a JSON object but {json_kind(obj)}; a line is one "
                        f"{{\"prompt\", \"completion\"}} or {{\"messages\"}} object")
    if "messages" in obj:
        if "prompt" in obj or "completion" in obj:
            raise FileError(f"{where}: both \"messages\" and \"prompt\"/\"completion\"; give one shape a line")
        if template not in TEMPLATES:
            raise FileError(f"{where}: a chat (\"messages\") needs --template ({', '.join(TEMPLATES)})")
        return encode_chat(tok, obj["messages"], where)
    if template:
        raise FileError(f"{where}: --template {template} reads chats (\"messages\"), not prompt/completion pairs")
    if "prompt" not in obj or "completion" not in obj:
        raise FileError(f"{where}: needs string \"prompt\" and \"completion\" (or \"messages\" with --template)")
    p, c = string(obj["prompt"], '"prompt"', where), string(obj["completion"], '"completion"', where)
    if not c:
        raise FileError(f"{where}: empty completion, so no token would carry loss")
    pi, ci = tok.encode(p), tok.encode(c)
    return pi + ci + [tok.special["<|endoftext|>"]], [0] * len(pi) + [1] * (len(ci) + 1)


class Refused(ValueError):
    """Raised from the JSON parser's hooks for what Python's json accepts and JSON does not."""


def unique_keys(pairs):
    obj = {}
    for k, v in pairs:
        if k in obj:  # Python's json keeps the last silently: likely a bug in whatever wrote the line
            raise Refused(f"duplicate key \"{k}\"")
        obj[k] = v
    return obj


def no_constant(name):
    raise Refused(f"{name} is not JSON; write a number or null")


def parse_line(line, where):
    try:
        return json.loads(line, object_pairs_hook=unique_keys, parse_constant=no_constant)
    except json.JSONDecodeError as e:
        raise FileError(f"{where}: not JSON ({e.msg} at column {e.colno})") from None
    except Refused as e:
        raise FileError(f"{where}: {e}") from None
    except RecursionError:  # json recurses per level: 100,000 '[' would end in a traceback
        raise FileError(f"{where}: JSON nested too deep for the parser (more than about "
                        f"{sys.getrecursionlimit()} levels)") from None


def jsonl_lines(path):
    """(line number, text) of each line that is not blank. Lines split on \\n only, as JSONL does and
    as editors and sed number them; a line that is not UTF-8 is refused by line and column."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]  # a byte order mark, as some Windows editors write
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise FileError(f"{path}:{lineno}: not UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1}); "
                                f"save the file as UTF-8") from None
            if line.strip(" \t\r\n"):
                yield lineno, line


def tokenize_jsonl(tok, path, template, log=print):
    ids, weights, n, t0 = [], [], 0, time.time()
    with blame(path):  # the file's own errors (open, read); each line's are named by its line
        for lineno, line in jsonl_lines(path):
            where = f"{path}:{lineno}"
            with blame(where):
                i, w = encode_example(tok, parse_line(line, where), template, where)
            ids += i
            weights += w
            n += 1
            if n % 10000 == 0:
                log(f"  {n:,} examples, {len(ids):,} tokens [{time.time() - t0:.1f} s]")
    if not n:
        raise FileError(f"{path}: no examples (empty, or only blank lines)")
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


def decode_file(tok, path, show_loss):
    """Print a token file as text, in UTF-8 whatever the locale (the text is UTF-8 by definition)."""
    ids, weights, tag = read_token_file(path, with_tag=True)
    if tag and tag != tok.tag:
        raise FileError(f"{path}: made by the tokenizer \"{tag}\", not this one (\"{tok.tag}\"): decode it with --tokenizer "
                        f"{name_for_tag(tag) or 'MODEL_DIR/tokenizer.json (its model folder)'}")
    if ids and max(ids) >= tok.vocab:
        k = next(k for k, i in enumerate(ids) if i >= tok.vocab)
        raise FileError(f"{path}: token {k:,} is id {ids[k]:,}, not a token id of this tokenizer (< {tok.vocab}); "
                        f"tokenized for another model?")
    if show_loss and weights is None:
        print(f"note: {path} is version 1: every token carries loss", file=sys.stderr)
    text = decode_marked(tok, ids, weights) if show_loss and weights is not None else tok.decode(ids)
    out = getattr(sys.stdout, "buffer", None)
    if out is None:
        sys.stdout.write(text)
    else:
        sys.stdout.flush()
        out.write(text.encode("utf-8"))
    return 0


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="*", help="text files or directories of *.txt")
    ap.add_argument("-o", "--out", help="output token file")
    ap.add_argument("--jsonl", metavar="FILE", help="prompt/completion pairs or chats, one JSON object a line")
    ap.add_argument("--template", choices=TEMPLATES, help="chat template for \"messages\" lines")
    ap.add_argument("--tokenizer", default="qwen3", metavar="NAME|PATH",
                    help="qwen3 or qwen3.5 (the ranks data/get_tokenizer.sh fetches), a .tiktoken ranks file, "
                         "or a model folder's tokenizer.json (default: qwen3, data/qwen.tiktoken)")
    ap.add_argument("--decode", metavar="FILE.tok", help="print a token file as text and exit")
    ap.add_argument("--show-loss", action="store_true", help="with --decode: mark the tokens that carry loss [[...]]")
    a = ap.parse_args(argv)
    # options that would be ignored are refused, before any work (exit 2, as argparse's own errors)
    if a.decode:
        if a.inputs or a.jsonl or a.out or a.template:
            ap.error("--decode FILE.tok prints to stdout; give it no inputs, --jsonl, -o or --template")
    elif a.show_loss:
        ap.error("--show-loss goes with --decode FILE.tok")
    elif not a.out or (not a.inputs and not a.jsonl) or (a.inputs and a.jsonl):
        ap.error("give input text files or --jsonl FILE, and -o OUT (or --decode FILE)")
    elif a.template and not a.jsonl:
        ap.error("--template applies to --jsonl chats")
    return a


def run(a):
    if a.decode:
        return decode_file(QwenTokenizer(a.tokenizer), a.decode, a.show_loss)
    files = [] if a.jsonl else list_inputs(a.inputs)
    check_output(a.out, files + ([a.jsonl] if a.jsonl else []) + [resolve(a.tokenizer)])
    tok = QwenTokenizer(a.tokenizer)
    if a.jsonl:
        print(f"tokenizing {a.jsonl} with {tok.kind} ({tok.path})")
        ids, weights, n = tokenize_jsonl(tok, a.jsonl, a.template)
        write_tokens(a.out, ids, weights, tok.tag)
        k = sum(weights)
        print(f"wrote {a.out}: {len(ids):,} tokens ({n:,} examples, <|endoftext|> after each); "
              f"{k:,} carry loss ({100 * k / len(ids):.1f}%)")
        return 0
    print(f"tokenizing {len(files)} document(s) with {tok.kind} ({tok.path})")
    ids = tokenize_files(tok, files)
    write_tokens(a.out, ids, tag=tok.tag)
    print(f"wrote {a.out}: {len(ids):,} tokens ({len(files)} documents, <|endoftext|> after each)")
    return 0


def main(argv=None):
    a = parse_args(argv)
    unwritten = f"; {a.out} not written" if a.out else ""
    try:
        with stop_on_signals():
            return run(a)
    except (TokenizerError, ValueError, OSError) as e:  # FileError is a ValueError
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"error: interrupted{unwritten}", file=sys.stderr)
        return 130
    except Stopped as e:
        print(f"error: stopped by {signal.Signals(e.args[0]).name}{unwritten}", file=sys.stderr)
        return 128 + e.args[0]


if __name__ == "__main__":
    sys.exit(main())
