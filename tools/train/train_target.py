#!/usr/bin/python3
"""train_target.py -- trains spex's default qwen3 target on the generated word-problem corpus.

What it is: a plain PyTorch (CPU, float32, 2 threads) training loop for model.py's Qwen3 on
/work/train/data/train.jsonl (the "text" field of each line: the ChatML prompt, the
<think> reasoning and the final answer, ending in <|im_end|>), tokenized with tok.py.
  - loss: next-token cross-entropy on every token of the text (prompt and answer alike;
    padding excluded). The prompt is cheap to model and teaches the question phrasing the
    reasoning refers back to; the held-out log also shows the loss of the assistant part
    alone (tokens after the prompt), which is what decoding sees;
  - batches: sequences padded to the longest in the batch, lengths bucketed (a shuffled
    window of 64 batches is sorted by length) so little compute goes to padding; each
    sequence starts at position 0, as in spex, never packed behind another one;
  - AdamW (betas 0.9 / 0.95, weight decay 0.1 on matrices and embeddings, none on norms),
    linear warmup then cosine decay to 10 % of the peak, gradient clipping at 1.0;
  - every --eval-every steps: held-out loss on a fixed subset of heldout.jsonl, logged to
    /work/train/logs/target.log; checkpoints (latest and best held-out) every
    --ckpt-minutes; stops at --steps, at --max-minutes of wall time, or when the held-out
    loss has not improved for --patience evaluations.
Deterministic given the seed (data order, init) with --steps N; with --steps 0 the
learning-rate schedule follows the wall clock (the shared 2-core machine's speed varies),
so the stopping step and the exact weights depend on the machine's load.

What it is not: a distributed or mixed-precision trainer; no packing, no dropout.

Usage:
  train_target.py --steps N --batch B [--lr 2e-3] [--max-minutes 35] [--seed 1]
  (--steps 0: run for --max-minutes of wall time, the cosine following the clock)
  train_target.py --smoke         1-minute run that prints steps/s and tokens/s
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as Fn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "ref"))
import model as M  # noqa: E402

REPO = os.path.abspath(os.path.join(HERE, "..", ".."))


def log(f, msg):
    line = time.strftime("%H:%M:%S ") + msg
    print(line, flush=True)
    if f:
        f.write(line + "\n")
        f.flush()


def load_tokens(path, tok, cache):
    """Token ids of every text of a jsonl file, and each one's prompt length; cached as npz."""
    if cache and os.path.exists(cache) and os.path.getmtime(cache) > max(os.path.getmtime(path),
                                                                         os.path.getmtime(tok.path)):
        z = np.load(cache)
        ids, off = z["ids"], z["off"]   # (each z[...] access re-reads the archive: once only)
        return [ids[off[i]:off[i + 1]] for i in range(len(off) - 1)], z["plen"]
    seqs, plen = [], []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            seqs.append(np.array(tok.encode(r["text"], parse_special=True), dtype=np.int32))
            plen.append(len(tok.encode(r["prompt"], parse_special=True)))
    if cache:
        off = np.concatenate([[0], np.cumsum([len(s) for s in seqs])])
        np.savez(cache, ids=np.concatenate(seqs), off=off, plen=np.array(plen, dtype=np.int32))
    return seqs, np.array(plen, dtype=np.int32)


def make_batch(seqs, idx, pad_id):
    """ids [B, T] padded with pad_id, and a bool mask [B, T-1] of the predicted targets."""
    T = max(len(seqs[i]) for i in idx)
    ids = np.full((len(idx), T), pad_id, dtype=np.int64)
    valid = np.zeros((len(idx), T), dtype=bool)
    for r, i in enumerate(idx):
        ids[r, :len(seqs[i])] = seqs[i]
        valid[r, :len(seqs[i])] = True
    return torch.from_numpy(ids), torch.from_numpy(valid[:, 1:])


def batches(n, batch, rng):
    """Endless stream of index batches: shuffle, sort windows of 64 batches by length."""
    while True:
        perm = rng.permutation(n)
        out = []
        for w in range(0, n, 64 * batch):
            win = perm[w:w + 64 * batch]
            win = win[np.argsort(LENS[win], kind="stable")]
            out += [win[j:j + batch] for j in range(0, len(win), batch) if len(win[j:j + batch]) == batch]
        for j in rng.permutation(len(out)):
            yield out[j]


def loss_of(m, ids, valid):
    logits = m(ids[:, :-1])
    return Fn.cross_entropy(logits.reshape(-1, logits.shape[-1])[valid.reshape(-1)],
                            ids[:, 1:].reshape(-1)[valid.reshape(-1)])


@torch.no_grad()
def evaluate(m, seqs, plen, pad_id, batch=32):
    """Mean held-out loss per token over all tokens and over the assistant part."""
    m.eval()
    tot = n = tot_a = n_a = 0.0
    order = np.argsort([len(s) for s in seqs])
    for j in range(0, len(seqs), batch):
        idx = order[j:j + batch]
        ids, valid = make_batch(seqs, idx, pad_id)
        logits = m(ids[:, :-1])
        nll = Fn.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                               reduction="none").view(ids.shape[0], -1)
        asst = valid.clone()
        for r, i in enumerate(idx):
            asst[r, :plen[i] - 1] = False     # target t+1 is assistant when t+1 >= plen
        tot += float(nll[valid].sum()); n += float(valid.sum())
        tot_a += float(nll[asst].sum()); n_a += float(asst.sum())
    m.train()
    return tot / n, tot_a / n_a


def lr_at(step, args, elapsed):
    """Warmup over --warmup steps, then cosine over the larger of the step fraction and the
    wall-clock fraction of --max-minutes (with --steps 0: the wall clock alone), so the decay
    finishes when the time budget does on a machine of any (shared, varying) speed."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    p = elapsed / (args.max_minutes * 60)
    if args.steps:
        p = max(p, (step - args.warmup) / max(1, args.steps - args.warmup))
    p = min(1.0, p)
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


def save(m, opt, step, args, path, extra):
    tmp = path + ".tmp"
    torch.save({"config": m.c.to_dict(), "model": m.state_dict(), "opt": opt.state_dict(), "step": step,
                "args": vars(args), **extra}, tmp)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", default="/work/train/data/train.jsonl")
    ap.add_argument("--heldout", default="/work/train/data/heldout.jsonl")
    ap.add_argument("--tokenizer", default=os.path.join(REPO, "models", "tokenizer.json"))
    ap.add_argument("--ckpt", default="/work/train/ckpt/target.pt")
    ap.add_argument("--log", default="/work/train/logs/target.log")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--eval-n", type=int, default=256)
    ap.add_argument("--ckpt-minutes", type=float, default=4.0)
    ap.add_argument("--max-minutes", type=float, default=35.0)
    ap.add_argument("--patience", type=int, default=6)
    # 1 thread: on the shared 2-core machine, 2 OpenMP threads that spin at every barrier
    # while another process holds a core ran 5-10x slower than 1 thread (measured)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--smoke", action="store_true", help="1-minute speed measurement, no checkpoint")
    ap.add_argument("--resume", default=None,
                    help="continue from this checkpoint (weights, optimizer and step): a new warmup + "
                         "cosine schedule with --lr as its peak runs from the resumed step")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    from tok import Tokenizer
    tok = Tokenizer.load(args.tokenizer)
    tok.path = args.tokenizer
    pad_id = tok.special("<|endoftext|>")
    t0 = time.time()
    seqs, _ = load_tokens(args.train, tok, "/work/train/ckpt/target-train-tokens.npz")
    hseqs, hplen = load_tokens(args.heldout, tok, "/work/train/ckpt/target-heldout-tokens.npz")
    hseqs, hplen = hseqs[:args.eval_n], hplen[:args.eval_n]
    global LENS
    LENS = np.array([len(s) for s in seqs])
    logf = None if args.smoke else open(args.log, "a")
    log(logf, f"tokenized {len(seqs)} train / {len(hseqs)} held-out texts in {time.time() - t0:.0f} s; "
              f"train tokens {LENS.sum()}, mean length {LENS.mean():.1f}, max {LENS.max()}")

    c = M.Config(n_vocab=len(tok.vocab), n_layer=args.layers)
    m = M.Qwen3(c).init_weights(args.seed)
    m.train()
    decay = [p for n, p in m.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in m.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95), foreach=True)
    step0 = 0
    if args.resume:
        ck = torch.load(args.resume, map_location="cpu")
        if ck["config"] != c.to_dict():
            sys.exit(f"--resume {args.resume}: its config {ck['config']} is not this run's {c.to_dict()}")
        m.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step0 = ck["step"]
        log(logf, f"resumed from {args.resume} at step {step0} (held-out {ck.get('heldout')})")
    log(logf, f"config {c.to_dict()}; {m.n_params()} parameters; args {vars(args)}")

    # a resumed run draws a different batch order (the seed mixed with the resumed step)
    rng = np.random.RandomState(args.seed + 7919 * step0)
    stream = batches(len(seqs), args.batch, rng)
    start = time.time()
    last_ckpt = start
    best, since_best, seen, run_loss = float("inf"), 0, 0, None
    step = step0
    while step - step0 < args.steps or not args.steps:
        for g in opt.param_groups:
            g["lr"] = lr = lr_at(step - step0, args, time.time() - start)
        idx = next(stream)
        ids, valid = make_batch(seqs, idx, pad_id)
        loss = loss_of(m, ids, valid)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        step += 1
        seen += int(valid.sum())
        run_loss = float(loss) if run_loss is None else 0.95 * run_loss + 0.05 * float(loss)
        el = time.time() - start
        if args.smoke:
            if step % 5 == 0:
                log(None, f"step {step} loss {run_loss:.3f} {(step - step0) / el:.2f} steps/s {seen / el:.0f} tok/s")
            if el > 60:
                break
            continue
        if step % 20 == 0:
            log(logf, f"step {step} lr {lr:.2e} train {run_loss:.4f} gnorm {float(gn):.2f} "
                      f"{(step - step0) / el:.2f} steps/s {seen / el:.0f} tok/s")
        if step % args.eval_every == 0:
            hl, ha = evaluate(m, hseqs, hplen, pad_id)
            log(logf, f"EVAL step {step} heldout {hl:.4f} heldout_assistant {ha:.4f} train {run_loss:.4f} "
                      f"elapsed {el / 60:.1f} min")
            if hl < best - 1e-3:
                best, since_best = hl, 0
                save(m, opt, step, args, args.ckpt.replace(".pt", "-best.pt"), {"heldout": hl, "heldout_asst": ha})
            else:
                since_best += 1
            if since_best >= args.patience:
                log(logf, f"held-out loss has not improved for {args.patience} evaluations: stopping")
                break
        if time.time() - last_ckpt > args.ckpt_minutes * 60:
            save(m, opt, step, args, args.ckpt, {})
            last_ckpt = time.time()
        if el > args.max_minutes * 60:
            log(logf, f"wall-clock limit {args.max_minutes} min reached at step {step}")
            break
    if not args.smoke:
        hl, ha = evaluate(m, hseqs, hplen, pad_id)
        save(m, opt, step, args, args.ckpt, {"heldout": hl, "heldout_asst": ha})
        if hl < best - 1e-3:
            save(m, opt, step, args, args.ckpt.replace(".pt", "-best.pt"), {"heldout": hl, "heldout_asst": ha})
        log(logf, f"DONE step {step} heldout {hl:.4f} heldout_assistant {ha:.4f} best {min(best, hl):.4f} "
                  f"wall {(time.time() - start) / 60:.1f} min")


LENS = None

if __name__ == "__main__":
    main()
