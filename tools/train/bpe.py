#!/usr/bin/env python3
"""bpe.py -- trains the byte-level BPE vocabulary of spex's default models.

What it is: reads the "text" field of every line of the train split (gen_problems.py output),
cuts out the six special tokens (they are never merged), splits the rest with the qwen2
pre-tokenizer (tok.pretokenize: digits one at a time, letters with one leading non-letter,
punctuation runs, newline runs), counts the distinct words, then merges the most frequent
adjacent pair of symbols over the distinct words (skipping a pair whose concatenation is
already a token, so every token string is unique) until the vocabulary holds
256 byte tokens + merges + 6 specials = --vocab (1024) tokens. Ties between pairs of equal
count go to the pair whose (left, right) strings sort first, so the result is a pure function
of the corpus. Writes tokenizer.json: {"vocab": [id order], "merges": ["l r", ...],
"specials": {text: id}, "pre": "qwen2", "model": "gpt2"}; ids are documented in tok.py.

What it is not: a general trainer (no Unicode pre-tokenization beyond ASCII, no
normalization, no dropout). The corpus is ASCII.

Usage: bpe.py --train /work/train/data/train.jsonl --out models/tokenizer.json [--vocab 1024]
"""

import argparse
import collections
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tok  # noqa: E402


def word_counts(path):
    counts = collections.Counter()
    with open(path) as f:
        for line in f:
            text = json.loads(line)["text"]
            for is_special, piece in tok.split_specials(text, tok.SPECIALS):
                if not is_special:
                    counts.update(tok.pretokenize(piece))
    return counts


def train(counts, n_merges):
    # words as lists of symbol strings, with their counts
    words = [[tok.BYTE_CHARS[b] for b in w.encode("utf-8")] for w in counts]
    freq = list(counts.values())
    pairs = collections.Counter()
    where = collections.defaultdict(set)   # pair -> indices of words that contain it
    for i, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pairs[(a, b)] += freq[i]
            where[(a, b)].add(i)
    merges = []
    made = set(tok.BYTE_CHARS.values())
    banned = set()   # pairs whose concatenation is already a token (another split of it won)
    while len(merges) < n_merges:
        best = min((p for p, c in pairs.items() if c > 0 and p not in banned), key=lambda p: (-pairs[p], p),
                   default=None)
        if best is None:
            break
        if best[0] + best[1] in made:
            banned.add(best)
            continue
        made.add(best[0] + best[1])
        merges.append(best)
        a, b = best
        ab = a + b
        for i in list(where[best]):
            w = words[i]
            # remove this word's old pair counts, merge, add the new ones
            for x, y in zip(w, w[1:]):
                pairs[(x, y)] -= freq[i]
                if pairs[(x, y)] == 0:
                    del pairs[(x, y)]
            j, nw = 0, []
            while j < len(w):
                if j + 1 < len(w) and w[j] == a and w[j + 1] == b:
                    nw.append(ab)
                    j += 2
                else:
                    nw.append(w[j])
                    j += 1
            words[i] = nw
            for x, y in zip(nw, nw[1:]):
                pairs[(x, y)] += freq[i]
                where[(x, y)].add(i)
        where.pop(best, None)
    return merges


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab", type=int, default=tok.VOCAB_SIZE)
    a = ap.parse_args()
    t0 = time.time()
    counts = word_counts(a.train)
    n_merges = a.vocab - tok.N_BYTES - len(tok.SPECIALS)
    merges = train(counts, n_merges)
    if len(merges) < n_merges:
        sys.exit(f"bpe.py: only {len(merges)} merges possible, {n_merges} wanted (corpus too small)")
    vocab = [tok.BYTE_CHARS[b] for b in range(256)] + [x + y for x, y in merges]
    if len(set(vocab)) != len(vocab):
        sys.exit("bpe.py: duplicate token produced")
    specials = {s: len(vocab) + k for k, s in enumerate(tok.SPECIALS)}
    vocab += tok.SPECIALS
    d = {"model": "gpt2", "pre": "qwen2", "vocab": vocab, "merges": [f"{x} {y}" for x, y in merges],
         "specials": specials}
    with open(a.out, "w") as f:
        json.dump(d, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"bpe.py: {len(counts)} distinct words, {len(merges)} merges, vocab {len(vocab)}, "
          f"{time.time() - t0:.1f} s -> {a.out}")


if __name__ == "__main__":
    main()
