#!/usr/bin/python3
"""train_drafter.py -- train the DFlash2 drafter (drafter.py) against the frozen target.

What it is: the recipe of ../shared/docs/dflash2.md §22 at toy scale, on CPU:
  * the target (tools/train/model.py; by default the shipped GGUF, Q8_0 dequantized) is frozen;
    its token embedding and LM head are the drafter's (buffers, never trained);
  * data: gen_drafter_data.py's target generations (half greedy, half sampled); the target's tap
    rows f = [h_in(id_0) | ...] of every token are computed once by a teacher-forced forward
    (the "recomputed" features of §22) and kept in memory as float16;
  * random anchors: A anchors per sequence drawn from the completion (anchor a: the token at
    position a, context = positions < a, targets a+1..a+B-1); all blocks of a batch run in one
    forward with a block-sparse visibility mask (each block sees context < its anchor plus its
    own block, bidirectionally);
  * loss: position-decayed CE on slots 1..B-1, w_k = exp(-(k-1)/gamma), gamma 4 for B = 8, plus
    the selector loss with weight 1.0 and no decay: a K-way CE over the unary top-K of each slot,
    predecessor = the true previous token (the anchor for slot 1); when the true token is not in
    the top-K it is added to the loss's candidate set (K+1 columns, the extra one masked
    otherwise);
  * AdamW, lr warmup + cosine over a wall-clock budget (progress = max(step / steps, time /
    budget)), torch.set_num_threads(2);
  * validation: the simulated T = 0 speculative decode on held-out greedy generations (drafts at
    every position from one batched forward, then the accept walk a -> a + m + 1), i.e. the mean
    acceptance length spex reports at T = 0 on those prompts.

What it is not: a distributed trainer, or a trainer of the target (train_target.py).

Usage:
  train_drafter.py --data /work/train/data/drafter_data.pt --out /work/train/ckpt/drafter.pt \\
      --minutes 20 > /work/train/logs/drafter.log
"""

import argparse
import math
import os
import random
import sys
import time

import torch
import torch.nn.functional as Fn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import model as tm  # noqa: E402
from drafter import Drafter, DrafterConfig  # noqa: E402

TAP_CLAMP = 65504.0


def default_taps(n_layer, L=3):
    """Tap ids spread over the target depth, the deepest being n_layer (the pre-final-norm state,
    dflash2.md §6): e.g. 8 layers -> [3, 5, 8]."""
    return sorted({max(1, round(n_layer * (i + 1) / L)) for i in range(L)})


@torch.no_grad()
def compute_features(m, seqs, taps, batch=32, log=print):
    """Teacher-forced target forward -> list of (T_i, L*E) float16 tap rows (clamped, §6)."""
    out = [None] * len(seqs)
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]["ids"]))
    t0 = time.time()
    for b in range(0, len(order), batch):
        idx = order[b:b + batch]
        T = max(len(seqs[i]["ids"]) for i in idx)
        ids = torch.zeros(len(idx), T, dtype=torch.long)
        for r, i in enumerate(idx):
            ids[r, :len(seqs[i]["ids"])] = torch.tensor(seqs[i]["ids"])
        _, tp = m(ids, taps=taps, last_only=True)       # right padding: causal rows unaffected
        f = torch.cat(tp, dim=-1).clamp(-TAP_CLAMP, TAP_CLAMP)
        for r, i in enumerate(idx):
            out[i] = f[r, :len(seqs[i]["ids"])].half().clone()
        if (b // batch) % 20 == 0:
            log(f"  features {b + len(idx)}/{len(seqs)} {time.time() - t0:.0f}s")
    return out


def make_batch(seqs, feats, idx, A, B, rng):
    """Pad sequences idx; draw A anchors per sequence in [n_prompt, T-2]. Returns feats (N, S, LD),
    anchor tokens / positions (N, A), labels (N, A, B-1) (-1 = past the end), ctx_len (N,)."""
    N = len(idx)
    S = max(len(seqs[i]["ids"]) for i in idx)
    LD = feats[idx[0]].shape[1]
    f = torch.zeros(N, S, LD)
    at = torch.zeros(N, A, dtype=torch.long)
    ap = torch.zeros(N, A, dtype=torch.long)
    lab = torch.full((N, A, B - 1), -1, dtype=torch.long)
    cl = torch.zeros(N, dtype=torch.long)
    for r, i in enumerate(idx):
        ids = seqs[i]["ids"]
        T = len(ids)
        f[r, :T] = feats[i].float()
        cl[r] = T
        lo, hi = seqs[i]["n_prompt"], T - 2
        cand = list(range(lo, hi + 1)) or [max(0, T - 2)]
        pick = rng.sample(cand, A) if len(cand) >= A else [rng.choice(cand) for _ in range(A)]
        t = torch.tensor(ids)
        for k, a in enumerate(pick):
            at[r, k] = ids[a]
            ap[r, k] = a
            n = min(B - 1, T - 1 - a)
            if n > 0:
                lab[r, k, :n] = t[a + 1:a + 1 + n]
    return f, at, ap, lab, cl


def losses(dr, f, at, ap, lab, cl, gamma):
    """Position-decayed CE + selector CE (see the file header). Returns (total, ce, sel, acc1)."""
    c = dr.c
    n = c.block - 1
    h = dr.blocks(f, at, ap, n, ctx_len=cl)                     # (N, A, n, D)
    z = dr.logits(h)                                            # (N, A, n, V)
    valid = lab >= 0
    y = lab.clamp(min=0)
    w = torch.exp(-torch.arange(n, dtype=torch.float32) / gamma)[None, None, :] * valid
    ce = Fn.cross_entropy(z.reshape(-1, c.V), y.reshape(-1), reduction="none").view_as(w)
    ce_loss = (ce * w).sum() / w.sum().clamp(min=1e-6)
    # selector: candidates = top-K of z (+ the true token when missing), predecessor = true previous token
    C = torch.topk(z.detach(), c.K, dim=-1).indices                 # (N, A, n, K)
    hit = C == y[..., None]
    in_top = hit.any(-1)
    cand = torch.cat([C, y[..., None]], dim=-1)                      # (N, A, n, K+1)
    U = torch.gather(z, -1, cand)
    prev = torch.cat([at[..., None], y[..., :-1]], dim=-1)           # (N, A, n)
    gate = dr.gate(h)                                                # (N, A, n, R)
    bil = ((dr.sel_A[prev] * gate)[..., None, :] * dr.sel_B[cand]).sum(-1)    # (N, A, n, K+1)
    S = U + bil
    S = torch.cat([S[..., :c.K], S[..., c.K:].masked_fill(in_top[..., None], float("-inf"))], dim=-1)
    tgt = torch.where(in_top, hit.float().argmax(-1), torch.full_like(y, c.K))
    sel = Fn.cross_entropy(S.reshape(-1, c.K + 1), tgt.reshape(-1), reduction="none").view_as(y)
    vf = valid.float()
    sel_loss = (sel * vf).sum() / vf.sum().clamp(min=1)
    acc1 = ((z[:, :, 0].argmax(-1) == y[:, :, 0]) & valid[:, :, 0]).float().sum() / valid[:, :, 0].float().sum().clamp(min=1)
    return ce_loss + sel_loss, ce_loss.item(), sel_loss.item(), acc1.item()


@torch.no_grad()
def greedy_walk_batch(dr, h, z, anchors):
    """Greedy selector walk (§13) for every block: h (M, n, D), z (M, n, V), anchors (M,) ->
    drafted ids (M, n)."""
    c = dr.c
    C = torch.topk(z, c.K, dim=-1).indices
    # §12.3 order (value desc, id asc); torch.topk returns value-sorted, ties are measure-zero here
    U = torch.gather(z, -1, C)
    gate = dr.gate(h)
    prev = anchors
    out = []
    for p in range(z.shape[1]):
        S = U[:, p] + ((dr.sel_A[prev] * gate[:, p])[:, None, :] * dr.sel_B[C[:, p]]).sum(-1)
        k = S.argmax(-1)
        prev = C[:, p].gather(1, k[:, None])[:, 0]
        out.append(prev)
    return torch.stack(out, dim=1)


@torch.no_grad()
def validate(dr, seqs, feats, max_seqs=128, batch=8):
    """Simulated T = 0 speculative decode on the target's greedy generations: mean acceptance
    length (tokens per verify step, bonus included), per-position acceptance, top-1 slot-1 acc."""
    dr.eval()
    n = dr.c.block - 1
    steps = emitted = 0
    pos_acc = [0] * n
    pos_tot = [0] * n
    for b in range(0, min(len(seqs), max_seqs), batch):
        idx = list(range(b, min(b + batch, len(seqs), max_seqs)))
        S = max(len(seqs[i]["ids"]) for i in idx)
        A = max(len(seqs[i]["ids"]) - 1 - seqs[i]["n_prompt"] for i in idx)
        if A <= 0:
            continue
        N = len(idx)
        f = torch.zeros(N, S, feats[idx[0]].shape[1])
        at = torch.zeros(N, A, dtype=torch.long)
        ap = torch.zeros(N, A, dtype=torch.long)
        for r, i in enumerate(idx):
            ids = seqs[i]["ids"]
            f[r, :len(ids)] = feats[i].float()
            for k in range(A):
                a = min(seqs[i]["n_prompt"] + k, len(ids) - 1)
                at[r, k], ap[r, k] = ids[a], a
        h = dr.blocks(f, at, ap, n)
        z = dr.logits(h)
        d = greedy_walk_batch(dr, h.reshape(N * A, n, -1), z.reshape(N * A, n, -1), at.reshape(-1)).view(N, A, n)
        for r, i in enumerate(idx):
            ids, p0 = seqs[i]["ids"], seqs[i]["n_prompt"]
            T = len(ids)
            a = p0                      # anchor = first generated token, at position n_prompt
            while a < T - 1:
                nn_ = min(n, T - 1 - a)
                m = 0
                while m < nn_ and int(d[r, a - p0, m]) == ids[a + 1 + m]:
                    m += 1
                for q in range(nn_):
                    pos_tot[q] += 1 if q <= m else 0
                    pos_acc[q] += 1 if q < m else 0
                steps += 1
                emitted += m + 1
                a += m + 1
    dr.train()
    al = emitted / max(1, steps)
    per = [pos_acc[q] / max(1, pos_tot[q]) for q in range(n)]
    return al, per


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="/work/train/data/drafter_data.pt")
    ap.add_argument("--target", default=os.path.join(HERE, "..", "..", "models", "target.gguf"))
    ap.add_argument("--ckpt", default=None, help="target checkpoint instead of the GGUF")
    ap.add_argument("--tokenizer", default=os.path.join(HERE, "..", "..", "models", "tokenizer.json"))
    ap.add_argument("--mask-id", type=int, default=-1, help="override the tokenizer's <|mask|> id (tests)")
    ap.add_argument("--out", default="/work/train/ckpt/drafter.pt")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=0, help="0 = the target's")
    ap.add_argument("--heads-kv", type=int, default=0)
    ap.add_argument("--head-dim", type=int, default=0)
    ap.add_argument("--ffn", type=int, default=0, help="0 = 2 * D")
    ap.add_argument("--taps", default="", help="comma-separated GGUF tap ids (default spread to n_layer)")
    ap.add_argument("--block", type=int, default=8)
    ap.add_argument("--rank", type=int, default=32)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--anchors", type=int, default=24)
    ap.add_argument("--batch", type=int, default=8, help="sequences per step")
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--wd", type=float, default=0.01)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--steps", type=int, default=100000)
    ap.add_argument("--minutes", type=float, default=20.0, help="wall-clock budget (cosine follows it)")
    ap.add_argument("--gamma", type=float, default=4.0)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--features-cache", default="", help="torch.save the features here / reuse them")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    log = lambda s: print(s, flush=True)
    t_start = time.time()

    m = (tm.from_checkpoint(a.ckpt) if a.ckpt else tm.from_gguf(a.target)).float().eval()
    for p in m.parameters():
        p.requires_grad_(False)
    tc = m.c
    if a.mask_id >= 0:
        mask_id = a.mask_id
    else:
        from tok import Tokenizer
        mask_id = Tokenizer.load(a.tokenizer).special("<|mask|>")
    taps = [int(x) for x in a.taps.split(",")] if a.taps else default_taps(tc.n_layer)
    D = tc.n_embd
    c = DrafterConfig(D=D, V=tc.n_vocab, taps=taps, mask_id=mask_id, n_layer=a.layers,
                      H=a.heads or tc.n_head, H_kv=a.heads_kv or tc.n_head_kv, d_h=a.head_dim or tc.head_dim,
                      F=a.ffn or 2 * D, block=a.block, R=a.rank, K=a.top_k, eps=tc.eps, rope_base=1e6)
    head = m.embd.weight if tc.tied else m.out.weight
    dr = Drafter(c, m.embd.weight, head)
    n_par = sum(p.numel() for p in dr.parameters())
    log(f"drafter config {c.to_dict()}  parameters {n_par} (codebooks {2 * c.V * c.R})")

    data = torch.load(a.data)
    seqs, val = data["train"], data["val"]
    log(f"data: {len(seqs)} train sequences ({sum(len(s['ids']) for s in seqs)} tokens), {len(val)} val; meta {data.get('meta')}")
    if a.features_cache and os.path.exists(a.features_cache):
        fc = torch.load(a.features_cache)
        feats, vfeats = fc["train"], fc["val"]
        log(f"features loaded from {a.features_cache}")
    else:
        feats = compute_features(m, seqs, taps, log=log)
        vfeats = compute_features(m, val, taps, log=log)
        if a.features_cache:
            torch.save({"train": feats, "val": vfeats, "taps": taps}, a.features_cache)
    log(f"features ready {time.time() - t_start:.0f}s")
    del m

    opt = torch.optim.AdamW([p for p in dr.parameters() if p.requires_grad], lr=a.lr,
                            betas=(0.9, 0.95), weight_decay=a.wd)
    budget = a.minutes * 60.0
    t0 = time.time()
    order = []
    best = -1.0
    hist = []

    def save(path, extra):
        sd = dr.state_dict()
        torch.save({"config": c.to_dict(), "model": sd, "args": vars(a), **extra}, path)

    step = 0
    ema = None
    while step < a.steps:
        prog = max(step / a.steps, (time.time() - t0) / budget)
        if prog >= 1.0:
            break
        lr = a.lr * min(1.0, (step + 1) / a.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * prog)))
        for g in opt.param_groups:
            g["lr"] = lr
        if len(order) < a.batch:
            order = list(range(len(seqs)))
            rng.shuffle(order)
        idx, order = order[:a.batch], order[a.batch:]
        f, at, apos, lab, cl = make_batch(seqs, feats, idx, a.anchors, c.block, rng)
        loss, ce, sel, acc1 = losses(dr, f, at, apos, lab, cl, a.gamma)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(dr.parameters(), 1.0)
        opt.step()
        step += 1
        cur = (ce, sel, acc1)
        ema = cur if ema is None else tuple(0.95 * e + 0.05 * x for e, x in zip(ema, cur))
        if step % 20 == 0:
            log(f"step {step} t {time.time() - t0:.0f}s lr {lr:.2e} ce {ema[0]:.4f} sel {ema[1]:.4f} acc1 {ema[2]:.3f}")
        if step % a.eval_every == 0:
            al, per = validate(dr, val, vfeats)
            hist.append((step, time.time() - t0, ema[0], ema[1], al))
            log(f"EVAL step {step} t {time.time() - t0:.0f}s val_AL {al:.3f} per-pos " + " ".join(f"{x:.2f}" for x in per))
            save(a.out + ".last", {"step": step, "val_al": al, "hist": hist})
            if al > best:
                best = al
                save(a.out, {"step": step, "val_al": al, "hist": hist})
    al, per = validate(dr, val, vfeats)
    hist.append((step, time.time() - t0, ema[0] if ema else 0, ema[1] if ema else 0, al))
    log(f"FINAL step {step} t {time.time() - t0:.0f}s val_AL {al:.3f} per-pos " + " ".join(f"{x:.2f}" for x in per))
    save(a.out + ".last", {"step": step, "val_al": al, "hist": hist})
    if al >= best:
        save(a.out, {"step": step, "val_al": al, "hist": hist})
    log(f"done: best val_AL {max(best, al):.3f}, total {time.time() - t_start:.0f}s")


if __name__ == "__main__":
    main()
