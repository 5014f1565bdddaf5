#!/usr/bin/env python3
"""check_tok.py -- proves that tok.py encodes exactly as spex's C tokenizer, and that spex's
chat rendering of a problem gives the token ids of its "prompt" field.

What it is: writes a tiny random qwen3 GGUF (one layer, 32 wide; tools/ref/gguf_io.py) that
carries the trained vocabulary through Tokenizer.add_to_writer -- the same keys the exported
models carry -- then for each checked record runs

    build/spex run -m tiny.gguf -f TEXT_FILE -n 0 -v --no-bos
        whole "text" (specials included) -> must equal tok.encode(text); also a few ASCII
        edge cases of the pre-tokenizer (EDGE)
    build/spex run -m tiny.gguf --chat [--system S] -p USER -n 0 -v --no-bos
        spex renders the Qwen3 template itself -> must equal tok.encode(prompt)

and compares the ids spex prints on stderr ("prompt ids (N): i0 i1 ..."; tools/run.c).
The model's weights are random: only the tokenizer and the template detection matter
(-n 0 generates nothing). Exit status 0 when every record matches, 1 otherwise.

What it is not: a test of the model (see the parity golden of the export scripts).

Usage: check_tok.py [--spex build/spex] [--tokenizer models/tokenizer.json]
                    [--train /work/train/data/train.jsonl --n-train 200]
                    [--heldout /work/train/data/heldout.jsonl] [--demo /work/train/data/demo.jsonl]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tools", "ref"))
import gguf_io as gio  # noqa: E402
import tok  # noqa: E402


def write_tiny_model(t, path, seed=5):
    rng = np.random.RandomState(seed)
    E, H, Hkv, hd, F, V = 32, 2, 1, 16, 48, t.n_vocab
    w = gio.Writer()
    a = "qwen3"
    w.add("general.architecture", gio.STRING, a)
    w.add("general.name", gio.STRING, "check-tok")
    w.add("general.file_type", gio.U32, 0)
    w.add(f"{a}.block_count", gio.U32, 1)
    w.add(f"{a}.context_length", gio.U32, 1024)
    w.add(f"{a}.embedding_length", gio.U32, E)
    w.add(f"{a}.feed_forward_length", gio.U32, F)
    w.add(f"{a}.attention.head_count", gio.U32, H)
    w.add(f"{a}.attention.head_count_kv", gio.U32, Hkv)
    w.add(f"{a}.attention.layer_norm_rms_epsilon", gio.F32, 1e-6)
    w.add(f"{a}.attention.key_length", gio.U32, hd)
    w.add(f"{a}.attention.value_length", gio.U32, hd)
    w.add(f"{a}.rope.freq_base", gio.F32, 1e6)
    t.add_to_writer(w)

    def mat(n_in, n_out):
        return rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)

    w.add_tensor("token_embd.weight", rng.standard_normal((V, E)))
    w.add_tensor("output_norm.weight", np.ones(E))
    w.add_tensor("output.weight", mat(E, V))
    p = "blk.0."
    w.add_tensor(p + "attn_norm.weight", np.ones(E))
    w.add_tensor(p + "attn_q.weight", mat(E, H * hd))
    w.add_tensor(p + "attn_k.weight", mat(E, Hkv * hd))
    w.add_tensor(p + "attn_v.weight", mat(E, Hkv * hd))
    w.add_tensor(p + "attn_output.weight", mat(H * hd, E))
    w.add_tensor(p + "attn_q_norm.weight", np.ones(hd))
    w.add_tensor(p + "attn_k_norm.weight", np.ones(hd))
    w.add_tensor(p + "ffn_norm.weight", np.ones(E))
    w.add_tensor(p + "ffn_gate.weight", mat(E, F))
    w.add_tensor(p + "ffn_up.weight", mat(E, F))
    w.add_tensor(p + "ffn_down.weight", mat(F, E))
    w.write(path)


def spex_ids(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    for line in r.stderr.splitlines():
        if line.startswith("prompt ids ("):
            head, _, rest = line.partition(":")
            ids = [int(x) for x in rest.split()]
            if len(ids) != int(head[len("prompt ids ("):-1]):
                raise RuntimeError(f"bad ids line: {line}")
            return ids
    raise RuntimeError(f"no 'prompt ids' line (rc {r.returncode}): {r.stderr.strip()[-500:]}")


# ASCII edge cases of the qwen2 regex beyond the corpus: contractions, space runs before a
# word and at the end, tabs, CR LF, punctuation runs with newlines, digits, specials inside
# words, an unfinished special.
EDGE = [
    "I'm sure they'll say it's ours, we'd've DON'T", "a  b   c    \n\n  d\t\te  ",
    "x\r\ny\r\n\r\n  z", "Hi!!!\n\n?? ...\n$12,345.67 = 3*4", "trailing spaces   ",
    "<|im_start|>user\nhello<|im_end|><think></think><|mask|>x<|endoftext|>",
    "<|im_start|<|im_end|>>< think>", "  \n \n\t", "'s's 'S 'LL 'x ''", "abc123def 4five six7",
]


def load(path, n=None):
    if not path or not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            out.append(json.loads(line))
            if n is not None and len(out) >= n:
                break
    return out


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spex", default=os.path.join(ROOT, "build", "spex"))
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "models", "tokenizer.json"))
    ap.add_argument("--train", default="/work/train/data/train.jsonl")
    ap.add_argument("--n-train", type=int, default=200)
    ap.add_argument("--heldout", default="/work/train/data/heldout.jsonl")
    ap.add_argument("--demo", default="/work/train/data/demo.jsonl")
    a = ap.parse_args()

    t = tok.Tokenizer.load(a.tokenizer)
    recs = load(a.train, a.n_train) + load(a.heldout) + load(a.demo)
    edge = [{"text": e, "user": e, "system": None, "prompt": None} for e in EDGE]
    recs += edge
    if not recs:
        sys.exit("check_tok.py: no records")
    bad = {"text": 0, "chat": 0}
    n_tokens = 0
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "tiny.gguf")
        write_tiny_model(t, model)
        txt = os.path.join(tmp, "text.txt")
        base = [a.spex, "run", "-m", model, "-n", "0", "-v", "--no-bos"]
        for k, r in enumerate(recs):
            want = t.encode(r["text"])
            n_tokens += len(want)
            with open(txt, "w") as f:
                f.write(r["text"])
            got = spex_ids(base + ["-f", txt])
            if got != want:
                bad["text"] += 1
                i = first_diff(got, want)
                print(f"text {k}: mismatch at token {i}: spex {got[i:i + 8]} python {want[i:i + 8]}\n  "
                      f"{r['text']!r}")
            if r["prompt"] is None:
                continue
            chat = base + ["--chat", "-p", r["user"]]
            if r["system"] is not None:
                chat += ["--system", r["system"]]
            want = t.encode(r["prompt"])
            got = spex_ids(chat)
            if got != want:
                bad["chat"] += 1
                i = first_diff(got, want)
                print(f"chat {k}: mismatch at token {i}: spex {got[i:i + 8]} python {want[i:i + 8]}\n  "
                      f"{r['prompt']!r}")
    n, nc = len(recs), len(recs) - len(edge)
    print(f"check_tok.py: {n} texts ({n_tokens} tokens; {len(edge)} edge cases): text ids {n - bad['text']}/{n} "
          f"equal, chat prompt ids {nc - bad['chat']}/{nc} equal")
    sys.exit(1 if bad["text"] or bad["chat"] else 0)


if __name__ == "__main__":
    main()
