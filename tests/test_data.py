#!/usr/bin/env python3
"""Data tests (CI): known ids, special tokens, the committed books token file decoding back to
the source texts, tokenizer.json giving the same ids as qwen.tiktoken, and the errors for bad
tokenizer files and empty input. Prints 'N passed, M failed'."""
import base64, hashlib, json, os, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "data"))
from qwen_tokenizer import ENDOFTEXT, PATTERN, QwenTokenizer, TokenizerError, load_ranks  # noqa: E402
import prepare  # noqa: E402

passed = failed = 0


def expect(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {what}")


def make_tokenizer_json(ranks, path):
    """A Hugging Face tokenizer.json equivalent to the ranks (what a Qwen model folder carries):
    byte-level BPE whose merges are recovered from the ranks, the Qwen split regex, NFC."""
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
        pre_tokenizers.Split(Regex(PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.decoder = decoders.ByteLevel()
    from tokenizers import AddedToken
    t.add_special_tokens([AddedToken(s, special=True) for s in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")])
    t.save(path)


def main():
    tk_path = os.path.join(ROOT, "data", "qwen.tiktoken")
    tok = QwenTokenizer(tk_path)
    # known ids (../shared/data/README.md gives the first three)
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
    shared = os.path.join(ROOT, "..", "shared", "data", "books")
    for (sha, name), doc in zip(manifest, docs):
        text = tok.decode(doc)
        expect(hashlib.sha256(text.encode("utf-8")).hexdigest() == sha, f"{name}: decoded text matches its sha256")
        src = os.path.join(shared, name)
        if os.path.exists(src):  # where the source is at hand, tokenizing it again gives the same ids
            expect(tok.encode(open(src, encoding="utf-8", newline="").read()) == doc, f"{name}: re-tokenized ids equal")

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
    run = lambda *args: subprocess.run([sys.executable, os.path.join(ROOT, "data", "prepare.py"), *args],
                                       capture_output=True, text=True)
    r = run(book, "-o", out, "--tokenizer", tk_path)
    expect(r.returncode == 0 and list(prepare.read_tokens(out)) == tok.encode(open(book).read()) + [ENDOFTEXT],
           f"prepare.py writes ids + <|endoftext|> ({r.stderr.strip()})")
    r = run(book, "-o", out, "--tokenizer", tj)
    expect(r.returncode == 0 and list(prepare.read_tokens(out)) == tok.encode(open(book).read()) + [ENDOFTEXT],
           "prepare.py with tokenizer.json")
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

    # prompt/completion pairs and chats: a version-2 file with a loss weight per token
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
    expect(raw[8:12] == (2).to_bytes(4, "little") and len(raw) == 24 + 5 * len(want_ids),
           "version 2 on disk: header, 4-byte ids, then one weight byte per token")
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
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except TokenizerError as e:
        print(f"FAIL {e}\n{passed} passed, {failed + 1} failed")
        sys.exit(1)
