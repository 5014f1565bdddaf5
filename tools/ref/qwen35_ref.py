"""qwen35_ref.py -- the NumPy reference of the `qwen35` hybrid target and its MTP block (float64).

What it is: an implementation written from spex's ../shared/docs/targets.md (§1, §3.3
partial NEOX RoPE, §3.4 taps, §6 keys / layer pattern / tensors / channel layouts, §6.6
gated attention, §7 Gated DeltaNet with the §7.1 recurrent and §7.2 chunked forms, §8.1
the MTP graph, §9 rollback semantics), not from spex's C code nor from any other engine.
make_qwen35_fixtures.py uses it to write the goldens in tests/data/qwen35/.

  Model(path)                 load a qwen35 GGUF (F32/F16; quantized tensors dequantized
                              with ggml_formats.py), keys §6.1, layer pattern §6.2, tied or
                              untied head, the MTP block (nextn_predict_layers);
  Model.forward_sequence      one sequence from position 0, whole-matrix causal attention,
                              GDN over the whole run (model_ref-compatible signature);
  Model.run                   the same, returning a Result (logits, taps, hidden, prenorm, states);
  Session                     rows of several sequences against per-sequence KV caches and
                              recurrent states (S, conv window); snapshot / restore, per-row
                              state capture and adopt (§9 strategies A and B);
  MTPSession                  the §8.1 MTP block with its own KV cache (step, decode, truncate);
  greedy                      greedy continuation (lowest id on ties).

What it is not: fast, or a model of spex's fp32 numerics. Everything is float64.

Conventions (targets.md §1): weights are numpy arrays with the reversed ggml ne, so a
matmul weight ne {in, out} is an (out, in) array W and y = W @ x. Legend: E hidden,
H / H_kv attention heads, hd head dim, F FFN width, V vocabulary, N trunk layers
(block_count - nextn_predict_layers), Hk / Hv GDN key / value heads, Dk = Dv state size,
C = 2·Hk·Dk + Hv·Dv conv channels, n rows.

State layouts (also used by the goldens): GDN state S of one layer is an (Hv, Dk, Dv) array,
S[t][i][j] = value head t, key dim i, value dim j (o[j] = sum_i S[i][j] q[i]); the conv
window is a (d_conv - 1, C) array of the previous `mixed` columns, oldest row first.

Choices where the spec leaves room (configurable, defaults = the spec's choice):
  * L2 norm of q / k: l2_form "llamacpp" x / max(|x|, eps) (default) or "hf"
    x (sum x^2 + eps)^-1/2 (§7.1 step 5), eps = the RMS eps.
  * MTP hidden: mtp_hidden "post" (default: the target's post-output_norm final hidden) or
    "pre" (the pre-norm residual), §8.1 last paragraph. Only used by mtp_hidden_rows().
  * full_attention_interval absent and no recurrent_layers array: interval 4 (llama.cpp's
    default). attention.recurrent_layers may cover the N trunk layers or all block_count
    layers (then the MTP entries must be false); bool, or any integer type (non-zero = true).
"""

import copy
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_io  # noqa: E402
from model_ref import rms_norm, silu, rope, softmax, ROPE_NEOX  # noqa: E402


class ModelError(Exception):
    pass


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softplus(x):
    return np.logaddexp(0.0, x)


def layer_pattern(n_layer, interval=None, recurrent_layers=None):
    """§6.2: list of n_layer bools, True = Gated DeltaNet (recurrent), False = full attention.
    recurrent_layers (per-layer array, trunk or trunk + MTP entries) overrides the rule
    'layer i is attention iff (i + 1) % interval == 0'."""
    if recurrent_layers is not None:
        arr = [bool(x) for x in np.asarray(recurrent_layers).reshape(-1)]
        if len(arr) < n_layer:
            raise ModelError(f"attention.recurrent_layers has {len(arr)} entries, {n_layer} trunk layers")
        if any(arr[n_layer:]):
            raise ModelError("attention.recurrent_layers marks an MTP layer recurrent")
        return arr[:n_layer]
    interval = 4 if interval is None else int(interval)
    if interval <= 0:
        raise ModelError(f"full_attention_interval {interval} must be > 0")
    return [(i + 1) % interval != 0 for i in range(n_layer)]


class GDNState:
    """Recurrent state of one GDN layer of one sequence: S (Hv, Dk, Dv), conv (d_conv-1, C)."""

    def __init__(self, S, conv):
        self.S = S
        self.conv = conv

    def copy(self):
        return GDNState(self.S.copy(), self.conv.copy())


class Result:
    """Outputs of a forward over n rows: logits (n_want, V), taps {id: (n, E)}, hidden
    (n, E) post-output_norm, prenorm (n, E) the residual after the last trunk layer,
    states: per sequence, optionally the per-row GDN states {l: GDNState} after each row."""

    def __init__(self, logits, taps, hidden, prenorm, states=None):
        self.logits, self.taps, self.hidden, self.prenorm, self.states = logits, taps, hidden, prenorm, states


class Model:
    """Hyper-parameters and float64 weights of a qwen35 GGUF."""

    def __init__(self, path, l2_form="llamacpp", mtp_hidden="post", variant=None):
        self.path = str(path)
        g = gguf_io.read(path)
        self.gguf = g
        arch = g.get("general.architecture")
        if arch != "qwen35":
            raise ModelError(f"{path}: architecture {arch!r} is not qwen35")
        self.arch = arch
        if l2_form not in ("llamacpp", "hf") or mtp_hidden not in ("post", "pre"):
            raise ModelError("l2_form must be llamacpp|hf, mtp_hidden post|pre")
        self.l2_form, self.mtp_hidden = l2_form, mtp_hidden
        # variant: deliberate mistakes, only for the sensitivity report of the fixture script
        self.variant = dict(variant or {})

        def key(name, default=None, required=False):
            v = g.get(f"{arch}.{name}")
            if v is None:
                if required:
                    raise ModelError(f"{path}: key {arch}.{name} missing")
                return default
            return v

        self.n_layer_all = int(key("block_count", required=True))
        self.n_nextn = int(key("nextn_predict_layers", 0))
        if not 0 <= self.n_nextn < self.n_layer_all:
            raise ModelError(f"{path}: nextn_predict_layers {self.n_nextn} vs block_count {self.n_layer_all}")
        self.n_layer = N = self.n_layer_all - self.n_nextn          # trunk layers
        self.n_embd = E = int(key("embedding_length", required=True))
        self.n_ff = int(key("feed_forward_length", required=True))
        self.n_head = H = int(key("attention.head_count", required=True))
        self.n_head_kv = Hkv = int(key("attention.head_count_kv", H))
        self.hd_k = int(key("attention.key_length", E // H))
        self.hd_v = int(key("attention.value_length", E // H))
        self.eps = float(key("attention.layer_norm_rms_epsilon", required=True))
        self.n_rot = int(key("rope.dimension_count", self.hd_k))
        self.rope_base = float(key("rope.freq_base", 10000.0))
        self.rope_sections = key("rope.dimension_sections", None)
        if self.rope_sections is None:
            raise ModelError(f"{path}: key {arch}.rope.dimension_sections missing (§6.1)")
        self.d_conv = int(key("ssm.conv_kernel", required=True))
        self.Dk = int(key("ssm.state_size", required=True))
        self.Hk = int(key("ssm.group_count", required=True))
        self.Hv = int(key("ssm.time_step_rank", required=True))
        inner = int(key("ssm.inner_size", required=True))
        if inner % self.Hv:
            raise ModelError(f"{path}: ssm.inner_size {inner} not a multiple of time_step_rank {self.Hv}")
        self.Dv = inner // self.Hv
        if self.Dv != self.Dk:
            raise ModelError(f"{path}: Dv {self.Dv} != state_size {self.Dk} (§6.3: Dk = Dv)")
        if self.Hv % self.Hk:
            raise ModelError(f"{path}: time_step_rank {self.Hv} not a multiple of group_count {self.Hk}")
        self.C = 2 * self.Hk * self.Dk + self.Hv * self.Dv
        if H % Hkv or self.n_rot > self.hd_k or self.n_rot % 2:
            raise ModelError(f"{path}: heads {H}/{Hkv}, n_rot {self.n_rot}, hd {self.hd_k}")
        self.recurrent = layer_pattern(N, key("full_attention_interval"), key("attention.recurrent_layers"))
        if "token_embd.weight" not in g.tensors:
            raise ModelError(f"{path}: tensor token_embd.weight missing")
        V = g.tensors["token_embd.weight"].ne[1]
        toks = g.get("tokenizer.ggml.tokens")
        self.n_vocab = V = int(len(toks)) if toks is not None else int(V)

        self.w = {}
        self._take("token_embd.weight", [E, V])
        self._take("output_norm.weight", [E])
        self.tied = "output.weight" not in g.tensors
        if not self.tied:
            self._take("output.weight", [E, V])
        self.W_out = self.w["token_embd.weight"] if self.tied else self.w["output.weight"]
        for l in range(N):
            self._take_common(l)
            if self.recurrent[l]:
                p = f"blk.{l}."
                Hv, Dv = self.Hv, self.Dv
                self._take(p + "attn_qkv.weight", [E, self.C])
                self._take(p + "attn_gate.weight", [E, Hv * Dv])
                self._take(p + "ssm_conv1d.weight", [self.d_conv, self.C])
                self._take(p + "ssm_dt.bias", [Hv])
                self._take(p + "ssm_a", [Hv])
                self._take(p + "ssm_beta.weight", [E, Hv])
                self._take(p + "ssm_alpha.weight", [E, Hv])
                self._take(p + "ssm_norm.weight", [Dv])
                self._take(p + "ssm_out.weight", [Hv * Dv, E])
            else:
                self._take_attn(l)
        self.has_mtp = self.n_nextn > 0
        if self.n_nextn > 1:
            raise ModelError(f"{path}: nextn_predict_layers {self.n_nextn} > 1 not supported")
        if self.has_mtp:
            l = N
            p = f"blk.{l}."
            self._take_common(l)
            self._take_attn(l)
            self._take(p + "nextn.eh_proj.weight", [2 * E, E])
            for nm in ("enorm", "hnorm"):
                self._take(p + f"nextn.{nm}.weight", [E])
            self.mtp_norm = self._take(p + "nextn.shared_head_norm.weight", [E], optional=True)
            if self.mtp_norm is None:
                self.mtp_norm = self.w["output_norm.weight"]
            emb = self._take(p + "nextn.embed_tokens.weight", [E, V], optional=True)
            self.mtp_embd = self.w["token_embd.weight"] if emb is None else emb
            head = self._take(p + "nextn.shared_head_head.weight", [E, V], optional=True)
            self.mtp_head = self.W_out if head is None else head

    # -- loading -------------------------------------------------------------------------------

    def _take(self, name, ne, optional=False):
        t = self.gguf.tensors.get(name)
        if t is None:
            if optional:
                return None
            raise ModelError(f"{self.path}: tensor {name} missing")
        if list(t.ne) != list(ne):
            raise ModelError(f"{self.path}: tensor {name} has shape {t.ne}, expected {ne}")
        if t.type in (gguf_io.GGML_F32, gguf_io.GGML_F16):
            a = np.asarray(t.data, dtype=np.float64)
        else:
            import ggml_formats
            tn = ggml_formats.TYPE_BY_ID.get(t.type)
            if tn is None:
                raise ModelError(f"{self.path}: tensor {name} has ggml type {t.type}, not supported")
            a = ggml_formats.dequantize(tn, t.data).astype(np.float64).reshape(tuple(reversed(t.ne)))
        self.w[name] = a
        return a

    def _take_common(self, l):
        p, E, F = f"blk.{l}.", self.n_embd, self.n_ff
        self._take(p + "attn_norm.weight", [E])
        self._take(p + "post_attention_norm.weight", [E])
        self._take(p + "ffn_gate.weight", [E, F])
        self._take(p + "ffn_up.weight", [E, F])
        self._take(p + "ffn_down.weight", [F, E])

    def _take_attn(self, l):
        p, E, H, Hkv = f"blk.{l}.", self.n_embd, self.n_head, self.n_head_kv
        self._take(p + "attn_q.weight", [E, 2 * H * self.hd_k])
        self._take(p + "attn_k.weight", [E, Hkv * self.hd_k])
        self._take(p + "attn_v.weight", [E, Hkv * self.hd_v])
        self._take(p + "attn_output.weight", [H * self.hd_v, E])
        self._take(p + "attn_q_norm.weight", [self.hd_k])
        self._take(p + "attn_k_norm.weight", [self.hd_k])

    def lw(self, l, name):
        return self.w[f"blk.{l}.{name}"]

    def _check_tokens(self, tokens):
        tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
        if tokens.size and (tokens.min() < 0 or tokens.max() >= self.n_vocab):
            raise ModelError(f"token id out of range 0..{self.n_vocab - 1}")
        return tokens

    def _check_taps(self, taps):
        taps = list(taps or [])
        for t in taps:
            if not 0 <= t <= self.n_layer:
                raise ModelError(f"tap {t} outside 0..{self.n_layer}")
        return taps

    def new_gdn_state(self):
        return GDNState(np.zeros((self.Hv, self.Dk, self.Dv)), np.zeros((self.d_conv - 1, self.C)))

    # -- gated full attention (§6.6) ---------------------------------------------------------------

    def attn_qkv(self, l, xn, pos):
        """xn (n, E) normed inputs at positions pos -> q (n, H, hd), gate (n, H, hd),
        k (n, H_kv, hd), v (n, H_kv, hd_v); QK-norm and partial NEOX RoPE applied."""
        n, H, hd = xn.shape[0], self.n_head, self.hd_k
        qf = (xn @ self.lw(l, "attn_q.weight").T).reshape(n, H, 2 * hd)   # per head [q_h | gate_h]
        if self.variant.get("q_gate_swapped"):
            q, gate = qf[..., hd:], qf[..., :hd]
        else:
            q, gate = qf[..., :hd], qf[..., hd:]
        k = (xn @ self.lw(l, "attn_k.weight").T).reshape(n, self.n_head_kv, hd)
        v = (xn @ self.lw(l, "attn_v.weight").T).reshape(n, self.n_head_kv, self.hd_v)
        q = rms_norm(q, self.lw(l, "attn_q_norm.weight"), self.eps)
        k = rms_norm(k, self.lw(l, "attn_k_norm.weight"), self.eps)
        q = rope(q, pos, self.n_rot, self.rope_base, ROPE_NEOX)   # IMROPE == NEOX for text (§3.3)
        k = rope(k, pos, self.n_rot, self.rope_base, ROPE_NEOX)
        return q, gate, k, v

    def attend(self, q, k, v, mask):
        """q (n, H, hd); k (m, H_kv, hd); v (m, H_kv, hd_v); mask (n, m) True = visible ->
        (n, H, hd_v). Query head h reads KV head floor(h * H_kv / H)."""
        kv_of = (np.arange(self.n_head) * self.n_head_kv) // self.n_head
        s = np.einsum("nhd,mhd->hnm", q, k[:, kv_of, :]) / np.sqrt(self.hd_k)
        s = np.where(mask[None, :, :], s, -np.inf)
        return np.einsum("hnm,mhd->nhd", softmax(s, axis=-1), v[:, kv_of, :])

    def attn_out(self, l, o, gate):
        n = o.shape[0]
        if not self.variant.get("no_gate"):
            o = o * sigmoid(gate)
        return o.reshape(n, self.n_head * self.hd_v) @ self.lw(l, "attn_output.weight").T

    def ffn(self, l, x):
        h = rms_norm(x, self.lw(l, "post_attention_norm.weight"), self.eps)   # the pre-FFN norm
        gt = h @ self.lw(l, "ffn_gate.weight").T
        up = h @ self.lw(l, "ffn_up.weight").T
        return (silu(gt) * up) @ self.lw(l, "ffn_down.weight").T

    # -- Gated DeltaNet (§7) -------------------------------------------------------------------------

    def _l2(self, x):
        ss = np.sum(x * x, axis=-1, keepdims=True)
        if self.l2_form == "hf":
            return x / np.sqrt(ss + self.eps)
        return x / np.maximum(np.sqrt(ss), self.eps)

    def gdn_inputs(self, l, xn, state):
        """§7.1 steps 1-6 for n consecutive tokens of one sequence (updates state.conv):
        q (n, Hv, Dk) already / sqrt(Dk), k (n, Hv, Dk), v (n, Hv, Dv), g (n, Hv),
        beta (n, Hv), z (n, Hv, Dv), mixed (n, C)."""
        n, Hk, Hv, Dk, Dv = xn.shape[0], self.Hk, self.Hv, self.Dk, self.Dv
        mixed = xn @ self.lw(l, "attn_qkv.weight").T                         # (n, C)
        z = (xn @ self.lw(l, "attn_gate.weight").T).reshape(n, Hv, Dv)
        beta = sigmoid(xn @ self.lw(l, "ssm_beta.weight").T)                 # (n, Hv)
        a = xn @ self.lw(l, "ssm_alpha.weight").T
        g = softplus(a + self.lw(l, "ssm_dt.bias")) * self.lw(l, "ssm_a")    # log-decay <= 0
        w = self.lw(l, "ssm_conv1d.weight")                                  # (C, d_conv): w[c][k]
        if self.variant.get("conv_reversed"):
            w = w[:, ::-1]
        K = self.d_conv
        ext = np.concatenate([state.conv, mixed], axis=0)                    # (K-1+n, C)
        conv = np.zeros((n, self.C))
        for k in range(K):   # tap K-1 multiplies the current token
            conv += w[:, k][None, :] * ext[k:k + n]
        state.conv = ext[n:].copy()                                          # last K-1 columns
        conv = silu(conv)
        q = conv[:, :Hk * Dk].reshape(n, Hk, Dk)
        kk = conv[:, Hk * Dk:2 * Hk * Dk].reshape(n, Hk, Dk)
        v = conv[:, 2 * Hk * Dk:].reshape(n, Hv, Dv)
        q, kk = self._l2(q), self._l2(kk)
        if self.variant.get("grouped_heads"):
            src = (np.arange(Hv) * Hk) // Hv         # the wrong (GQA-style) pairing
        else:
            src = np.arange(Hv) % Hk                 # tiled: value head t reads key head t mod Hk
        q, kk = q[:, src, :], kk[:, src, :]
        q = q / np.sqrt(Dk)
        return q, kk, v, g, beta, z, mixed

    @staticmethod
    def delta_recurrent(S, q, k, v, g, beta, keep=False):
        """§7.1 step 7, token by token. S (Hv, Dk, Dv) updated in place; returns o (n, Hv, Dv)
        and, with keep, the list of S after each token."""
        n = q.shape[0]
        o = np.zeros((n,) + v.shape[1:])
        kept = []
        for t in range(n):
            S *= np.exp(g[t])[:, None, None]
            err = beta[t][:, None] * (v[t] - np.einsum("hij,hi->hj", S, k[t]))
            S += k[t][:, :, None] * err[:, None, :]
            o[t] = np.einsum("hij,hi->hj", S, q[t])
            if keep:
                kept.append(S.copy())
        return o, kept

    @staticmethod
    def delta_chunked(S, q, k, v, g, beta, chunk):
        """§7.2, per head, chunks of `chunk` tokens (the last one shorter). S updated in place."""
        n, Hv = q.shape[0], q.shape[1]
        o = np.zeros((n,) + v.shape[1:])
        for c0 in range(0, n, chunk):
            c1 = min(n, c0 + chunk)
            m = c1 - c0
            tri_s = np.tril(np.ones((m, m), dtype=bool), -1)
            tri_i = np.tril(np.ones((m, m), dtype=bool), 0)
            for h in range(Hv):
                Q, Kc, Vc = q[c0:c1, h], k[c0:c1, h], v[c0:c1, h]
                b, gam = beta[c0:c1, h], np.cumsum(g[c0:c1, h])
                Mx = np.where(tri_i, np.exp(np.where(tri_i, gam[:, None] - gam[None, :], 0.0)), 0.0)
                A = np.where(tri_s, (b[:, None] * (Kc @ Kc.T)) * Mx, 0.0)
                T = np.eye(m)
                # T = (I + A)^-1 by forward substitution (unit lower-triangular)
                for i in range(1, m):
                    T[i, :i] = -A[i, :i] @ T[:i, :i]
                U = T @ (b[:, None] * Vc)
                Wk = T @ ((b * np.exp(gam))[:, None] * Kc)
                Vn = U - Wk @ S[h]
                o[c0:c1, h] = (Q * np.exp(gam)[:, None]) @ S[h] + np.where(tri_i, Q @ Kc.T * Mx, 0.0) @ Vn
                S[h] = np.exp(gam[-1]) * S[h] + (np.exp(gam[-1] - gam)[:, None] * Kc).T @ Vn
        return o

    def gdn_layer(self, l, xn, state, mode="recurrent", chunk=64, keep=False):
        """One GDN layer over n consecutive tokens of one sequence (normed inputs xn (n, E)).
        Updates state; returns (out (n, E), per-token [GDNState] if keep else None)."""
        n = xn.shape[0]
        conv_before = state.conv.copy()
        q, k, v, g, beta, z, mixed = self.gdn_inputs(l, xn, state)
        kept = None
        if mode == "recurrent":
            o, Ss = self.delta_recurrent(state.S, q, k, v, g, beta, keep)
            if keep:   # the conv window after token t: the last d_conv-1 columns up to t
                ext = np.concatenate([conv_before, mixed], axis=0)
                K1 = self.d_conv - 1
                kept = [GDNState(Ss[t], ext[t + 1:t + 1 + K1].copy()) for t in range(n)]
        elif mode == "chunked":
            if keep:
                raise ModelError("per-token states need mode='recurrent'")
            o = self.delta_chunked(state.S, q, k, v, g, beta, chunk)
        else:
            raise ModelError(f"unknown GDN mode {mode!r}")
        o = rms_norm(o, self.lw(l, "ssm_norm.weight"), self.eps) * silu(z)   # §7.1 step 8
        return o.reshape(n, self.Hv * self.Dv) @ self.lw(l, "ssm_out.weight").T, kept

    # -- path 1: one sequence from position 0 ---------------------------------------------------------

    def run(self, tokens, taps=None, mode="recurrent", chunk=64):
        """Whole-sequence forward at positions 0..n-1 (whole-matrix causal attention, fresh
        recurrent states). Result.states = {l: GDNState} after the last token."""
        tokens = self._check_tokens(tokens)
        taps = self._check_taps(taps)
        n = tokens.size
        pos = np.arange(n)
        mask = pos[None, :] <= pos[:, None]
        x = self.w["token_embd.weight"][tokens].copy()
        out_taps, states = {}, {}
        for l in range(self.n_layer):
            if l in taps:
                out_taps[l] = x.copy()
            xn = rms_norm(x, self.lw(l, "attn_norm.weight"), self.eps)
            if self.recurrent[l]:
                st = self.new_gdn_state()
                y, _ = self.gdn_layer(l, xn, st, mode, chunk)
                states[l] = st
            else:
                q, gate, k, v = self.attn_qkv(l, xn, pos)
                y = self.attn_out(l, self.attend(q, k, v, mask), gate)
            x = x + y
            x = x + self.ffn(l, x)
        if self.n_layer in taps:
            out_taps[self.n_layer] = x.copy()
        hidden = rms_norm(x, self.w["output_norm.weight"], self.eps)
        return Result(hidden @ self.W_out.T, out_taps, hidden, x, states)

    def forward_sequence(self, tokens, start_pos=0, taps=None, mode="recurrent", chunk=64):
        """model_ref-compatible: logits (n, V), or (logits, taps) when taps are asked for."""
        if start_pos != 0:
            raise ModelError("qwen35 forward_sequence starts at position 0 (recurrent state)")
        r = self.run(tokens, taps, mode, chunk)
        return (r.logits, r.taps) if taps else r.logits

    def mtp_hidden_rows(self, result):
        """The target hidden rows fed to MTP (§8.1): post-output_norm by default."""
        return result.hidden if self.mtp_hidden == "post" else result.prenorm


class _Seq:
    def __init__(self, m):
        self.n = 0                                       # tokens processed = next position
        self.tok = []
        self.kv = {l: {"pos": [], "k": [], "v": []} for l in range(m.n_layer) if not m.recurrent[l]}
        self.gdn = {l: m.new_gdn_state() for l in range(m.n_layer) if m.recurrent[l]}


class Session:
    """Per-sequence KV caches and recurrent states; a batched forward over rows of several
    sequences. Each sequence's rows must continue it: positions n, n+1, ... in row order
    (they may be interleaved with other sequences' rows). Rollback (§9): snapshot / restore
    (strategy B), or decode(..., keep_states=True) + adopt (strategy A: the per-row states of
    a verify batch, then KV truncation)."""

    def __init__(self, model):
        self.m = model
        self.seqs = {}

    def seq(self, s):
        if s not in self.seqs:
            self.seqs[s] = _Seq(self.m)
        return self.seqs[s]

    def snapshot(self, s):
        return copy.deepcopy(self.seq(s))

    def restore(self, s, snap):
        self.seqs[s] = copy.deepcopy(snap)

    def adopt(self, s, n_keep, gdn_states):
        """Keep positions 0..n_keep-1: truncate the KV caches and take gdn_states ({l: GDNState},
        the state after position n_keep-1, e.g. a row of decode(keep_states=True))."""
        c = self.seq(s)
        for kv in c.kv.values():
            keep = [i for i, p in enumerate(kv["pos"]) if p < n_keep]
            for f in ("pos", "k", "v"):
                kv[f] = [kv[f][i] for i in keep]
        c.gdn = {l: st.copy() for l, st in gdn_states.items()}
        c.tok = c.tok[:n_keep]
        c.n = n_keep

    def decode(self, seq, pos, tokens, want=None, taps=None, mode="recurrent", chunk=64, keep_states=False):
        m = self.m
        seq = [int(s) for s in seq]
        pos = np.asarray(pos, dtype=np.int64).reshape(-1)
        tokens = m._check_tokens(tokens)
        taps = m._check_taps(taps)
        n = tokens.size
        want = np.ones(n, dtype=bool) if want is None else np.asarray(want, dtype=bool)
        order = []   # sequences in order of first appearance
        for s in seq:
            if s not in order:
                order.append(s)
        rows = {s: [i for i in range(n) if seq[i] == s] for s in order}
        for s in order:
            c = self.seq(s)
            if [int(pos[i]) for i in rows[s]] != list(range(c.n, c.n + len(rows[s]))):
                raise ModelError(f"sequence {s}: rows must continue at position {c.n} in order")
        for s in order:
            c = self.seqs[s]
            c.tok += [int(tokens[i]) for i in rows[s]]
            c.n += len(rows[s])
        x = m.w["token_embd.weight"][tokens].copy()
        out_taps = {}
        kept = {s: [dict() for _ in rows[s]] for s in order} if keep_states else None
        for l in range(m.n_layer):
            if l in taps:
                out_taps[l] = x.copy()
            xn = rms_norm(x, m.lw(l, "attn_norm.weight"), m.eps)
            y = np.zeros_like(x)
            if m.recurrent[l]:
                for s in order:
                    idx = rows[s]
                    y[idx], ks = m.gdn_layer(l, xn[idx], self.seqs[s].gdn[l], mode, chunk, keep_states)
                    if keep_states:
                        for r, st in enumerate(ks):
                            kept[s][r][l] = st
            else:
                q, gate, k, v = m.attn_qkv(l, xn, pos)
                for i in range(n):
                    kv = self.seqs[seq[i]].kv[l]
                    kv["pos"].append(int(pos[i]))
                    kv["k"].append(k[i])
                    kv["v"].append(v[i])
                o = np.zeros((n, m.n_head, m.hd_v))
                for i in range(n):   # one row against its own sequence's cache
                    kv = self.seqs[seq[i]].kv[l]
                    mask = (np.asarray(kv["pos"]) <= pos[i])[None, :]
                    o[i] = m.attend(q[i:i + 1], np.stack(kv["k"]), np.stack(kv["v"]), mask)[0]
                y = m.attn_out(l, o, gate)
            x = x + y
            x = x + m.ffn(l, x)
        if m.n_layer in taps:
            out_taps[m.n_layer] = x.copy()
        hidden = rms_norm(x, m.w["output_norm.weight"], m.eps)
        return Result(hidden[want] @ m.W_out.T, out_taps, hidden, x, kept)


class MTPSession:
    """The §8.1 MTP block of one sequence with its own KV cache (entries by position).
    spex's pairing: the entry at position p holds token t_p with the target hidden of
    position p-1 (the zero vector at p = 0); a draft step feeds the previous step's h_nextn."""

    def __init__(self, model):
        if not model.has_mtp:
            raise ModelError(f"{model.path}: no MTP block (nextn_predict_layers = 0)")
        self.m = model
        self.l = model.n_layer
        self.kv = {"pos": [], "k": [], "v": []}

    def truncate(self, p):
        keep = [i for i, q in enumerate(self.kv["pos"]) if q < p]
        for f in ("pos", "k", "v"):
            self.kv[f] = [self.kv[f][i] for i in keep]

    def decode(self, tokens, pos, hiddens):
        """Rows (token, position, target hidden (E,)) -> (logits (n, V), h_nextn (n, E))."""
        m, l = self.m, self.l
        tokens = m._check_tokens(tokens)
        pos = np.asarray(pos, dtype=np.int64).reshape(-1)
        h = np.asarray(hiddens, dtype=np.float64).reshape(tokens.size, m.n_embd)
        if set(pos.tolist()) & set(self.kv["pos"]) or len(set(pos.tolist())) != pos.size:
            raise ModelError("MTP: position given twice (truncate first)")
        e = rms_norm(m.mtp_embd[tokens], m.lw(l, "nextn.enorm.weight"), m.eps)
        hh = rms_norm(h, m.lw(l, "nextn.hnorm.weight"), m.eps)
        cat = np.concatenate([hh, e] if m.variant.get("eh_swapped") else [e, hh], axis=1)   # embedding first
        x = cat @ m.lw(l, "nextn.eh_proj.weight").T
        xn = rms_norm(x, m.lw(l, "attn_norm.weight"), m.eps)
        q, gate, k, v = m.attn_qkv(l, xn, pos)
        for i in range(tokens.size):
            self.kv["pos"].append(int(pos[i]))
            self.kv["k"].append(k[i])
            self.kv["v"].append(v[i])
        o = np.zeros((tokens.size, m.n_head, m.hd_v))
        K, Vv, P = np.stack(self.kv["k"]), np.stack(self.kv["v"]), np.asarray(self.kv["pos"])
        for i in range(tokens.size):
            o[i] = m.attend(q[i:i + 1], K, Vv, (P <= pos[i])[None, :])[0]
        x = x + m.attn_out(l, o, gate)
        x = x + m.ffn(l, x)
        hn = rms_norm(x, m.mtp_norm, m.eps)
        return hn @ m.mtp_head.T, hn

    def step(self, token, p, hidden):
        lg, hn = self.decode([token], [p], [hidden])
        return lg[0], hn[0]


def first_argmax(row):
    """(id, margin): lowest id among the maxima, top-1 minus top-2 logit."""
    top = np.argsort(-np.asarray(row), kind="stable")
    return int(top[0]), float(row[top[0]] - row[top[1]])


def greedy(model, prompt, n_steps, mode="recurrent"):
    """Feed prompt at 0.., then n_steps times take the argmax of the last row and feed it.
    Returns (ids, margins)."""
    sess = Session(model)
    n = len(prompt)
    r = sess.decode([0] * n, range(n), prompt, want=[i == n - 1 for i in range(n)], mode=mode)
    row, ids, margins, p = r.logits[-1], [], [], n
    for _ in range(n_steps):
        t, mg = first_argmax(row)
        ids.append(t)
        margins.append(mg)
        if len(ids) == n_steps:
            break
        row = sess.decode([0], [p], [t], mode=mode).logits[0]
        p += 1
    return ids, margins


def mtp_catchup(model, result, tokens, start_pos=0, h_prev=None, mtp=None):
    """Decode tokens (the rows of a target batch at start_pos..) through the MTP block,
    pairing row k with the target hidden of row k-1 (row 0 with h_prev, zero if None).
    Returns (mtp session, logits, h_nextn)."""
    mtp = mtp or MTPSession(model)
    H = model.mtp_hidden_rows(result)
    h0 = np.zeros(model.n_embd) if h_prev is None else np.asarray(h_prev, dtype=np.float64)
    hs = np.concatenate([h0[None, :], H[:-1]], axis=0)
    lg, hn = mtp.decode(tokens, start_pos + np.arange(len(tokens)), hs)
    return mtp, lg, hn


def mtp_chain(model, mtp, anchor, P, h, n_steps):
    """§8.2 draft: (anchor @ P, h) -> d1; (d_i @ P+i, h_nextn of step i) -> d_{i+1}.
    Returns (ids, margins, logits rows, h_nextn rows)."""
    ids, margins, rows, hs = [], [], [], []
    tok, hid = anchor, np.asarray(h, dtype=np.float64)
    for i in range(n_steps):
        lg, hn = mtp.step(tok, P + i, hid)
        d, mg = first_argmax(lg)
        ids.append(d)
        margins.append(mg)
        rows.append(lg)
        hs.append(hn)
        tok, hid = d, hn
    return ids, margins, np.array(rows), np.array(hs)
