#!/usr/bin/python3
"""make_model_seeds.py -- writes the seed corpus of fuzz/fuzz_model.c: tiny valid targets of every
architecture spex loads (llama untied, qwen3, qwen35 with a GDN layer, an attention layer and the
MTP block; qwen35 tied with attention.recurrent_layers), all F32, a few KB each.

Deterministic (fixed seed); only the shapes and key sets matter, not the values.
Usage (repository root): /usr/bin/python3 fuzz/make_model_seeds.py
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools", "ref"))
import gguf_io as G  # noqa: E402

OUT = os.path.join(HERE, "corpus", "model")
rng = np.random.RandomState(7)


def mat(n_out, n_in):
    return (rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)).astype(np.float32)


def vec(n):
    return (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)


def common(w, arch, E, N, H, Hkv, hd, F, V):
    w.add("general.architecture", G.STRING, arch)
    w.add(f"{arch}.block_count", G.U32, N)
    w.add(f"{arch}.context_length", G.U32, 64)
    w.add(f"{arch}.embedding_length", G.U32, E)
    w.add(f"{arch}.feed_forward_length", G.U32, F)
    w.add(f"{arch}.attention.head_count", G.U32, H)
    w.add(f"{arch}.attention.head_count_kv", G.U32, Hkv)
    w.add(f"{arch}.attention.key_length", G.U32, hd)
    w.add(f"{arch}.attention.value_length", G.U32, hd)
    w.add(f"{arch}.attention.layer_norm_rms_epsilon", G.F32, 1e-6)
    w.add(f"{arch}.rope.freq_base", G.F32, 10000.0)
    w.add_tensor("token_embd.weight", mat(V, E))
    w.add_tensor("output_norm.weight", vec(E))


def dense(arch, qk):
    E, N, H, Hkv, hd, F, V = 16, 2, 2, 1, 8, 16, 32
    w = G.Writer()
    common(w, arch, E, N, H, Hkv, hd, F, V)
    w.add_tensor("output.weight", mat(V, E))
    for l in range(N):
        p = f"blk.{l}."
        w.add_tensor(p + "attn_norm.weight", vec(E))
        w.add_tensor(p + "attn_q.weight", mat(H * hd, E))
        w.add_tensor(p + "attn_k.weight", mat(Hkv * hd, E))
        w.add_tensor(p + "attn_v.weight", mat(Hkv * hd, E))
        w.add_tensor(p + "attn_output.weight", mat(E, H * hd))
        if qk:
            w.add_tensor(p + "attn_q_norm.weight", vec(hd))
            w.add_tensor(p + "attn_k_norm.weight", vec(hd))
        w.add_tensor(p + "ffn_norm.weight", vec(E))
        w.add_tensor(p + "ffn_gate.weight", mat(F, E))
        w.add_tensor(p + "ffn_up.weight", mat(F, E))
        w.add_tensor(p + "ffn_down.weight", mat(E, F))
    return w


def qwen35(tied, pattern):
    E, H, Hkv, hd, F, V = 16, 2, 1, 8, 16, 32
    Hk, Hv, D = 1, 2, 8
    C = 2 * Hk * D + Hv * D
    N = len(pattern)
    mtp = not tied
    w = G.Writer()
    common(w, "qwen35", E, N + (1 if mtp else 0), H, Hkv, hd, F, V)
    w.add("qwen35.rope.dimension_count", G.U32, 8)
    w.add_array("qwen35.rope.dimension_sections", G.I32, [2, 2, 0, 0])
    w.add("qwen35.ssm.conv_kernel", G.U32, 4)
    w.add("qwen35.ssm.state_size", G.U32, D)
    w.add("qwen35.ssm.group_count", G.U32, Hk)
    w.add("qwen35.ssm.time_step_rank", G.U32, Hv)
    w.add("qwen35.ssm.inner_size", G.U32, Hv * D)
    if tied:
        w.add_array("qwen35.attention.recurrent_layers", G.BOOL, [bool(x) for x in pattern])
    else:
        w.add("qwen35.full_attention_interval", G.U32, 2)
        w.add("qwen35.nextn_predict_layers", G.U32, 1)
        w.add_tensor("output.weight", mat(V, E))

    def attn(p):
        w.add_tensor(p + "attn_q.weight", mat(2 * H * hd, E))
        w.add_tensor(p + "attn_k.weight", mat(Hkv * hd, E))
        w.add_tensor(p + "attn_v.weight", mat(Hkv * hd, E))
        w.add_tensor(p + "attn_output.weight", mat(E, H * hd))
        w.add_tensor(p + "attn_q_norm.weight", vec(hd))
        w.add_tensor(p + "attn_k_norm.weight", vec(hd))

    def ffn(p):
        w.add_tensor(p + "attn_norm.weight", vec(E))
        w.add_tensor(p + "post_attention_norm.weight", vec(E))
        w.add_tensor(p + "ffn_gate.weight", mat(F, E))
        w.add_tensor(p + "ffn_up.weight", mat(F, E))
        w.add_tensor(p + "ffn_down.weight", mat(E, F))

    for l, rec in enumerate(pattern):
        p = f"blk.{l}."
        ffn(p)
        if rec:
            w.add_tensor(p + "attn_qkv.weight", mat(C, E))
            w.add_tensor(p + "attn_gate.weight", mat(Hv * D, E))
            w.add_tensor(p + "ssm_conv1d.weight", (0.5 * rng.standard_normal((C, 4))).astype(np.float32))
            w.add_tensor(p + "ssm_dt.bias", (0.5 * rng.standard_normal(Hv)).astype(np.float32))
            w.add_tensor(p + "ssm_a", (-np.exp(0.5 * rng.standard_normal(Hv))).astype(np.float32))
            w.add_tensor(p + "ssm_beta.weight", mat(Hv, E))
            w.add_tensor(p + "ssm_alpha.weight", mat(Hv, E))
            w.add_tensor(p + "ssm_norm.weight", vec(D))
            w.add_tensor(p + "ssm_out.weight", mat(E, Hv * D))
        else:
            attn(p)
    if mtp:
        p = f"blk.{N}."
        ffn(p)
        attn(p)
        w.add_tensor(p + "nextn.eh_proj.weight", mat(E, 2 * E))
        w.add_tensor(p + "nextn.enorm.weight", vec(E))
        w.add_tensor(p + "nextn.hnorm.weight", vec(E))
        w.add_tensor(p + "nextn.shared_head_norm.weight", vec(E))
    return w


def main():
    os.makedirs(OUT, exist_ok=True)
    seeds = {
        "llama.gguf": dense("llama", False),
        "qwen3.gguf": dense("qwen3", True),
        "qwen35-mtp.gguf": qwen35(False, [1, 0]),
        "qwen35-tied.gguf": qwen35(True, [1, 1, 0]),
    }
    for name, w in seeds.items():
        w.write(os.path.join(OUT, name))
        print(name, os.path.getsize(os.path.join(OUT, name)), "bytes")


if __name__ == "__main__":
    main()
