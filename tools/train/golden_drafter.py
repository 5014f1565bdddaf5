#!/usr/bin/python3
"""golden_drafter.py -- the parity golden of the shipped drafter: tests/data/default/drafter.golden.gguf.

What it is: for a few held-out ChatML prompts, the first draft block spex computes after the
prompt, computed in PyTorch in float64 from exactly the shipped files: the target's weights as
stored in models/target.gguf (Q8_0 dequantized by tools/ref/ggml_formats.py via model.from_gguf)
and the drafter's weights as stored in models/drafter.gguf (export_drafter.load_gguf). Per case:
  golden.caseI.prompt      i32[P]   prompt token ids (the context, positions 0..P-1)
  golden.caseI.anchor      i32      the target's greedy token after the prompt (position P)
  golden.caseI.P           i32
  golden.caseI.n           i32      drafted slots (7 = B-1)
  golden.caseI.C           i32[n*K] top-K candidate ids per slot, slot-major, order of dflash2.md
                                    §12.3 (logit descending, ties by id ascending)
  golden.caseI.greedy.ids  i32[n]   the greedy selector walk (§13, p_min 0)
  caseI.U                  F32 {K, n} the slot logits z at the K candidates (= U of §12.1)
  golden.caseI.target_top  i32[n+1] the target's own greedy continuation after the prompt,
                                    anchor first (so the test can also count accepted drafts)
and global keys golden.drafter / golden.target (repo-relative paths), their sha256, golden.n_cases,
golden.min_margin (smallest logit gap at any stored discrete decision: the top-K boundary and the
walk's argmax; the C test's tolerance on U must stay well below it).

What it is not: the C test (the lead writes it), nor a check of spex's numerics by itself.

With --demo FILE.jsonl it writes no golden and instead prints the simulated T = 0 mean acceptance
length on those problems (the target's greedy continuation, then the accept walk of
train_drafter.validate), the number spex's `run -md ... --temp 0` should report on them.

Usage: golden_drafter.py [--target models/target.gguf] [--drafter models/drafter.gguf]
                         [--out tests/data/default/drafter.golden.gguf]
       golden_drafter.py --demo /work/train/data/demo.jsonl
"""

import argparse
import hashlib
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tools", "ref"))
import gguf_io as gio  # noqa: E402
import model as tm  # noqa: E402
from export_drafter import load_gguf  # noqa: E402
from drafter import draft_greedy  # noqa: E402
from tok import Tokenizer  # noqa: E402


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def demo(a, m, dr, tok, eos):
    from train_drafter import validate
    seqs = []
    with torch.no_grad():
        for line in open(a.demo):
            ids = tok.encode(json.loads(line)["prompt"], parse_special=True)
            out = m.generate([ids], a.max_new, eos=eos)[0]
            seqs.append({"ids": ids + out, "n_prompt": len(ids)})
        feats = []
        for s in seqs:
            _, tp = m(torch.tensor([s["ids"]]), taps=dr.c.taps, last_only=True)
            feats.append(torch.cat(tp, dim=-1)[0].clamp(-65504.0, 65504.0))
    for i, s in enumerate(seqs):
        al, _ = validate(dr, [s], [feats[i]], batch=1)
        print(f"problem {i}: {len(s['ids']) - s['n_prompt']} tokens, simulated AL {al:.3f}")
    al, per = validate(dr, seqs, feats, batch=1)
    print(f"demo: simulated T=0 mean acceptance length {al:.3f}; per position " + " ".join(f"{x:.2f}" for x in per))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=os.path.join(ROOT, "models", "target.gguf"))
    ap.add_argument("--drafter", default=os.path.join(ROOT, "models", "drafter.gguf"))
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "models", "tokenizer.json"))
    ap.add_argument("--heldout", default="/work/train/data/heldout.jsonl")
    ap.add_argument("--first", type=int, default=100, help="index of the first held-out problem tried")
    ap.add_argument("--cases", type=int, default=2)
    ap.add_argument("--min-margin", type=float, default=2e-3)
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "default", "drafter.golden.gguf"))
    ap.add_argument("--demo", default="", help="print the simulated T = 0 acceptance on these problems")
    ap.add_argument("--max-new", type=int, default=256)
    a = ap.parse_args()
    torch.set_num_threads(2)
    m = tm.from_gguf(a.target).double().eval()
    head = m.embd.weight if m.c.tied else m.out.weight
    dr = load_gguf(a.drafter, m.embd.weight.detach(), head.detach()).double().eval()
    c = dr.c
    n = c.block - 1
    tok = Tokenizer.load(a.tokenizer)
    eos = tok.special("<|im_end|>")
    if a.demo:
        return demo(a, m.float(), dr.float(), tok, eos)
    probs = [json.loads(l) for l in open(a.heldout)]

    g = gio.Writer()
    g.add("general.architecture", gio.STRING, "spex-golden")
    g.add("golden.drafter", gio.STRING, os.path.relpath(os.path.abspath(a.drafter), ROOT))
    g.add("golden.drafter_sha256", gio.STRING, sha256(a.drafter))
    g.add("golden.target", gio.STRING, os.path.relpath(os.path.abspath(a.target), ROOT))
    g.add("golden.target_sha256", gio.STRING, sha256(a.target))
    worst = float("inf")
    done = 0
    i = a.first
    with torch.no_grad():
        while done < a.cases:
            pr = probs[i]
            i += 1
            ids = tok.encode(pr["prompt"], parse_special=True)
            P = len(ids)
            cont = m.generate([ids], n + 1, eos=eos)[0]         # the target's greedy continuation
            anchor = cont[0]
            x = torch.tensor([ids])
            logits, tp = m(x, taps=c.taps)
            f = torch.cat(tp, dim=-1).clamp(-65504.0, 65504.0)
            r = draft_greedy(dr, f, anchor, P, n)
            z, C = r["z"], r["C"]
            # margins: the K-th vs (K+1)-th logit of each slot, and the walk's best vs second score
            srt = torch.sort(z, dim=-1, descending=True).values
            mg = float((srt[:, c.K - 1] - srt[:, c.K]).min())
            gate = dr.gate(r["h_out"])
            prev = anchor
            for p in range(n):
                S = dr.edge(r["U"][p], gate[p], torch.tensor([prev]), C[p])[0]
                s2 = torch.sort(S, descending=True).values
                mg = min(mg, float(s2[0] - s2[1]))
                prev = int(C[p, int(S.argmax())])
            if mg < a.min_margin:
                print(f"problem {i - 1}: margin {mg:.2e} too small, skipped")
                continue
            worst = min(worst, mg)
            acc = 0
            while acc < n and r["ids"][acc] == cont[1 + acc]:
                acc += 1
            pre = f"case{done}."
            g.add_array("golden." + pre + "prompt", gio.I32, np.array(ids, dtype=np.int32))
            g.add("golden." + pre + "anchor", gio.I32, int(anchor))
            g.add("golden." + pre + "P", gio.I32, P)
            g.add("golden." + pre + "n", gio.I32, n)
            g.add_array("golden." + pre + "C", gio.I32, C.numpy().astype(np.int32).reshape(-1))
            g.add_array("golden." + pre + "greedy.ids", gio.I32, np.array(r["ids"], dtype=np.int32))
            g.add_array("golden." + pre + "target_top", gio.I32, np.array(cont[:n + 1], dtype=np.int32))
            g.add_tensor(pre + "U", r["U"].numpy().astype(np.float32))      # {K, n}
            print(f"case {done}: problem {i - 1}, P {P}, anchor {anchor}, drafted {r['ids']}, "
                  f"target {cont[1:n + 1]}, accepted {acc}, margin {mg:.3e}")
            done += 1
    g.add("golden.n_cases", gio.I32, done)
    g.add("golden.min_margin", gio.F32, worst)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    size = g.write(a.out)
    print(f"wrote {a.out}: {size} bytes, min margin {worst:.3e}")


if __name__ == "__main__":
    main()
