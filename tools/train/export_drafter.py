#!/usr/bin/python3
"""export_drafter.py -- write a trained DFlash2 drafter (drafter.py) as a GGUF of arch "dflash".

What it is: the mapping between drafter.py's module and the GGUF keys / tensors of
../shared/docs/dflash2.md §3-§4, in the layout tools/ref/make_dflash_fixtures.py writes (the
fixtures spex's C loader is tested on): every key of §3 that a DFlash2 file needs, target_layers
as GGUF ids (i32 array), the tokenizer keys copied from the target GGUF plus
tokenizer.ggml.mask_token_id, all tensors F32 (the drafter is small; norms and conv bases must be
F32 anyway). No token_embd / output tensors: DFlash2 borrows them from the target (§4.4).
`load_gguf` reads such a file back into a drafter.Drafter (used by golden_drafter.py and the
parity self-test, so the goldens are computed from the weights exactly as exported).

What it is not: a quantizer (spex quantize can requantize the matmul tensors if ever needed) or
a target exporter (export_target.py).

Usage:
  export_drafter.py --ckpt /work/train/ckpt/drafter.pt --target models/target.gguf --out models/drafter.gguf
"""

import argparse
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "ref"))
import gguf_io as gio  # noqa: E402
from drafter import Drafter, DrafterConfig  # noqa: E402

LAYER_TENSORS = (   # GGUF name, module attribute (weights of nn.Linear: .weight)
    ("attn_norm.weight", "attn_norm"), ("attn_q.weight", "q.weight"), ("attn_k.weight", "k.weight"),
    ("attn_v.weight", "v.weight"), ("attn_output.weight", "o.weight"),
    ("attn_q_norm.weight", "q_norm"), ("attn_k_norm.weight", "k_norm"),
    ("ffn_norm.weight", "ffn_norm"), ("ffn_gate.weight", "gate.weight"), ("ffn_up.weight", "up.weight"),
    ("ffn_down.weight", "down.weight"),
    ("attn_conv_base", "attn_conv_base"), ("attn_conv_proj.weight", "attn_conv_proj.weight"),
    ("ffn_conv_base", "ffn_conv_base"), ("ffn_conv_proj.weight", "ffn_conv_proj.weight"),
)
GLOBAL_TENSORS = (
    ("fc.weight", "fc.weight"), ("enc.output_norm.weight", "enc_norm"), ("output_norm.weight", "out_norm"),
    ("selector_hidden.weight", "sel_H.weight"), ("selector_predecessor.weight", "sel_A"),
    ("selector_successor.weight", "sel_B"),
)


def _get(mod, attr):
    for a in attr.split("."):
        mod = getattr(mod, a)
    return mod


def write_gguf(dr: Drafter, target_gguf, path, name="spex default drafter (DFlash2)", ctx_len=4096):
    c = dr.c
    tg = gio.read(target_gguf)
    w = gio.Writer()
    w.add("general.architecture", gio.STRING, "dflash")
    w.add("general.name", gio.STRING, name)
    w.add("dflash.block_count", gio.U32, c.n_layer)
    w.add("dflash.context_length", gio.U32, ctx_len)
    w.add("dflash.embedding_length", gio.U32, c.D)
    w.add("dflash.feed_forward_length", gio.U32, c.F)
    w.add("dflash.attention.head_count", gio.U32, c.H)
    w.add("dflash.attention.head_count_kv", gio.U32, c.H_kv)
    w.add("dflash.attention.key_length", gio.U32, c.d_h)
    w.add("dflash.attention.value_length", gio.U32, c.d_h)
    w.add("dflash.attention.layer_norm_rms_epsilon", gio.F32, c.eps)
    w.add("dflash.rope.dimension_count", gio.U32, c.d_h)
    w.add("dflash.rope.freq_base", gio.F32, c.rope_base)
    if c.window > 0:
        w.add("dflash.attention.sliding_window", gio.U32, c.window)
        w.add_array("dflash.attention.sliding_window_pattern", gio.BOOL,
                    np.array(c.extra.get("swa_pattern", [True] * c.n_layer)))
    w.add("dflash.attention.causal", gio.BOOL, bool(c.causal))
    w.add("dflash.block_size", gio.U32, c.block)
    w.add_array("dflash.target_layers", gio.I32, np.array(c.taps, dtype=np.int32))
    w.add("dflash.conv_kernel_size", gio.U32, c.T_c)
    w.add("dflash.conv_group_size", gio.U32, c.g)
    w.add("dflash.selector_rank", gio.U32, c.R)
    w.add("dflash.selector_top_k", gio.U32, c.K)
    if c.logit_scale:
        w.add("dflash.logit_scale", gio.F32, c.logit_scale)
    if c.softcap > 0:
        w.add("dflash.final_logit_softcapping", gio.F32, c.softcap)
    for k, v in tg.kv.items():                     # tokenizer copied from the target (§3)
        if k.startswith("tokenizer."):
            w.add_value(k, v)
    w.add("tokenizer.ggml.mask_token_id", gio.U32, c.mask_id)

    def t(x):
        return x.detach().cpu().float().numpy()

    for gname, attr in GLOBAL_TENSORS[:3]:
        w.add_tensor(gname, t(_get(dr, attr)))
    for gname, attr in GLOBAL_TENSORS[3:]:
        w.add_tensor(gname, t(_get(dr, attr)))
    for i, layer in enumerate(dr.layers):
        for gname, attr in LAYER_TENSORS:
            w.add_tensor(f"blk.{i}.{gname}", t(_get(layer, attr)))
    return w.write(path)


def _kv_int(g, k, default=None):
    v = g.get(k)
    return default if v is None else int(v)


def load_gguf(path, embed, head):
    """A Drafter holding exactly the weights of a dflash2 GGUF (F32 tensors as they are, quantized
    ones dequantized), with the target's embed / head (V, D) torch tensors borrowed."""
    g = gio.read(path)
    c = DrafterConfig(
        D=_kv_int(g, "dflash.embedding_length"), V=embed.shape[0],
        taps=[int(x) for x in g.get("dflash.target_layers")],
        mask_id=_kv_int(g, "tokenizer.ggml.mask_token_id"),
        n_layer=_kv_int(g, "dflash.block_count"), H=_kv_int(g, "dflash.attention.head_count"),
        H_kv=_kv_int(g, "dflash.attention.head_count_kv"), d_h=_kv_int(g, "dflash.attention.key_length"),
        F=_kv_int(g, "dflash.feed_forward_length"), block=_kv_int(g, "dflash.block_size"),
        T_c=_kv_int(g, "dflash.conv_kernel_size"), g=_kv_int(g, "dflash.conv_group_size"),
        R=_kv_int(g, "dflash.selector_rank"), K=_kv_int(g, "dflash.selector_top_k"),
        eps=float(g.get("dflash.attention.layer_norm_rms_epsilon")),
        rope_base=float(g.get("dflash.rope.freq_base", 10000.0)),
        window=_kv_int(g, "dflash.attention.sliding_window", 0),
        causal=bool(g.get("dflash.attention.causal", False)),
        logit_scale=float(g.get("dflash.logit_scale", 0.0) or 0.0),
        softcap=float(g.get("dflash.final_logit_softcapping", 0.0) or 0.0))
    pat = g.get("dflash.attention.sliding_window_pattern")
    if c.window > 0 and pat is not None and not all(pat):
        c.extra["swa_pattern"] = [bool(x) for x in pat]
    dr = Drafter(c, embed, head)

    def arr(name):
        t = g.tensors[name]
        if t.type == gio.GGML_F32:
            a = np.asarray(t.data, dtype=np.float32)
        else:  # a requantized drafter (spex quantize): its weights as stored, dequantized
            import ggml_formats
            kind = ggml_formats.TYPE_BY_ID.get(t.type)
            if kind is None:
                raise ValueError(f"{path}: {name}: ggml type {t.type} not supported")
            a = ggml_formats.dequantize(kind, t.data).astype(np.float32)
        return torch.from_numpy(a.reshape(tuple(reversed(t.ne))).copy())

    with torch.no_grad():
        for gname, attr in GLOBAL_TENSORS:
            _get(dr, attr).copy_(arr(gname))
        for i, layer in enumerate(dr.layers):
            for gname, attr in LAYER_TENSORS:
                _get(layer, attr).copy_(arr(f"blk.{i}.{gname}"))
    return dr


def selftest():
    """Parity of drafter.py (via load_gguf) with the NumPy reference's golden for the committed
    fixture tests/data/dflash/tiny-qwen3.dflash2.gguf (SWA on layer 0, logit scale, softcap),
    then a write / load round trip."""
    import tempfile
    from drafter import draft_greedy
    from model_ref import Model
    root = os.path.join(HERE, "..", "..", "tests", "data")
    tgt = Model(os.path.join(root, "models", "tiny-qwen3.gguf"))
    emb = torch.from_numpy(tgt.w["token_embd.weight"].astype(np.float32))
    head = torch.from_numpy(tgt.W_out.astype(np.float32))
    dr = load_gguf(os.path.join(root, "dflash", "tiny-qwen3.dflash2.gguf"), emb, head)
    gd = gio.read(os.path.join(root, "dflash", "tiny-qwen3.dflash2.golden.gguf"))
    f = torch.from_numpy(np.array(gd.tensors["ctx.features"].data, np.float32).reshape(gd.get("golden.P"), -1))
    P, anchor = int(gd.get("golden.P")), int(gd.get("golden.anchor"))
    worst = 0.0
    for n in (7, 3):
        r = draft_greedy(dr, f[None], anchor, P, n)
        zg = np.asarray(gd.tensors[f"block{n}.z"].data, np.float32).reshape(n, -1)
        err = float(np.max(np.abs(r["z"].numpy() - zg)) / (np.max(np.abs(zg)) + 1e-9))
        worst = max(worst, err)
        C = np.asarray(gd.get(f"golden.block{n}.C")).reshape(n, -1)
        ids = list(gd.get(f"golden.block{n}.greedy.ids"))
        assert (r["C"].numpy() == C).all(), (n, r["C"], C)
        assert r["ids"] == ids, (n, r["ids"], ids)
        assert err < 1e-4, err
    with tempfile.TemporaryDirectory() as td:
        pth = os.path.join(td, "d.gguf")
        write_gguf(dr, os.path.join(root, "models", "tiny-qwen3.gguf"), pth)
        dr2 = load_gguf(pth, emb, head)
        r1 = draft_greedy(dr, f[None], anchor, P, 7)
        r2 = draft_greedy(dr2, f[None], anchor, P, 7)
        assert torch.equal(r1["z"], r2["z"]) and r1["ids"] == r2["ids"]
    print(f"selftest ok: fixture z max rel err {worst:.2e}, C and greedy ids equal; round trip exact")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", help="train_drafter.py checkpoint (.pt)")
    ap.add_argument("--target", help="target GGUF (tokenizer keys are copied from it)")
    ap.add_argument("--out")
    ap.add_argument("--selftest", action="store_true", help="parity with the committed dflash2 fixture")
    a = ap.parse_args()
    if a.selftest:
        return selftest()
    ck = torch.load(a.ckpt, map_location="cpu")
    c = DrafterConfig(**ck["config"])
    sd = ck["model"]
    dr = Drafter(c, sd["embed"], sd["head"])
    dr.load_state_dict(sd)
    n = write_gguf(dr, a.target, a.out)
    print(f"wrote {a.out}: {n} bytes, {sum(p.numel() for p in dr.parameters())} parameters")


if __name__ == "__main__":
    main()
