#!/usr/bin/python3
"""golden_target.py -- writes tests/data/default/target.golden.gguf, the PyTorch-vs-spex check
of the shipped target models/target.gguf.

What it is: the reference side of the "PyTorch forward and spex agree" check of issue 5.
It reads models/target.gguf (Q8_0), dequantizes every tensor with tools/ref/ggml_formats.py
(so the reference sees exactly the weights spex multiplies with), builds the PyTorch model
of model.py from them in float64 (so the reference error is far below spex's fp32 /
fp16-KV error), and for 2 held-out prompts records the logits of the last 4 prompt
positions and a 32-token greedy continuation with each step's top-1 minus top-2 margin.
With --check it also runs `build/spex run --temp 0` on the same prompts and compares the
prompt ids and the greedy text (a quick end-to-end check; the committed C test is the lead's).

What it is not: a golden of the drafter, or of sampled decoding.

File layout (GGUF, arch "spex-golden"; P = golden.n_prompts = 2, V vocabulary):
  golden.model                 str  "../../../models/target.gguf" (relative to this file)
  golden.model_sha256          str  sha256 of the model file the golden was made from
  golden.n_prompts             u32  P
  golden.n_last                u32  4   (positions whose logits are stored)
  golden.n_greedy              u32  32
  golden.prompt.{i}            i32[]  prompt token ids (ChatML prompt ending "<|im_start|>assistant\\n",
                                      encoded with parse_special; no BOS)
  golden.greedy.{i}            i32[32] greedy ids after the prompt (argmax, lowest id on ties;
                                      never stopped early: EOS, if it came, would be kept)
  golden.greedy_min_margin.{i} f32  smallest margin of prompt i's greedy path
  tensor logits.{i}            F32 ne {V, 4}: logits of prompt positions n-4 .. n-1
  tensor margin.{i}            F32 ne {32}: top-1 minus top-2 logit of each greedy step

Usage:
  golden_target.py [--model models/target.gguf] [--heldout /work/train/data/heldout.jsonl]
                   [--out tests/data/default/target.golden.gguf] [--check]
  golden_target.py --random-prompts SEED ...   random token prompts (tests before data exists)
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "ref"))
import gguf_io as gio  # noqa: E402
import model as M  # noqa: E402

REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
N_LAST, N_GREEDY = 4, 32


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def pick_prompts(args):
    """[(text or None, ids)] of the two golden prompts."""
    if args.random_prompts is not None:
        rng = np.random.RandomState(args.random_prompts)
        return [(bytes(rng.randint(97, 123, n).astype(np.uint8)).decode(), None) for n in (37, 61)]
    from tok import Tokenizer
    tok = Tokenizer.load(args.tokenizer)
    # problems with >= 3 reasoning steps, so that 32 greedy tokens stay inside the answer
    # (spex stops at <|im_end|>; the golden's continuation must not run past it)
    rows = [r for r in map(json.loads, open(args.heldout)) if r.get("steps", 3) >= 3]
    # one without and (if any) one with a system message, so both template paths are covered
    plain = [r for r in rows if not r.get("system")]
    with_sys = [r for r in rows if r.get("system")]
    chosen = [plain[0], with_sys[0] if with_sys else plain[1]]
    return [(r["prompt"], tok.encode(r["prompt"], parse_special=True)) for r in chosen]


def spex_check(args, text, ids, greedy):
    """Runs spex greedily on the prompt text; compares prompt ids and the generated text."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(text)
        pf = f.name
    try:
        r = subprocess.run([args.spex, "run", "-m", args.model, "-f", pf, "-n", str(N_GREEDY), "--temp", "0",
                            "--special", "-v", "-t", "2"], capture_output=True)
    finally:
        os.unlink(pf)
    err = r.stderr.decode(errors="replace")
    line = [l for l in err.splitlines() if l.startswith("prompt ids")]
    spex_ids = [int(x) for x in line[0].split(":", 1)[1].split()] if line else None
    ok_ids = spex_ids == list(ids)
    if args.random_prompts is not None:
        from export_target import byte_tokenizer_kv   # byte vocab: id = byte, then named controls
        names = dict((k, v) for k, _, v in byte_tokenizer_kv(m_vocab(args)))["tokenizer.ggml.tokens"][1]
        want = b"".join(bytes([t]) if t < 256 else names[t].encode() for t in greedy)
        ok_txt = r.stdout == want
    else:
        from tok import Tokenizer
        want = Tokenizer.load(args.tokenizer).decode(greedy)
        ok_txt = r.stdout.decode(errors="replace") == want
    print(f"  spex: prompt ids {'same' if ok_ids else 'DIFFER'}, greedy text {'same' if ok_txt else 'DIFFERS'}")
    if not ok_txt:
        print("  spex :", repr(r.stdout[:300]))
        print("  torch:", repr(want[:300]))
    return ok_ids and ok_txt


def m_vocab(args):
    return len(gio.read(args.model).get("tokenizer.ggml.tokens"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(REPO, "models", "target.gguf"))
    ap.add_argument("--tokenizer", default=os.path.join(REPO, "models", "tokenizer.json"))
    ap.add_argument("--heldout", default="/work/train/data/heldout.jsonl")
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "default", "target.golden.gguf"))
    ap.add_argument("--model-ref", default="../../../models/target.gguf",
                    help="golden.model: the model's path relative to the golden file")
    ap.add_argument("--random-prompts", type=int, metavar="SEED")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--spex", default=os.path.join(REPO, "build", "spex"))
    args = ap.parse_args()

    torch.set_num_threads(2)
    m = M.from_gguf(args.model).double()
    prompts = pick_prompts(args)
    if args.random_prompts is not None:   # byte vocabulary: id = byte value
        prompts = [(t, list(t.encode())) for t, _ in prompts]

    g = gio.Writer()
    g.add("general.architecture", gio.STRING, "spex-golden")
    g.add("golden.model", gio.STRING, args.model_ref)
    g.add("golden.model_sha256", gio.STRING, sha256_file(args.model))
    g.add("golden.n_prompts", gio.U32, len(prompts))
    g.add("golden.n_last", gio.U32, N_LAST)
    g.add("golden.n_greedy", gio.U32, N_GREEDY)
    ok = True
    for i, (text, ids) in enumerate(prompts):
        with torch.no_grad():
            logits = m(torch.tensor([ids]))[0, -N_LAST:].numpy()            # (4, V)
        out, mg = m.generate([ids], N_GREEDY, return_margins=True)
        greedy, margins = out[0], np.array(mg[0])
        if args.random_prompts is None and 2044 in greedy[:-1]:
            raise SystemExit(f"prompt {i}: greedy path reaches <|im_end|> before {N_GREEDY} tokens")
        # self-check: the cached generate() agrees with one uncached forward
        with torch.no_grad():
            full = m(torch.tensor([ids + greedy[:-1]]))[0, len(ids) - 1:].numpy()
        if list(np.argmax(full, axis=1)) != greedy:
            raise SystemExit("generate() and the whole-sequence argmax disagree")
        if np.abs(full[-N_GREEDY:][0] - logits[-1]).max() > 1e-9:
            raise SystemExit("prefill logits differ")
        g.add_array(f"golden.prompt.{i}", gio.I32, np.array(ids, dtype=np.int32))
        g.add_array(f"golden.greedy.{i}", gio.I32, np.array(greedy, dtype=np.int32))
        g.add(f"golden.greedy_min_margin.{i}", gio.F32, float(margins.min()))
        g.add_tensor(f"logits.{i}", logits.astype(np.float32))
        g.add_tensor(f"margin.{i}", margins.astype(np.float32))
        print(f"prompt {i}: {len(ids)} ids, logit absmax {np.abs(logits).max():.2f}, "
              f"greedy min margin {margins.min():.4f}")
        if args.check:
            ok &= spex_check(args, text, ids, greedy)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    n = g.write(args.out)
    print(f"wrote {args.out}: {n} bytes")
    if args.check and not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
