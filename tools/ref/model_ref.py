"""model_ref.py -- the NumPy reference of the `llama` and `qwen3` forward passes.

What it is: a float64 implementation written from spex's ../shared/docs/targets.md
(§1 conventions, §3 building blocks, §4 llama, §5 qwen3), used to produce the golden
logits, layer taps and greedy ids in tests/data/models/ that the C engine is compared
with. Every weight is widened to float64 on load (quantized tensors are dequantized with
ggml_formats.py first), so the reference error is far below the C engine's fp32 error.

What it is not: fast, or a model of spex's internals. It holds no fp16 KV cache, no
threads, no memory plan. It covers exactly what targets.md §3-5 specify: RMSNorm, causal
GQA attention with softmax over the sequence's own positions, RoPE NORM (llama: pairs
(2i, 2i+1)) and NEOX (qwen3: pairs (i, i + n_rot/2)) with freq_base, partial rotary
(rope.dimension_count < head dim) and optional rope_freqs factors, per-head QK-norm
before RoPE (qwen3), SwiGLU, optional llama biases, tied or untied output head.

Two independent ways to run the same model, which the self-checks compare:

  forward_sequence(tokens, start_pos)   one sequence, whole-matrix attention with a causal
                                        mask, no cache;
  Session.decode(rows)                  a batch of rows (seq, pos, token, want_logits) from
                                        several sequences against per-sequence KV caches
                                        that can be truncated (speculative rollback) --
                                        the shape of spex's batched forward.

Layer taps (targets.md §3.4, dflash2.md §6): tap id l is the residual stream at the
INPUT of layer l, i.e. the embedding for l = 0 and the output of layer l-1 (after both of
its residual additions) otherwise; l = n_layer is the pre-final-norm hidden state.

Shapes: weights are numpy arrays with the reversed ggml `ne`, so a matmul weight with
ne {in, out} is an (out, in) array W and y = W @ x. Legend: E hidden, H / H_kv query /
KV heads, hd_k / hd_v head dims (attention.key_length / value_length), F FFN width,
V vocabulary, n rows of a batch.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_io  # noqa: E402

ROPE_NORM, ROPE_NEOX = 0, 2   # ggml's constants (targets.md §3.3)


class ModelError(Exception):
    pass


# ------------------------------------------------------------------------------------
# building blocks (targets.md §1, §3)
# ------------------------------------------------------------------------------------

def rms_norm(x, w, eps):
    """x: (..., d); normalise over the last axis, then scale by w (d,)."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def rope(x, pos, n_rot, base, mode, freq_factors=None):
    """Rotate x (n, heads, hd) at positions pos (n,). Pair i in [0, n_rot/2) is
    (2i, 2i+1) for NORM and (i, i + n_rot/2) for NEOX, angle pos * base^(-2i/n_rot)
    (divided by freq_factors[i] when given); dims >= n_rot are left alone."""
    half = n_rot // 2
    i = np.arange(half, dtype=np.float64)
    theta = np.asarray(pos, dtype=np.float64)[:, None] * base ** (-2.0 * i / n_rot)[None, :]
    if freq_factors is not None:
        theta = theta / freq_factors[None, :]
    cos = np.cos(theta)[:, None, :]
    sin = np.sin(theta)[:, None, :]
    if mode == ROPE_NORM:
        ia, ib = np.arange(0, n_rot, 2), np.arange(1, n_rot, 2)
    elif mode == ROPE_NEOX:
        ia, ib = np.arange(half), np.arange(half, n_rot)
    else:
        raise ModelError(f"rope mode {mode} not supported")
    a, b = x[..., ia], x[..., ib]
    out = x.copy()
    out[..., ia] = a * cos - b * sin
    out[..., ib] = a * sin + b * cos
    return out


def softmax(s, axis=-1):
    s = s - np.max(s, axis=axis, keepdims=True)
    e = np.exp(s)
    return e / np.sum(e, axis=axis, keepdims=True)


# ------------------------------------------------------------------------------------
# the model
# ------------------------------------------------------------------------------------

class Model:
    """Hyper-parameters and float64 weights of a llama / qwen3 GGUF."""

    def __init__(self, path):
        self.path = str(path)
        g = gguf_io.read(path)
        self.gguf = g
        arch = g.get("general.architecture")
        if arch not in ("llama", "qwen3"):
            raise ModelError(f"{path}: architecture {arch!r} not supported (llama, qwen3)")
        self.arch = arch

        def key(name, default=None, required=False):
            v = g.get(f"{arch}.{name}")
            if v is None:
                if required:
                    raise ModelError(f"{path}: key {arch}.{name} missing")
                return default
            return v

        self.n_layer = int(key("block_count", required=True))
        self.n_embd = E = int(key("embedding_length", required=True))
        self.n_ff = int(key("feed_forward_length", required=True))
        self.n_head = H = int(key("attention.head_count", required=True))
        self.n_head_kv = int(key("attention.head_count_kv", H))
        self.eps = float(key("attention.layer_norm_rms_epsilon", required=True))
        self.hd_k = int(key("attention.key_length", E // H))
        self.hd_v = int(key("attention.value_length", E // H))
        self.n_rot = int(key("rope.dimension_count", self.hd_k))
        self.rope_base = float(key("rope.freq_base", 10000.0))
        self.rope_mode = ROPE_NORM if arch == "llama" else ROPE_NEOX
        self.qk_norm = arch == "qwen3"
        if key("expert_count", 0):
            raise ModelError(f"{path}: mixture-of-experts models are not supported")
        if self.n_head % self.n_head_kv:
            raise ModelError(f"{path}: head_count {H} is not a multiple of head_count_kv {self.n_head_kv}")
        if self.n_rot > self.hd_k or self.n_rot % 2:
            raise ModelError(f"{path}: rope.dimension_count {self.n_rot} vs key_length {self.hd_k}")
        if "token_embd.weight" not in g.tensors:
            raise ModelError(f"{path}: tensor token_embd.weight missing")
        n_vocab_default = g.tensors["token_embd.weight"].ne[1]
        tokens = g.get("tokenizer.ggml.tokens")
        if tokens is not None:
            n_vocab_default = len(tokens)
        self.n_vocab = int(key("vocab_size", n_vocab_default))

        self.w = {}
        F, V, Hkv = self.n_ff, self.n_vocab, self.n_head_kv
        self._take("token_embd.weight", [E, V])
        self._take("output_norm.weight", [E])
        self.tied = "output.weight" not in g.tensors
        if not self.tied:
            self._take("output.weight", [E, V])
        self.freq_factors = None
        if "rope_freqs.weight" in g.tensors:
            self.freq_factors = self._take("rope_freqs.weight", [self.n_rot // 2])
        for l in range(self.n_layer):
            p = f"blk.{l}."
            self._take(p + "attn_norm.weight", [E])
            self._take(p + "attn_q.weight", [E, H * self.hd_k])
            self._take(p + "attn_k.weight", [E, Hkv * self.hd_k])
            self._take(p + "attn_v.weight", [E, Hkv * self.hd_v])
            self._take(p + "attn_output.weight", [H * self.hd_v, E])
            self._take(p + "ffn_norm.weight", [E])
            self._take(p + "ffn_gate.weight", [E, F])
            self._take(p + "ffn_up.weight", [E, F])
            self._take(p + "ffn_down.weight", [F, E])
            if self.qk_norm:
                self._take(p + "attn_q_norm.weight", [self.hd_k])
                self._take(p + "attn_k_norm.weight", [self.hd_k])
            if arch == "llama":   # optional biases (targets.md §4.2)
                for name, n in (("attn_q", H * self.hd_k), ("attn_k", Hkv * self.hd_k),
                                ("attn_v", Hkv * self.hd_v), ("attn_output", E),
                                ("ffn_gate", F), ("ffn_up", F), ("ffn_down", E)):
                    if p + name + ".bias" in g.tensors:
                        self._take(p + name + ".bias", [n])
        self.W_out = self.w["token_embd.weight"] if self.tied else self.w["output.weight"]

    def _take(self, name, ne):
        t = self.gguf.tensors.get(name)
        if t is None:
            raise ModelError(f"{self.path}: tensor {name} missing")
        if list(t.ne) != list(ne):
            raise ModelError(f"{self.path}: tensor {name} has shape {t.ne}, expected {ne}")
        if t.type in (gguf_io.GGML_F32, gguf_io.GGML_F16):
            a = np.asarray(t.data, dtype=np.float64)
        else:
            import ggml_formats   # quantized: the independent dequantizer of this folder
            name_t = ggml_formats.TYPE_BY_ID.get(t.type)
            if name_t is None:
                raise ModelError(f"{self.path}: tensor {name} has ggml type {t.type}, not supported")
            a = ggml_formats.dequantize(name_t, t.data).astype(np.float64).reshape(tuple(reversed(t.ne)))
        self.w[name] = a
        return a

    def lw(self, l, name):
        return self.w.get(f"blk.{l}.{name}")

    # -- pieces of a layer ------------------------------------------------------------------

    def _linear(self, l, name, x):
        y = x @ self.lw(l, name + ".weight").T
        b = self.lw(l, name + ".bias")
        return y if b is None else y + b

    def _qkv(self, l, x, pos):
        """x: (n, E) layer inputs at positions pos -> q (n, H, hd_k), k (n, H_kv, hd_k),
        v (n, H_kv, hd_v) with QK-norm and RoPE applied."""
        n = x.shape[0]
        h = rms_norm(x, self.lw(l, "attn_norm.weight"), self.eps)
        q = self._linear(l, "attn_q", h).reshape(n, self.n_head, self.hd_k)
        k = self._linear(l, "attn_k", h).reshape(n, self.n_head_kv, self.hd_k)
        v = self._linear(l, "attn_v", h).reshape(n, self.n_head_kv, self.hd_v)
        if self.qk_norm:   # per head, before RoPE (targets.md §5.3)
            q = rms_norm(q, self.lw(l, "attn_q_norm.weight"), self.eps)
            k = rms_norm(k, self.lw(l, "attn_k_norm.weight"), self.eps)
        q = rope(q, pos, self.n_rot, self.rope_base, self.rope_mode, self.freq_factors)
        k = rope(k, pos, self.n_rot, self.rope_base, self.rope_mode, self.freq_factors)
        return q, k, v

    def _attend(self, q, k, v, mask):
        """q (n, H, hd_k); k (m, H_kv, hd_k); v (m, H_kv, hd_v); mask (n, m) bool (True =
        visible) -> (n, H*hd_v). Query head h reads KV head floor(h * H_kv / H)."""
        n = q.shape[0]
        kv_of = (np.arange(self.n_head) * self.n_head_kv) // self.n_head
        kh = k[:, kv_of, :]                                # (m, H, hd_k)
        vh = v[:, kv_of, :]                                # (m, H, hd_v)
        s = np.einsum("nhd,mhd->hnm", q, kh) / np.sqrt(self.hd_k)
        s = np.where(mask[None, :, :], s, -np.inf)
        p = softmax(s, axis=-1)
        o = np.einsum("hnm,mhd->nhd", p, vh)
        return o.reshape(n, self.n_head * self.hd_v)

    def _ffn(self, l, x):
        h = rms_norm(x, self.lw(l, "ffn_norm.weight"), self.eps)
        g = self._linear(l, "ffn_gate", h)
        u = self._linear(l, "ffn_up", h)
        return self._linear(l, "ffn_down", silu(g) * u)

    def _head(self, x):
        return rms_norm(x, self.w["output_norm.weight"], self.eps) @ self.W_out.T

    def _check_tokens(self, tokens):
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.size and (tokens.min() < 0 or tokens.max() >= self.n_vocab):
            raise ModelError(f"token id out of range 0..{self.n_vocab - 1}")
        return tokens

    def _check_taps(self, taps):
        taps = list(taps or [])
        for t in taps:
            if not 0 <= t <= self.n_layer:
                raise ModelError(f"tap {t} outside 0..{self.n_layer}")
        return taps

    # -- path 1: one sequence, no cache -------------------------------------------------------

    def forward_sequence(self, tokens, start_pos=0, taps=None):
        """Logits (n, V) of a sequence fed at positions start_pos, start_pos+1, ...,
        each row seeing the rows before it. With taps, also a dict tap id -> (n, E)."""
        tokens = self._check_tokens(tokens)
        taps = self._check_taps(taps)
        n = tokens.size
        pos = start_pos + np.arange(n)
        mask = pos[None, :] <= pos[:, None]
        x = self.w["token_embd.weight"][tokens].copy()
        out_taps = {}
        for l in range(self.n_layer):
            if l in taps:
                out_taps[l] = x.copy()
            q, k, v = self._qkv(l, x, pos)
            x = x + self._linear(l, "attn_output", self._attend(q, k, v, mask))
            x = x + self._ffn(l, x)
        if self.n_layer in taps:
            out_taps[self.n_layer] = x.copy()
        logits = self._head(x)
        return (logits, out_taps) if taps else logits


class Session:
    """Per-sequence KV caches and a batched forward over rows of several sequences.

    A cache entry is (position, k, v) per layer. A row at position p of sequence s sees
    every entry of s with position <= p once the batch's own rows are stored, which is
    the causal rule of targets.md §3.2 for any mix of prompt, decode and verify rows.
    truncate(s, p) drops the entries at positions >= p (speculative rollback)."""

    def __init__(self, model):
        self.m = model
        self.seqs = {}   # seq id -> {"pos": list, "k": [per layer list], "v": [...], "tok": list}

    def _seq(self, s):
        if s not in self.seqs:
            L = self.m.n_layer
            self.seqs[s] = {"pos": [], "tok": [], "k": [[] for _ in range(L)], "v": [[] for _ in range(L)]}
        return self.seqs[s]

    def truncate(self, s, p):
        c = self._seq(s)
        keep = [i for i, q in enumerate(c["pos"]) if q < p]
        c["pos"] = [c["pos"][i] for i in keep]
        c["tok"] = [c["tok"][i] for i in keep]
        for l in range(self.m.n_layer):
            c["k"][l] = [c["k"][l][i] for i in keep]
            c["v"][l] = [c["v"][l][i] for i in keep]

    def history(self, s):
        """(tokens, positions) of sequence s, in position order."""
        c = self._seq(s)
        order = np.argsort(c["pos"], kind="stable")
        return [c["tok"][i] for i in order], [c["pos"][i] for i in order]

    def decode(self, seq, pos, tokens, want=None, taps=None):
        """One batch: rows i = (seq[i], pos[i], tokens[i]). Returns (logits of the rows
        with want[i] true, in row order, shape (n_want, V); dict tap id -> (n, E))."""
        m = self.m
        seq = [int(s) for s in seq]
        pos = np.asarray(pos, dtype=np.int64)
        tokens = m._check_tokens(tokens)
        taps = m._check_taps(taps)
        n = tokens.size
        want = np.ones(n, dtype=bool) if want is None else np.asarray(want, dtype=bool)
        for s in set(seq):
            c = self._seq(s)
            new = [int(p) for p, t in zip(pos, seq) if t == s]
            if len(set(new)) != len(new) or set(new) & set(c["pos"]):
                raise ModelError(f"sequence {s}: position given twice (truncate first)")
        for i in range(n):
            c = self.seqs[seq[i]]
            c["pos"].append(int(pos[i]))
            c["tok"].append(int(tokens[i]))

        x = m.w["token_embd.weight"][tokens].copy()
        out_taps = {}
        for l in range(m.n_layer):
            if l in taps:
                out_taps[l] = x.copy()
            q, k, v = m._qkv(l, x, pos)
            for i in range(n):
                c = self.seqs[seq[i]]
                c["k"][l].append(k[i])
                c["v"][l].append(v[i])
            att = np.zeros((n, m.n_head * m.hd_v))
            for i in range(n):   # one row at a time against its own sequence's cache
                c = self.seqs[seq[i]]
                cp = np.asarray(c["pos"])
                mask = (cp <= pos[i])[None, :]
                att[i] = m._attend(q[i:i + 1], np.stack(c["k"][l]), np.stack(c["v"][l]), mask)[0]
            x = x + m._linear(l, "attn_output", att)
            x = x + m._ffn(l, x)
        if m.n_layer in taps:
            out_taps[m.n_layer] = x.copy()
        logits = m._head(x[want])
        return logits, out_taps


def greedy(model, prompt, n_steps, stop=None):
    """Greedy continuation: feed prompt at positions 0.., then n_steps times take the
    argmax (lowest id on ties) of the last row and feed it. Returns (ids, margins), the
    margin being top-1 minus top-2 logit of each step; stops early after `stop`."""
    sess = Session(model)
    logits, _ = sess.decode([0] * len(prompt), range(len(prompt)), prompt,
                            want=[i == len(prompt) - 1 for i in range(len(prompt))])
    ids, margins = [], []
    p = len(prompt)
    row = logits[-1]
    for _ in range(n_steps):
        top = np.argsort(-row, kind="stable")
        t = int(top[0])
        ids.append(t)
        margins.append(float(row[top[0]] - row[top[1]]))
        if (stop is not None and t == stop) or len(ids) == n_steps:
            break
        logits, _ = sess.decode([0], [p], [t])
        row = logits[0]
        p += 1
    return ids, margins
