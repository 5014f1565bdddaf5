"""dflash_ref.py -- the NumPy reference of the DFlash v1 / DFlash2 drafter (float64).

What it is: an implementation written from ../shared/docs/dflash2.md (not from spex's C
code, nor from any other engine) of everything the drafter side of speculative decoding
computes, used to write the goldens in tests/data/dflash/ (make_dflash_fixtures.py):

  Drafter(path, target)       load a `dflash` GGUF (§2 detection, §3 keys, §4 tensors) and
                              validate it against a target model_ref.Model (§5);
  features(target, tokens)    target feature rows f = [h_in(id_0) | ... ] (§6, clamped);
  Drafter.fuse / context_kv   c = RMSNorm(W_fc f) and each layer's injected K / V (§7);
  DraftCache                  per-sequence context K/V by absolute position, truncatable (§16);
  Drafter.draft_block         the block [anchor, MASK x n] at P..P+n (§8, §9), the grouped
                              dynamic depthwise convolution (§10), final norm and the
                              target's head with logit scale / softcap (§11);
  topk / lattice / greedy_walk / sampled_walk   the DFlash2 selector (§12-§14);
  v1_greedy / v1_sampled      DFlash v1 per-slot choice (§13 last line, §14 last paragraph);
  verify_greedy / verify_rejection   the lossless acceptance rules (§15.2, §15.4).

What it is not: fast, batched across sequences, or a model of spex's fp32 numerics. All
arithmetic is float64 (the spec asks for fp32 in C; the goldens are float64 rounded to f32
once, and make_dflash_fixtures.py checks that every discrete decision stored in a golden
has a margin far above fp32 error).

Conventions (dflash2.md §1): weights are numpy arrays with the reversed ggml ne, so a
matmul weight ne {in, out} is an (out, in) array W and y = W @ x. Legend: D drafter hidden
(= target E), L taps, N_d drafter layers, H / H_kv / d_h heads and head dim, F FFN width,
B block size, n drafted tokens (block rows n+1, row 0 the anchor), T_c conv taps, g conv
group size, G = D / g groups, R selector rank, K candidates per slot, V vocabulary.

Choices where the spec leaves room (each also listed in tools/ref/README.md):
  * fc.scale (optional {1}): multiplies W_fc f before the RMSNorm (§24 "multiply the fc
    output"). RMSNorm makes it nearly a no-op apart from eps.
  * Sliding window: a key at position k is visible to a query at position q iff
    |q - k| < W (§9, §24), applied to context AND block keys alike (the spec says block keys
    are "always within the window"; with W >= B the two readings agree, and the fixture's
    W = 10 > B = 8).
  * The draft tokenizer: when `tokenizer.ggml.tokens` is present its length must equal the
    target's vocabulary (§5 rule 5); when absent the check is skipped (the target's
    tokenizer is used anyway, §3).
  * Inverse-CDF sampling (§14): CDF_j = q_0 + ... + q_j accumulated left to right over the
    candidate order of §12.3; k = #{j : u >= CDF_j}, clamped to K-1. Slot p consumes
    uniforms[p-1]; a slot stopped by p_min consumes none (the check precedes the draw).
  * DFlash v1 sampled slot: the same inverse CDF over the full vocabulary in token-id
    order, q = softmax(z / T); p_min on max(q) before the draw (as the DFlash2 walk).
  * The greedy p_min test is computed literally as 1 / sum_k exp(row[k] - row[k*]) < p_min
    (§13), the DFlash v1 one as max softmax(z_p) < p_min over the full vocabulary.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_io  # noqa: E402
from model_ref import rms_norm, silu, rope, softmax, ROPE_NEOX  # noqa: E402

TAP_CLAMP = 65504.0          # §6 sanitising bound (the f16 maximum)
T_MIN = 1e-5                 # §14: T clamped to >= 1e-5
V1_BLOCK_DEFAULT = 16        # §3: block_size fallback, v1 only

INT_TYPES = (gguf_io.U8, gguf_io.I8, gguf_io.U16, gguf_io.I16, gguf_io.U32, gguf_io.I32,
             gguf_io.U64, gguf_io.I64)


class DrafterError(Exception):
    pass


# ------------------------------------------------------------------------------------
# loading and validation (§2-§5)
# ------------------------------------------------------------------------------------

class Drafter:
    """Hyper-parameters and float64 weights of a `dflash` GGUF, validated against a target
    (a model_ref.Model). `variant` is "dflash2" or "dflash1". `cfg` overrides the spec's
    configurable choices: swa_pattern_default (True), emb_scale_whole_block (True)."""

    def __init__(self, path, target, **cfg):
        self.path = str(path)
        self.target = target
        self.cfg = dict(swa_pattern_default=True, emb_scale_whole_block=True)
        self.cfg.update(cfg)
        g = gguf_io.read(path)
        self.gguf = g
        self.warnings = []
        self._detect()
        self._keys()
        self._tensors()
        self._validate_pair()

    # -- helpers ------------------------------------------------------------------------

    def _err(self, msg):
        raise DrafterError(f"{self.path}: {msg}")

    def _int(self, key, default=None, required=False, lo=0, hi=2**32 - 1):
        """An integer key of any GGUF integer type (§3 "integer signedness"), range-checked."""
        v = self.gguf.kv.get(key)
        if v is None:
            if required:
                self._err(f"key {key} missing")
            return default
        if v.type not in INT_TYPES:
            self._err(f"key {key} has type {gguf_io.VTYPE_NAMES[v.type]}, expected an integer")
        x = int(v.value)
        if not lo <= x <= hi:
            self._err(f"key {key} = {x} outside [{lo}, {hi}]")
        return x

    def _float(self, key, default=None, required=False):
        v = self.gguf.kv.get(key)
        if v is None:
            if required:
                self._err(f"key {key} missing")
            return default
        if v.type not in (gguf_io.F32, gguf_io.F64):
            self._err(f"key {key} has type {gguf_io.VTYPE_NAMES[v.type]}, expected a float")
        return float(v.value)

    def _bool(self, key, default=False):
        v = self.gguf.kv.get(key)
        if v is None:
            return default
        if v.type == gguf_io.BOOL:
            return bool(v.value)
        if v.type == gguf_io.STRING:      # §3: llama.cpp reads causal through a string accessor
            return v.value == "true"
        if v.type in INT_TYPES:
            return int(v.value) != 0
        self._err(f"key {key} has type {gguf_io.VTYPE_NAMES[v.type]}, expected a bool")

    def _int_array(self, key, required=False):
        v = self.gguf.kv.get(key)
        if v is None:
            if required:
                self._err(f"key {key} missing")
            return None
        if v.type != gguf_io.ARRAY or v.elem not in INT_TYPES:
            self._err(f"key {key} must be an array of integers")
        return [int(x) for x in v.value]

    # -- §2 -------------------------------------------------------------------------------

    def _detect(self):
        g = self.gguf
        arch = g.get("general.architecture")
        if arch != "dflash":
            self._err(f"general.architecture is {arch!r}, not 'dflash'")
        if ("markov_w1.weight" in g.tensors or self._bool("dflash.sample_from_anchor")
                or self._bool("dflash.has_confidence_head")
                or any(n.startswith("markov_") for n in g.tensors)):
            self._err("DSpark drafters are not supported")
        self.variant = "dflash2" if "selector_hidden.weight" in g.tensors else "dflash1"

    # -- §3 -------------------------------------------------------------------------------

    def _keys(self):
        k = self._int
        self.n_layer = k("dflash.block_count", required=True, lo=1)
        self.D = k("dflash.embedding_length", required=True, lo=1)
        self.F = k("dflash.feed_forward_length", required=True, lo=1)
        self.H = k("dflash.attention.head_count", required=True, lo=1)
        self.H_kv = k("dflash.attention.head_count_kv", required=True, lo=1)
        self.d_h = k("dflash.attention.key_length", required=True, lo=1)
        d_v = k("dflash.attention.value_length", required=True, lo=1)
        if d_v != self.d_h:
            self._err(f"attention.value_length {d_v} != key_length {self.d_h}")
        if self.H % self.H_kv:
            self._err(f"head_count {self.H} is not a multiple of head_count_kv {self.H_kv}")
        self.eps = self._float("dflash.attention.layer_norm_rms_epsilon", required=True)
        self.n_rot = k("dflash.rope.dimension_count", self.d_h, lo=1)
        if self.n_rot > self.d_h or self.n_rot % 2:
            self._err(f"rope.dimension_count {self.n_rot} must be even and <= key_length {self.d_h}")
        self.rope_base = self._float("dflash.rope.freq_base", None)
        if self.rope_base is None:
            self.rope_base = 10000.0
            self.warnings.append("dflash.rope.freq_base absent: using 10000")
        sections = self._int_array("dflash.rope.dimension_sections")
        if sections is not None and list(sections) != [self.n_rot // 2, 0, 0, 0]:
            self._err(f"rope.dimension_sections {sections} is not the degenerate [{self.n_rot // 2}, 0, 0, 0]")
        self.W = k("dflash.attention.sliding_window", 0)
        pat = self.gguf.kv.get("dflash.attention.sliding_window_pattern")
        if pat is None:
            self.swa = [bool(self.W) and self.cfg["swa_pattern_default"]] * self.n_layer
        else:
            if pat.type != gguf_io.ARRAY or len(pat.value) != self.n_layer:
                self._err(f"attention.sliding_window_pattern must be an array of {self.n_layer} bools")
            self.swa = [bool(x) and self.W > 0 for x in pat.value]
        self.causal = self._bool("dflash.attention.causal", False)
        self.taps = self._int_array("dflash.target_layers", required=True)
        if not self.taps:
            self._err("dflash.target_layers is empty")
        self.L = len(self.taps)
        self.mask_id = k("tokenizer.ggml.mask_token_id", required=True)
        self.logit_scale = self._float("dflash.logit_scale", None)
        self.softcap = self._float("dflash.final_logit_softcapping", None)
        self.emb_scale = self._float("dflash.input_embedding_scale", 1.0)
        top_k = k("dflash.selector_top_k", 0)
        if (top_k > 0) != (self.variant == "dflash2"):
            self._err(f"dflash.selector_top_k = {top_k} but selector_hidden.weight is "
                      f"{'present' if self.variant == 'dflash2' else 'absent'} (§2: they must agree)")
        if self.variant == "dflash2":
            self.B = k("dflash.block_size", required=True, lo=2)
            self.T_c = k("dflash.conv_kernel_size", required=True, lo=1)
            self.g = k("dflash.conv_group_size", required=True, lo=1)
            self.R = k("dflash.selector_rank", required=True, lo=1)
            self.K = k("dflash.selector_top_k", required=True, lo=1)
            if self.D % self.g:
                self._err(f"embedding_length {self.D} is not a multiple of conv_group_size {self.g}")
            self.G = self.D // self.g
        else:
            self.B = k("dflash.block_size", V1_BLOCK_DEFAULT, lo=2)

    # -- §4 -------------------------------------------------------------------------------

    def _take(self, name, ne, f32_only=False, optional=False):
        t = self.gguf.tensors.get(name)
        if t is None:
            if optional:
                return None
            self._err(f"tensor {name} missing")
        if list(t.ne) != list(ne):
            self._err(f"tensor {name} has ne {t.ne}, expected {ne}")
        if f32_only and t.type != gguf_io.GGML_F32:
            self._err(f"tensor {name} must be F32 (type {t.type})")
        if t.type in (gguf_io.GGML_F32, gguf_io.GGML_F16):
            a = np.asarray(t.data, dtype=np.float64)
        else:
            import ggml_formats
            tn = ggml_formats.TYPE_BY_ID.get(t.type)
            if tn is None:
                self._err(f"tensor {name} has ggml type {t.type}, not supported")
            a = ggml_formats.dequantize(tn, t.data).astype(np.float64).reshape(tuple(reversed(t.ne)))
        return a

    def _tensors(self):
        g = self.gguf
        for bad in ("d2t",):
            if bad in g.tensors:
                self._err(f"tensor {bad} present: reduced-vocabulary drafters are not supported")
        D, F, H, H_kv, d_h = self.D, self.F, self.H, self.H_kv, self.d_h
        V = self.target.n_vocab
        self.V = V
        self.fc = self._take("fc.weight", [self.L * D, D])          # (D, L*D)
        fs = self._take("fc.scale", [1], optional=True)
        self.fc_scale = None if fs is None else float(fs[0])
        self.enc_norm = self._take("enc.output_norm.weight", [D], f32_only=True)
        self.out_norm = self._take("output_norm.weight", [D], f32_only=True)
        # borrowed from the target unless the drafter ships its own (§4.4)
        emb = self._take("token_embd.weight", [D, V], optional=True)
        self.E_tok = self.target.w["token_embd.weight"] if emb is None else emb
        head = self._take("output.weight", [D, V], optional=True)
        self.W_head = self.target.W_out if head is None else head
        self.layers = []
        for l in range(self.n_layer):
            p = f"blk.{l}."
            w = {}
            for name, ne, f32 in (("attn_norm.weight", [D], True),
                                  ("attn_q.weight", [D, H * d_h], False),
                                  ("attn_k.weight", [D, H_kv * d_h], False),
                                  ("attn_v.weight", [D, H_kv * d_h], False),
                                  ("attn_output.weight", [H * d_h, D], False),
                                  ("attn_q_norm.weight", [d_h], True),
                                  ("attn_k_norm.weight", [d_h], True),
                                  ("ffn_norm.weight", [D], True),
                                  ("ffn_gate.weight", [D, F], False),
                                  ("ffn_up.weight", [D, F], False),
                                  ("ffn_down.weight", [F, D], False)):
                w[name] = self._take(p + name, ne, f32_only=f32)
            if p + "attn_sinks.weight" in g.tensors:
                if self.variant == "dflash2":
                    self._err(f"tensor {p}attn_sinks.weight present in a DFlash2 file")
                w["attn_sinks.weight"] = self._take(p + "attn_sinks.weight", [H], f32_only=True)
            if self.variant == "dflash2":
                n_d = 2 * self.T_c * self.G
                for side in ("attn", "ffn"):
                    # base {D, T_c, 2}: numpy (2, T_c, D), base[s][t][c] (§10.1)
                    w[side + "_conv_base"] = self._take(p + side + "_conv_base", [D, self.T_c, 2], f32_only=True)
                    w[side + "_conv_proj.weight"] = self._take(p + side + "_conv_proj.weight", [D, n_d])
            else:
                for side in ("attn", "ffn"):
                    for suffix in ("_conv_base", "_conv_proj.weight"):
                        if p + side + suffix in g.tensors:
                            self._err(f"tensor {p}{side}{suffix} in a file without selector tensors")
            self.layers.append(w)
        if self.variant == "dflash2":
            self.sel_H = self._take("selector_hidden.weight", [D, self.R])           # (R, D)
            self.sel_A = self._take("selector_predecessor.weight", [self.R, V])      # (V, R)
            self.sel_B = self._take("selector_successor.weight", [self.R, V])        # (V, R)

    def _validate_pair(self):
        t = self.target
        if self.D != t.n_embd:
            self._err(f"dflash.embedding_length {self.D} != target embedding_length {t.n_embd} ({t.path})")
        if len(set(self.taps)) != len(self.taps):
            self._err(f"dflash.target_layers {self.taps} has duplicates")
        for i in self.taps:
            if not 0 <= i <= t.n_layer:
                self._err(f"dflash.target_layers id {i} outside 0..{t.n_layer} (target {t.path})")
        if self.mask_id >= t.n_vocab:
            self._err(f"tokenizer.ggml.mask_token_id {self.mask_id} >= target vocabulary {t.n_vocab}")
        toks = self.gguf.get("tokenizer.ggml.tokens")
        if toks is not None:
            if len(toks) != t.n_vocab:
                self._err(f"draft vocabulary {len(toks)} != target vocabulary {t.n_vocab} ({t.path})")
            ttoks = t.gguf.get("tokenizer.ggml.tokens")
            if ttoks is not None and list(ttoks) != list(toks):
                self.warnings.append("draft and target token strings differ")
        if self.variant == "dflash2" and not 1 <= self.K <= t.n_vocab:
            self._err(f"selector_top_k {self.K} outside 1..{t.n_vocab}")

    # -- §7 fusion and context K/V --------------------------------------------------------

    def fuse(self, f):
        """f (m, L*D) feature rows -> c (m, D) = RMSNorm(W_fc f; enc.output_norm)."""
        y = np.asarray(f, dtype=np.float64) @ self.fc.T
        if self.fc_scale is not None:
            y = y * self.fc_scale
        return rms_norm(y, self.enc_norm, self.eps)

    def context_kv(self, c, pos):
        """c (m, D) at absolute positions pos (m,) -> per layer (K (m, H_kv, d_h) after
        k_norm and NEOX RoPE at pos, V (m, H_kv, d_h))."""
        m = c.shape[0]
        out = []
        for w in self.layers:
            k = (c @ w["attn_k.weight"].T).reshape(m, self.H_kv, self.d_h)
            k = rms_norm(k, w["attn_k_norm.weight"], self.eps)
            k = rope(k, pos, self.n_rot, self.rope_base, ROPE_NEOX)
            v = (c @ w["attn_v.weight"].T).reshape(m, self.H_kv, self.d_h)
            out.append((k, v))
        return out

    # -- §10 the convolution ----------------------------------------------------------------

    def delta(self, w, side, u):
        """u (rows, D) normed sublayer input -> delta (rows, 2, T_c, G): delta[j][s][t][grp]
        at flat index grp + G*(t + T_c*s) of row j's conv_proj output (§10.1)."""
        d = u @ w[side + "_conv_proj.weight"].T
        return d.reshape(u.shape[0], 2, self.T_c, self.G)

    def conv(self, x, base, delta, s, j=None):
        """Side s of one module. x (rows, D); base (2, T_c, D); delta (rows, 2, T_c, G);
        j (rows,) in-block index of each row (default 0..rows-1: one block). Tap t of row r
        reads x[r - t] with the OUTPUT row's coefficients, and is zero when j[r] < t."""
        rows = x.shape[0]
        j = np.arange(rows) if j is None else np.asarray(j)
        grp = np.arange(self.D) // self.g
        out = np.zeros_like(x)
        for t in range(self.T_c):
            coef = base[s, t][None, :] + delta[:, s, t, :][:, grp]       # (rows, D)
            src = np.zeros_like(x)
            if t < rows:
                src[t:] = x[:rows - t]
            src[j < t] = 0.0
            out += coef * src
        return out

    # -- §8, §9 the block ------------------------------------------------------------------

    def _visible(self, l, qpos, kpos, kblock):
        """(n_q, n_k) visibility: context keys (kblock False) and block keys; block rows are
        0..n in order. Non-causal unless attention.causal; sliding window |q-k| < W."""
        vis = np.ones((qpos.size, kpos.size), dtype=bool)
        if self.causal:
            qj = np.arange(qpos.size)[:, None]
            kj = np.cumsum(kblock) - 1                   # block index of block keys
            vis &= ~(kblock[None, :] & (kj[None, :] > qj))
        if self.swa[l]:
            vis &= np.abs(qpos[:, None] - kpos[None, :]) < self.W
        return vis

    def draft_block(self, cache, anchor, P, n, keep=False):
        """The block [anchor, MASK x n] at positions P..P+n over the context in `cache`
        (a DraftCache holding positions < P). Returns a dict: h (n+1, D) final residual
        stream, h_out (n, D) normed rows 1..n, z_raw (n, V) head logits, z (n, V) after
        logit scale / softcap; with keep, also per-layer intermediates."""
        if not 1 <= n <= self.B - 1:
            raise DrafterError(f"n = {n} outside 1..B-1 = {self.B - 1}")
        if cache.positions() and max(cache.positions()) >= P:
            raise DrafterError("draft cache holds positions >= P (invariant A)")
        toks = np.array([anchor] + [self.mask_id] * n)
        pos = P + np.arange(n + 1)
        x = self.E_tok[toks].copy()
        if self.emb_scale != 1.0:
            if self.cfg["emb_scale_whole_block"]:
                x *= self.emb_scale
            else:
                x[1:] *= self.emb_scale
        rec = {"layers": []}
        ctx_pos = np.asarray(cache.positions(), dtype=np.int64)
        kpos = np.concatenate([ctx_pos, pos])
        kblock = np.concatenate([np.zeros(ctx_pos.size, bool), np.ones(n + 1, bool)])
        kv_of = (np.arange(self.H) * self.H_kv) // self.H
        for l, w in enumerate(self.layers):
            lr = {}
            u = rms_norm(x, w["attn_norm.weight"], self.eps)
            if self.variant == "dflash2":
                da = self.delta(w, "attn", u)
                lr["delta_attn"] = da
                u = self.conv(u, w["attn_conv_base"], da, 0)
            q = (u @ w["attn_q.weight"].T).reshape(n + 1, self.H, self.d_h)
            k = (u @ w["attn_k.weight"].T).reshape(n + 1, self.H_kv, self.d_h)
            v = (u @ w["attn_v.weight"].T).reshape(n + 1, self.H_kv, self.d_h)
            q = rope(rms_norm(q, w["attn_q_norm.weight"], self.eps), pos, self.n_rot, self.rope_base, ROPE_NEOX)
            k = rope(rms_norm(k, w["attn_k_norm.weight"], self.eps), pos, self.n_rot, self.rope_base, ROPE_NEOX)
            ck, cv = cache.kv(l)
            K_all = np.concatenate([ck, k]) if ck is not None else k
            V_all = np.concatenate([cv, v]) if cv is not None else v
            vis = self._visible(l, pos, kpos, kblock)
            s = np.einsum("nhd,mhd->hnm", q, K_all[:, kv_of, :]) / np.sqrt(self.d_h)
            s = np.where(vis[None], s, -np.inf)
            if "attn_sinks.weight" in w:      # v1 only: an extra logit per head, no value
                sink = w["attn_sinks.weight"][:, None, None] * np.ones((1, n + 1, 1))
                pr = softmax(np.concatenate([s, sink], axis=-1), axis=-1)[..., :-1]
            else:
                pr = softmax(s, axis=-1)
            att = np.einsum("hnm,mhd->nhd", pr, V_all[:, kv_of, :]).reshape(n + 1, self.H * self.d_h)
            a = att @ w["attn_output.weight"].T
            if self.variant == "dflash2":
                a = self.conv(a, w["attn_conv_base"], da, 1)
            r = x + a
            u2 = rms_norm(r, w["ffn_norm.weight"], self.eps)
            if self.variant == "dflash2":
                df = self.delta(w, "ffn", u2)
                lr["delta_ffn"] = df
                u2 = self.conv(u2, w["ffn_conv_base"], df, 0)
            mm = (silu(u2 @ w["ffn_gate.weight"].T) * (u2 @ w["ffn_up.weight"].T)) @ w["ffn_down.weight"].T
            if self.variant == "dflash2":
                mm = self.conv(mm, w["ffn_conv_base"], df, 1)
            x = r + mm
            lr["out"] = x.copy()
            if keep:
                lr["block_k"], lr["block_v"] = k, v
            rec["layers"].append(lr)
        h_out = rms_norm(x[1:], self.out_norm, self.eps)
        z_raw = h_out @ self.W_head.T
        rec.update(h=x, h_out=h_out, z_raw=z_raw, z=self.transform(z_raw))
        return rec

    def transform(self, z):
        """§11 step 3: logit scale (if present and != 0), then softcap (if > 0)."""
        if self.logit_scale is not None and self.logit_scale != 0.0:
            z = self.logit_scale * z
        if self.softcap is not None and self.softcap > 0.0:
            z = self.softcap * np.tanh(z / self.softcap)
        return z

    # -- §12 selector quantities ---------------------------------------------------------

    def selector(self, z, h_out, anchor):
        """z (n, V) transformed logits, h_out (n, D) -> dict C (n, K) ids, U (n, K),
        gate (n, R), S: list of n score matrices (S[0] is (1, K), S[p-1] (K, K))."""
        C = np.stack([topk(row, self.K) for row in z])
        U = np.take_along_axis(z, C, axis=1)
        gate = h_out @ self.sel_H.T
        S = []
        for p in range(len(z)):
            pred = np.array([anchor]) if p == 0 else C[p - 1]
            S.append(edge_scores(U[p], gate[p], self.sel_A[pred], self.sel_B[C[p]]))
        return dict(C=C, U=U, gate=gate, S=S)


# ------------------------------------------------------------------------------------
# target features and the draft cache (§6, §7, §16)
# ------------------------------------------------------------------------------------

def clamp_features(f):
    """§6 sanitising: NaN -> 0, +-inf and |x| > 65504 -> +-65504."""
    f = np.nan_to_num(np.asarray(f, dtype=np.float64), nan=0.0, posinf=TAP_CLAMP, neginf=-TAP_CLAMP)
    return np.clip(f, -TAP_CLAMP, TAP_CLAMP)


def features(target, tokens, taps, start_pos=0):
    """Feature rows (n, L*D) of a sequence fed to the target at start_pos.. (a single
    forward with a causal mask, so the rows equal those of any cached / batched schedule).
    Also returns the target logits (n, V)."""
    logits, tp = target.forward_sequence(tokens, start_pos=start_pos, taps=list(taps))
    f = np.concatenate([tp[i] for i in taps], axis=1)
    return clamp_features(f), logits


class DraftCache:
    """One sequence's injected context K/V, by absolute position, for every layer."""

    def __init__(self, drafter):
        self.d = drafter
        self.pos = []
        self.k = [[] for _ in drafter.layers]
        self.v = [[] for _ in drafter.layers]

    def inject(self, f, pos):
        """Feature rows f (m, L*D) of target tokens at positions pos (m,)."""
        pos = [int(p) for p in pos]
        if set(pos) & set(self.pos) or len(set(pos)) != len(pos):
            raise DrafterError("position injected twice (truncate first)")
        c = self.d.fuse(f)
        kv = self.d.context_kv(c, np.asarray(pos))
        for l, (k, v) in enumerate(kv):
            self.k[l].extend(list(k))
            self.v[l].extend(list(v))
        self.pos.extend(pos)
        return c, kv

    def truncate(self, p):
        """Keep positions < p."""
        keep = [i for i, q in enumerate(self.pos) if q < p]
        self.pos = [self.pos[i] for i in keep]
        for l in range(len(self.k)):
            self.k[l] = [self.k[l][i] for i in keep]
            self.v[l] = [self.v[l][i] for i in keep]

    def positions(self):
        return list(self.pos)

    def kv(self, l):
        if not self.pos:
            return None, None
        return np.stack(self.k[l]), np.stack(self.v[l])


# ------------------------------------------------------------------------------------
# selector and walks (§12-§14)
# ------------------------------------------------------------------------------------

def topk(row, K):
    """Ids of the K largest entries, sorted by value descending, equal values by id
    ascending (§12.3)."""
    order = np.lexsort((np.arange(row.size), -row))
    return order[:K]


def edge_scores(U, gate, A_rows, B_rows):
    """S[i, k] = U[k] + sum_r A_rows[i, r] * gate[r] * B_rows[k, r] (§12.2)."""
    return U[None, :] + (A_rows * gate[None, :]) @ B_rows.T


def first_argmax(row):
    return int(np.flatnonzero(row == np.max(row))[0])


def greedy_walk(sel, p_min=0.0):
    """§13. Returns dict ids (drafted ids), k (candidate indices), conf (the confidence
    1 / sum exp(row - row[k*]) of every slot visited, the stopping one included)."""
    ids, ks, conf = [], [], []
    prev = 0
    for p in range(len(sel["S"])):
        row = sel["S"][p][prev]
        k = first_argmax(row)
        c = 1.0 / np.sum(np.exp(row - row[k]))
        conf.append(c)
        if p_min > 0 and c < p_min:
            break
        ids.append(int(sel["C"][p][k]))
        ks.append(k)
        prev = k
    return dict(ids=ids, k=ks, conf=conf)


def inverse_cdf(q, u):
    """k = #{j : u >= CDF_j} clamped to len(q)-1, CDF accumulated left to right."""
    cdf = np.cumsum(q)
    return min(int(np.sum(u >= cdf)), len(q) - 1)


def sampled_walk(sel, T, uniforms, p_min=0.0):
    """§14. Slot p uses uniforms[p-1]. Returns dict ids, k, q (list of K-vectors, one per
    drafted slot), used (number of uniforms consumed)."""
    T = max(float(T), T_MIN)
    ids, ks, qs = [], [], []
    prev = 0
    for p in range(len(sel["S"])):
        row = sel["S"][p][prev]
        q = softmax(row / T)
        if p_min > 0 and np.max(q) < p_min:
            break
        k = inverse_cdf(q, uniforms[p])
        ids.append(int(sel["C"][p][k]))
        ks.append(k)
        qs.append(q)
        prev = k
    return dict(ids=ids, k=ks, q=qs, used=len(ids))


def v1_greedy(z, p_min=0.0):
    """DFlash v1 at T = 0: independent argmax per slot (lowest id on ties), stop at the first
    slot whose top softmax probability over the vocabulary is below p_min."""
    ids, conf = [], []
    for row in z:
        t = first_argmax(row)
        c = float(np.max(softmax(row)))
        conf.append(c)
        if p_min > 0 and c < p_min:
            break
        ids.append(t)
    return dict(ids=ids, conf=conf)


def v1_sampled(z, T, uniforms, p_min=0.0):
    """DFlash v1 at T > 0: q_p = softmax(z_p / T) over the vocabulary, inverse CDF in id order."""
    T = max(float(T), T_MIN)
    ids, qs = [], []
    for p, row in enumerate(z):
        q = softmax(row / T)
        if p_min > 0 and np.max(q) < p_min:
            break
        ids.append(inverse_cdf(q, uniforms[p]))
        qs.append(q)
    return dict(ids=ids, q=qs)


# ------------------------------------------------------------------------------------
# verification (§15)
# ------------------------------------------------------------------------------------

def verify_greedy(target_logits, drafts):
    """§15.2. target_logits (n+1, V): rows of the verify batch [a, d_1..d_n]. Returns
    (m accepted, emitted tokens d_1..d_m + [correction or bonus])."""
    m = 0
    for i, d in enumerate(drafts):
        t = first_argmax(target_logits[i])
        if t != d:
            return m, list(drafts[:m]) + [t]
        m += 1
    return m, list(drafts) + [first_argmax(target_logits[len(drafts)])]


def verify_rejection(p_rows, drafts, C, q, u_accept, u_resample):
    """§15.4. p_rows (n+1, V) target distributions of the verify rows; C (n, K) candidate
    ids, q (n, K) proposals; u_accept[i] for slot i+1; u_resample[0] drives the single
    residual / bonus draw (inverse CDF in token-id order). Returns (m, emitted)."""
    n = len(drafts)
    for i in range(n):
        qt = np.zeros(p_rows.shape[1])
        qt[C[i]] = q[i]
        d = drafts[i]
        if u_accept[i] * qt[d] < p_rows[i][d]:
            continue
        r = np.maximum(0.0, p_rows[i] - qt)
        r = p_rows[i] if r.sum() == 0 else r / r.sum()
        return i, list(drafts[:i]) + [inverse_cdf(r, u_resample[0])]
    return n, list(drafts) + [inverse_cdf(p_rows[n], u_resample[0])]
