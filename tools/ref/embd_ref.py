"""embd_ref.py -- the NumPy reference of spex's embeddings, and the golden file the C test reads.

What it is: the pooled, normalised sentence embedding of a decoder model as llama.cpp
defines it for `llama-server --embedding`: per token the hidden state after the final
RMSNorm (output_norm) -- the last layer's output normalised, before the LM head -- then
pooled over the sequence (mean; cls = the first token; last = the last token; none = one
row per token) and, for pooled outputs, scaled to unit euclidean norm (embd_normalize 2,
the server's default). The forward passes are this folder's float64 references
(model_ref.py for llama / qwen3, qwen35_ref.py for qwen35), which widen every weight
(Q8_0 and the K-quants dequantized by ggml_formats.py) to float64.

What it is not: a tokenizer -- the cases are token ids, so the C side compares the model
and pooling alone (the server tests check that text and ids give the same vectors).

Output: tests/data/embd_golden.txt, plain text, one record per line:

    model PATH                       the GGUF the following cases run on (repo-relative)
    case POOLING NORM N t_1 .. t_N   pooling none|mean|cls|last, embd_normalize NORM
    vec K v_1 .. v_K                 the expected floats (none: N x E, row by row)

Regenerate from the repository root with Debian's Python (it has numpy):

    /usr/bin/python3 tools/ref/embd_ref.py      # -> tests/data/embd_golden.txt
"""

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gguf_io  # noqa: E402
import model_ref  # noqa: E402
import qwen35_ref  # noqa: E402


def hidden_states(path, tokens):
    """(n, E) float64: RMSNorm(last layer output; output_norm) of every token."""
    arch = gguf_io.read(path).get("general.architecture")
    if arch == "qwen35":
        return qwen35_ref.Model(path).run(tokens).hidden
    m = model_ref.Model(path)
    _, taps = m.forward_sequence(tokens, taps=[m.n_layer])
    return model_ref.rms_norm(taps[m.n_layer], m.w["output_norm.weight"], m.eps)


def pool(h, pooling):
    if pooling == "none":
        return h
    if pooling == "mean":
        return h.mean(axis=0)
    if pooling == "cls":
        return h[0]
    if pooling == "last":
        return h[-1]
    raise ValueError(pooling)


def normalize(v, norm):
    """llama.cpp's embd_normalize over a vector (the last axis)."""
    a = np.abs(v)
    if norm < 0:
        return v
    if norm == 0:
        s = a.max(axis=-1, keepdims=True) / 32760.0
    elif norm == 1:
        s = a.sum(axis=-1, keepdims=True)
    elif norm == 2:
        s = np.sqrt((v * v).sum(axis=-1, keepdims=True))
    else:
        s = ((a ** norm).sum(axis=-1, keepdims=True)) ** (1.0 / norm)
    return np.where(s > 0, v / np.where(s > 0, s, 1), 0)


# (model, [(pooling, norm, token ids)]): a few prompts per model, every pooling kind, the
# normalisations on the small fixture; lengths past one 32-row tile on the shipped target.
CASES = [
    ("models/target.gguf", [
        ("mean", 2, [1, 17, 230, 511, 64, 999, 3, 402]),
        ("last", 2, [5, 100, 200, 300, 400, 500, 600, 700, 800, 900, 11, 22, 33, 44, 55, 66, 77, 88, 99, 111,
                     222, 333, 444, 555, 666, 777, 888, 121, 232, 343, 454, 565, 676, 787]),
        ("cls", 2, [42, 7, 9]),
    ]),
    ("tests/data/models/tiny-qwen3.gguf", [
        ("mean", 2, [1, 2, 3, 4, 5, 6, 7]),
        ("last", 2, [200, 17, 31, 4]),
        ("cls", 2, [9, 8]),
        ("mean", 1, [10, 20, 30]),
        ("mean", 0, [10, 20, 30]),
        ("mean", 3, [10, 20, 30]),
        ("mean", -1, [10, 20, 30]),
        ("none", -1, [5, 6, 7]),
    ]),
    ("tests/data/qwen35/tiny-qwen35.gguf", [
        ("mean", 2, [1, 2, 3, 4, 5]),
        ("last", 2, [100, 50, 25]),
    ]),
]


def main():
    root = os.path.dirname(os.path.dirname(HERE))
    out = os.path.join(root, "tests", "data", "embd_golden.txt")
    lines = ["# embd_golden.txt -- tools/ref/embd_ref.py: pooled final-norm hidden states (float64 reference)"]
    n_floats = 0
    for path, cases in CASES:
        lines.append(f"model {path}")
        for pooling, norm, toks in cases:
            h = hidden_states(os.path.join(root, path), toks)
            v = normalize(pool(h, pooling), norm).reshape(-1)
            lines.append(f"case {pooling} {norm} {len(toks)} " + " ".join(str(t) for t in toks))
            lines.append(f"vec {v.size} " + " ".join(f"{x:.8e}" for x in v))
            n_floats += v.size
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{out}: {n_floats} floats")


if __name__ == "__main__":
    main()
