#!/usr/bin/env python3
"""Data tests (CI): known ids, special tokens, the committed books token file decoding back to
the source texts (data/books.sha256), both shipped token files as pinned (data/tokens.sha256) and
made again byte for byte from those texts, tokenizer.json giving the same ids as qwen.tiktoken;
Qwen3.5's tokenizer (--tokenizer qwen3.5): its published ids, its split, its tag, books_q35.tok
decoding to the books' texts; and prepare.py's errors: each one line naming the file (FILE:LINE
for JSONL), exit 1 for a bad file and 2 for a wrong command line, no traceback, and no partial
output left on any failure or stop. Prints 'N passed, M failed'.
PREPARE_PY=path/to/prepare.py runs the command-line checks against another copy of the tool (one
with qwen_tokenizer.py next to it), e.g. the committed one, to see that the checks catch its bugs."""
import base64, contextlib, hashlib, json, os, shutil, stat, struct, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREPARE = os.environ.get("PREPARE_PY", os.path.join(ROOT, "data", "prepare.py"))
sys.path.insert(0, os.path.join(ROOT, "data"))
from qwen_tokenizer import (ENDOFTEXT, PATTERN, PATTERN_QWEN3_5, SPECIAL, QwenTokenizer, TokenizerError,  # noqa: E402
                            load_ranks, resolve, sha256_file, QWEN3_5_TIKTOKEN_SHA256)
import prepare  # noqa: E402

passed = failed = 0


def expect(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {what}")


def make_tokenizer_json(ranks, path, pattern=PATTERN, specials=tuple(SPECIAL)):
    """A Hugging Face tokenizer.json equivalent to the ranks (what a Qwen model folder carries):
    byte-level BPE whose merges are recovered from the ranks, the split regex PATTERN, NFC, and the
    SPECIALS as added tokens from the id after the last rank."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, Regex
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_char = {b: chr(c) for b, c in zip(bs, cs)}
    enc = lambda tok: "".join(byte_char[b] for b in tok)
    vocab = {enc(t): r for t, r in ranks.items()}
    merges = []
    for tok, rank in ranks.items():
        if len(tok) < 2:
            continue
        pairs = [(tok[:i], tok[i:]) for i in range(1, len(tok)) if tok[:i] in ranks and tok[i:] in ranks]
        pairs.sort(key=lambda p: (ranks[p[0]], ranks[p[1]]))
        merges += [(rank, enc(a), enc(b)) for a, b in pairs]
    merges.sort(key=lambda m: m[0])
    t = Tokenizer(models.BPE(vocab=vocab, merges=[(a, b) for _, a, b in merges], byte_fallback=False))
    t.normalizer = normalizers.NFC()
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.decoder = decoders.ByteLevel()
    from tokenizers import AddedToken
    t.add_special_tokens([AddedToken(s, special=True) for s in specials])
    t.save(path)


# Runs prepare.py's main() with a failure planted at os.replace (the rename of OUT.partial, so the
# partial file exists) or at the tokenizer's encode: an OSError, or a signal sent to itself.
INJECT = r"""
import importlib.util, os, signal, sys, time
path, where, how = sys.argv[1:4]
spec = importlib.util.spec_from_file_location("prepare_under_test", path)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
def fail(*args, **kw):
    if how == "OSError":
        raise OSError(28, "No space left on device")
    os.kill(os.getpid(), getattr(signal, how))
    time.sleep(10)
    raise SystemExit("the signal did not stop the run")
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, whatever this test inherited
signal.signal(signal.SIGTERM, signal.SIG_DFL)
if where == "replace":
    mod.os.replace = fail
else:
    mod.QwenTokenizer.encode = fail
sys.exit(mod.main(sys.argv[4:]))
"""


class Tool:
    """prepare.py run as a user runs it, on files in a scratch folder."""

    def __init__(self, tmp, tk_path):
        self.dir, self.tk = os.path.join(tmp, "cli"), tk_path
        os.makedirs(self.dir)

    def path(self, name, data=None):
        p = os.path.join(self.dir, name)
        if data is not None:
            with open(p, "wb") as f:
                f.write(data.encode() if isinstance(data, str) else data)
        return p

    def run(self, *args, env=None, text=True):
        # --tokenizer first, so that a case can give its own
        return subprocess.run([sys.executable, PREPARE, "--tokenizer", self.tk, *args],
                              capture_output=True, text=text, env=env)

    def run_injected(self, where, how, *args):
        return subprocess.run([sys.executable, "-c", INJECT, PREPARE, where, how, "--tokenizer", self.tk, *args],
                              capture_output=True, text=True, timeout=60)


def check(test, what, r, code, *names, ok=True):
    """A clean refusal: exit CODE, no traceback, and an error line naming each of NAMES. An exit-1
    error is one line; argparse's exit-2 ones come after its usage lines."""
    lines = r.stderr.strip().splitlines()
    clean = (r.returncode == code and bool(lines) and "Traceback" not in r.stderr and (code == 2 or len(lines) == 1)
             and all(n in lines[-1] for n in names))
    expect(clean and ok, f"{test}: {what}: exit {code}, one line naming {names}{'' if ok else ', and its extra check'} "
                         f"(got {r.returncode}: {r.stderr.strip()[-300:]!r})")
    print(f"  {what:44s} -> {lines[-1][:150] if lines else ''}")


def test_books_remade_byte_for_byte(t, texts):
    """Good input gives what it gave: the shipped token files made again by the same command from the
    books' text (TEXTS, decoded from books.tok and checked against data/books.sha256). books.tok is
    version 1, made before token files carried their tokenizer; the new one is version 3, the same ids
    after the tag "qwen3". books_q35.tok is version 3 as shipped, so the same bytes."""
    src = t.path("books")
    os.makedirs(src)
    for name, text in texts:
        with open(os.path.join(src, name), "w", encoding="utf-8", newline="") as f:
            f.write(text)
    out = t.path("books.tok")
    r = t.run(src, "-o", out)
    shipped = open(os.path.join(ROOT, "data", "books.tok"), "rb").read()
    new = open(out, "rb").read() if r.returncode == 0 else b""
    same = new[24:56].rstrip(b"\0") == b"qwen3" and new[56:] == shipped[24:] and new[16:24] == shipped[16:24]
    expect(same and "1,270,101 tokens (7 documents" in r.stdout,
           f"books.tok remade: its ids byte for byte, after the tag qwen3 ({r.stderr.strip()})")
    out = t.path("books_q35.tok")
    r = t.run(src, "-o", out, "--tokenizer", "qwen3.5")
    new = open(out, "rb").read() if r.returncode == 0 else b""
    expect(new == open(os.path.join(ROOT, "data", "books_q35.tok"), "rb").read(),
           f"books_q35.tok remade byte for byte by --tokenizer qwen3.5 ({r.stderr.strip()})")


def test_undecodable_input_names_file_and_line(t):
    """Defect 1: a file that is not UTF-8 got Python's codec message, which names no file."""
    T = "undecodable input"
    txt = t.path("latin1.txt", b"first line\ncaf\xe9\n")
    check(T, "a .txt that is not UTF-8", t.run(txt, "-o", t.path("x.tok")), 1, f"{txt}:2:", "UTF-8")
    pair = json.dumps({"prompt": "a", "completion": " b"}).encode()
    jl = t.path("latin1.jsonl", pair + b"\n\n" + pair.replace(b'"a"', b'"caf\xe9"') + b"\n")
    check(T, "a JSONL line that is not UTF-8", t.run("--jsonl", jl, "-o", t.path("x.tok")), 1, f"{jl}:3:", "UTF-8")


def test_odd_json_refused_by_line(t):
    """Defect 2: deep nesting ended in a RecursionError traceback, and Python's json takes more than
    JSON (NaN, duplicate keys, lone surrogates) or the tool let odd shapes through. Each bad line
    is the third, after a good one and a blank one (blank lines are skipped but counted)."""
    T = "odd JSON"
    chat = ["--template", "chatml"]
    msg = lambda **m: json.dumps({"messages": [{"role": "user", "content": "hi"}, m]})
    cases = [("nesting 100,000 lists deep", "[" * 100000, [], "nested too deep"),
             ("nesting 100,000 objects deep", '{"a": ' * 100000, [], "nested too deep"),
             ("a line that is a list", "[1, 2]", [], "not a JSON object"),
             ("a number as the prompt", '{"prompt": 3, "completion": "b"}', [], '"prompt" must be a string'),
             ("NaN", '{"prompt": "a", "completion": "b", "score": NaN}', [], "NaN is not JSON"),
             ("-Infinity", '{"prompt": "a", "completion": "b", "score": -Infinity}', [], "Infinity is not JSON"),
             ("a duplicate key", '{"prompt": "a", "completion": "b", "completion": "c"}', [],
              'duplicate key "completion"'),
             ("a lone surrogate escape", '{"prompt": "a\\ud800", "completion": "b"}', [], "lone surrogate"),
             ("both shapes on one line", '{"prompt": "a", "completion": "b", "messages": []}', chat, "both"),
             ("messages that are not a list", '{"messages": "hi"}', chat, "non-empty list"),
             ("a message that is not an object", '{"messages": ["hi"]}', chat, "messages[0] must be an object"),
             ("a message with another key", msg(role="assistant", content="x", name="bot"), chat, '"name"'),
             ("an unknown role", msg(role="tool", content="x"), chat, 'role "tool"'),
             ("a content that is not a string", msg(role="assistant", content=5), chat, '"content" must be a string')]
    good_pair = json.dumps({"prompt": "a", "completion": " b"})
    for what, line, extra, says in cases:
        jl = t.path("odd.jsonl", (msg(role="assistant", content="x") if extra else good_pair) + "\n \t\n" + line + "\n")
        check(T, what, t.run("--jsonl", jl, "-o", t.path("x.tok"), *extra), 1, f"{jl}:3:", says)
    for what, text in (("an empty file", ""), ("a file of blank lines", "\n \t\r\n\n")):
        jl = t.path("odd.jsonl", text)
        check(T, what, t.run("--jsonl", jl, "-o", t.path("x.tok")), 1, jl, "no examples")
    # what is allowed: a byte order mark, \r\n, blank lines, other keys of a line; the same tokens
    plain, odd = t.path("plain.jsonl", good_pair + "\n" + good_pair + "\n"), t.path("odd.jsonl")
    with open(odd, "wb") as f:
        f.write(b"\xef\xbb\xbf" + json.dumps({"id": 7, "prompt": "a", "completion": " b"}).encode() + b"\r\n \t\r\n" +
                good_pair.encode() + b"\r\n")
    r1, r2 = t.run("--jsonl", plain, "-o", t.path("plain.tok")), t.run("--jsonl", odd, "-o", t.path("odd.tok"))
    expect(r1.returncode == 0 and r2.returncode == 0 and
           prepare.read_token_file(t.path("plain.tok")) == prepare.read_token_file(t.path("odd.tok")),
           f"{T}: a byte order mark, \\r\\n, blank lines and other keys give the plain file's tokens "
           f"({r2.stderr.strip()})")


def test_no_partial_output_on_any_failure(t):
    """Defect 3: a failure at the write (-o a directory, a full disk, a signal) left OUT.partial
    behind, and -o was first tried after all the work. Now: refused before the work, or OUT.partial
    removed and an older OUT as it was."""
    T = "no partial output"
    text = b"It is a truth universally acknowledged.\n"
    book = t.path("book.txt", text)
    old = b"an older, complete token file"
    out = t.path("old.tok", old)

    def as_it_was():
        ok = open(out, "rb").read() == old and not os.path.exists(out + ".partial")
        with contextlib.suppress(OSError):
            os.unlink(out + ".partial")  # so that a partial file left here fails this case only
        return ok
    d = t.path("outdir")
    os.makedirs(d)
    r = t.run(book, "-o", d)
    check(T, "-o a directory", r, 1, d, ok=not os.path.exists(d + ".partial") and "tokenizing" not in r.stdout)
    r = t.run(book, "-o", t.path("missing/x.tok"))
    check(T, "-o in a missing directory", r, 1, t.path("missing"), ok="tokenizing" not in r.stdout)
    victim = t.path("victim.txt", text)
    r = t.run(victim, "-o", victim)
    check(T, "-o the input itself", r, 1, victim, ok=open(victim, "rb").read() == text)
    fifo = t.path("fifo")
    os.mkfifo(fifo)
    r = t.run(book, "-o", fifo)
    check(T, "-o a FIFO (as /dev/null would be)", r, 1, fifo, ok=stat.S_ISFIFO(os.lstat(fifo).st_mode))
    for what, where, how, code in (("the rename fails (disk full)", "replace", "OSError", 1),
                                   ("SIGTERM while writing", "replace", "SIGTERM", 143),
                                   ("Ctrl-C while writing", "replace", "SIGINT", 130),
                                   ("SIGTERM while tokenizing", "encode", "SIGTERM", 143)):
        check(T, what, t.run_injected(where, how, book, "-o", out), code, out, ok=as_it_was())
    bad = t.path("late.jsonl", json.dumps({"prompt": "a", "completion": " b"}) + "\n{oops\n")
    check(T, "a bad line after good ones", t.run("--jsonl", bad, "-o", out), 1, f"{bad}:2:", ok=as_it_was())


def token_file(t, name, ids, count=None, tail=b""):
    """A version-1 token file whose header says COUNT tokens (default: as many as IDS)."""
    head = b"LCTOKENS" + struct.pack("<IIq", 1, 4, len(ids) if count is None else count)
    return t.path(name, head + struct.pack(f"<{len(ids)}I", *ids) + tail)


def test_other_errors_named_with_exit_codes(t, tok):
    """Defect 4: the other error paths. Exit 1 names the file; exit 2 is a wrong command line, refused
    before any work, where options used to be ignored without a word."""
    T = "other errors"
    book, out = t.path("emma.txt", "Emma Woodhouse, handsome, clever, and rich.\n"), t.path("o4.tok")
    empty_dir = t.path("no_txt")
    os.makedirs(empty_dir)
    t.path("no_txt/notes.md", "not a .txt")
    lines = open(t.tk, "rb").read().split(b"\n")
    lines[300] = lines[300].split()[0] + b" 5"  # two tokens of rank 5
    dup = t.path("dup.tiktoken", b"\n".join(lines))
    good = token_file(t, "good.tok", tok.encode("café “quoted”") + [ENDOFTEXT])
    huge, trailing = token_file(t, "huge.tok", [], count=2 ** 62), token_file(t, "trailing.tok", [9707], tail=b"junk")
    oov = token_file(t, "oov.tok", [9707, 999999])
    cases = [("a missing input", [t.path("nope.txt"), "-o", out], 1, [t.path("nope.txt"), "does not exist"]),
             ("a directory with no .txt files", [empty_dir, "-o", out], 1, [empty_dir, "no *.txt"]),
             ("a tokenizer path that is a directory", [book, "-o", out, "--tokenizer", empty_dir], 1,
              [empty_dir, "not a regular file"]),
             ("a ranks file with a rank twice", [book, "-o", out, "--tokenizer", dup], 1, [dup]),
             ("--decode of a text file", ["--decode", book], 1, [book, "not a longctx token file"]),
             ("--decode of a header counting 2**62 tokens", ["--decode", huge], 1, [huge, "truncated"]),
             ("--decode of bytes after the tokens", ["--decode", trailing], 1, [trailing, "bytes"]),
             ("--decode of an id past the vocabulary", ["--decode", oov], 1, [oov, "token 1 is id 999,999"]),
             ("--show-loss without --decode", [book, "-o", out, "--show-loss"], 2, ["--show-loss"]),
             ("--decode with -o", ["--decode", good, "-o", out], 2, ["--decode"]),
             ("--template with text inputs", [book, "-o", out, "--template", "chatml"], 2, ["--template"]),
             ("no -o", [book], 2, ["-o OUT"])]
    for what, args, code, names in cases:
        check(T, what, t.run(*args), code, *names)
    r = t.run("--decode", good, env=dict(os.environ, PYTHONIOENCODING="ascii"), text=False)
    expect(r.returncode == 0 and r.stdout == "café “quoted”<|endoftext|>".encode(),
           f"{T}: --decode writes UTF-8 whatever the locale "
           f"({r.returncode}: {r.stderr.decode(errors='replace')[-200:]})")

# Qwen3.5's ids as its Hugging Face tokenizer gives them (special tokens parsed): a chat turn with an
# empty thinking block, the generation prompt, and the end of a turn
PUBLISHED_QWEN3_5 = (
    ("<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
     [248045, 846, 198, 9419, 248046, 198, 248045, 74455, 198, 248068, 271, 248069, 271]),
    ("<|im_start|>assistant\n", [248045, 74455, 198]),
    ("<|im_end|>", [248046]))
# letters and combining marks: Qwen3.5's split keeps each word whole, Qwen3's breaks it at the marks
DEVANAGARI = "नमस्ते दुनिया"
DEVANAGARI_IDS = [58069, 84237, 150104, 153348, 184642, 235886]
QWEN3_5_TAG = "eot=248044,vocab=248077"


def test_qwen3_5_published_ids(tok):
    """--tokenizer qwen3.5 (data/qwen3_5.tiktoken): the published ids, its special tokens, its tag."""
    T = "qwen3.5 ids"
    for text, want in PUBLISHED_QWEN3_5:
        got = tok.encode_special(text)
        expect(got == want, f"{T}: {text!r} encodes to {want} (got {got})")
        expect(tok.decode(got) == text, f"{T}: {text!r} decodes back")
    plain = tok.encode("<|im_end|>")
    expect(248046 not in plain and tok.decode(plain) == "<|im_end|>",
           f"{T}: a special token's name in plain text stays text")
    want = {"<|endoftext|>": 248044, "<|im_start|>": 248045, "<|im_end|>": 248046, "<think>": 248068,
            "</think>": 248069, "<|audio_pad|>": 248076}
    expect(all(tok.special.get(n) == i for n, i in want.items()) and len(tok.special) == 33,
           f"{T}: 33 special tokens from <|endoftext|> = 248044 to <|audio_pad|> = 248076")
    expect(tok.tag == QWEN3_5_TAG and tok.vocab == 248077, f"{T}: tag {tok.tag!r}, vocabulary {tok.vocab}")
    expect(sha256_file(tok.path) == QWEN3_5_TIKTOKEN_SHA256, f"{T}: {tok.path} is the file get_tokenizer.sh pins")
    import tiktoken  # the same ranks split as Qwen3 splits: other ids, so the test sees which split is used
    qwen3_split = tiktoken.Encoding(name="q", pat_str=PATTERN, mergeable_ranks=load_ranks(tok.path), special_tokens={})
    got = tok.encode(DEVANAGARI)
    expect(got == DEVANAGARI_IDS and qwen3_split.encode_ordinary(DEVANAGARI) != got,
           f"{T}: combining marks are letters in Qwen3.5's split ({got})")


def test_qwen3_5_books(tok, texts):
    """books_q35.tok, Qwen3.5's ids of the books: tagged, and each document decodes to the text
    books.tok decodes to."""
    T = "books_q35.tok"
    ids, weights, tag = prepare.read_token_file(os.path.join(ROOT, "data", "books_q35.tok"), with_tag=True)
    expect(tag == QWEN3_5_TAG and weights is None, f"{T}: version 3, tagged {QWEN3_5_TAG} (got {tag!r})")
    eot = tok.special["<|endoftext|>"]
    docs = tok.decode(ids).split("<|endoftext|>")
    expect(ids[-1] == eot and docs[-1] == "" and len(docs) - 1 == len(texts),
           f"{T}: {len(texts)} documents, each ending in <|endoftext|> (248044)")
    for (name, text), doc in zip(texts, docs):
        expect(doc == text, f"{T}: {name} decodes to the text books.tok decodes to")
    expect(max(ids) < tok.vocab and ENDOFTEXT not in ids, f"{T}: no id past Qwen3.5's vocabulary, no Qwen3 end of text")


def test_qwen3_5_tool(t, tok):
    """prepare.py --tokenizer qwen3.5: its ids and tag, the ranks file by its path alike, chats with
    its special ids; and what is refused: another file's tokenizer at --decode, a missing ranks file,
    a ranks file of neither generation."""
    T = "prepare --tokenizer qwen3.5"
    text = "It is a truth universally acknowledged. नमस्ते\n"
    book, out = t.path("q35.txt", text), t.path("q35.tok")
    for spec in ("qwen3.5", resolve("qwen3.5")):
        r = t.run(book, "-o", out, "--tokenizer", spec)
        ids, _, tag = prepare.read_token_file(out, with_tag=True) if r.returncode == 0 else ([], None, None)
        expect(list(ids) == tok.encode(text) + [248044] and tag == QWEN3_5_TAG,
               f"{T}: --tokenizer {spec}: Qwen3.5's ids, <|endoftext|> 248044, tag {tag!r} ({r.stderr.strip()})")
    r = t.run("--decode", out, "--tokenizer", "qwen3.5")
    expect(r.returncode == 0 and r.stdout == text + "<|endoftext|>", f"{T}: --decode gives the text back")
    chats = t.path("q35.jsonl", json.dumps({"messages": [{"role": "user", "content": "Hello"},
                                                       {"role": "assistant", "content": "Hi"}]}) + "\n")
    r = t.run("--jsonl", chats, "--template", "chatml", "-o", out, "--tokenizer", "qwen3.5")
    ids, w = prepare.read_token_file(out) if r.returncode == 0 else ([], [])
    want = tok.encode_special("<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi<|im_end|>\n<|endoftext|>")
    expect(list(ids) == want and list(ids[:5]) == PUBLISHED_QWEN3_5[0][1][:5],
           f"{T}: --template chatml writes Qwen3.5's special ids ({r.stderr.strip()})")
    check(T, "--decode of a qwen3.5 file as qwen3", t.run("--decode", out), 1, out, QWEN3_5_TAG, "--tokenizer qwen3.5")
    q3 = t.path("q3.tok")
    r = t.run(book, "-o", q3)
    check(T, "--decode of a qwen3 file as qwen3.5", t.run("--decode", q3, "--tokenizer", "qwen3.5"), 1, q3,
          '"qwen3"', "--tokenizer qwen3", ok=r.returncode == 0)
    # a copy of the tool with no ranks beside it, as before data/get_tokenizer.sh has run
    bare = t.path("bare")
    os.makedirs(bare)
    for f in ("prepare.py", "qwen_tokenizer.py"):
        shutil.copy(os.path.join(os.path.dirname(PREPARE), f), bare)
    r = subprocess.run([sys.executable, os.path.join(bare, "prepare.py"), book, "-o", out, "--tokenizer", "qwen3.5"],
                       capture_output=True, text=True)
    check(T, "--tokenizer qwen3.5 before get_tokenizer.sh", r, 1, "--tokenizer qwen3.5", "qwen3_5.tiktoken",
          "get_tokenizer.sh")
    few = t.path("few.tiktoken", b"".join(open(t.tk, "rb").readlines()[:1000]))
    check(T, "a ranks file of neither generation", t.run(book, "-o", out, "--tokenizer", few), 1, few, "1000 ranks",
          "248044")


def test_qwen3_5_tokenizer_json(tok, tmp):
    """A Qwen3.5 tokenizer.json (its merges recovered from the ranks, its split, its 33 added tokens),
    as a model folder carries: the same ids as --tokenizer qwen3.5, and the same tag."""
    T = "qwen3.5 tokenizer.json"
    tj = os.path.join(tmp, "q35", "tokenizer.json")
    os.makedirs(os.path.dirname(tj))
    make_tokenizer_json(load_ranks(tok.path), tj, PATTERN_QWEN3_5, tuple(tok.special))
    hf = QwenTokenizer(tj)
    sample = PUBLISHED_QWEN3_5[0][0] + DEVANAGARI + " naïve café 毕老师 12345\r\n\n  x e\u0301t\u0301"
    expect(hf.encode_special(sample) == tok.encode_special(sample), f"{T}: the same ids as the ranks file")
    expect(hf.tag == tok.tag == QWEN3_5_TAG, f"{T}: the same tag ({hf.tag!r})")


def main():
    tk_path = os.path.join(ROOT, "data", "qwen.tiktoken")
    tok = QwenTokenizer(tk_path)
    # known ids
    ids = tok.encode("Hello! 毕老师！1 + 1 = 2")
    expect(ids[:3] == [9707, 0, 6567], f"known string ids {ids[:3]}")
    expect(tok.decode(ids) == "Hello! 毕老师！1 + 1 = 2", "known string round trip")
    # special tokens: the name in plain text is text, never the special id
    plain = tok.encode("a<|endoftext|>b")
    expect(ENDOFTEXT not in plain and tok.decode(plain) == "a<|endoftext|>b", "special name in text stays text")
    expect(tok.decode([ENDOFTEXT]) == "<|endoftext|>", "id 151643 decodes to <|endoftext|>")

    # the committed token file decodes back to the source texts (hashes in data/books.sha256)
    toks = prepare.read_tokens(os.path.join(ROOT, "data", "books.tok"))
    expect(len(toks) > 1048576 + 1, f"books.tok holds {len(toks)} tokens > 1M + 1")
    docs, cur = [], []
    for t in toks:
        if t == ENDOFTEXT:
            docs.append(cur)
            cur = []
        else:
            cur.append(t)
    expect(not cur, "books.tok ends with <|endoftext|>")
    manifest = [l.split() for l in open(os.path.join(ROOT, "data", "books.sha256")) if l.strip()]
    expect(len(docs) == len(manifest), f"{len(docs)} documents, manifest lists {len(manifest)}")
    texts = [(name, tok.decode(doc)) for (_, name), doc in zip(manifest, docs)]
    for (sha, name), (_, text) in zip(manifest, texts):
        expect(hashlib.sha256(text.encode("utf-8")).hexdigest() == sha, f"{name}: decoded text matches its sha256")
    pins = [l.split() for l in open(os.path.join(ROOT, "data", "tokens.sha256")) if l.strip()]
    for sha, name in pins:  # the shipped token files as they were made (sha256sum -c in data/ checks the same)
        expect(sha256_file(os.path.join(ROOT, "data", name)) == sha, f"data/{name} matches data/tokens.sha256")

    # tokenizer.json gives the same ids as qwen.tiktoken
    tmp = tempfile.mkdtemp()
    tj = os.path.join(tmp, "tokenizer.json")
    make_tokenizer_json(load_ranks(tk_path), tj)
    hf = QwenTokenizer(tj)
    sample = tok.decode(docs[2][:20000]) + " naïve café 毕老师 <|im_start|> 12345\r\n\n  x"
    a, b = tok.encode(sample), hf.encode(sample)
    expect(a == b, f"tokenizer.json ids equal qwen.tiktoken ids ({len(a)} vs {len(b)} tokens)")
    expect(hf.decode(b + [ENDOFTEXT]) == sample + "<|endoftext|>", "tokenizer.json decode")

    # the prepare tool end to end, and its errors
    book = os.path.join(tmp, "b.txt")
    open(book, "w").write("It is a truth universally acknowledged.\n")
    out = os.path.join(tmp, "b.tok")
    run = lambda *args: subprocess.run([sys.executable, PREPARE, *args], capture_output=True, text=True)
    r = run(book, "-o", out, "--tokenizer", tk_path)
    expect(r.returncode == 0 and list(prepare.read_tokens(out)) == tok.encode(open(book).read()) + [ENDOFTEXT],
           f"prepare.py writes ids + <|endoftext|> ({r.stderr.strip()})")
    r = run(book, "-o", out, "--tokenizer", tj)
    expect(r.returncode == 0 and list(prepare.read_tokens(out)) == tok.encode(open(book).read()) + [ENDOFTEXT],
           "prepare.py with tokenizer.json")
    # a token file records its tokenizer (versions 3 and 4: a 32-byte tag after the header): Qwen3's is
    # "qwen3" in either form; another generation's tokenizer.json (its special tokens at other ids, as
    # Qwen3.5's) is tagged by its end of text and vocabulary, and its ids follow its own special tokens
    tag = prepare.read_token_file(out, with_tag=True)[2] if r.returncode == 0 else None
    raw = open(out, "rb").read() if r.returncode == 0 else b""
    expect(tag == "qwen3" and raw[8:12] == (3).to_bytes(4, "little") and raw[24:29] == b"qwen3",
           f"prepare.py tags its file with the tokenizer (\"{tag}\", version 3 on disk)")
    spec = json.load(open(tj))
    for t_ in spec["added_tokens"]:
        t_["id"] += 100
    tj2 = os.path.join(tmp, "next", "tokenizer.json")
    os.makedirs(os.path.dirname(tj2))
    json.dump(spec, open(tj2, "w"))
    out2 = os.path.join(tmp, "b2.tok")
    r = run(book, "-o", out2, "--tokenizer", tj2)
    ids2, _, tag2 = prepare.read_token_file(out2, with_tag=True) if r.returncode == 0 else ([], None, None)
    expect(r.returncode == 0 and tag2 == f"eot={ENDOFTEXT + 100},vocab={ENDOFTEXT + 103}" and
           list(ids2) == tok.encode(open(book).read()) + [ENDOFTEXT + 100],
           f"another tokenizer.json: its own end-of-text id, and its tag ({tag2}; {r.stderr.strip()})")
    r = run("--decode", out2, "--tokenizer", tk_path)
    expect(r.returncode == 1 and "made by the tokenizer" in r.stderr,
           f"--decode with the wrong tokenizer is refused by name ({r.stderr.strip()})")
    empty = os.path.join(tmp, "empty.txt")
    open(empty, "w").close()
    bad_tk = os.path.join(tmp, "bad.tiktoken")
    open(bad_tk, "w").write("not base64 at all\n")
    bad_json = os.path.join(tmp, "bad.json")
    open(bad_json, "w").write("{\"model\": 3}")
    cases = [("empty input", [empty, "-o", out, "--tokenizer", tk_path], "empty"),
             ("missing input", [os.path.join(tmp, "nope.txt"), "-o", out, "--tokenizer", tk_path], "does not exist"),
             ("missing tokenizer", [book, "-o", out, "--tokenizer", os.path.join(tmp, "none.tiktoken")], "not found"),
             ("invalid tiktoken file", [book, "-o", out, "--tokenizer", bad_tk], "not a readable tiktoken"),
             ("invalid tokenizer.json", [book, "-o", out, "--tokenizer", bad_json], "not a valid tokenizer.json")]
    for what, args, msg in cases:
        r = run(*args)
        expect(r.returncode == 1 and msg in r.stderr, f"{what}: exit 1 with '{msg}' (got {r.returncode}: {r.stderr.strip()})")
        print(f"  prepare.py {what:24s} -> {r.stderr.strip()}")

    # prompt/completion pairs and chats: a version-4 file (2 with the tag) with a loss weight per token
    pairs = os.path.join(tmp, "pairs.jsonl")
    with open(pairs, "w") as f:
        f.write(json.dumps({"prompt": "Question: who wrote Emma?\nAnswer:", "completion": " Jane Austen."}) + "\n\n")
        f.write(json.dumps({"prompt": "cat in French:", "completion": " chat"}) + "\n")
    sft = os.path.join(tmp, "sft.tok")
    r = run("--jsonl", pairs, "-o", sft, "--tokenizer", tk_path)
    ids, w = prepare.read_token_file(sft) if r.returncode == 0 else ([], None)
    want_ids, want_w = [], []
    for p_, c_ in (("Question: who wrote Emma?\nAnswer:", " Jane Austen."), ("cat in French:", " chat")):
        pi, ci = tok.encode(p_), tok.encode(c_)
        want_ids += pi + ci + [ENDOFTEXT]
        want_w += [0] * len(pi) + [1] * (len(ci) + 1)
    expect(r.returncode == 0 and list(ids) == want_ids and w is not None and list(w) == want_w,
           f"--jsonl pairs: prompt tokens weight 0, completion + <|endoftext|> weight 1 ({r.stderr.strip()})")
    raw = open(sft, "rb").read() if r.returncode == 0 else b""
    expect(raw[8:12] == (4).to_bytes(4, "little") and len(raw) == 24 + 32 + 5 * len(want_ids),
           "version 4 on disk: header, the tokenizer's tag, 4-byte ids, then one weight byte per token")
    expect("carry loss" in r.stdout, f"the summary says how many tokens carry loss: {r.stdout.strip()}")
    d = run("--decode", sft, "--show-loss", "--tokenizer", tk_path)
    expect(d.returncode == 0 and "Answer:[[ Jane Austen.<|endoftext|>]]cat in French:[[ chat<|endoftext|>]]" in d.stdout,
           f"--decode --show-loss marks the trained spans: {d.stdout!r}")
    chats = os.path.join(tmp, "chats.jsonl")
    with open(chats, "w") as f:
        f.write(json.dumps({"messages": [{"role": "system", "content": "Be brief."},
                                         {"role": "user", "content": "Who wrote Emma?"},
                                         {"role": "assistant", "content": "Jane Austen."},
                                         {"role": "user", "content": "And Persuasion?"},
                                         {"role": "assistant", "content": "Also Austen."}]}) + "\n")
    chat = os.path.join(tmp, "chat.tok")
    r = run("--jsonl", chats, "--template", "chatml", "-o", chat, "--tokenizer", tk_path)
    ids, w = prepare.read_token_file(chat) if r.returncode == 0 else ([], [])
    trained = tok.decode([i for i, x in zip(ids, w) if x])
    expect(r.returncode == 0 and trained == "Jane Austen.<|im_end|>Also Austen.<|im_end|>",
           f"--template chatml: only the assistants' content and <|im_end|> carry loss (got {trained!r})")
    expect(tok.decode(ids).startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n") and
           ids[-1] == ENDOFTEXT and w[-1] == 0, "chatml layout: <|im_start|>ROLE\\n CONTENT <|im_end|>\\n, <|endoftext|> after")
    bad = os.path.join(tmp, "bad.jsonl")
    jcases = [("a line that is not JSON", "{oops\n", [], "not JSON"),
              ("a pair without completion", json.dumps({"prompt": "x"}) + "\n", [], "needs string"),
              ("an empty completion", json.dumps({"prompt": "x", "completion": ""}) + "\n", [], "empty completion"),
              ("a chat without --template", json.dumps({"messages": [{"role": "user", "content": "x"}]}) + "\n", [],
               "needs --template"),
              ("a chat with no assistant", json.dumps({"messages": [{"role": "user", "content": "x"}]}) + "\n",
               ["--template", "chatml"], "no assistant"),
              ("pairs with --template", json.dumps({"prompt": "x", "completion": "y"}) + "\n", ["--template", "chatml"],
               "reads chats"),
              ("no examples", "\n\n", [], "no examples")]
    for what, text, extra, msg in jcases:
        open(bad, "w").write(text)
        r = run("--jsonl", bad, "-o", out, "--tokenizer", tk_path, *extra)
        expect(r.returncode == 1 and msg in r.stderr, f"{what}: exit 1 with '{msg}' (got {r.returncode}: {r.stderr.strip()})")
        print(f"  prepare.py --jsonl {what:26s} -> {r.stderr.strip()}")

    t = Tool(tmp, tk_path)
    tok35 = QwenTokenizer("qwen3.5")
    for test, *args in ((test_books_remade_byte_for_byte, t, texts), (test_qwen3_5_published_ids, tok35),
                        (test_qwen3_5_books, tok35, texts), (test_qwen3_5_tool, t, tok35),
                        (test_qwen3_5_tokenizer_json, tok35, tmp), (test_undecodable_input_names_file_and_line, t),
                        (test_odd_json_refused_by_line, t), (test_no_partial_output_on_any_failure, t),
                        (test_other_errors_named_with_exit_codes, t, tok)):
        try:
            test(*args)
        except Exception as e:  # a test that breaks is one failure, and the others still run
            expect(False, f"{test.__name__} raised {type(e).__name__}: {e}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except TokenizerError as e:
        print(f"FAIL {e}\n{passed} passed, {failed + 1} failed")
        sys.exit(1)
