"""The Qwen tokenizers (byte-level BPE), loaded from either form users have: a BPE ranks file
(through the `tiktoken` package) or a Hugging Face `tokenizer.json` (through the `tokenizers`
package). The same tokenizer in either form gives the same ids.

Two generations have ranks files that data/get_tokenizer.sh fetches into data/, and a name:
  qwen3    data/qwen.tiktoken     Qwen2 and Qwen3: 151,643 ranks, <|endoftext|> = 151643
  qwen3.5  data/qwen3_5.tiktoken  Qwen3.5: 248,044 ranks, 33 special tokens from 248044 (<|endoftext|>)
`--tokenizer qwen3.5` (the name) or the file's path both load Qwen3.5's; a ranks file's generation is
told by its number of ranks. A tokenizer names itself in the token files it makes (`tag`, common/tokens.h):
"qwen3" for Qwen3's, "eot=ID,vocab=N" for any other (Qwen3.5's: "eot=248044,vocab=248077"), so that a
trainer refuses ids made for the other kind of model. A model folder's tokenizer.json is tagged the same way.
"""
import base64, hashlib, json, os, re, unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
ENDOFTEXT = 151643  # Qwen3's; another generation's is tok.special["<|endoftext|>"]
SPECIAL = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645}
# The Qwen3 pre-tokenizer split (the same regex its tokenizer.json carries).
PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
           r"\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen3.5's adds the combining marks (\p{M}) to the letters: a word in Devanagari or with a combining
# accent NFC cannot fold stays one piece instead of breaking at each mark.
PATTERN_QWEN3_5 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|"
                   r"\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen3.5's special tokens, in id order from 248044 (its tokenizer's added tokens)
SPECIAL_NAMES_QWEN3_5 = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
    "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
    "<think>", "</think>", "<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>",
    "<tts_text_bos_single>", "<|audio_pad|>")
TAG_QWEN3 = "qwen3"  # the tag token files made by Qwen3's tokenizer carry (common/tokens.h)
QWEN_TIKTOKEN_SHA256 = "b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186"
QWEN3_5_TIKTOKEN_SHA256 = "8dde380a6405e935f5de16a99eb61c824f3f814dd1ed298784c72babb7a03cdd"


class Generation:
    """What a ranks file alone does not say: its split regex and its special tokens."""

    def __init__(self, name, ranks_file, n_ranks, pattern, special):
        self.name, self.ranks_file, self.n_ranks, self.pattern, self.special = (
            name, ranks_file, n_ranks, pattern, special)


GENERATIONS = (
    Generation("qwen3", "qwen.tiktoken", ENDOFTEXT, PATTERN, SPECIAL),
    Generation("qwen3.5", "qwen3_5.tiktoken", 248044, PATTERN_QWEN3_5,
               {n: 248044 + i for i, n in enumerate(SPECIAL_NAMES_QWEN3_5)}))


class TokenizerError(Exception):
    pass


def tag_of(special, vocab):
    """The token-file tag of a tokenizer with these special ids and VOCAB ids in all."""
    if all(special.get(n) == i for n, i in SPECIAL.items()):
        return TAG_QWEN3
    return f"eot={special['<|endoftext|>']},vocab={vocab}"


def resolve(spec):
    """The file --tokenizer SPEC names: a generation's name ("qwen3", "qwen3.5") is its ranks file in
    data/; anything else is a path. (A file literally called qwen3.5 is ./qwen3.5.)"""
    gen = next((g for g in GENERATIONS if g.name == spec), None)
    return os.path.join(HERE, gen.ranks_file) if gen else spec


def name_for_tag(tag):
    """The --tokenizer that makes files tagged TAG, or None when it is not one of ours."""
    return next((g.name for g in GENERATIONS if tag_of(g.special, g.n_ranks + len(g.special)) == tag), None)


def load_ranks(path):
    """A .tiktoken file: lines 'base64(token bytes) rank'."""
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


def check_path(spec, path):
    if os.path.exists(path) and not os.path.isfile(path):
        raise TokenizerError(f"tokenizer file {path} is not a regular file; give qwen3, qwen3.5, a .tiktoken "
                             f"ranks file or a tokenizer.json")
    if not os.path.isfile(path):
        named = f"--tokenizer {spec}: " if spec != path else ""
        raise TokenizerError(f"{named}tokenizer file {path} not found (bash data/get_tokenizer.sh fetches "
                             f"qwen.tiktoken and qwen3_5.tiktoken; README.md, section Data)")


class QwenTokenizer:
    """encode(text) -> ids with NFC normalization and no special-token parsing in the text;
    encode_special(text) -> ids where special-token names are the special tokens; decode(ids) -> text.
    SPEC: "qwen3", "qwen3.5", a .tiktoken ranks file (tiktoken) or a tokenizer.json (tokenizers)."""

    def __init__(self, spec):
        path = resolve(spec)
        check_path(spec, path)
        self.path = path
        if path.endswith(".json"):
            self._load_json(path)
        else:
            self._load_ranks(path)
        self.tag = tag_of(self.special, self.vocab)
        # longest first, so that no name is cut short by another that begins it
        names = sorted(self.special, key=len, reverse=True)
        self._special_re = re.compile("(" + "|".join(map(re.escape, names)) + ")")

    def _load_json(self, path):
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
            # from the encoder and handle special ids ourselves
            spec["added_tokens"] = []
            self.hf = Tokenizer.from_str(json.dumps(spec))
        except Exception as e:
            raise TokenizerError(f"{path}: not a valid tokenizer.json ({str(e)[:200]})") from None
        missing = [n for n in SPECIAL if n not in specials]
        if missing:
            raise TokenizerError(f"{path}: no {', '.join(missing)} among its added tokens; not a Qwen tokenizer")
        # Qwen3's three, as its ranks file has them (the trainers' checks know no more of Qwen3's); all of another's
        self.special = {n: specials[n] for n in SPECIAL} if tag_of(specials, n_vocab) == TAG_QWEN3 else specials
        self.vocab, self.kind = n_vocab, "tokenizer.json"

    def _load_ranks(self, path):
        try:
            import tiktoken
        except ImportError:
            raise TokenizerError(f"{os.path.basename(path)} needs the 'tiktoken' package: "
                                 f"pip install tiktoken") from None
        ranks = load_ranks(path)
        gen = next((g for g in GENERATIONS if g.n_ranks == len(ranks)), None)
        if gen is None:
            known = " or ".join(f"{g.n_ranks} ({g.name})" for g in GENERATIONS)
            raise TokenizerError(f"{path}: {len(ranks)} ranks, expected {known}; not a Qwen ranks file")
        self.tk = tiktoken.Encoding(name=gen.name, pat_str=gen.pattern, mergeable_ranks=ranks,
                                    special_tokens=gen.special)
        self.special, self.vocab, self.kind = dict(gen.special), len(ranks) + len(gen.special), gen.ranks_file

    def encode(self, text):
        """Ids of plain text: NFC-normalized, special-token strings in it stay ordinary text."""
        text = unicodedata.normalize("NFC", text)
        if self.kind == "tokenizer.json":
            return self.hf.encode(text, add_special_tokens=False).ids
        return self.tk.encode_ordinary(text)

    def encode_special(self, text):
        """Ids of text in which each special token's name is that token (a conversation written out
        as a chat template renders it). The text between them is normalized apart, as a Hugging Face
        tokenizer does: NFC must not fold a name's '>' with a combining mark after it."""
        ids = []
        for k, part in enumerate(self._special_re.split(text)):  # odd parts are the names matched
            if k % 2:
                ids.append(self.special[part])
            elif part:
                ids += self.encode(part)
        return ids

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
