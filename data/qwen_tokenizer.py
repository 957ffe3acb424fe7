"""The Qwen tokenizer (Qwen2/Qwen3 byte-level BPE), loaded from either form users have:
the `qwen.tiktoken` ranks file (through the `tiktoken` package) or a Hugging Face
`tokenizer.json` (through the `tokenizers` package). Both give the same ids.

A model folder's tokenizer.json of another Qwen generation (Qwen3.5's, a larger vocabulary) loads
too: its special tokens' ids come from the file, and `tag` names it differently ("eot=ID,vocab=N"
instead of "qwen3"), so the token files it makes are not trained into a model of the other kind.
"""
import base64, hashlib, json, os, unicodedata

ENDOFTEXT = 151643
SPECIAL = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645}
# The Qwen pre-tokenizer split (the same regex tokenizer.json carries).
PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
           r"\s*[\r\n]+|\s+(?!\S)|\s+")
TAG_QWEN3 = "qwen3"  # the tag token files made by this tokenizer carry (common/tokens.h)
QWEN_TIKTOKEN_SHA256 = "b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186"


class TokenizerError(Exception):
    pass


def load_ranks(path):
    """qwen.tiktoken: lines 'base64(token bytes) rank'."""
    ranks = {}
    try:
        with open(path, "rb") as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                parts = line.split()
                if len(parts) != 2:
                    raise TokenizerError(f"{path}: not a readable tiktoken ranks file (line {n}: expected "
                                         f"'base64 rank', got {line[:40]!r})")
                ranks[base64.b64decode(parts[0], validate=True)] = int(parts[1])
    except (OSError, ValueError) as e:
        raise TokenizerError(f"{path}: not a readable tiktoken ranks file ({e})") from None
    if len(ranks) < 256:
        raise TokenizerError(f"{path}: only {len(ranks)} ranks; not a BPE ranks file")
    if sorted(ranks.values()) != list(range(len(ranks))):  # else tiktoken panics (a Rust traceback)
        raise TokenizerError(f"{path}: ranks are not 0..{len(ranks) - 1} each once; a corrupt ranks file")
    return ranks


class QwenTokenizer:
    """encode(text) -> ids with NFC normalization and no special-token parsing in the text;
    decode(ids) -> text. Backed by tiktoken (.tiktoken) or tokenizers (tokenizer.json)."""

    def __init__(self, path):
        if os.path.exists(path) and not os.path.isfile(path):
            raise TokenizerError(f"tokenizer file {path} is not a regular file; give qwen.tiktoken or tokenizer.json")
        if not os.path.isfile(path):
            raise TokenizerError(f"tokenizer file {path} not found (bash data/get_tokenizer.sh fetches qwen.tiktoken; README.md, section Data)")
        self.path = path
        if path.endswith(".json"):
            try:
                from tokenizers import Tokenizer
            except ImportError:
                raise TokenizerError("tokenizer.json needs the 'tokenizers' package: pip install tokenizers") from None
            try:
                with open(path, encoding="utf-8") as f:
                    spec = json.load(f)
                specials = {t["content"]: t["id"] for t in spec.get("added_tokens", [])}
                n_vocab = max([*spec.get("model", {}).get("vocab", {}).values(), *specials.values(), -1]) + 1
                # added tokens would be matched inside the text; the books are plain text, so drop them
                # from the encoder and handle special ids ourselves when decoding
                spec["added_tokens"] = []
                self.hf = Tokenizer.from_str(json.dumps(spec))
            except Exception as e:
                raise TokenizerError(f"{path}: not a valid tokenizer.json ({str(e)[:200]})") from None
            missing = [n for n in SPECIAL if n not in specials]
            if missing:
                raise TokenizerError(f"{path}: no {', '.join(missing)} among its added tokens; not a Qwen tokenizer")
            self.special = {n: specials[n] for n in SPECIAL}
            self.tag = TAG_QWEN3 if self.special == SPECIAL else f"eot={specials['<|endoftext|>']},vocab={n_vocab}"
            self.vocab = n_vocab
            self.kind = "tokenizer.json"
        else:
            try:
                import tiktoken
            except ImportError:
                raise TokenizerError("qwen.tiktoken needs the 'tiktoken' package: pip install tiktoken") from None
            ranks = load_ranks(path)
            if len(ranks) != ENDOFTEXT:
                raise TokenizerError(f"{path}: {len(ranks)} ranks, expected {ENDOFTEXT} for Qwen")
            self.tk = tiktoken.Encoding(name="qwen", pat_str=PATTERN, mergeable_ranks=ranks, special_tokens=SPECIAL)
            self.special, self.tag, self.vocab = dict(SPECIAL), TAG_QWEN3, max(SPECIAL.values()) + 1
            self.kind = "qwen.tiktoken"

    def encode(self, text):
        """Ids of plain text: NFC-normalized, special-token strings in it stay ordinary text."""
        text = unicodedata.normalize("NFC", text)
        if self.kind == "tokenizer.json":
            return self.hf.encode(text, add_special_tokens=False).ids
        return self.tk.encode_ordinary(text)

    def decode(self, ids):
        """Text of ids; special ids become their names."""
        if self.kind != "tokenizer.json":
            return self.tk.decode(list(ids))
        names = {v: k for k, v in self.special.items()}
        out, run = [], []
        for i in ids:
            if i in names:
                out.append(self.hf.decode(run, skip_special_tokens=False) if run else "")
                out.append(names[i])
                run = []
            else:
                run.append(i)
        out.append(self.hf.decode(run, skip_special_tokens=False) if run else "")
        return "".join(out)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
