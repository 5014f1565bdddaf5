"""tok.py -- the byte-level BPE tokenizer of spex's default models, in Python.

What it is: load models/tokenizer.json (written by bpe.py), encode and decode text exactly as
spex's C tokenizer does for a GGUF "gpt2" vocab with the "qwen2" pre-tokenizer
(src/tok/encode.c: special partition, pre-tokenizer regex, byte-to-unicode mapping, BPE by
merge rank), and hand out the GGUF tokenizer keys (gguf_kv / add_to_writer) that the
export scripts write into target.gguf and drafter.gguf. check_tok.py proves encode() equals
the C tokenizer on corpus texts.

Fixed ids (bpe.py writes them; changing them invalidates every trained model):
    0..255      the 256 byte tokens, id = byte value (GPT-2 byte-to-unicode strings)
    256..1017   762 merges, in rank order (merge r creates token 256 + r)
    1018 <|endoftext|>   BOS / padding (add_bos_token is false: nothing is added)
    1019 <|im_start|>
    1020 <|im_end|>      EOS and EOT: the end of an assistant turn
    1021 <think>
    1022 </think>
    1023 <|mask|>        the DFlash drafter's mask token (tokenizer.ggml.mask_token_id, drafter only)
All six specials are control tokens (token_type 3); with parse_special they are matched in the
text (longest first), otherwise their text is tokenized as plain bytes.

What it is not: a general Unicode pre-tokenizer. Python's re has no \\p{L}/\\p{N}, so the
qwen2 regex is written with ASCII classes (letters [A-Za-z], digits [0-9], re.ASCII for \\s).
That is exact for ASCII text -- the whole corpus -- and approximate for other scripts. No NFC
(qwen2 has none in spex either).
"""

import json
import os
import re

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|mask|>"]
VOCAB_SIZE = 1024   # the corpus has ~480 distinct words: ~940 merges exhaust it, so 2048 is unreachable
N_BYTES = 256

# qwen2 pre-tokenizer (src/tok/vocab.c), \p{L} -> [A-Za-z], \p{N} -> [0-9] (one digit a match)
QWEN2_PATTERN = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
                 r"|[^\r\nA-Za-z0-9]?[A-Za-z]+"
                 r"|[0-9]"
                 r"| ?[^\sA-Za-z0-9]+[\r\n]*"
                 r"|\s*[\r\n]+"
                 r"|\s+(?!\S)"
                 r"|\s+")
QWEN2_RE = re.compile(QWEN2_PATTERN, re.ASCII)

DEFAULT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "tokenizer.json")
QWEN3_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "data",
                            "qwen3-tokenizer", "tokenizer_config.json")


def byte_to_unicode():
    """GPT-2's reversible byte -> printable character table: printable Latin-1 bytes map to
    themselves, the other 68 bytes to U+0100 upwards in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_CHARS = byte_to_unicode()


def pretokenize(text):
    """The qwen2 pre-tokenizer's words of a text without specials (every ASCII char matches)."""
    return QWEN2_RE.findall(text)


def split_specials(text, specials):
    """[(is_special, piece)]: the longest special at each position wins, as in encode.c."""
    out, frag, i = [], 0, 0
    by_first = {}
    for s in sorted(specials, key=len, reverse=True):
        by_first.setdefault(s[0], []).append(s)
    while i < len(text):
        hit = None
        for s in by_first.get(text[i], ()):
            if text.startswith(s, i):
                hit = s
                break
        if hit is None:
            i += 1
            continue
        if i > frag:
            out.append((False, text[frag:i]))
        out.append((True, hit))
        i += len(hit)
        frag = i
    if frag < len(text):
        out.append((False, text[frag:]))
    return out


class Tokenizer:
    def __init__(self, vocab, merges, specials):
        self.vocab = list(vocab)                 # id -> token string (byte-mapped)
        self.merges = list(merges)               # rank -> "left right"
        self.specials = dict(specials)           # text -> id
        self.ids = {t: i for i, t in enumerate(self.vocab)}
        self.ranks = {tuple(m.split(" ")): r for r, m in enumerate(self.merges)}
        self.unicode_to_byte = {c: b for b, c in BYTE_CHARS.items()}
        self.cache = {}

    @classmethod
    def load(cls, path=DEFAULT_PATH):
        with open(path) as f:
            d = json.load(f)
        return cls(d["vocab"], d["merges"], d["specials"])

    def special(self, name):
        return self.specials[name]

    @property
    def n_vocab(self):
        return len(self.vocab)

    def _bpe_word(self, word):
        ids = self.cache.get(word)
        if ids is not None:
            return ids
        sym = [BYTE_CHARS[b] for b in word.encode("utf-8")]
        while len(sym) > 1:
            best, best_rank = -1, None
            for i in range(len(sym) - 1):
                r = self.ranks.get((sym[i], sym[i + 1]))
                if r is not None and (best_rank is None or r < best_rank):
                    best, best_rank = i, r
            if best < 0:
                break
            sym[best:best + 2] = [sym[best] + sym[best + 1]]
        ids = [self.ids[s] for s in sym]
        self.cache[word] = ids
        return ids

    def encode(self, text, parse_special=True):
        out = []
        pieces = split_specials(text, self.specials) if parse_special else [(False, text)]
        for is_special, piece in pieces:
            if is_special:
                out.append(self.specials[piece])
                continue
            for w in pretokenize(piece):
                out.extend(self._bpe_word(w))
        return out

    def decode(self, ids):
        bs = bytearray()
        for i in ids:
            t = self.vocab[i]
            if t in self.specials:
                bs += t.encode("utf-8")
            else:
                bs += bytes(self.unicode_to_byte[c] for c in t)
        return bs.decode("utf-8", errors="replace")

    def token_types(self):
        return [3 if t in self.specials else 1 for t in self.vocab]

    def gguf_kv(self, drafter=False, chat_template=None):
        """[(key, vtype, value)] with gguf_io value types; arrays are (key, gio.ARRAY, (elem, list))."""
        import gguf_io as gio   # tools/ref on sys.path (callers add it)
        if chat_template is None:
            with open(QWEN3_CONFIG) as f:
                chat_template = json.load(f)["chat_template"]
        kv = [
            ("tokenizer.ggml.model", gio.STRING, "gpt2"),
            ("tokenizer.ggml.pre", gio.STRING, "qwen2"),
            ("tokenizer.ggml.tokens", gio.ARRAY, (gio.STRING, list(self.vocab))),
            ("tokenizer.ggml.token_type", gio.ARRAY, (gio.I32, self.token_types())),
            ("tokenizer.ggml.merges", gio.ARRAY, (gio.STRING, list(self.merges))),
            ("tokenizer.ggml.bos_token_id", gio.U32, self.special("<|endoftext|>")),
            ("tokenizer.ggml.eos_token_id", gio.U32, self.special("<|im_end|>")),
            ("tokenizer.ggml.eot_token_id", gio.U32, self.special("<|im_end|>")),
            ("tokenizer.ggml.padding_token_id", gio.U32, self.special("<|endoftext|>")),
            ("tokenizer.ggml.add_bos_token", gio.BOOL, False),
            ("tokenizer.chat_template", gio.STRING, chat_template),
        ]
        if drafter:
            kv.append(("tokenizer.ggml.mask_token_id", gio.U32, self.special("<|mask|>")))
        return kv

    def add_to_writer(self, w, drafter=False):
        """Writes gguf_kv() into a gguf_io.Writer."""
        import numpy as np
        import gguf_io as gio
        for key, vtype, value in self.gguf_kv(drafter=drafter):
            if vtype == gio.ARRAY:
                elem, vals = value
                if elem == gio.I32:
                    vals = np.array(vals, dtype=np.int32)
                w.add_array(key, elem, vals)
            else:
                w.add(key, vtype, value)
