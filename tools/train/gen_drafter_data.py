#!/usr/bin/python3
"""gen_drafter_data.py -- the DFlash2 drafter's training data: the target's own generations.

What it is: runs the frozen target (tools/train/model.py, batched KV-cached generate) on the
ChatML prompts of the training problems and keeps prompt + completion token ids. Alternate
batches of prompts are decoded greedily and sampled at T = 1, top-p 0.95, top-k 20 (the demo's two
settings), as dflash2.md §22 asks ("trained on the target's own greedy and sampled
generations"). A separate greedy set on held-out prompts serves as the validation set (its
teacher-forced acceptance equals the T = 0 acceptance spex would see on those prompts).
The target's tap features are NOT stored: train_drafter.py recomputes them with a
teacher-forced forward.

By default the target is the shipped GGUF (models/target.gguf, Q8_0 dequantized), so the
drafter learns exactly the model spex verifies against; --ckpt uses a checkpoint instead.

What it is not: a data-set of human text (that is tools/data/gen_problems.py).

Usage:
  gen_drafter_data.py --target models/target.gguf --train /work/train/data/train.jsonl \\
      --heldout /work/train/data/heldout.jsonl --n 3000 --n-val 128 --out /work/train/data/drafter_data.pt
Output (torch.save): {"train": [{"ids": [...], "n_prompt": int, "greedy": bool}], "val": [...],
"meta": {...}}.
"""

import argparse
import json
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import model as tm  # noqa: E402
from tok import Tokenizer  # noqa: E402


def load_target(a):
    if a.ckpt:
        return tm.from_checkpoint(a.ckpt)
    return tm.from_gguf(a.target)


def prompts_of(path, n, skip=0):
    out = []
    with open(path) as f:
        for i, line in enumerate(f):
            if i < skip:
                continue
            out.append(json.loads(line)["prompt"])
            if len(out) == n:
                break
    return out


def generate(m, tok, texts, greedy, batch, max_new, seed, log, deadline=None):
    """Decode texts in batches; greedy may be a bool or a function batch index -> bool
    (alternating batches keep the greedy / sampled ratio when the deadline cuts the run short)."""
    eos = tok.special("<|im_end|>")
    res = []
    t0 = time.time()
    for bi, b in enumerate(range(0, len(texts), batch)):
        if deadline is not None and time.time() > deadline:
            log(f"  time budget reached after {b} prompts")
            break
        gr = greedy(bi) if callable(greedy) else greedy
        ps = [tok.encode(t, parse_special=True) for t in texts[b:b + batch]]
        # prompts of one batch differ by a few tokens only (left padding)
        outs = m.generate(ps, max_new, temperature=0.0 if gr else 1.0, top_k=0 if gr else 20,
                          top_p=1.0 if gr else 0.95, eos=eos, seed=seed + b)
        for p, o in zip(ps, outs):
            res.append({"ids": p + o, "n_prompt": len(p), "greedy": gr, "ended": bool(o and o[-1] == eos)})
        log(f"  {'greedy' if gr else 'sampled'} {b + len(ps)}/{len(texts)}  {time.time() - t0:.0f}s")
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=os.path.join(HERE, "..", "..", "models", "target.gguf"))
    ap.add_argument("--ckpt", default=None, help="use a train_target.py checkpoint instead of the GGUF")
    ap.add_argument("--tokenizer", default=os.path.join(HERE, "..", "..", "models", "tokenizer.json"))
    ap.add_argument("--train", default="/work/train/data/train.jsonl")
    ap.add_argument("--heldout", default="/work/train/data/heldout.jsonl")
    ap.add_argument("--n", type=int, default=3000, help="training prompts (half greedy, half sampled)")
    ap.add_argument("--n-val", type=int, default=128)
    ap.add_argument("--skip", type=int, default=0, help="skip this many training prompts (fresh ones)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--max-new", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-minutes", type=float, default=0.0, help="stop starting new batches after this")
    ap.add_argument("--out", default="/work/train/data/drafter_data.pt")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    log = lambda s: print(s, flush=True)
    m = load_target(a).float().eval()
    tok = Tokenizer.load(a.tokenizer)
    t0 = time.time()
    val = generate(m, tok, prompts_of(a.heldout, a.n_val), True, a.batch, a.max_new, a.seed, log)
    deadline = t0 + 60.0 * a.max_minutes if a.max_minutes > 0 else None
    tr = prompts_of(a.train, a.n, a.skip)
    data = generate(m, tok, tr, lambda bi: bi % 2 == 0, a.batch, a.max_new, a.seed, log, deadline)
    n_tok = sum(len(d["ids"]) for d in data)
    n_gen = sum(len(d["ids"]) - d["n_prompt"] for d in data)
    ended = sum(d["ended"] for d in data) / max(1, len(data))
    meta = dict(target=a.ckpt or os.path.abspath(a.target), n=len(data), n_val=len(val), tokens=n_tok,
                generated=n_gen, ended_frac=ended, seed=a.seed, seconds=time.time() - t0)
    torch.save({"train": data, "val": val, "meta": meta}, a.out)
    log(f"wrote {a.out}: {meta}")


if __name__ == "__main__":
    main()
