#!/usr/bin/python3
"""export_target.py -- writes a trained (or random) qwen3 target as a GGUF, then quantizes it.

What it is: the bridge from a train_target.py checkpoint to the file spex loads. It writes
an F32 GGUF of architecture `qwen3` with tools/ref/gguf_io.py, with the same keys and
tensor names / shapes as tools/ref/make_fixtures.py writes tiny-qwen3 (targets.md §5.1,
§5.2: key_length / value_length always written, rope.freq_base 1e6, no
rope.dimension_count), the tokenizer keys of tools/train/tok.py
(Tokenizer.gguf_kv(): gpt2 model, qwen2 pre-tokenizer, ChatML specials, Qwen3 chat
template), and then runs `build/spex quantize F32.gguf OUT.gguf TYPE` (default Q8_0), so
the shipped file is made by spex's own quantizer.

What it is not: a converter for other checkpoints, or a quantizer of its own.

Usage:
  export_target.py --ckpt /work/train/ckpt/target.pt --tokenizer models/tokenizer.json \\
                   --f32 /work/train/ckpt/target-f32.gguf --out models/target.gguf [--type Q8_0]
  export_target.py --random SEED ...      a random-init model of the default Config (tests)
  --byte-tokenizer                        256 byte tokens + ChatML specials + filler control
                                          tokens instead of tok.py (tests, before a tokenizer
                                          exists)
"""

import argparse
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "ref"))
import gguf_io as gio  # noqa: E402
import model as M  # noqa: E402

REPO = os.path.abspath(os.path.join(HERE, "..", ".."))


def byte_tokenizer_kv(n_vocab):
    """A stand-in vocabulary for tests: GPT-2 byte tokens 0..255, the ChatML / thinking
    specials, then control fillers up to n_vocab. No merges."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|mask|>"]
    toks = [table[b] for b in range(256)] + specials
    toks += [f"<|filler_{i}|>" for i in range(n_vocab - len(toks))]
    types = np.array([1] * 256 + [3] * (n_vocab - 256), dtype=np.int32)
    im_end = 256 + specials.index("<|im_end|>")
    return [("tokenizer.ggml.model", gio.STRING, "gpt2"), ("tokenizer.ggml.pre", gio.STRING, "qwen2"),
            ("tokenizer.ggml.tokens", gio.ARRAY, (gio.STRING, toks)),
            ("tokenizer.ggml.token_type", gio.ARRAY, (gio.I32, types)),
            ("tokenizer.ggml.merges", gio.ARRAY, (gio.STRING, [])),
            ("tokenizer.ggml.eos_token_id", gio.U32, im_end),
            ("tokenizer.ggml.padding_token_id", gio.U32, 256),
            ("tokenizer.ggml.add_bos_token", gio.BOOL, False)]


def tokenizer_kv(path):
    from tok import Tokenizer
    return Tokenizer.load(path).gguf_kv()


def write_f32(model, kvs, path, name="spex-target"):
    c = model.c
    a = "qwen3"
    w = gio.Writer()
    w.add("general.architecture", gio.STRING, a)
    w.add("general.name", gio.STRING, name)
    w.add("general.file_type", gio.U32, 0)   # all F32
    w.add(f"{a}.block_count", gio.U32, c.n_layer)
    w.add(f"{a}.context_length", gio.U32, c.ctx)
    w.add(f"{a}.embedding_length", gio.U32, c.n_embd)
    w.add(f"{a}.feed_forward_length", gio.U32, c.n_ff)
    w.add(f"{a}.attention.head_count", gio.U32, c.n_head)
    w.add(f"{a}.attention.head_count_kv", gio.U32, c.n_head_kv)
    w.add(f"{a}.attention.layer_norm_rms_epsilon", gio.F32, c.eps)
    w.add(f"{a}.attention.key_length", gio.U32, c.head_dim)
    w.add(f"{a}.attention.value_length", gio.U32, c.head_dim)
    w.add(f"{a}.rope.freq_base", gio.F32, c.rope_base)
    n_tokens = None
    for key, vtype, value in kvs:
        if key == "tokenizer.ggml.mask_token_id":
            continue   # the drafter's key (dflash2.md); the target has no use for it
        if vtype == gio.ARRAY:
            elem, vals = value
            w.add_array(key, elem, vals)
            if key == "tokenizer.ggml.tokens":
                n_tokens = len(vals)
        elif isinstance(value, gio.Value):
            w.add_value(key, value)
        else:
            w.add(key, vtype, value)
    if n_tokens != c.n_vocab:
        raise SystemExit(f"tokenizer has {n_tokens} tokens, the model {c.n_vocab}")
    for name, arr in model.gguf_tensors():
        w.add_tensor(name, arr.astype(np.float32))
    return w.write(path)


def quantize(f32, out, qtype, spex):
    cmd = [spex, "quantize", f32, out, qtype]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--ckpt")
    src.add_argument("--random", type=int, metavar="SEED")
    ap.add_argument("--tokenizer", default=os.path.join(REPO, "models", "tokenizer.json"))
    ap.add_argument("--byte-tokenizer", action="store_true")
    ap.add_argument("--f32", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--type", default="Q8_0")
    ap.add_argument("--name", default="spex-target")
    ap.add_argument("--spex", default=os.path.join(REPO, "build", "spex"))
    args = ap.parse_args()

    kvs = byte_tokenizer_kv(M.Config().n_vocab) if args.byte_tokenizer else tokenizer_kv(args.tokenizer)
    if args.ckpt:
        m = M.from_checkpoint(args.ckpt)
    else:
        n_vocab = len([v for k, _, v in kvs if k == "tokenizer.ggml.tokens"][0][1])
        m = M.Qwen3(M.Config(n_vocab=n_vocab)).init_weights(args.random).eval()
    n = write_f32(m, kvs, args.f32, args.name)
    print(f"wrote {args.f32}: {n} bytes, {m.n_params()} parameters", flush=True)
    if args.type.upper() != "F32":
        quantize(args.f32, args.out, args.type, args.spex)
        print(f"wrote {args.out}: {os.path.getsize(args.out)} bytes", flush=True)


if __name__ == "__main__":
    main()
