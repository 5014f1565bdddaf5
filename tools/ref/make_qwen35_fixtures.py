#!/usr/bin/python3
"""make_qwen35_fixtures.py -- writes the tiny qwen35 targets, their goldens and a DFlash2 drafter in tests/data/qwen35/.

What it is: the generator of the committed fixtures that spex's C qwen35 tests compare
against (layouts in tools/ref/README.md, section "qwen35 fixtures (tests/data/qwen35/)"):

    tiny-qwen35.gguf             arch qwen35, F32, 4 trunk layers (GDN, attention, GDN,
                                 attention by full_attention_interval 2) + 1 MTP block,
                                 tiled V heads (Hk 2, Hv 4), partial rotary 16 of 32, untied
    tiny-qwen35.golden.gguf      24-token logits / taps / hidden, greedy ids, MTP logits and
                                 h_nextn per position, a 4-step MTP draft chain, GDN states
    tiny-qwen35-tied.gguf        same shapes, tied head, no MTP, layer pattern from
                                 attention.recurrent_layers = [true, true, false, true]
    tiny-qwen35-tied.golden.gguf the single-sequence part, greedy ids, GDN states
    tiny-qwen35.dflash2.gguf     a DFlash2 drafter for tiny-qwen35 (make_dflash_fixtures'
                                 recipe, taps [1, 2, 4], block 8, mask 250); no golden

All numbers come from qwen35_ref.py (float64) on the weights as written (F32) and are
stored as F32. Deterministic: legacy RandomState streams with fixed seeds.

Before writing, the self-checks run (--check runs them and compares with the committed
files, writing nothing): a plain-loop second implementation of one GDN layer (§7.1 read
off the flat tensor data) equals the vectorised one; chunked GDN (chunk 1, 4, 7, 64) equals
the recurrent form; a Session
with two interleaved sequences equals single runs; snapshot / restore and per-row state
adoption after a verify batch equal re-running only the accepted tokens; the layer pattern
rule; MTP with the eh_proj halves swapped changes the logits; every stored argmax has a
margin >= MARGIN; files built twice are byte-identical.

What it is not: a test of the C code (that is tests/test_*qwen35*.c).

Usage (repository root):  /usr/bin/python3 tools/ref/make_qwen35_fixtures.py [--check] [--out DIR]
"""

import argparse
import hashlib
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gguf_io as gio  # noqa: E402
import qwen35_ref as qr  # noqa: E402

ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
OUT_DEFAULT = os.path.join(ROOT, "tests", "data", "qwen35")
TOKENIZER_SRC = os.path.join(ROOT, "tests", "data", "models", "tiny-qwen3.gguf")

TAPS = [0, 2, 4]
N_SINGLE = 24
N_GREEDY = 12
N_PROMPT_GREEDY = 6
N_CHAIN = 4
MARGIN = 0.01          # every stored argmax at least this far from its runner-up (fp32 error ~1e-5)
TOL_CHUNK = 1e-10      # chunked vs recurrent GDN, float64
TOL_SESSION = 1e-12    # cached / batched paths vs the whole-sequence path

BASE = dict(
    n_embd=64, n_ff=96, n_head=4, n_head_kv=2, head_dim=32, n_rot=16, sections=[4, 4, 0, 0],
    rope_base=1e4, eps=1e-6, ctx=256, d_conv=4, Dk=16, Hk=2, Hv=4, inner=64,
    embd_sigma=1.0, conv_sigma=0.5)

CONFIGS = {
    "tiny-qwen35": dict(BASE, seed=6001, golden_seed=7001, n_trunk=4, nextn=1, interval=2,
                        recurrent_layers=None, tied=False),
    "tiny-qwen35-tied": dict(BASE, seed=6002, golden_seed=7002, n_trunk=4, nextn=0, interval=None,
                             recurrent_layers=[True, True, False, True], tied=True, embd_sigma=0.15),
}

DRAFTER = dict(name="tiny-qwen35.dflash2", target="tiny-qwen35", seed=6101, taps=[1, 2, 4], block=8, mask=250)


class CheckError(Exception):
    pass


def sha256_bytes(b):
    return hashlib.sha256(b).hexdigest()


def expect_close(what, a, b, tol):
    d = float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) if np.size(a) else 0.0
    if not d <= tol:
        raise CheckError(f"{what}: max abs diff {d:.3g} > {tol:g}")
    return d


def f32(a):
    return np.ascontiguousarray(np.asarray(a, dtype=np.float64).astype(np.float32))


def i32(a):
    return np.asarray(a, dtype=np.int32).reshape(-1)


# ------------------------------------------------------------------------------------
# the model files
# ------------------------------------------------------------------------------------

def build_model(name, cfg):
    rng = np.random.RandomState(cfg["seed"])
    a = "qwen35"
    E, H, Hkv, hd, F = cfg["n_embd"], cfg["n_head"], cfg["n_head_kv"], cfg["head_dim"], cfg["n_ff"]
    Dk, Hk, Hv, K = cfg["Dk"], cfg["Hk"], cfg["Hv"], cfg["d_conv"]
    Dv = cfg["inner"] // Hv
    C = 2 * Hk * Dk + Hv * Dv
    n_all = cfg["n_trunk"] + cfg["nextn"]
    w = gio.Writer()
    w.add("general.architecture", gio.STRING, a)
    w.add("general.name", gio.STRING, name)
    w.add("general.file_type", gio.U32, 0)
    w.add(f"{a}.block_count", gio.U32, n_all)
    if cfg["nextn"]:
        w.add(f"{a}.nextn_predict_layers", gio.U32, cfg["nextn"])
    w.add(f"{a}.context_length", gio.U32, cfg["ctx"])
    w.add(f"{a}.embedding_length", gio.U32, E)
    w.add(f"{a}.feed_forward_length", gio.U32, F)
    w.add(f"{a}.attention.head_count", gio.U32, H)
    w.add(f"{a}.attention.head_count_kv", gio.U32, Hkv)
    w.add(f"{a}.attention.key_length", gio.U32, hd)
    w.add(f"{a}.attention.value_length", gio.U32, hd)
    w.add(f"{a}.attention.layer_norm_rms_epsilon", gio.F32, cfg["eps"])
    w.add(f"{a}.rope.freq_base", gio.F32, cfg["rope_base"])
    w.add(f"{a}.rope.dimension_count", gio.U32, cfg["n_rot"])
    w.add_array(f"{a}.rope.dimension_sections", gio.I32, i32(cfg["sections"]))
    w.add(f"{a}.ssm.conv_kernel", gio.U32, K)
    w.add(f"{a}.ssm.state_size", gio.U32, Dk)
    w.add(f"{a}.ssm.group_count", gio.U32, Hk)
    w.add(f"{a}.ssm.time_step_rank", gio.U32, Hv)
    w.add(f"{a}.ssm.inner_size", gio.U32, cfg["inner"])
    if cfg["interval"] is not None:
        w.add(f"{a}.full_attention_interval", gio.U32, cfg["interval"])
    if cfg["recurrent_layers"] is not None:
        # bool array: llama.cpp's converter passes a list of Python bools to the writer
        w.add_array(f"{a}.attention.recurrent_layers", gio.BOOL, np.array(cfg["recurrent_layers"], dtype=bool))
    tok = gio.read(TOKENIZER_SRC)
    for k, v in tok.kv.items():
        if k.startswith("tokenizer."):
            w.add_value(k, v)
    V = len(tok.get("tokenizer.ggml.tokens"))
    recurrent = qr.layer_pattern(cfg["n_trunk"], cfg["interval"], cfg["recurrent_layers"])

    def mat(n_in, n_out, sigma=1.0):   # ne {n_in, n_out} -> numpy (n_out, n_in)
        return rng.standard_normal((n_out, n_in)) * sigma / np.sqrt(n_in)

    def norm(n, spread):
        return 1.0 + spread * rng.standard_normal(n)

    w.add_tensor("token_embd.weight", rng.standard_normal((V, E)) * cfg["embd_sigma"])
    w.add_tensor("output_norm.weight", norm(E, 0.1))
    if not cfg["tied"]:
        w.add_tensor("output.weight", mat(E, V))

    def common(p):
        w.add_tensor(p + "attn_norm.weight", norm(E, 0.1))
        w.add_tensor(p + "post_attention_norm.weight", norm(E, 0.1))
        w.add_tensor(p + "ffn_gate.weight", mat(E, F))
        w.add_tensor(p + "ffn_up.weight", mat(E, F))
        w.add_tensor(p + "ffn_down.weight", mat(F, E))

    def attention(p):
        w.add_tensor(p + "attn_q.weight", mat(E, 2 * H * hd))
        w.add_tensor(p + "attn_k.weight", mat(E, Hkv * hd))
        w.add_tensor(p + "attn_v.weight", mat(E, Hkv * hd))
        w.add_tensor(p + "attn_output.weight", mat(H * hd, E))
        w.add_tensor(p + "attn_q_norm.weight", norm(hd, 0.3))
        w.add_tensor(p + "attn_k_norm.weight", norm(hd, 0.3))

    for l in range(cfg["n_trunk"]):
        p = f"blk.{l}."
        common(p)
        if recurrent[l]:
            w.add_tensor(p + "attn_qkv.weight", mat(E, C))
            w.add_tensor(p + "attn_gate.weight", mat(E, Hv * Dv))
            w.add_tensor(p + "ssm_conv1d.weight", rng.standard_normal((C, K)) * cfg["conv_sigma"])
            w.add_tensor(p + "ssm_dt.bias", 0.5 * rng.standard_normal(Hv))
            w.add_tensor(p + "ssm_a", -np.exp(0.5 * rng.standard_normal(Hv)))
            w.add_tensor(p + "ssm_beta.weight", mat(E, Hv))
            w.add_tensor(p + "ssm_alpha.weight", mat(E, Hv))
            w.add_tensor(p + "ssm_norm.weight", norm(Dv, 0.1))
            w.add_tensor(p + "ssm_out.weight", mat(Hv * Dv, E))
        else:
            attention(p)
    if cfg["nextn"]:
        p = f"blk.{cfg['n_trunk']}."
        common(p)
        attention(p)
        w.add_tensor(p + "nextn.eh_proj.weight", mat(2 * E, E))
        w.add_tensor(p + "nextn.enorm.weight", norm(E, 0.1))
        w.add_tensor(p + "nextn.hnorm.weight", norm(E, 0.1))
        w.add_tensor(p + "nextn.shared_head_norm.weight", norm(E, 0.1))
    return w


# ------------------------------------------------------------------------------------
# goldens
# ------------------------------------------------------------------------------------

def pick_single(m, rng):
    """24 random ids whose logits rows all have an argmax margin >= MARGIN (row 23 is the
    MTP anchor), as do every MTP logits row and every MTP chain step."""
    for _ in range(2000):
        toks = [int(t) for t in rng.randint(0, m.n_vocab, N_SINGLE)]
        r = m.run(toks, taps=TAPS)
        if min(qr.first_argmax(row)[1] for row in r.logits) < MARGIN:
            continue
        if m.has_mtp:
            anchor, _ = qr.first_argmax(r.logits[-1])
            mtp, lg, hn = qr.mtp_catchup(m, r, toks)
            if min(qr.first_argmax(row)[1] for row in lg) < MARGIN:
                continue
            ids, mgs, _, _ = qr.mtp_chain(m, mtp, anchor, N_SINGLE, m.mtp_hidden_rows(r)[-1], N_CHAIN)
            if min(mgs) < MARGIN:
                continue
        return toks, r
    raise CheckError("no single sequence with safe margins")


def pick_greedy(m, rng):
    for _ in range(500):
        prompt = [int(t) for t in rng.randint(0, m.n_vocab, N_PROMPT_GREEDY)]
        ids, margins = qr.greedy(m, prompt, N_GREEDY)
        if min(margins) >= max(MARGIN, 0.03) and len(set(ids)) >= 6:
            return prompt, ids, margins
    raise CheckError("no greedy prompt with a safe margin")


def make_golden(mpath, cfg, info):
    m = qr.Model(mpath)
    rng = np.random.RandomState(cfg["golden_seed"])
    toks, r = pick_single(m, rng)
    single_taps = np.concatenate([r.taps[l] for l in TAPS], axis=1)
    prompt, ids, gmargins = pick_greedy(m, rng)
    info["greedy_margin"] = min(gmargins)
    info["logit_absmax"] = float(np.abs(r.logits).max())
    info["tap_absmax"] = float(np.abs(single_taps).max())
    info["single_margin_min"] = min(qr.first_argmax(row)[1] for row in r.logits)
    info["anchor_margin"] = qr.first_argmax(r.logits[-1])[1]
    info["pattern"] = "".join("G" if x else "A" for x in m.recurrent)

    g = gio.Writer()
    g.add("general.architecture", gio.STRING, "spex-golden")
    g.add("golden.model", gio.STRING, os.path.basename(mpath))
    with open(mpath, "rb") as f:
        g.add("golden.model_sha256", gio.STRING, sha256_bytes(f.read()))
    g.add_array("golden.taps", gio.I32, i32(TAPS))
    g.add_array("golden.single.tokens", gio.I32, i32(toks))
    g.add_array("golden.greedy.prompt", gio.I32, i32(prompt))
    g.add_array("golden.greedy.ids", gio.I32, i32(ids))
    g.add("golden.greedy.min_margin", gio.F32, float(min(gmargins)))
    gdn_layers = [l for l in range(m.n_layer) if m.recurrent[l]]
    g.add_array("golden.state.layers", gio.I32, i32(gdn_layers))
    g.add_tensor("single.logits", f32(r.logits))           # ne {V, 24}
    g.add_tensor("single.taps", f32(single_taps))           # ne {3E, 24}
    g.add_tensor("single.hidden", f32(r.hidden))            # ne {E, 24}
    for l in gdn_layers:
        g.add_tensor(f"state.S.{l}", f32(r.states[l].S))         # ne {Dv, Dk, Hv}
        g.add_tensor(f"state.conv.{l}", f32(r.states[l].conv))   # ne {C, d_conv-1}
    if m.has_mtp:
        mtp, lg, hn = qr.mtp_catchup(m, r, toks)
        anchor, _ = qr.first_argmax(r.logits[-1])
        chain, cm, crows, chs = qr.mtp_chain(m, mtp, anchor, N_SINGLE, m.mtp_hidden_rows(r)[-1], N_CHAIN)
        g.add_array("golden.mtp.chain", gio.I32, i32(chain))
        g.add("golden.mtp.chain_margin", gio.F32, float(min(cm)))
        g.add("golden.mtp.anchor", gio.I32, int(anchor))
        g.add_tensor("mtp.logits", f32(lg))                  # ne {V, 24}
        g.add_tensor("mtp.hidden", f32(hn))                  # ne {E, 24}
        g.add_tensor("mtp.chain.logits", f32(crows))         # ne {V, 4}
        info["chain"] = chain
        info["chain_margin"] = min(cm)
        info["mtp_absmax"] = float(np.abs(lg).max())
        info["mtp_std"] = float(np.mean(np.std(lg, axis=1)))
        info["mtp_argmax_margin_min"] = min(qr.first_argmax(row)[1] for row in lg)
    return g, m, toks, r


# ------------------------------------------------------------------------------------
# self-checks
# ------------------------------------------------------------------------------------

def check_pattern():
    lp = qr.layer_pattern
    att = [i for i, x in enumerate(lp(64, 4)) if not x]
    if att != list(range(3, 64, 4)):
        raise CheckError(f"layer pattern 27B: attention layers {att}")
    if sum(1 for x in lp(24, 4) if not x) != 6:
        raise CheckError("layer pattern 0.8B: expected 6 attention layers")
    if lp(4, 2) != [True, False, True, False]:
        raise CheckError("layer pattern interval 2")
    if lp(4, 2, [1, 1, 0, 1]) != [True, True, False, True]:
        raise CheckError("recurrent_layers does not override the interval")
    if lp(4, None, [True, True, False, True, False]) != [True, True, False, True]:
        raise CheckError("recurrent_layers covering the MTP layer")
    for bad in ([True, True, False], [True, True, False, True, True]):
        try:
            lp(4, None, bad)
        except qr.ModelError:
            continue
        raise CheckError(f"recurrent_layers {bad} accepted")
    if lp(8, None) != lp(8, 4):
        raise CheckError("absent interval must default to 4")


def check_gdn_scalar(m, toks, info):
    """§7.1 written a second time with plain loops over the flat F32 data of the file (conv
    weight element k + 4c, qkv channel layout, tiling t mod Hk), for the first GDN layer over
    6 tokens; compared with Model.gdn_layer."""
    l = m.recurrent.index(True)
    x = m.run(toks[:6], taps=[l]).taps[l]
    xn = qr.rms_norm(x, m.lw(l, "attn_norm.weight"), m.eps)
    want, _ = m.gdn_layer(l, xn, m.new_gdn_state())
    T = m.gguf.tensors
    flat = {nm: np.asarray(T[f"blk.{l}.{nm}"].data, dtype=np.float64).reshape(-1)
            for nm in ("attn_qkv.weight", "attn_gate.weight", "ssm_conv1d.weight", "ssm_dt.bias", "ssm_a",
                       "ssm_beta.weight", "ssm_alpha.weight", "ssm_norm.weight", "ssm_out.weight")}
    E, C, Hk, Hv, D, K = m.n_embd, m.C, m.Hk, m.Hv, m.Dk, m.d_conv

    def matvec(name, v, n_out):   # ne {n_in, n_out}: out[r] = sum_c W[r*n_in + c] v[c]
        n_in = len(v)
        return [sum(flat[name][r * n_in + c] * v[c] for c in range(n_in)) for r in range(n_out)]

    hist = [[0.0] * C for _ in range(K - 1)]
    S = [[[0.0] * D for _ in range(D)] for _ in range(Hv)]
    worst = 0.0
    for t in range(6):
        xv = list(xn[t])
        mixed = matvec("attn_qkv.weight", xv, C)
        z = matvec("attn_gate.weight", xv, Hv * D)
        bl = matvec("ssm_beta.weight", xv, Hv)
        al = matvec("ssm_alpha.weight", xv, Hv)
        win = hist + [mixed]
        conv = []
        for c in range(C):
            acc = sum(flat["ssm_conv1d.weight"][k + K * c] * win[k][c] for k in range(K))
            conv.append(acc / (1.0 + np.exp(-acc)))
        hist = win[1:]

        def l2(vv):
            nn = np.sqrt(sum(a * a for a in vv))
            return [a / max(nn, m.eps) for a in vv]
        qh = [l2(conv[h * D:(h + 1) * D]) for h in range(Hk)]
        kh = [l2(conv[Hk * D + h * D:Hk * D + (h + 1) * D]) for h in range(Hk)]
        out = []
        for h in range(Hv):
            v = conv[2 * Hk * D + h * D:2 * Hk * D + (h + 1) * D]
            q = [a / np.sqrt(D) for a in qh[h % Hk]]
            k = kh[h % Hk]
            beta = 1.0 / (1.0 + np.exp(-bl[h]))
            g = np.logaddexp(0.0, al[h] + flat["ssm_dt.bias"][h]) * flat["ssm_a"][h]
            for i in range(D):
                for j in range(D):
                    S[h][i][j] *= np.exp(g)
            err = [beta * (v[j] - sum(S[h][i][j] * k[i] for i in range(D))) for j in range(D)]
            for i in range(D):
                for j in range(D):
                    S[h][i][j] += k[i] * err[j]
            o = [sum(S[h][i][j] * q[i] for i in range(D)) for j in range(D)]
            rms = np.sqrt(sum(a * a for a in o) / D + m.eps)
            for j in range(D):
                zz = z[h * D + j]
                out.append(o[j] / rms * flat["ssm_norm.weight"][j] * zz / (1.0 + np.exp(-zz)))
        y = matvec("ssm_out.weight", out, E)
        worst = max(worst, expect_close(f"scalar GDN layer {l} token {t}", y, want[t], 1e-12))
    info["gdn_scalar"] = worst


def check_chunked(m, toks, r, info):
    worst = 0.0
    for ch in (4, 7, 1, 64):
        rc = m.run(toks, taps=TAPS, mode="chunked", chunk=ch)
        worst = max(worst, expect_close(f"chunked {ch} vs recurrent logits", rc.logits, r.logits, TOL_CHUNK))
        for l in r.states:
            worst = max(worst, expect_close(f"chunked {ch} state S.{l}", rc.states[l].S, r.states[l].S, TOL_CHUNK))
            worst = max(worst, expect_close(f"chunked {ch} conv.{l}", rc.states[l].conv, r.states[l].conv, TOL_CHUNK))
    info["chunk_vs_recurrent"] = worst


def check_session(m, rng, toks, r, info):
    worst = 0.0
    # one batch, token by token, chunked batches: all equal the whole-sequence run
    s = qr.Session(m)
    rb = s.decode([0] * len(toks), range(len(toks)), toks, taps=TAPS)
    worst = max(worst, expect_close("session one batch", rb.logits, r.logits, TOL_SESSION))
    for l in TAPS:
        worst = max(worst, expect_close(f"session tap {l}", rb.taps[l], r.taps[l], TOL_SESSION))
    worst = max(worst, expect_close("tap 0 = embedding", r.taps[0], m.w["token_embd.weight"][toks], 0.0))
    s = qr.Session(m)
    for p, t in enumerate(toks):
        lg = s.decode([3], [p], [t], mode="chunked", chunk=4).logits
        worst = max(worst, expect_close(f"token by token {p}", lg[0], r.logits[p], TOL_SESSION))
    for l, st in r.states.items():
        worst = max(worst, expect_close(f"token by token state {l}", s.seqs[3].gdn[l].S, st.S, TOL_SESSION))
    # two interleaved sequences, uneven batches, mixed with decode rows
    a = toks
    b = [int(t) for t in rng.randint(0, m.n_vocab, 17)]
    ra, rb_ = m.run(a, taps=TAPS), m.run(b, taps=TAPS)
    s = qr.Session(m)
    na = nb = 0
    sched = [(5, 0), (0, 6), (3, 4), (1, 1), (7, 2), (8, 4)]   # (rows of A, rows of B) per call
    for k, (ca, cb) in enumerate(sched):
        rows = [(0, na + i, a[na + i]) for i in range(ca)] + [(1, nb + i, b[nb + i]) for i in range(cb)]
        if k % 2:   # interleave A and B row by row
            ra_, rb2 = rows[:ca], rows[ca:]
            rows = [x for pair in zip(ra_, rb2) for x in pair] + ra_[len(rb2):] + rb2[len(ra_):]
        mode = "chunked" if k % 3 == 2 else "recurrent"
        out = s.decode([x[0] for x in rows], [x[1] for x in rows], [x[2] for x in rows], taps=TAPS,
                       mode=mode, chunk=3)
        for i, (sq, p, _) in enumerate(rows):
            ref = ra if sq == 0 else rb_
            worst = max(worst, expect_close(f"interleaved call {k} row {i}", out.logits[i], ref.logits[p], TOL_SESSION))
            for l in TAPS:
                worst = max(worst, expect_close(f"interleaved tap {l}", out.taps[l][i], ref.taps[l][p], TOL_SESSION))
        na += ca
        nb += cb
    assert na == len(a) and nb == len(b)
    info["session_vs_whole"] = worst


def check_rollback(m, rng, info):
    """A verify-like batch [anchor, d1..d4] at P; accept m = 2. Strategy B: restore the
    snapshot taken before it and re-run the 3 accepted rows; strategy A: adopt the per-row
    state of row m and truncate the KV. Both must equal a fresh run of prefix + accepted."""
    worst = 0.0
    pre = [int(t) for t in rng.randint(0, m.n_vocab, 9)]
    ver = [int(t) for t in rng.randint(0, m.n_vocab, 5)]
    P, acc = len(pre), 2
    ref = m.run(pre + ver[:acc + 1])
    nxt = int(rng.randint(0, m.n_vocab))
    ref2 = m.run(pre + ver[:acc + 1] + [nxt])
    s = qr.Session(m)
    s.decode([0] * P, range(P), pre)
    snap = s.snapshot(0)
    out = s.decode([0] * 5, range(P, P + 5), ver, keep_states=True)
    worst = max(worst, expect_close("verify rows 0..m", out.logits[:acc + 1], ref.logits[P:], TOL_SESSION))
    # strategy A
    sA = qr.Session(m)
    sA.seqs[0] = s.snapshot(0)
    sA.adopt(0, P + acc + 1, out.states[0][acc])
    # strategy B
    s.restore(0, snap)
    s.decode([0] * (acc + 1), range(P, P + acc + 1), ver[:acc + 1])
    for name, ss in (("restore + re-run", s), ("per-row adopt", sA)):
        for l, st in ref.states.items():
            worst = max(worst, expect_close(f"{name}: S.{l}", ss.seqs[0].gdn[l].S, st.S, TOL_SESSION))
            worst = max(worst, expect_close(f"{name}: conv.{l}", ss.seqs[0].gdn[l].conv, st.conv, TOL_SESSION))
        lg = ss.decode([0], [P + acc + 1], [nxt]).logits[0]
        worst = max(worst, expect_close(f"{name}: next token", lg, ref2.logits[-1], TOL_SESSION))
    info["rollback"] = worst


def check_mtp(m, mpath, toks, r, info):
    """Batched catch-up equals step by step; eh_proj halves swapped and pre-norm hidden change
    the logits (sanity: the fixture can tell the conventions apart)."""
    _, lg, hn = qr.mtp_catchup(m, r, toks)
    mt = qr.MTPSession(m)
    H = m.mtp_hidden_rows(r)
    worst = 0.0
    for p, t in enumerate(toks):
        l1, h1 = mt.step(t, p, np.zeros(m.n_embd) if p == 0 else H[p - 1])
        worst = max(worst, expect_close(f"MTP step {p}", l1, lg[p], TOL_SESSION))
        worst = max(worst, expect_close(f"MTP h_nextn {p}", h1, hn[p], TOL_SESSION))
    info["mtp_steps_vs_batch"] = worst
    sens = {}
    for name, kw in (("eh_proj halves swapped", dict(variant={"eh_swapped": True})),
                     ("pre-norm hidden", dict(mtp_hidden="pre"))):
        m2 = qr.Model(mpath, **kw)
        _, lg2, _ = qr.mtp_catchup(m2, r, toks)
        d = float(np.max(np.abs(lg2 - lg)))
        if d < 0.1:
            raise CheckError(f"MTP sanity: {name} moves the logits by only {d:.3g}")
        sens[name] = d
    info["mtp_sens"] = sens


def sensitivities(mpath, toks, r):
    """How far the 24-token logits move when one convention is implemented wrongly."""
    out = {}
    for name, kw in (("V heads grouped (floor(t*Hk/Hv)) instead of tiled", dict(variant={"grouped_heads": True})),
                     ("conv taps reversed", dict(variant={"conv_reversed": True})),
                     ("attention output gate skipped", dict(variant={"no_gate": True})),
                     ("[gate | q] instead of [q | gate]", dict(variant={"q_gate_swapped": True})),
                     ("L2 norm HF form", dict(l2_form="hf"))):
        m2 = qr.Model(mpath, **kw)
        out[name] = float(np.max(np.abs(m2.run(toks).logits - r.logits)))
    return out


def check_drafter(dpath, mpath, m):
    import dflash_ref as dr
    d = dr.Drafter(dpath, m)
    f, logits = dr.features(m, list(range(10, 22)), d.taps)
    cache = dr.DraftCache(d)
    cache.inject(f, np.arange(12))
    anchor = int(np.argmax(logits[-1]))
    z = d.draft_block(cache, anchor, 12, 7)["z"]
    if not np.all(np.isfinite(z)):
        raise CheckError("drafter block not finite")
    return float(np.abs(z).max())


# ------------------------------------------------------------------------------------

def build_all(out, check):
    files, infos = {}, {}
    for name, cfg in CONFIGS.items():
        w = build_model(name, cfg)
        data = w.to_bytes()
        if build_model(name, cfg).to_bytes() != data:
            raise CheckError(f"{name}: built twice, bytes differ")
        mpath = os.path.join(out, f"{name}.gguf")
        with open(mpath, "wb") as f:
            f.write(data)
        if gio.copy_writer(gio.read(mpath)).to_bytes() != data:
            raise CheckError(f"{name}: read + write is not byte-identical")
        info = {}
        g, m, toks, r = make_golden(mpath, cfg, info)
        gdata = g.to_bytes()
        if make_golden(mpath, cfg, {})[0].to_bytes() != gdata:
            raise CheckError(f"{name}: golden built twice, bytes differ")
        rng = np.random.RandomState(cfg["golden_seed"] + 500)
        check_gdn_scalar(m, toks, info)
        check_chunked(m, toks, r, info)
        check_session(m, rng, toks, r, info)
        check_rollback(m, rng, info)
        if m.has_mtp:
            check_mtp(m, mpath, toks, r, info)
            info["sens"] = sensitivities(mpath, toks, r)
        gpath = os.path.join(out, f"{name}.golden.gguf")
        with open(gpath, "wb") as f:
            f.write(gdata)
        files[f"{name}.gguf"] = data
        files[f"{name}.golden.gguf"] = gdata
        infos[name] = (info, m, mpath)
    # the DFlash2 drafter: make_dflash_fixtures' builder and tiny-qwen3 recipe, other taps / seed
    import make_dflash_fixtures as mdf
    info, m, mpath = infos[DRAFTER["target"]]
    dcfg = dict(mdf.CONFIGS["tiny-qwen3.dflash2"], seed=DRAFTER["seed"], taps=DRAFTER["taps"],
                block=DRAFTER["block"], mask=DRAFTER["mask"])
    dw = mdf.build_drafter(m, dcfg)
    ddata = dw.to_bytes()
    if mdf.build_drafter(m, dcfg).to_bytes() != ddata:
        raise CheckError("drafter built twice, bytes differ")
    dpath = os.path.join(out, f"{DRAFTER['name']}.gguf")
    with open(dpath, "wb") as f:
        f.write(ddata)
    check_drafter(dpath, mpath, m)
    files[f"{DRAFTER['name']}.gguf"] = ddata
    return files, infos


def report(files, infos):
    for name, (info, m, _) in infos.items():
        print(f"{name}: pattern {info['pattern']} (G = GDN, A = attention); |logits| <= {info['logit_absmax']:.2f}, "
              f"|taps| <= {info['tap_absmax']:.2f}; single-row margin min {info['single_margin_min']:.3g} "
              f"(anchor row 23: {info['anchor_margin']:.3g}); greedy min margin {info['greedy_margin']:.3g}")
        print(f"  chunked (4, 7, 1, 64) vs recurrent max diff {info['chunk_vs_recurrent']:.2g}; session / interleaved "
              f"vs whole-sequence {info['session_vs_whole']:.2g}; rollback (restore + re-run, per-row adopt) "
              f"{info['rollback']:.2g}; scalar-loop GDN layer vs vectorised {info['gdn_scalar']:.2g}")
        if "chain" in info:
            print(f"  MTP: |logits| <= {info['mtp_absmax']:.2f}, mean row std {info['mtp_std']:.2f}, per-row argmax "
                  f"margin min {info['mtp_argmax_margin_min']:.3g}; chain {info['chain']} margin "
                  f"{info['chain_margin']:.3g}; step vs batch {info['mtp_steps_vs_batch']:.2g}; "
                  + ", ".join(f"{k} moves MTP logits {v:.2f}" for k, v in info["mtp_sens"].items()))
            print("  sensitivities (max |delta logit| over 24 rows): "
                  + "; ".join(f"{k} {v:.3g}" for k, v in info["sens"].items()))
    for fn, data in files.items():
        print(f"{fn}: {len(data)} B")
    print(f"total {sum(len(d) for d in files.values())} B")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=OUT_DEFAULT)
    ap.add_argument("--check", action="store_true", help="run the self-checks only, write nothing")
    args = ap.parse_args()
    try:
        check_pattern()
        tmp = tempfile.TemporaryDirectory()
        files, infos = build_all(tmp.name, args.check)
        report(files, infos)
        if args.check:
            stale = [fn for fn, data in files.items()
                     if not os.path.exists(os.path.join(OUT_DEFAULT, fn))
                     or open(os.path.join(OUT_DEFAULT, fn), "rb").read() != data]
            if stale:
                raise CheckError(f"the committed fixtures differ from what this script writes: {stale}")
            print("the committed fixtures are up to date (--check: nothing written)")
        else:
            os.makedirs(args.out, exist_ok=True)
            for fn, data in files.items():
                with open(os.path.join(args.out, fn), "wb") as f:
                    f.write(data)
            print(f"written to {args.out}")
        tmp.cleanup()
    except (CheckError, qr.ModelError) as e:
        print(f"make_qwen35_fixtures: FAILED: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
