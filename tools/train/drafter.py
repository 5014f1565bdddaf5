"""drafter.py -- the DFlash2 drafter in PyTorch (training and reference forward).

What it is: the drafter of ../shared/docs/dflash2.md §6-§12 written as a torch.nn.Module, with the
conventions of the NumPy reference tools/ref/dflash_ref.py (which spex's C drafter was verified
against): fc + enc norm fusion of the target's tap rows (§7), context K/V with k_norm and NEOX RoPE
at each context token's own position, the block [anchor, MASK x n] at P..P+n (§8), non-causal
attention of the block rows over the context strictly before the anchor plus their own block (§9),
the grouped dynamic depthwise convolution on both sides of attention and FFN (§10: T_c taps, group
g, delta from the normed sublayer input, flat index grp + G*(t + T_c*s), taps zero across the block
start), the drafter's final norm and the TARGET's frozen LM head (§11) and the low-rank candidate
selector (§12-§13: top-K, U = logits, gate = H h_out, S = U + sum_r A[pred] gate B[cand]).

One batched entry point serves training and inference: `blocks()` runs any number of blocks of
equal length per sequence against that sequence's fused context, with a visibility rule "context
position < anchor position" (plus an optional sliding window) and "same block". Training puts many
random anchors of one sequence side by side (dflash2.md §22); inference runs one block.

What it is not: a target model (the target's tap rows come in as `feats`; tools/train/model.py is
the target), a trainer (train_drafter.py), or a GGUF writer (export_drafter.py). No KV cache: the
context K/V are recomputed from the fused context each call (cheap at this size).

Shapes: N sequences, S context rows, A blocks per sequence, Bn rows per block (n+1), D hidden,
L taps, H / H_kv heads of d_h, F FFN width, T_c conv taps, g group size, G = D / g, R selector rank,
K candidates, V vocabulary. Weight layouts are PyTorch's (out, in), i.e. the ggml ne {in, out}.
"""

import math
from dataclasses import dataclass, field, asdict

import torch
import torch.nn as nn
import torch.nn.functional as Fn


@dataclass
class DrafterConfig:
    D: int                       # = target n_embd (the head and embedding are borrowed)
    V: int                       # target vocabulary
    taps: list                   # GGUF tap ids (input residual of target layer id; id == n_layer: pre-final-norm)
    mask_id: int                 # tokenizer special <|mask|>
    n_layer: int = 2
    H: int = 4
    H_kv: int = 2
    d_h: int = 64
    F: int = 512
    block: int = 8               # B: anchor + B-1 masks
    T_c: int = 2
    g: int = 16
    R: int = 32
    K: int = 8
    eps: float = 1e-6
    rope_base: float = 1e6
    window: int = 0              # 0 = no sliding window (|q - k| < W when > 0)
    causal: bool = False
    logit_scale: float = 0.0     # 0 / absent = none (§11)
    softcap: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def G(self):
        return self.D // self.g

    @property
    def L(self):
        return len(self.taps)

    def to_dict(self):
        return asdict(self)


def rms_norm(x, w, eps):
    """RMSNorm over the last axis in fp32, weights stored raw (no +1; dflash2.md §1)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_neox(x, pos, base):
    """NEOX RoPE on x (..., rows, heads, d_h) at positions pos (..., rows): pairs (i, i + d_h/2),
    angle pos * base^(-2i/d_h) (dflash always uses NEOX, §7 and §21 item 12)."""
    d = x.shape[-1]
    half = d // 2
    inv = base ** (-2.0 * torch.arange(half, dtype=torch.float64) / d)
    ang = (pos.to(torch.float64)[..., None] * inv).to(x.dtype)          # (..., rows, half)
    cos = torch.cos(ang)[..., None, :]
    sin = torch.sin(ang)[..., None, :]
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


class Layer(nn.Module):
    """One drafter layer: attention and SwiGLU FFN, each wrapped in a two-sided conv (§9, §10)."""

    def __init__(self, c: DrafterConfig):
        super().__init__()
        self.c = c
        D, H, Hk, dh, F = c.D, c.H, c.H_kv, c.d_h, c.F
        nd = 2 * c.T_c * c.G
        self.attn_norm = nn.Parameter(torch.ones(D))
        self.q = nn.Linear(D, H * dh, bias=False)
        self.k = nn.Linear(D, Hk * dh, bias=False)
        self.v = nn.Linear(D, Hk * dh, bias=False)
        self.o = nn.Linear(H * dh, D, bias=False)
        self.q_norm = nn.Parameter(torch.ones(dh))
        self.k_norm = nn.Parameter(torch.ones(dh))
        self.ffn_norm = nn.Parameter(torch.ones(D))
        self.gate = nn.Linear(D, F, bias=False)
        self.up = nn.Linear(D, F, bias=False)
        self.down = nn.Linear(F, D, bias=False)
        # conv bases (2 sides, T_c taps, D) = ne {D, T_c, 2}; identity init (§22: "identity-initialised")
        base = torch.zeros(2, c.T_c, D)
        base[:, 0, :] = 1.0
        self.attn_conv_base = nn.Parameter(base.clone())
        self.ffn_conv_base = nn.Parameter(base.clone())
        self.attn_conv_proj = nn.Linear(D, nd, bias=False)
        self.ffn_conv_proj = nn.Linear(D, nd, bias=False)
        nn.init.zeros_(self.attn_conv_proj.weight)
        nn.init.zeros_(self.ffn_conv_proj.weight)

    def context_kv(self, c, pos):
        """c (N, S, D) fused context at positions pos (N, S) -> K (N, S, H_kv, d_h) after k_norm
        and RoPE, V (N, S, H_kv, d_h) (§7 step 2)."""
        N, S, _ = c.shape
        k = self.k(c).view(N, S, self.c.H_kv, self.c.d_h)
        k = rope_neox(rms_norm(k, self.k_norm, self.c.eps), pos, self.c.rope_base)
        v = self.v(c).view(N, S, self.c.H_kv, self.c.d_h)
        return k, v

    def delta(self, proj, u):
        """u (..., D) -> per-channel delta (..., 2, T_c, D): row j's conv_proj output viewed as
        [s][t][grp] (flat grp + G*(t + T_c*s), §10.1), each group broadcast over its g channels."""
        c = self.c
        d = proj(u).view(*u.shape[:-1], 2, c.T_c, c.G)
        return d.repeat_interleave(c.g, dim=-1)

    def conv(self, x, base, dlt, s, j):
        """Side s of one module (§10.2). x (N, R, D); base (2, T_c, D); dlt (N, R, 2, T_c, D);
        j (R,) in-block index of each row (rows of one block are consecutive). Tap t of row r reads
        x[r - t] with row r's coefficients, and is zero when j[r] < t (block-local)."""
        out = None
        for t in range(self.c.T_c):
            coef = base[s, t] + dlt[:, :, s, t, :]
            if t == 0:
                src = x
            else:
                src = torch.zeros_like(x)
                src[:, t:] = x[:, :-t]
                src = src * (j >= t).to(x.dtype)[None, :, None]
            out = coef * src if out is None else out + coef * src
        return out

    def forward(self, x, pos, j, ctx_kv, vis_c, vis_b):
        """x (N, R, D) block rows (R = A blocks of Bn consecutive rows) at positions pos (N, R),
        in-block index j (R,); ctx_kv the context (K, V) of this layer; vis_c (N, R, S) bool
        visibility of the context keys; vis_b (N, A, Bn, Bn) visibility of the row's own block
        keys (other blocks are never visible, so their scores are not even formed)."""
        c = self.c
        N, R, D = x.shape
        A, Bn = vis_b.shape[1], vis_b.shape[2]
        u = rms_norm(x, self.attn_norm, c.eps)
        da = self.delta(self.attn_conv_proj, u)
        u = self.conv(u, self.attn_conv_base, da, 0, j)
        q = self.q(u).view(N, R, c.H, c.d_h)
        k = self.k(u).view(N, R, c.H_kv, c.d_h)
        v = self.v(u).view(N, R, c.H_kv, c.d_h)
        q = rope_neox(rms_norm(q, self.q_norm, c.eps), pos, c.rope_base)
        k = rope_neox(rms_norm(k, self.k_norm, c.eps), pos, c.rope_base)
        ck, cv = ctx_kv
        rep = c.H // c.H_kv                                  # GQA: head h uses KV head floor(h*H_kv/H)
        ck, cv = ck.repeat_interleave(rep, dim=2), cv.repeat_interleave(rep, dim=2)
        k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
        scale = 1.0 / math.sqrt(c.d_h)
        s_c = torch.einsum("nrhd,nshd->nhrs", q, ck) * scale                      # (N, H, R, S)
        s_c = s_c.masked_fill(~vis_c[:, None], float("-inf"))
        qb = q.view(N, A, Bn, c.H, c.d_h)
        kb = k.view(N, A, Bn, c.H, c.d_h)
        vb = v.view(N, A, Bn, c.H, c.d_h)
        s_b = torch.einsum("nabhd,nachd->nhabc", qb, kb) * scale                  # (N, H, A, Bn, Bn)
        s_b = s_b.masked_fill(~vis_b[:, None], float("-inf")).reshape(N, c.H, R, Bn)
        pr = torch.softmax(torch.cat([s_c, s_b], dim=-1), dim=-1)                # joint softmax
        S = s_c.shape[-1]
        att = torch.einsum("nhrs,nshd->nrhd", pr[..., :S], cv)
        att = att + torch.einsum("nhabc,nachd->nabhd", pr[..., S:].reshape(N, c.H, A, Bn, Bn), vb).reshape(N, R, c.H, c.d_h)
        att = att.reshape(N, R, c.H * c.d_h)
        a = self.o(att)
        a = self.conv(a, self.attn_conv_base, da, 1, j)
        r = x + a
        u2 = rms_norm(r, self.ffn_norm, c.eps)
        df = self.delta(self.ffn_conv_proj, u2)
        u2 = self.conv(u2, self.ffn_conv_base, df, 0, j)
        m = self.down(Fn.silu(self.gate(u2)) * self.up(u2))
        m = self.conv(m, self.ffn_conv_base, df, 1, j)
        return r + m


class Drafter(nn.Module):
    """The DFlash2 drafter. `embed` and `head` (V, D) are the target's frozen token embedding and
    LM head (buffers, never trained, never exported: §4.4)."""

    def __init__(self, c: DrafterConfig, embed, head):
        super().__init__()
        self.c = c
        D = c.D
        self.fc = nn.Linear(c.L * D, D, bias=False)
        self.enc_norm = nn.Parameter(torch.ones(D))
        self.layers = nn.ModuleList([Layer(c) for _ in range(c.n_layer)])
        self.out_norm = nn.Parameter(torch.ones(D))
        self.sel_H = nn.Linear(D, c.R, bias=False)                  # gate projection (R, D)
        self.sel_A = nn.Parameter(torch.randn(c.V, c.R) * 0.1)      # predecessor codebook
        self.sel_B = nn.Parameter(torch.randn(c.V, c.R) * 0.1)      # successor codebook
        self.register_buffer("embed", embed.detach().float().clone())
        self.register_buffer("head", head.detach().float().clone())
        for l in self.layers:      # smaller residual-branch outputs at init
            for lin in (l.q, l.k, l.v, l.gate, l.up):
                nn.init.normal_(lin.weight, std=D ** -0.5)
            nn.init.normal_(l.o.weight, std=(c.H * c.d_h) ** -0.5 / math.sqrt(2 * c.n_layer))
            nn.init.normal_(l.down.weight, std=c.F ** -0.5 / math.sqrt(2 * c.n_layer))
        nn.init.normal_(self.fc.weight, std=(c.L * D) ** -0.5)
        nn.init.normal_(self.sel_H.weight, std=D ** -0.5)

    # -- §7 ----------------------------------------------------------------------------------

    def fuse(self, feats):
        """feats (N, S, L*D) -> c (N, S, D) = RMSNorm(W_fc f; enc.output_norm)."""
        return rms_norm(self.fc(feats), self.enc_norm, self.c.eps)

    # -- §8-§11 --------------------------------------------------------------------------------

    def blocks(self, feats, anchor_tok, anchor_pos, n, ctx_len=None):
        """Run A blocks of n+1 rows per sequence.

        feats (N, S, L*D): the target's tap rows of each sequence's tokens at positions 0..S-1;
        anchor_tok, anchor_pos (N, A): anchor token and its position P (context visible to the
        block: positions < P, and < ctx_len[i] if given); n: masks per block.
        Returns h_out (N, A, n, D), the drafter's normed rows 1..n (§11 step 1)."""
        c = self.c
        N, S, _ = feats.shape
        A = anchor_tok.shape[1]
        Bn = n + 1
        dev = feats.device
        cx = self.fuse(feats)
        ctx_pos = torch.arange(S, device=dev)[None].expand(N, S)
        toks = torch.full((N, A, Bn), c.mask_id, dtype=torch.long, device=dev)
        toks[:, :, 0] = anchor_tok
        jj = torch.arange(Bn, device=dev)
        pos = (anchor_pos[:, :, None] + jj).reshape(N, A * Bn)          # row j at P + j
        x = self.embed[toks.reshape(N, A * Bn)]
        j = jj.repeat(A)                                                # (A*Bn,)
        # visibility: context key k iff k < P of the row's block (and inside the sequence);
        # block key iff the same block (non-causal, or causal inside the block)
        P_row = anchor_pos[:, :, None].expand(N, A, Bn).reshape(N, A * Bn)
        vis_c = ctx_pos[:, None, :] < P_row[:, :, None]                  # (N, R, S)
        if ctx_len is not None:
            vis_c = vis_c & (ctx_pos[:, None, :] < ctx_len[:, None, None])
        vis_b = torch.ones(Bn, Bn, dtype=torch.bool, device=dev)
        if c.causal:
            vis_b = vis_b.tril()
        vis_b = vis_b[None, None].expand(N, A, Bn, Bn)
        vis_cw, vis_bw = vis_c, vis_b
        if c.window > 0:      # |q - k| < W on SWA layers (§9; all layers unless extra["swa_pattern"])
            vis_cw = vis_c & ((pos[:, :, None] - ctx_pos[:, None, :]).abs() < c.window)
            d = (jj[:, None] - jj[None, :]).abs() < c.window
            vis_bw = vis_b & d[None, None]
        swa = c.extra.get("swa_pattern", [True] * c.n_layer)
        for li, layer in enumerate(self.layers):
            kv = layer.context_kv(cx, ctx_pos)
            w = c.window > 0 and swa[li]
            x = layer(x, pos, j, kv, vis_cw if w else vis_c, vis_bw if w else vis_b)
        x = x.view(N, A, Bn, c.D)[:, :, 1:]
        return rms_norm(x, self.out_norm, c.eps)

    def logits(self, h_out):
        """§11 steps 2-3: the target's head, then logit scale and softcap when configured."""
        z = h_out @ self.head.t()
        if self.c.logit_scale:
            z = z * self.c.logit_scale
        if self.c.softcap > 0:
            z = self.c.softcap * torch.tanh(z / self.c.softcap)
        return z

    # -- §12 -----------------------------------------------------------------------------------

    def gate(self, h_out):
        return self.sel_H(h_out)

    def edge(self, U, gate, pred, cand):
        """S[..., i, k] = U[..., k] + sum_r A[pred[..., i]] gate[..., r] B[cand[..., k]] (§12.2).
        U (..., K), gate (..., R), pred (..., P) ids, cand (..., K) ids -> (..., P, K)."""
        a = self.sel_A[pred] * gate[..., None, :]
        b = self.sel_B[cand]
        return U[..., None, :] + a @ b.transpose(-1, -2)


def topk_sorted(z, K):
    """Top-K ids of z (..., V) sorted by value descending, equal values by id ascending (§12.3):
    a stable sort of -z keeps ascending ids among equal values (torch.topk leaves ties unordered)."""
    return torch.sort(-z, dim=-1, stable=True).indices[..., :K]


@torch.no_grad()
def draft_greedy(dr: Drafter, feats, anchor, P, n):
    """Inference for one sequence (§13): the block at P over context rows feats (1, P, L*D).
    Returns dict ids (n drafted ids), C (n, K), U (n, K), z (n, V), h_out (n, D)."""
    h = dr.blocks(feats[:, :P], torch.tensor([[anchor]]), torch.tensor([[P]]), n)[0, 0]
    z = dr.logits(h)
    C = topk_sorted(z, dr.c.K)
    U = torch.gather(z, 1, C)
    gate = dr.gate(h)
    ids, prev_tok = [], anchor
    for p in range(n):
        S = dr.edge(U[p], gate[p], torch.tensor([prev_tok]), C[p])[0]
        k = int(torch.nonzero(S == S.max())[0, 0])     # first maximum
        prev_tok = int(C[p, k])
        ids.append(prev_tok)
    return dict(ids=ids, C=C, U=U, z=z, h_out=h)


def _selftest():
    """Batched multi-anchor blocks (the training layout) equal one block at a time over the
    truncated context (the inference layout); identity conv init leaves rows unchanged."""
    torch.manual_seed(0)
    c = DrafterConfig(D=32, V=50, taps=[1, 2], mask_id=49, n_layer=2, H=4, H_kv=2, d_h=8, F=64, R=4, K=3)
    emb, head = torch.randn(50, 32), torch.randn(50, 32)
    dr = Drafter(c, emb, head)
    with torch.no_grad():
        for l in dr.layers:    # non-trivial convs so the layout test covers them
            l.attn_conv_proj.weight.normal_(0, 0.3)
            l.ffn_conv_proj.weight.normal_(0, 0.3)
            l.attn_conv_base.add_(0.3 * torch.randn_like(l.attn_conv_base))
    N, S, A, n = 2, 20, 5, 7
    f = torch.randn(N, S, 64)
    ap = torch.randint(3, 14, (N, A))
    at = torch.randint(0, 49, (N, A))
    h = dr.blocks(f, at, ap, n)
    err = 0.0
    for i in range(N):
        for k in range(A):
            P = int(ap[i, k])
            h1 = dr.blocks(f[i:i + 1, :P], at[i:i + 1, k:k + 1], ap[i:i + 1, k:k + 1], n)
            err = max(err, float((h1[0, 0] - h[i, k]).abs().max()))
    assert err < 1e-5, err
    lay = Layer(c)
    x = torch.randn(1, 8, 32)
    d = lay.delta(lay.attn_conv_proj, x)
    assert torch.equal(lay.conv(x, lay.attn_conv_base, d, 0, torch.arange(8)), x)
    print(f"drafter selftest ok (batched vs single block max err {err:.1e})")


if __name__ == "__main__":
    _selftest()
