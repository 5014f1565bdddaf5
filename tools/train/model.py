"""model.py -- the qwen3 target model in PyTorch (CPU, float32), for training and for goldens.

What it is: the `qwen3` forward of ../shared/docs/targets.md §3 and §5, written to follow the
conventions of the NumPy reference tools/ref/model_ref.py exactly (they are spex's):
pre-norm blocks, RMSNorm x * (mean(x^2) + eps)^-1/2 * w with eps 1e-6 and plain weights
(no "1 + w"), per-head RMSNorm of q and k over the head dim BEFORE RoPE, NEOX RoPE (pairs
(i, i + hd/2), angle pos * base^(-2i/hd), base 1e6, full rotary), causal GQA where query
head h reads KV head floor(h * H_kv / H), scores scaled by 1/sqrt(hd), SwiGLU FFN, an
untied (or tied) output head. The head dim is its own hyper-parameter (GGUF key_length),
never assumed to be E / H.

It also offers
  - layer taps (targets.md §3.4, dflash2.md §6): tap id l < n_layer is the residual
    stream entering layer l (l = 0: the embedding), id n_layer is the output of the last
    layer before output_norm;
  - generate(): batched greedy / sampled decoding with a preallocated KV cache and
    left-padded prompts (for the drafter's training data);
  - from_gguf() / gguf_tensors(): the mapping to and from spex's GGUF tensor names
    (targets.md §5.2), dequantizing quantized tensors with tools/ref/ggml_formats.py.

What it is not: a model of spex's internals (no fp16 KV cache, no threads), nor fast on
long contexts (attention is materialised as a [B, H, T, T] matrix).

Legend: B batch rows, T tokens, E hidden, H / Hkv query / KV heads, hd head dim, F FFN
width, V vocabulary, L layers.
"""

import math
import os
import sys
from dataclasses import dataclass, asdict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as Fn

_REF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref")
if _REF not in sys.path:
    sys.path.insert(0, _REF)


@dataclass
class Config:
    n_vocab: int = 2048
    n_embd: int = 320
    n_layer: int = 8
    n_head: int = 5
    n_head_kv: int = 1
    head_dim: int = 64
    n_ff: int = 960
    eps: float = 1e-6
    rope_base: float = 1e6
    tied: bool = False
    ctx: int = 1024

    def to_dict(self):
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(pos, hd, base):
    """pos: int tensor (any shape) -> cos, sin of shape pos.shape + (hd/2,), in float32
    (angles computed in float64 so large positions lose nothing before the cast)."""
    half = hd // 2
    inv = base ** (-2.0 * torch.arange(half, dtype=torch.float64) / hd)
    ang = pos.to(torch.float64).unsqueeze(-1) * inv
    return torch.cos(ang).float(), torch.sin(ang).float()


def rope_neox(x, cos, sin):
    """x: [B, heads, T, hd]; cos/sin: [B or 1, 1, T, hd/2]. NEOX pairs (i, i + hd/2)."""
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        E, H, Hkv, hd = c.n_embd, c.n_head, c.n_head_kv, c.head_dim
        self.q = nn.Linear(E, H * hd, bias=False)
        self.k = nn.Linear(E, Hkv * hd, bias=False)
        self.v = nn.Linear(E, Hkv * hd, bias=False)
        self.o = nn.Linear(H * hd, E, bias=False)
        self.q_norm = RMSNorm(hd, c.eps)
        self.k_norm = RMSNorm(hd, c.eps)
        if H % Hkv:
            raise ValueError(f"head_count {H} is not a multiple of head_count_kv {Hkv}")

    def qkv(self, n, cos, sin):
        """n: [B, T, E] normed inputs -> q [B, H, T, hd], k, v [B, Hkv, T, hd] (k roped)."""
        B, T, _ = n.shape
        c = self.c
        q = self.q(n).view(B, T, c.n_head, c.head_dim).transpose(1, 2)
        k = self.k(n).view(B, T, c.n_head_kv, c.head_dim).transpose(1, 2)
        v = self.v(n).view(B, T, c.n_head_kv, c.head_dim).transpose(1, 2)
        q = rope_neox(self.q_norm(q), cos, sin)   # QK-norm per head, before RoPE (§5.3)
        k = rope_neox(self.k_norm(k), cos, sin)
        return q, k, v

    def attend(self, q, k, v, mask):
        """q [B, H, T, hd]; k, v [B, Hkv, S, hd]; mask broadcastable to [B, 1, T, S], True =
        visible -> [B, T, H*hd]. Query head h reads KV head floor(h * Hkv / H): with H a
        multiple of Hkv those are contiguous groups of G = H / Hkv query heads, so q is
        viewed as [B, Hkv, G*T, hd] and multiplied with k directly (no copies of k, v)."""
        B, H, T, hd = q.shape
        Hkv, S = k.shape[1], k.shape[2]
        G = H // Hkv
        qg = q.reshape(B, Hkv, G * T, hd)
        s = torch.matmul(qg, k.transpose(-1, -2)).view(B, H, T, S) * (1.0 / math.sqrt(hd))
        s = s.masked_fill(~mask, float("-inf"))
        p = torch.softmax(s, dim=-1)
        o = torch.matmul(p.view(B, Hkv, G * T, S), v).view(B, H, T, hd)
        return o.transpose(1, 2).reshape(B, T, H * hd)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attn_norm = RMSNorm(c.n_embd, c.eps)
        self.attn = Attention(c)
        self.ffn_norm = RMSNorm(c.n_embd, c.eps)
        self.gate = nn.Linear(c.n_embd, c.n_ff, bias=False)
        self.up = nn.Linear(c.n_embd, c.n_ff, bias=False)
        self.down = nn.Linear(c.n_ff, c.n_embd, bias=False)

    def ffn(self, h):
        n = self.ffn_norm(h)
        return self.down(Fn.silu(self.gate(n)) * self.up(n))


class Qwen3(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embd = nn.Embedding(c.n_vocab, c.n_embd)
        self.blocks = nn.ModuleList([Block(c) for _ in range(c.n_layer)])
        self.out_norm = RMSNorm(c.n_embd, c.eps)
        self.out = None if c.tied else nn.Linear(c.n_embd, c.n_vocab, bias=False)

    # -- initialisation ------------------------------------------------------------------

    def init_weights(self, seed):
        """N(0, 0.02) embeddings, N(0, 1/fan_in) matmuls with the residual-output
        projections scaled down by 1/sqrt(2L) (so the residual stream does not grow with
        depth at init), norms at 1."""
        g = torch.Generator().manual_seed(seed)
        c = self.c
        with torch.no_grad():
            self.embd.weight.normal_(0.0, 0.02, generator=g)
            for name, p in self.named_parameters():
                if name.startswith("embd"):
                    continue
                if p.dim() == 1:
                    p.fill_(1.0)
                    continue
                std = 1.0 / math.sqrt(p.shape[1])
                if name.endswith("attn.o.weight") or name.endswith("down.weight"):
                    std /= math.sqrt(2 * c.n_layer)
                p.normal_(0.0, std, generator=g)
        return self

    def n_params(self):
        return sum(p.numel() for p in self.parameters())

    def head(self, x):
        w = self.embd.weight if self.out is None else self.out.weight
        return Fn.linear(self.out_norm(x), w)

    # -- the forward -----------------------------------------------------------------------

    def forward(self, ids, taps=None, pos=None, key_valid=None, last_only=False):
        """ids [B, T] -> logits [B, T, V] (or [B, 1, V] with last_only); with taps (a list of
        tap ids), returns (logits, [tap tensors [B, T, E] in the order asked]).
        pos: [B, T] positions (default 0..T-1); key_valid: [B, T] bool, False marks padding
        that no query may read (left padding in generate())."""
        c = self.c
        B, T = ids.shape
        if pos is None:
            pos = torch.arange(T).unsqueeze(0)
        cos, sin = rope_tables(pos, c.head_dim, c.rope_base)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)           # [B|1, 1, T, hd/2]
        mask = torch.ones(T, T, dtype=torch.bool).tril().view(1, 1, T, T)
        if key_valid is not None:   # padding keys hidden, except from themselves (no NaN rows)
            mask = mask & (key_valid.view(B, 1, 1, T) | torch.eye(T, dtype=torch.bool).view(1, 1, T, T))
        want = {} if not taps else {t: None for t in taps}
        for t in want:
            if not 0 <= t <= c.n_layer:
                raise ValueError(f"tap {t} outside 0..{c.n_layer}")
        x = self.embd(ids)
        for l, blk in enumerate(self.blocks):
            if l in want:
                want[l] = x
            q, k, v = blk.attn.qkv(blk.attn_norm(x), cos, sin)
            h = x + blk.attn.o(blk.attn.attend(q, k, v, mask))
            x = h + blk.ffn(h)
        if c.n_layer in want:
            want[c.n_layer] = x
        if last_only:
            x = x[:, -1:, :]
        logits = self.head(x)
        if taps:
            return logits, [want[t] for t in taps]
        return logits

    # -- batched generation with a KV cache ------------------------------------------------

    @torch.no_grad()
    def generate(self, prompts, max_new, temperature=0.0, top_k=0, top_p=1.0, eos=None,
                 seed=0, return_margins=False):
        """prompts: list of token-id lists. Greedy (temperature 0: argmax, lowest id on
        ties) or sampled (softmax(logits / T) restricted to top_k, then to the smallest
        nucleus with mass >= top_p). Each row stops after emitting eos (included) or after
        max_new tokens. Returns the list of generated id lists (and, with return_margins,
        each step's top-1 minus top-2 logit)."""
        c = self.c
        B = len(prompts)
        Tp = max(len(p) for p in prompts)
        S = Tp + max_new
        if S > c.ctx:
            raise ValueError(f"prompt + max_new = {S} exceeds the context {c.ctx}")
        g = torch.Generator().manual_seed(seed)
        pad = torch.tensor([Tp - len(p) for p in prompts])
        ids = torch.zeros(B, Tp, dtype=torch.long)
        for b, p in enumerate(prompts):
            ids[b, Tp - len(p):] = torch.tensor(p, dtype=torch.long)
        valid = torch.arange(S).unsqueeze(0) >= pad.unsqueeze(1)          # [B, S]
        pos_all = (torch.arange(S).unsqueeze(0) - pad.unsqueeze(1)).clamp(min=0)
        dt = self.embd.weight.dtype   # float32, or float64 for goldens
        kc = [torch.zeros(B, c.n_head_kv, S, c.head_dim, dtype=dt) for _ in range(c.n_layer)]
        vc = [torch.zeros(B, c.n_head_kv, S, c.head_dim, dtype=dt) for _ in range(c.n_layer)]

        def step(tok, t0, t1):
            """Feed tok [B, t1-t0] at cache slots t0..t1-1; logits of the last slot."""
            pos = pos_all[:, t0:t1]
            cos, sin = rope_tables(pos, c.head_dim, c.rope_base)
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
            q_slot = torch.arange(t0, t1).view(1, 1, -1, 1)
            k_slot = torch.arange(t1).view(1, 1, 1, -1)
            # a padding slot sees itself only, so its rows stay finite (a row with every
            # key masked would turn to NaN and 0 * NaN poisons the real rows' matmul)
            mask = (k_slot <= q_slot) & (valid[:, :t1].view(B, 1, 1, t1) | (k_slot == q_slot))
            x = self.embd(tok)
            for l, blk in enumerate(self.blocks):
                q, k, v = blk.attn.qkv(blk.attn_norm(x), cos, sin)
                kc[l][:, :, t0:t1] = k
                vc[l][:, :, t0:t1] = v
                h = x + blk.attn.o(blk.attn.attend(q, kc[l][:, :, :t1], vc[l][:, :, :t1], mask))
                x = h + blk.ffn(h)
            return self.head(x[:, -1, :])

        row = step(ids, 0, Tp)
        out = [[] for _ in range(B)]
        margins = [[] for _ in range(B)]
        done = torch.zeros(B, dtype=torch.bool)
        for i in range(max_new):
            if return_margins:
                top2 = torch.topk(row, 2, dim=-1).values
                mg = (top2[:, 0] - top2[:, 1]).tolist()
            if temperature <= 0.0:
                nxt = torch.argmax(row, dim=-1)   # first maximum = lowest id on ties
            else:
                nxt = _sample(row / temperature, top_k, top_p, g)
            for b in range(B):
                if not done[b]:
                    out[b].append(int(nxt[b]))
                    if return_margins:
                        margins[b].append(mg[b])
                    if eos is not None and int(nxt[b]) == eos:
                        done[b] = True
            if bool(done.all()) or i == max_new - 1:
                break
            row = step(nxt.view(B, 1), Tp + i, Tp + i + 1)
        return (out, margins) if return_margins else out

    # -- GGUF mapping ----------------------------------------------------------------------

    def gguf_tensors(self):
        """(name, float32 numpy array (out, in)) in spex's naming (targets.md §5.2); the
        array's reversed shape is the ggml ne."""
        sd = {k: v.detach().cpu().float().numpy() for k, v in self.state_dict().items()}
        out = [("token_embd.weight", sd["embd.weight"]), ("output_norm.weight", sd["out_norm.weight"])]
        if not self.c.tied:
            out.append(("output.weight", sd["out.weight"]))
        for l in range(self.c.n_layer):
            for ours, theirs in _LAYER_NAMES:
                out.append((f"blk.{l}.{theirs}.weight", sd[f"blocks.{l}.{ours}.weight"]))
        return out


_LAYER_NAMES = [
    ("attn_norm", "attn_norm"), ("attn.q", "attn_q"), ("attn.k", "attn_k"), ("attn.v", "attn_v"),
    ("attn.o", "attn_output"), ("attn.q_norm", "attn_q_norm"), ("attn.k_norm", "attn_k_norm"),
    ("ffn_norm", "ffn_norm"), ("gate", "ffn_gate"), ("up", "ffn_up"), ("down", "ffn_down"),
]


def _sample(logits, top_k, top_p, g):
    """logits [B, V] already divided by the temperature -> sampled ids [B]."""
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        srt, idx = torch.sort(logits, dim=-1, descending=True)
        p = torch.softmax(srt, dim=-1)
        before = torch.cumsum(p, dim=-1) - p          # mass strictly before each entry
        srt = srt.masked_fill(before >= top_p, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, idx, srt)
    p = torch.softmax(logits, dim=-1)
    return torch.multinomial(p, 1, generator=g).view(-1)


# ------------------------------------------------------------------------------------------
# loading
# ------------------------------------------------------------------------------------------

def _gguf_array(t):
    """A GGUF tensor as a float32 numpy array with shape reversed(ne), dequantized if needed."""
    import gguf_io
    if t.type in (gguf_io.GGML_F32, gguf_io.GGML_F16):
        return np.asarray(t.data, dtype=np.float32)
    import ggml_formats
    name = ggml_formats.TYPE_BY_ID.get(t.type)
    if name is None:
        raise ValueError(f"tensor {t.name}: ggml type {t.type} not supported")
    return ggml_formats.dequantize(name, t.data).astype(np.float32).reshape(tuple(reversed(t.ne)))


def from_gguf(path):
    """A Qwen3 with the weights of a qwen3 GGUF (quantized tensors dequantized)."""
    import gguf_io
    g = gguf_io.read(path)
    if g.get("general.architecture") != "qwen3":
        raise ValueError(f"{path}: not a qwen3 GGUF")
    k = lambda n, d=None: g.get(f"qwen3.{n}", d)
    E, H = int(k("embedding_length")), int(k("attention.head_count"))
    V = g.tensors["token_embd.weight"].ne[1]
    c = Config(n_vocab=int(V), n_embd=E, n_layer=int(k("block_count")), n_head=H,
               n_head_kv=int(k("attention.head_count_kv", H)), head_dim=int(k("attention.key_length", E // H)),
               n_ff=int(k("feed_forward_length")), eps=float(k("attention.layer_norm_rms_epsilon")),
               rope_base=float(k("rope.freq_base", 10000.0)), tied="output.weight" not in g.tensors,
               ctx=int(k("context_length", 1024)))
    m = Qwen3(c)
    sd = {"embd.weight": _gguf_array(g.tensors["token_embd.weight"]),
          "out_norm.weight": _gguf_array(g.tensors["output_norm.weight"])}
    if not c.tied:
        sd["out.weight"] = _gguf_array(g.tensors["output.weight"])
    for l in range(c.n_layer):
        for ours, theirs in _LAYER_NAMES:
            sd[f"blocks.{l}.{ours}.weight"] = _gguf_array(g.tensors[f"blk.{l}.{theirs}.weight"])
    m.load_state_dict({n: torch.from_numpy(np.array(a, dtype=np.float32)) for n, a in sd.items()})
    return m.eval()


def from_checkpoint(path):
    """A Qwen3 from a train_target.py checkpoint ({"config": dict, "model": state_dict})."""
    ck = torch.load(path, map_location="cpu")
    m = Qwen3(Config(**ck["config"]))
    m.load_state_dict(ck["model"])
    return m.eval()
