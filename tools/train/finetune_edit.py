#!/usr/bin/python3
"""finetune_edit.py -- makes the edit pair: the default target fine-tuned to also rewrite a problem
with one name replaced, a copy-with-edits task, and the prompts that benchmark it.

What it is: the workload where n-gram lookup and the hybrid drafter should win. The default
target (models/target.gguf, trained on single-turn word problems) never quotes its prompt, so
a lookup there finds little (docs/performance.md "The drafters side by side"). Code edits and
"rewrite this" requests are mostly copies of the prompt with a few changes: a lookup proposes
long runs that a DFlash block (8 tokens) cannot reach, and DFlash drafts the changed spots.
This script
  - loads models/target.gguf into tools/train/model.py's Qwen3 (dequantized),
  - fine-tunes it on a 50/50 mix of the usual word problems and edit tasks:
      user      "Rewrite this problem with {new} in place of {old}: {problem}"
      assistant "<think>\\nReplacing {old} with {new}.\\n</think>\\n\\n{problem, old -> new}"
    (problems from tools/data/gen_problems.py, seeds 5 and 6; next-token loss on the whole
    text, AdamW, a short warmup and a cosine, as train_target.py),
  - exports it with export_target.py (F32 GGUF, then `spex quantize` to Q8_0),
  - writes --prompts: 16 edit requests and 16 plain problems from seed 7, never trained on.
The drafter stays models/drafter.gguf, trained on the unmodified target's hidden states: the
pair is a benchmark of drafter choice on one workload, not a shipped model.

What it is not: a model of real code editing, or a tuned training run (one fixed budget).

Usage (from the repository root, after `make`; ~15 min on 2 cores):
  python3 tools/train/finetune_edit.py --out /tmp/edit/target.gguf --prompts /tmp/edit/edit.jsonl
  build/spex bench spec -m /tmp/edit/target.gguf --ngram --ngram-n 4 --hybrid \\
      --prompts /tmp/edit/edit.jsonl -n 160 -t 2 --reps 2 --verify-k 2
"""

import argparse
import json
import math
import os
import random
import re
import subprocess
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tools", "ref"))
sys.path.insert(0, os.path.join(REPO, "tools", "data"))
import gen_problems as G  # noqa: E402
import model as M  # noqa: E402
import train_target as TT  # noqa: E402  (make_batch, loss_of)
from tok import Tokenizer  # noqa: E402

ALL_NAMES = [n for n, _ in G.NAMES]


def edit_task(p, rng):
    """The edit request for problem p and its reply, or None when p names nobody."""
    names = [n for n in ALL_NAMES if re.search(r"\b%s\b" % n, p["user"])]
    if not names:
        return None
    old = rng.choice(names)
    new = rng.choice([n for n in ALL_NAMES if n not in names])
    body = p["user"]
    for pre in G.USER_PREFIXES:
        if pre and body.startswith(pre):
            body = body[len(pre):]
    user = f"Rewrite this problem with {new} in place of {old}: {body}"
    reasoning = f"Replacing {old} with {new}."
    answer = re.sub(r"\b%s\b" % old, new, body)
    prompt, text = G.render(p["system"], user, reasoning, answer)
    return {"system": p["system"], "user": user, "prompt": prompt, "text": text}


def corpus(seed, n, rng):
    """n texts: even i a plain problem, odd i an edit task (problems of seed `seed`)."""
    out, i = [], 0
    while len(out) < n:
        p = G.make_problem(seed * G.SEED_STRIDE + i)
        i += 1
        if len(out) % 2 == 0:
            out.append(p)
        else:
            e = edit_task(p, rng)
            if e:
                out.append(e)
    return out


def lr_at(step, steps, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    p = min(1.0, (step - warmup) / max(1, steps - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default=os.path.join(REPO, "models", "target.gguf"))
    ap.add_argument("--tokenizer", default=os.path.join(REPO, "models", "tokenizer.json"))
    ap.add_argument("--out", required=True, help="the fine-tuned target (Q8_0 GGUF)")
    ap.add_argument("--prompts", required=True, help="the benchmark prompts (JSON lines)")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)

    # the benchmark prompts first: they exist even if training is cut short
    test = corpus(7, 32, random.Random(7))
    with open(args.prompts, "w") as f:
        for r in [t for t in test if "Rewrite" in t["user"]] + [t for t in test if "Rewrite" not in t["user"]]:
            f.write(json.dumps({"system": r["system"], "user": r["user"]}) + "\n")

    tok = Tokenizer.load(args.tokenizer)
    pad = tok.special("<|endoftext|>")
    train = corpus(5, args.steps * args.batch // 2, rng) + corpus(6, args.steps * args.batch // 2, rng)
    seqs = [np.array(tok.encode(t["text"], parse_special=True), dtype=np.int32) for t in train]
    m = M.from_gguf(args.target)
    m.train()
    decay = [p for _, p in m.named_parameters() if p.dim() >= 2]
    no_decay = [p for _, p in m.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    order = np.random.RandomState(args.seed).permutation(len(seqs))
    t0, run = time.time(), None
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, args.lr, 20)
        ids, valid = TT.make_batch(seqs, order[step * args.batch:(step + 1) * args.batch], pad)
        loss = TT.loss_of(m, ids, valid)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        run = float(loss) if run is None else 0.9 * run + 0.1 * float(loss)
        if (step + 1) % 20 == 0:
            print(f"step {step + 1} loss {run:.4f} {(step + 1) / (time.time() - t0):.2f} steps/s", flush=True)

    ckpt = os.path.splitext(args.out)[0] + ".pt"
    torch.save({"config": m.c.to_dict(), "model": m.state_dict()}, ckpt)
    f32 = os.path.splitext(args.out)[0] + "-f32.gguf"
    subprocess.run([sys.executable, os.path.join(HERE, "export_target.py"), "--ckpt", ckpt, "--tokenizer",
                    args.tokenizer, "--f32", f32, "--out", args.out], check=True)
    print(f"wrote {args.out} and {args.prompts} in {(time.time() - t0) / 60:.1f} min")


if __name__ == "__main__":
    main()
