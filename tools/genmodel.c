/*
 * genmodel.c — `spex gen-model`: writes a qwen3 or qwen35 GGUF with deterministic
 * pseudo-random weights in the real shapes of ../shared/docs/targets.md §11.1 (Qwen3-0.6B,
 * Qwen3-1.7B) and §11.2 (Qwen3.5-0.8B, with its MTP block), or a tiny shape of each arch for
 * tests, in any file type spex can quantize to.
 *
 * What it is: a benchmark and test fixture generator. Matrices are N(0, 0.02²) and norm
 * weights 1.0; for the Gated DeltaNet layers of qwen35, ssm_a = −A with A ~ U(1, 16),
 * ssm_dt.bias = 1 and conv taps N(0, 0.02²) (targets.md §11.4: numerically sane, exp(g) in
 * (0, 1), not realistic); every row is drawn from
 * its own stream (seed, tensor index, row), so the bytes depend only on --seed, never on
 * the thread count. Rows are generated and quantized one at a time with
 * spex_quantize_row_ref straight into the writer's buffer (the fill callback), so memory
 * stays at one output tensor plus a row per thread. The vocabulary is a minimal valid gpt2
 * (byte-level BPE) one: the 256 byte tokens, two-byte tokens of printable ASCII with their
 * merges, <|endoftext|> / <|im_start|> / <|im_end|> as control tokens, and "[PADn]"
 * unused tokens up to --vocab (as llama.cpp pads Qwen vocabularies).
 * With --drafter-for TARGET it writes a DFlash2 drafter (arch "dflash", ../shared/docs/dflash2.md
 * §3-§4) for that target instead, in the synthetic shape of targets.md §11.3 derived from the
 * target file (D, F, N, V, tokenizer keys), so spex_drafter_load accepts the pair (§5). Its init
 * is §11.4's: matrices and codebooks N(0, 0.02²), norms 1, conv bases near identity (tap 0 = 1,
 * the others 0, plus N(0, 0.01²)) with conv projections at sigma 0.002 (see list_dflash).
 * What it is not: a trained model (its text is gibberish; a random drafter's drafts are never
 * accepted) nor a converter.
 *
 * Type mixes follow the quantizer's recipe (src/quant/quantize_file.c, llama.cpp's rules):
 * the LM head (token_embd when tied) is Q6_K for the K-quant and Q4_0 mixes, attn_v and
 * ffn_down of the "more bits" layers are Q6_K in the _M mixes, the GDN layers' fused attn_qkv
 * is Q5_K in Q4_K_M and Q6_K in Q5_K_M, norms, ssm_conv1d, ssm_a and ssm_dt.bias stay F32, and
 * a row that is not a whole number of blocks falls back (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K ->
 * Q8_0, else F16). So `gen-model --type T` writes the same tensor bytes as `gen-model --type
 * f32` followed by `spex quantize ... T` (tested for qwen35-tiny).
 *
 * The normal draw is Irwin-Hall: four 16-bit uniforms of one 64-bit splitmix output, centred
 * and scaled to unit variance (bounded at ±3.46σ). Cheap enough for 1.7 B weights, and the
 * exact tails do not matter for speed or for numerical sanity.
 */
#include "spex.h"
#include "gguf/api.h"
#include "cpu/api.h"
#include "quant/api.h"
#include "cli.h"
#include "model/api.h"
#include "tensor/api.h"
#include "tok/api.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- shapes --------------------------------------------------------------------------- */

typedef struct gm_shape {
    const char *name, *arch;
    int32_t n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
    bool tied;
    /* qwen35 only (targets.md §6.1): trunk layers are n_layer, block_count = n_layer + n_nextn */
    int32_t n_nextn, interval, n_rot, sections[4];
    int32_t ssm_state, ssm_group, ssm_heads, ssm_conv;   /* D, Hk, Hv, d_conv */
    float rope_base;
} gm_shape;

/* targets.md §11.1 and §11.2; the tiny shapes keep every row a whole number of 256-element
 * super-blocks so the K-quant kernels run in tests, and are untied to exercise output.weight
 * (tiny-tied: the same with the head tied to token_embd, as the 0.6B and 1.7B shapes).
 * qwen35-tiny has 4 trunk layers with interval 2 (attention at 1 and 3, GDN at 0 and 2), so
 * both layer kinds and the MTP block are present. */
static const gm_shape g_shapes[] = {
    {"qwen3-0.6b", "qwen3", 28, 1024, 16, 8, 128, 3072, 151936, 40960, true, .rope_base = 1e6f},
    {"qwen3-1.7b", "qwen3", 28, 2048, 16, 8, 128, 6144, 151936, 40960, true, .rope_base = 1e6f},
    {"tiny", "qwen3", 2, 256, 4, 2, 64, 512, 512, 512, false, .rope_base = 1e6f},
    {"tiny-tied", "qwen3", 2, 256, 4, 2, 64, 512, 512, 512, true, .rope_base = 1e6f},
    {"qwen35-0.8b", "qwen35", 24, 1024, 8, 2, 256, 3584, 248320, 262144, true, 1, 4, 64, {11, 11, 10, 0},
     128, 16, 16, 4, 1e7f},
    {"qwen35-tiny", "qwen35", 4, 256, 4, 2, 64, 512, 512, 512, false, 1, 2, 16, {3, 3, 2, 0}, 64, 2, 4, 4, 1e7f},
};

#define GM_MAX_TENSORS (4 + 15 * 65)
#define GM_SEED_DEFAULT 1234

/* How a tensor's values are drawn. */
typedef enum {
    GM_RAND,       /* N(0, sigma²), sigma 0.02 unless set                                  */
    GM_ONES,       /* 1.0                                                                  */
    GM_NEG_A,      /* −U(1, 16)                                                            */
    GM_CONV_BASE,  /* DFlash2 conv base {D, T_c, 2}: 1 on tap 0, else 0, plus N(0, 0.01²)  */
} gm_fill;

typedef struct gm_tensor {
    char name[48];
    uint32_t n_dims;
    int64_t ne[3];
    spex_type type;
    gm_fill fill;    /* GM_ONES, GM_NEG_A and GM_CONV_BASE are f32 */
    float sigma;     /* GM_RAND */
} gm_tensor;

typedef struct gm_ctx {
    gm_tensor t[GM_MAX_TENSORS];
    int n;
    uint64_t seed;
    spex_pool *pool;
    float *rows;       /* [nth][max_row] */
    int64_t max_row;
    /* the tensor being filled */
    int64_t index;
    uint8_t *dst;
    _Atomic int failed;
} gm_ctx;

/* ---- deterministic weights ------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Unit-variance approximately normal draw from one 64-bit output (see the file comment). */
static inline float approx_normal(uint64_t *s) {
    uint64_t r = splitmix64(s);
    uint32_t sum = (uint32_t)(r & 0xffff) + (uint32_t)((r >> 16) & 0xffff) + (uint32_t)((r >> 32) & 0xffff) +
                   (uint32_t)(r >> 48);
    /* sum + 2 in [2, 262142]: four (u + 0.5) / 65536 terms, mean 2, variance 1/3 */
    return ((float)(sum + 2) * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

static void gen_row(uint64_t seed, int64_t index, int64_t row, float sigma, float *out, int64_t n) {
    uint64_t s = seed;
    s = splitmix64(&s) ^ ((uint64_t)index * 0xd1b54a32d192ed03ull);
    s = splitmix64(&s) ^ ((uint64_t)row * 0x8cb92ba72f3d8dd7ull);
    for (int64_t i = 0; i < n; i++) out[i] = sigma * approx_normal(&s);
}

static void fill_task(void *arg, int ith, int nth) {
    gm_ctx *c = arg;
    const gm_tensor *t = &c->t[c->index];
    const int64_t n = t->ne[0], n_rows = t->ne[1];
    const size_t rs = spex_type_row_size(t->type, n);
    float *row = c->rows + (size_t)ith * (size_t)c->max_row;
    /* rows interleaved over threads: every thread gets the same mix of work */
    for (int64_t r = ith; r < n_rows; r += nth) {
        uint8_t *d = c->dst + (size_t)r * rs;
        if (t->type == SPEX_TYPE_F32) {
            gen_row(c->seed, c->index, r, t->sigma, (float *)(void *)d, n);
            continue;
        }
        gen_row(c->seed, c->index, r, t->sigma, row, n);
        if (spex_quantize_row_ref(t->type, row, d, n) != SPEX_OK) c->failed = 1;
    }
}

static spex_status fill_tensor(void *ctx, int64_t index, void *dst, uint64_t nbytes, spex_error *err) {
    gm_ctx *c = ctx;
    const gm_tensor *t = &c->t[index];
    if (t->fill == GM_ONES) {
        float *f = dst;
        for (uint64_t i = 0; i < nbytes / sizeof(float); i++) f[i] = 1.0f;
        return SPEX_OK;
    }
    if (t->fill == GM_NEG_A) {
        /* ssm_a = −exp(A_log) = −A, A ~ U(1, 16): decays exp(g) stay inside (0, 1) */
        float *f = dst;
        uint64_t s = c->seed ^ ((uint64_t)index * 0xd1b54a32d192ed03ull);
        for (uint64_t i = 0; i < nbytes / sizeof(float); i++)
            f[i] = -(1.0f + 15.0f * (float)((double)(splitmix64(&s) >> 11) * 0x1.0p-53));
        return SPEX_OK;
    }
    if (t->fill == GM_CONV_BASE) {
        /* base[s][t][ch] at ch + D·(t + T_c·s) (dflash2.md §10.1); tap 0 is the current row,
         * so 1 there and 0 elsewhere is the identity, which training starts from (§22) */
        float *f = dst;
        const int64_t D = t->ne[0], T_c = t->ne[1];
        uint64_t s = c->seed ^ ((uint64_t)index * 0xd1b54a32d192ed03ull);
        for (uint64_t i = 0; i < nbytes / sizeof(float); i++)
            f[i] = (((int64_t)i / D) % T_c == 0 ? 1.0f : 0.0f) + 0.01f * approx_normal(&s);
        return SPEX_OK;
    }
    c->index = index;
    c->dst = dst;
    c->failed = 0;
    spex_pool_run(c->pool, fill_task, c);
    if (c->failed)
        return spex_error_set(err, SPEX_ERR_UNSUPPORTED, "gen-model: cannot quantize %s to %s", t->name,
                              spex_type_get_info((int)t->type)->name);
    return SPEX_OK;
}

/* ---- type recipe ---------------------------------------------------------------------- */

static bool ftype_base(spex_ftype ft, spex_type *base) {
    switch (ft) {
    case SPEX_FTYPE_F32: *base = SPEX_TYPE_F32; return true;
    case SPEX_FTYPE_F16: *base = SPEX_TYPE_F16; return true;
    case SPEX_FTYPE_BF16: *base = SPEX_TYPE_BF16; return true;
    case SPEX_FTYPE_Q4_0: *base = SPEX_TYPE_Q4_0; return true;
    case SPEX_FTYPE_Q8_0: *base = SPEX_TYPE_Q8_0; return true;
    case SPEX_FTYPE_Q4_K_M: *base = SPEX_TYPE_Q4_K; return true;
    case SPEX_FTYPE_Q5_K_M: *base = SPEX_TYPE_Q5_K; return true;
    case SPEX_FTYPE_Q6_K: *base = SPEX_TYPE_Q6_K; return true;
    }
    return false;
}

/* kind: 0 other matrix, 1 LM head, 2 attn_v, 3 ffn_down, 4 fused attn_qkv. i / n: the rank of
 * an attn_v or ffn_down among its kind and how many the recipe counts: the library's recipe
 * (spex_quantize_tensor_type) for a tensor of that kind. */
static spex_type pick_type(spex_ftype ft, spex_type base, int kind, int i, int n, int64_t row) {
    (void)base;
    static const char *const names[] = {"blk.0.ffn_gate.weight", "output.weight", "blk.0.attn_v.weight",
                                        "blk.0.ffn_down.weight", "blk.0.attn_qkv.weight"};
    spex_quant_tensor t = {.name = names[kind], .row = row, .has_output = true, .i_attn_v = i, .n_attn_v = n,
                           .i_ffn_down = i, .n_layer = n};
    return spex_quantize_tensor_type(ft, &t, NULL, NULL);
}

static void add(gm_ctx *c, const char *name, int64_t ne0, int64_t ne1, spex_type type, gm_fill fill) {
    gm_tensor *t = &c->t[c->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = fill == GM_RAND ? 2 : 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = 1;
    t->type = fill == GM_RAND ? type : SPEX_TYPE_F32;
    t->fill = fill;
    t->sigma = 0.02f;
}

#define NORM(name, n) add(c, name, n, 1, SPEX_TYPE_F32, GM_ONES)

static void list_qwen3(gm_ctx *c, const gm_shape *sh, spex_ftype ft, spex_type base) {
    const int64_t E = sh->n_embd, F = sh->n_ff, V = sh->n_vocab, hd = sh->head_dim;
    const int64_t qd = sh->n_head * hd, kvd = sh->n_head_kv * hd;
    const int N = sh->n_layer;
    c->n = 0;
    add(c, "token_embd.weight", E, V, pick_type(ft, base, sh->tied ? 1 : 0, 0, N, E), GM_RAND);
    for (int l = 0; l < N; l++) {
        char nm[48];
#define L(suffix) (snprintf(nm, sizeof nm, "blk.%d." suffix, l), nm)
        NORM(L("attn_norm.weight"), E);
        add(c, L("attn_q.weight"), E, qd, pick_type(ft, base, 0, l, N, E), GM_RAND);
        add(c, L("attn_k.weight"), E, kvd, pick_type(ft, base, 0, l, N, E), GM_RAND);
        add(c, L("attn_v.weight"), E, kvd, pick_type(ft, base, 2, l, N, E), GM_RAND);
        add(c, L("attn_output.weight"), qd, E, pick_type(ft, base, 0, l, N, qd), GM_RAND);
        NORM(L("attn_q_norm.weight"), hd);
        NORM(L("attn_k_norm.weight"), hd);
        NORM(L("ffn_norm.weight"), E);
        add(c, L("ffn_gate.weight"), E, F, pick_type(ft, base, 0, l, N, E), GM_RAND);
        add(c, L("ffn_up.weight"), E, F, pick_type(ft, base, 0, l, N, E), GM_RAND);
        add(c, L("ffn_down.weight"), F, E, pick_type(ft, base, 3, l, N, F), GM_RAND);
#undef L
    }
    NORM("output_norm.weight", E);
    if (!sh->tied) add(c, "output.weight", E, V, pick_type(ft, base, 1, 0, N, E), GM_RAND);
}

/* The tensor set of targets.md §6.3: trunk layer l is attention iff (l + 1) % interval == 0,
 * else Gated DeltaNet; blk.N is the MTP block. Ranks for the recipe: each trunk layer and the
 * MTP block hold one attn_v-like tensor (attn_v or the fused attn_qkv, which quantize_file.c
 * counts together) and one ffn_down, so both are counted over block_count = N + n_nextn. */
static void list_qwen35(gm_ctx *c, const gm_shape *sh, spex_ftype ft, spex_type base) {
    const int64_t E = sh->n_embd, F = sh->n_ff, V = sh->n_vocab, hd = sh->head_dim;
    const int64_t qd = sh->n_head * hd, kvd = sh->n_head_kv * hd, D = sh->ssm_state;
    const int64_t Hv = sh->ssm_heads, inner = Hv * D, C = 2 * sh->ssm_group * D + inner;
    const int N = sh->n_layer, n_all = sh->n_layer + sh->n_nextn;
    int i_v = 0;
    c->n = 0;
    add(c, "token_embd.weight", E, V, pick_type(ft, base, sh->tied ? 1 : 0, 0, n_all, E), GM_RAND);
    NORM("output_norm.weight", E);
    if (!sh->tied) add(c, "output.weight", E, V, pick_type(ft, base, 1, 0, n_all, E), GM_RAND);
    for (int l = 0; l < n_all; l++) {
        char nm[48];
        const bool attn = l >= N || (l + 1) % sh->interval == 0;
#define L(suffix) (snprintf(nm, sizeof nm, "blk.%d." suffix, l), nm)
        NORM(L("attn_norm.weight"), E);
        NORM(L("post_attention_norm.weight"), E);
        add(c, L("ffn_gate.weight"), E, F, pick_type(ft, base, 0, l, n_all, E), GM_RAND);
        add(c, L("ffn_up.weight"), E, F, pick_type(ft, base, 0, l, n_all, E), GM_RAND);
        add(c, L("ffn_down.weight"), F, E, pick_type(ft, base, 3, l, n_all, F), GM_RAND);
        if (attn) {
            add(c, L("attn_q.weight"), E, 2 * qd, pick_type(ft, base, 0, l, n_all, E), GM_RAND); /* [q_h | gate_h] */
            add(c, L("attn_k.weight"), E, kvd, pick_type(ft, base, 0, l, n_all, E), GM_RAND);
            add(c, L("attn_v.weight"), E, kvd, pick_type(ft, base, 2, i_v++, n_all, E), GM_RAND);
            add(c, L("attn_output.weight"), qd, E, pick_type(ft, base, 0, l, n_all, qd), GM_RAND);
            NORM(L("attn_q_norm.weight"), hd);
            NORM(L("attn_k_norm.weight"), hd);
        } else {
            add(c, L("attn_qkv.weight"), E, C, pick_type(ft, base, 4, l, n_all, E), GM_RAND);
            add(c, L("attn_gate.weight"), E, inner, pick_type(ft, base, 0, l, n_all, E), GM_RAND);
            add(c, L("ssm_conv1d.weight"), sh->ssm_conv, C, SPEX_TYPE_F32, GM_RAND); /* read element-wise */
            add(c, L("ssm_dt.bias"), Hv, 1, SPEX_TYPE_F32, GM_ONES);
            add(c, L("ssm_a"), Hv, 1, SPEX_TYPE_F32, GM_NEG_A);
            add(c, L("ssm_beta.weight"), E, Hv, pick_type(ft, base, 0, l, n_all, E), GM_RAND);
            add(c, L("ssm_alpha.weight"), E, Hv, pick_type(ft, base, 0, l, n_all, E), GM_RAND);
            NORM(L("ssm_norm.weight"), D);
            add(c, L("ssm_out.weight"), inner, E, pick_type(ft, base, 0, l, n_all, inner), GM_RAND);
        }
        if (l >= N) {
            add(c, L("nextn.eh_proj.weight"), 2 * E, E, pick_type(ft, base, 0, l, n_all, 2 * E), GM_RAND);
            NORM(L("nextn.enorm.weight"), E);
            NORM(L("nextn.hnorm.weight"), E);
            NORM(L("nextn.shared_head_norm.weight"), E);
        }
#undef L
    }
}

#define TRY(x)                          \
    do {                                \
        spex_status s_ = (x);           \
        if (s_ != SPEX_OK) return s_;   \
    } while (0)

/* ---- DFlash2 drafters (targets.md §11.3) ----------------------------------------------- */

/* A synthetic DFlash2 drafter for a target: D = the target's E, F = its F, 5 Qwen3-style layers
 * (head dim 128, H / H_kv = 16 / 8 for D <= 2048, else 32 / 8), block 8, T_c 2, g 16, R 256,
 * K 16. Everything else comes from the target file itself, so the pair always loads. */
typedef struct gm_dflash {
    int32_t n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab, n_ctx;
    int32_t block, conv_kernel, conv_group, rank, top_k, mask;
    int32_t n_taps, taps[5];
    float rope_base, eps;
    bool mrope_target;   /* qwen35: write the degenerate M-RoPE sections [n_rot/2, 0, 0, 0] (§3) */
} gm_dflash;

/* GGUF tap ids (dflash2.md §6: the input of layer id) for a target of N trunk layers: the table
 * of targets.md §11.3, i.e. the training default round(1 + i·(N−4)/4) + 1 over 5 taps (half
 * rounded up when N is not a multiple of 4), except N = 64, which takes the real Qwen3.8-27B
 * drafter's ids. Below 8 layers that rule repeats ids, so tiny targets tap layers 1 .. min(5, N)
 * (id N is the residual before the final norm, §6). Returns the count. */
static int dflash_taps(int32_t N, int32_t *taps) {
    static const int32_t real64[5] = {6, 20, 34, 48, 62};
    if (N == 64) {
        memcpy(taps, real64, sizeof real64);
        return 5;
    }
    if (N < 8) {
        int n = N < 5 ? N : 5;
        for (int i = 0; i < n; i++) taps[i] = i + 1;
        return n;
    }
    for (int i = 0; i < 5; i++) taps[i] = 1 + (2 * i * (N - 4) + 4) / 8 + 1;
    return 5;
}

/* dflash2.md §4 (15·N_d + 6 tensors). The recipe counts 5 layers for attn_v / ffn_down, as
 * quantize_file.c does from dflash.block_count, so `--type T` equals f32 + `spex quantize T`.
 * The conv projections are drawn at sigma 0.002 instead of 0.02: with unit-RMS inputs their
 * per-group δ is then ~0.002·sqrt(D) (0.06 at D 1024), small beside the identity base, so the
 * convolution stays near identity as in training (§22); at 0.02 it would be ~0.6. */
static void list_dflash(gm_ctx *c, const gm_dflash *dh, spex_ftype ft, spex_type base) {
    const int64_t D = dh->n_embd, F = dh->n_ff, V = dh->n_vocab, hd = dh->head_dim, R = dh->rank;
    const int64_t qd = (int64_t)dh->n_head * hd, kvd = (int64_t)dh->n_head_kv * hd, T_c = dh->conv_kernel;
    const int64_t n_delta = 2 * T_c * (D / dh->conv_group);
    const int N = dh->n_layer;
    c->n = 0;
    add(c, "fc.weight", (int64_t)dh->n_taps * D, D, pick_type(ft, base, 0, 0, N, (int64_t)dh->n_taps * D), GM_RAND);
    NORM("enc.output_norm.weight", D);
    NORM("output_norm.weight", D);
    add(c, "selector_hidden.weight", D, R, pick_type(ft, base, 0, 0, N, D), GM_RAND);
    add(c, "selector_predecessor.weight", R, V, pick_type(ft, base, 0, 0, N, R), GM_RAND);
    add(c, "selector_successor.weight", R, V, pick_type(ft, base, 0, 0, N, R), GM_RAND);
    for (int l = 0; l < N; l++) {
        char nm[48];
#define L(suffix) (snprintf(nm, sizeof nm, "blk.%d." suffix, l), nm)
        NORM(L("attn_norm.weight"), D);
        add(c, L("attn_q.weight"), D, qd, pick_type(ft, base, 0, l, N, D), GM_RAND);
        add(c, L("attn_k.weight"), D, kvd, pick_type(ft, base, 0, l, N, D), GM_RAND);
        add(c, L("attn_v.weight"), D, kvd, pick_type(ft, base, 2, l, N, D), GM_RAND);
        add(c, L("attn_output.weight"), qd, D, pick_type(ft, base, 0, l, N, qd), GM_RAND);
        NORM(L("attn_q_norm.weight"), hd);
        NORM(L("attn_k_norm.weight"), hd);
        NORM(L("ffn_norm.weight"), D);
        add(c, L("ffn_gate.weight"), D, F, pick_type(ft, base, 0, l, N, D), GM_RAND);
        add(c, L("ffn_up.weight"), D, F, pick_type(ft, base, 0, l, N, D), GM_RAND);
        add(c, L("ffn_down.weight"), F, D, pick_type(ft, base, 3, l, N, F), GM_RAND);
        static const char *const side[2] = {"attn", "ffn"};
        for (int k = 0; k < 2; k++) {
            char bn[48];
            snprintf(bn, sizeof bn, "blk.%d.%s_conv_base", l, side[k]);   /* no ".weight" (§4.2) */
            add(c, bn, D, T_c, SPEX_TYPE_F32, GM_CONV_BASE);
            c->t[c->n - 1].n_dims = 3;
            c->t[c->n - 1].ne[2] = 2;
            snprintf(bn, sizeof bn, "blk.%d.%s_conv_proj.weight", l, side[k]);
            add(c, bn, D, n_delta, pick_type(ft, base, 0, l, N, D), GM_RAND);
            c->t[c->n - 1].sigma = 0.002f;
        }
#undef L
    }
}

/* The drafter's shape from its target (spex_model_load's view of it). */
static void dflash_shape(const spex_model *m, gm_dflash *dh) {
    const spex_model_hparams *thp = spex_model_get_hparams(m);
    const spex_gguf *tg = spex_model_gguf(m);
    memset(dh, 0, sizeof *dh);
    dh->n_layer = 5;
    dh->n_embd = thp->n_embd;
    dh->n_ff = thp->n_ff;
    dh->head_dim = 128;
    dh->n_head = thp->n_embd <= 2048 ? 16 : 32;
    dh->n_head_kv = 8;
    dh->n_vocab = thp->n_vocab;
    dh->n_ctx = thp->n_ctx_train;
    dh->block = 8;
    dh->conv_kernel = 2;
    dh->conv_group = 16;
    dh->rank = 256;
    dh->top_k = 16;
    dh->rope_base = thp->rope_freq_base;
    dh->eps = 1e-6f;
    dh->mrope_target = thp->arch == SPEX_ARCH_QWEN35;
    dh->n_taps = dflash_taps(thp->n_layer, dh->taps);
    /* the target's own mask id if its tokenizer defines one, else the last id (any valid id
     * works: a random drafter has no trained mask embedding) */
    uint32_t mask;
    dh->mask = spex_gguf_get_u32(tg, "tokenizer.ggml.mask_token_id", &mask, NULL) == SPEX_OK &&
                       mask < (uint32_t)thp->n_vocab
                   ? (int32_t)mask
                   : thp->n_vocab - 1;
}

static spex_status set_dflash_metadata(spex_gguf_writer *w, const gm_dflash *dh, spex_ftype ft, const spex_model *m) {
    const spex_gguf *tg = spex_model_gguf(m);
    char name[64];
    int len = snprintf(name, sizeof name, "spex-random-dflash2-D%d-N%d", dh->n_embd, dh->n_layer);
    TRY(spex_gguf_writer_set_str(w, "general.architecture", "dflash", 6));
    TRY(spex_gguf_writer_set_str(w, "general.name", name, (uint64_t)len));
    TRY(spex_gguf_writer_set_u32(w, "general.file_type", (uint32_t)ft));
    TRY(spex_gguf_writer_set_u32(w, "dflash.block_count", (uint32_t)dh->n_layer));
    TRY(spex_gguf_writer_set_u32(w, "dflash.context_length", (uint32_t)dh->n_ctx));
    TRY(spex_gguf_writer_set_u32(w, "dflash.embedding_length", (uint32_t)dh->n_embd));
    TRY(spex_gguf_writer_set_u32(w, "dflash.feed_forward_length", (uint32_t)dh->n_ff));
    TRY(spex_gguf_writer_set_u32(w, "dflash.attention.head_count", (uint32_t)dh->n_head));
    TRY(spex_gguf_writer_set_u32(w, "dflash.attention.head_count_kv", (uint32_t)dh->n_head_kv));
    TRY(spex_gguf_writer_set_u32(w, "dflash.attention.key_length", (uint32_t)dh->head_dim));
    TRY(spex_gguf_writer_set_u32(w, "dflash.attention.value_length", (uint32_t)dh->head_dim));
    TRY(spex_gguf_writer_set_f32(w, "dflash.attention.layer_norm_rms_epsilon", dh->eps));
    TRY(spex_gguf_writer_set_u32(w, "dflash.rope.dimension_count", (uint32_t)dh->head_dim));
    TRY(spex_gguf_writer_set_f32(w, "dflash.rope.freq_base", dh->rope_base));
    if (dh->mrope_target) {
        const int32_t sec[4] = {dh->head_dim / 2, 0, 0, 0};
        TRY(spex_gguf_writer_set_arr(w, "dflash.rope.dimension_sections", SPEX_GGUF_I32, sec, 4));
    }
    TRY(spex_gguf_writer_set_bool(w, "dflash.attention.causal", false));
    TRY(spex_gguf_writer_set_u32(w, "dflash.block_size", (uint32_t)dh->block));
    TRY(spex_gguf_writer_set_u32(w, "dflash.conv_kernel_size", (uint32_t)dh->conv_kernel));
    TRY(spex_gguf_writer_set_u32(w, "dflash.conv_group_size", (uint32_t)dh->conv_group));
    TRY(spex_gguf_writer_set_u32(w, "dflash.selector_rank", (uint32_t)dh->rank));
    TRY(spex_gguf_writer_set_u32(w, "dflash.selector_top_k", (uint32_t)dh->top_k));
    TRY(spex_gguf_writer_set_arr(w, "dflash.target_layers", SPEX_GGUF_I32, dh->taps, (uint64_t)dh->n_taps));
    /* §3: the tokenizer is a copy of the target's (checked at load, then the target's is used) */
    for (int64_t i = 0; i < spex_gguf_n_kv(tg); i++) {
        const char *k = spex_gguf_key(tg, i);
        spex_gguf_value v;
        if (strncmp(k, "tokenizer.", 10) != 0) continue;
        TRY(spex_gguf_value_at(tg, i, &v));
        TRY(spex_gguf_writer_set_value(w, k, &v));
    }
    TRY(spex_gguf_writer_set_u32(w, "tokenizer.ggml.mask_token_id", (uint32_t)dh->mask));
    return SPEX_OK;
}

/* ---- vocabulary ----------------------------------------------------------------------- */

/* GPT-2's byte -> code point map (targets.md §12.1), as UTF-8 (at most 2 bytes). */
static int byte_char(int b, char *out) {
    int cp;
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) {
        cp = b;
    } else {
        int k = 0; /* rank of b among the remapped bytes */
        for (int i = 0; i < b; i++)
            if (!((i >= 33 && i <= 126) || (i >= 161 && i <= 172) || (i >= 174 && i <= 255))) k++;
        cp = 256 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xc0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

typedef struct gm_vocab {
    int32_t n;
    char *text;          /* all token texts, concatenated */
    spex_str *tok;       /* [n] views into text           */
    int32_t *type;       /* [n]                           */
    spex_str *merge;     /* [n_merge]                     */
    char *merge_text;
    int32_t n_merge;
    int32_t eos;
} gm_vocab;

static void vocab_free(gm_vocab *v) {
    free(v->text);
    free(v->tok);
    free(v->type);
    free(v->merge);
    free(v->merge_text);
}

/* Needs n >= 259 (bytes + 3 specials). */
static bool vocab_build(gm_vocab *v, int32_t n) {
    memset(v, 0, sizeof *v);
    v->n = n;
    v->text = malloc((size_t)n * 16);
    v->tok = malloc((size_t)n * sizeof *v->tok);
    v->type = malloc((size_t)n * sizeof *v->type);
    v->merge = malloc(94 * 94 * sizeof *v->merge);
    v->merge_text = malloc(94 * 94 * 8);
    if (!v->text || !v->tok || !v->type || !v->merge || !v->merge_text) return false;
    char *p = v->text, *mp = v->merge_text;
    int32_t i = 0;
    for (int b = 0; b < 256; b++, i++) {
        v->tok[i] = (spex_str){p, (uint64_t)byte_char(b, p)};
        v->type[i] = SPEX_TOKEN_NORMAL;
        p += v->tok[i].len;
    }
    const int32_t n_plain = n - 3;
    for (int a = 33; a <= 126 && i < n_plain; a++) {
        for (int b = 33; b <= 126 && i < n_plain; b++, i++) {
            p[0] = (char)a;
            p[1] = (char)b;
            v->tok[i] = (spex_str){p, 2};
            v->type[i] = SPEX_TOKEN_NORMAL;
            p += 2;
            mp[0] = (char)a;
            mp[1] = ' ';
            mp[2] = (char)b;
            v->merge[v->n_merge++] = (spex_str){mp, 3};
            mp += 3;
        }
    }
    for (; i < n_plain; i++) {
        int len = snprintf(p, 16, "[PAD%d]", (int)i);
        v->tok[i] = (spex_str){p, (uint64_t)len};
        v->type[i] = SPEX_TOKEN_UNUSED;
        p += len;
    }
    static const char *const specials[3] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    v->eos = i;
    for (int k = 0; k < 3; k++, i++) {
        size_t len = strlen(specials[k]);
        memcpy(p, specials[k], len);
        v->tok[i] = (spex_str){p, len};
        v->type[i] = SPEX_TOKEN_CONTROL;
        p += len;
    }
    return true;
}

/* ---- metadata and the command --------------------------------------------------------- */

/* "<arch>.<name>" in buf. */
static const char *akey(char *buf, size_t cap, const gm_shape *sh, const char *name) {
    snprintf(buf, cap, "%s.%s", sh->arch, name);
    return buf;
}

static spex_status set_metadata(spex_gguf_writer *w, const gm_shape *sh, spex_ftype ft, const gm_vocab *v) {
    char name[64], k[96];
    int len = snprintf(name, sizeof name, "spex-random-%s", sh->name);
    const bool q35 = !strcmp(sh->arch, "qwen35");
#define K(n) akey(k, sizeof k, sh, n)
    TRY(spex_gguf_writer_set_str(w, "general.architecture", sh->arch, strlen(sh->arch)));
    TRY(spex_gguf_writer_set_str(w, "general.name", name, (uint64_t)len));
    TRY(spex_gguf_writer_set_u32(w, "general.file_type", (uint32_t)ft));
    TRY(spex_gguf_writer_set_u32(w, K("block_count"), (uint32_t)(sh->n_layer + sh->n_nextn)));
    if (q35) TRY(spex_gguf_writer_set_u32(w, K("nextn_predict_layers"), (uint32_t)sh->n_nextn));
    TRY(spex_gguf_writer_set_u32(w, K("context_length"), (uint32_t)sh->n_ctx));
    TRY(spex_gguf_writer_set_u32(w, K("embedding_length"), (uint32_t)sh->n_embd));
    TRY(spex_gguf_writer_set_u32(w, K("feed_forward_length"), (uint32_t)sh->n_ff));
    TRY(spex_gguf_writer_set_u32(w, K("attention.head_count"), (uint32_t)sh->n_head));
    TRY(spex_gguf_writer_set_u32(w, K("attention.head_count_kv"), (uint32_t)sh->n_head_kv));
    TRY(spex_gguf_writer_set_u32(w, K("attention.key_length"), (uint32_t)sh->head_dim));
    TRY(spex_gguf_writer_set_u32(w, K("attention.value_length"), (uint32_t)sh->head_dim));
    TRY(spex_gguf_writer_set_f32(w, K("rope.freq_base"), sh->rope_base));
    TRY(spex_gguf_writer_set_f32(w, K("attention.layer_norm_rms_epsilon"), 1e-6f));
    if (q35) {
        TRY(spex_gguf_writer_set_u32(w, K("rope.dimension_count"), (uint32_t)sh->n_rot));
        TRY(spex_gguf_writer_set_arr(w, K("rope.dimension_sections"), SPEX_GGUF_I32, sh->sections, 4));
        TRY(spex_gguf_writer_set_u32(w, K("ssm.conv_kernel"), (uint32_t)sh->ssm_conv));
        TRY(spex_gguf_writer_set_u32(w, K("ssm.state_size"), (uint32_t)sh->ssm_state));
        TRY(spex_gguf_writer_set_u32(w, K("ssm.group_count"), (uint32_t)sh->ssm_group));
        TRY(spex_gguf_writer_set_u32(w, K("ssm.time_step_rank"), (uint32_t)sh->ssm_heads));
        TRY(spex_gguf_writer_set_u32(w, K("ssm.inner_size"), (uint32_t)(sh->ssm_heads * sh->ssm_state)));
        TRY(spex_gguf_writer_set_u32(w, K("full_attention_interval"), (uint32_t)sh->interval));
    }
#undef K
    TRY(spex_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2", 4));
    TRY(spex_gguf_writer_set_str(w, "tokenizer.ggml.pre", q35 ? "qwen35" : "qwen2", q35 ? 6 : 5));
    TRY(spex_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", v->tok, (uint64_t)v->n));
    TRY(spex_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", SPEX_GGUF_I32, v->type, (uint64_t)v->n));
    TRY(spex_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", v->merge, (uint64_t)v->n_merge));
    TRY(spex_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos));
    TRY(spex_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->eos));
    TRY(spex_gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)v->eos));
    TRY(spex_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false));
    return SPEX_OK;
}

static void gen_usage(FILE *f) {
    fprintf(f,
            "usage: spex gen-model --shape SHAPE --type TYPE -o OUT.gguf [--arch A] [--seed S] [--vocab N]\n"
            "                      [-t THREADS]\n"
            "       spex gen-model --drafter-for TARGET.gguf --type TYPE -o OUT.gguf [--seed S] [-t THREADS]\n"
            "  --shape   qwen3-0.6b | qwen3-1.7b | tiny          qwen3  (targets.md §11.1; tiny: 2 layers, E 256)\n"
            "            tiny-tied                               qwen3  (tiny with the LM head tied to token_embd)\n"
            "            qwen35-0.8b | qwen35-tiny               qwen35 (§11.2, with the MTP block; tiny: 4 trunk\n"
            "                                                    layers, attention at 1 and 3, E 256)\n"
            "  --drafter-for TARGET\n"
            "            a random DFlash2 drafter that loads against TARGET (any qwen3 / qwen35 / llama target,\n"
            "            e.g. one written by --shape): targets.md §11.3, D = the target's E, F = its F, 5 layers,\n"
            "            head dim 128, heads 16/8 (D <= 2048) or 32/8, block 8, conv 2 / group 16, rank 256,\n"
            "            top-k 16, taps by the target's layer count N (24: 2,7,12,17,22; 28: 2,8,14,20,26; N < 8:\n"
            "            1..min(5,N)); the target's vocabulary size and tokenizer keys, mask id = its\n"
            "            tokenizer.ggml.mask_token_id or V-1. No acceptance to expect: speed benchmarks only\n"
            "  --arch    optional check: the shape's architecture (qwen3 or qwen35)\n"
            "  --type    f32 f16 bf16 q8_0 q4_0 q4_K_M q5_K_M q6_K (llama.cpp's mixes for _M)\n"
            "  --seed    weights are a pure function of the seed (default %d)\n"
            "  --vocab   vocabulary size, >= 259 (default: the shape's)\n"
            "  -t        threads generating and quantizing rows (default 2; no effect on the bytes)\n",
            GM_SEED_DEFAULT);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cmd_gen_model(int argc, char **argv) {
    const char *shape_name = NULL, *type_name = NULL, *out = NULL, *arch = NULL, *target = NULL;
    long seed = GM_SEED_DEFAULT, vocab = 0, threads = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            gen_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--shape") && val) {
            shape_name = argv[++i];
        } else if (!strcmp(a, "--drafter-for") && val) {
            target = argv[++i];
        } else if (!strcmp(a, "--type") && val) {
            type_name = argv[++i];
        } else if (!strcmp(a, "-o") && val) {
            out = argv[++i];
        } else if (!strcmp(a, "--arch") && val) {
            arch = argv[++i];
        } else if (!strcmp(a, "--seed")) {
            if (!cli_parse_int(a, val, 0, 0x7fffffffL, &seed)) return 2;
            i++;
        } else if (!strcmp(a, "--vocab")) {
            if (!cli_parse_int(a, val, 259, 1L << 24, &vocab)) return 2;
            i++;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!cli_parse_int(a, val, 1, 1024, &threads)) return 2;
            i++;
        } else {
            fprintf(stderr, "error: gen-model: unknown or incomplete argument '%s'\n", a);
            gen_usage(stderr);
            return 2;
        }
    }
    if ((!shape_name == !target) || !type_name || !out) {
        if (shape_name && target) fprintf(stderr, "error: gen-model: --shape and --drafter-for exclude each other\n");
        gen_usage(stderr);
        return 2;
    }
    if (target && (arch || vocab)) {
        fprintf(stderr, "error: gen-model: --drafter-for takes the architecture and vocabulary from the target (no "
                        "--arch / --vocab)\n");
        return 2;
    }
    const gm_shape *sh = NULL;
    if (shape_name) {
        for (size_t k = 0; k < sizeof g_shapes / sizeof g_shapes[0]; k++)
            if (!strcmp(shape_name, g_shapes[k].name)) sh = &g_shapes[k];
        if (!sh) {
            fprintf(stderr, "error: gen-model: unknown shape '%s' (qwen3-0.6b, qwen3-1.7b, tiny, tiny-tied, qwen35-0.8b, "
                            "qwen35-tiny)\n", shape_name);
            return 2;
        }
        if (arch && strcmp(arch, sh->arch) != 0) {
            fprintf(stderr, "error: gen-model: --arch %s: shape %s is %s (shapes exist for qwen3 and qwen35)\n", arch,
                    sh->name, sh->arch);
            return 2;
        }
    }
    spex_ftype ft;
    spex_type base;
    if (!spex_ftype_from_name(type_name, &ft) || !ftype_base(ft, &base)) {
        fprintf(stderr, "error: gen-model: unknown type '%s'\n", type_name);
        return 2;
    }

    static gm_ctx c; /* ~40 KiB of tensor descriptors */
    memset(&c, 0, sizeof c);
    c.seed = (uint64_t)seed;
    gm_shape shape = {0};
    gm_dflash dh;
    gm_vocab v = {0};
    spex_model *tm = NULL;
    spex_gguf_writer *w = NULL;
    spex_error err = {0};
    spex_status s = SPEX_OK;
    if (target) {
        /* the target as spex will load it: the pair check at drafter load reads the same values */
        s = spex_model_load(target, NULL, &tm, &err);
        if (s == SPEX_OK) {
            dflash_shape(tm, &dh);
            c.seed ^= 0x64666c617368ull;   /* "dflash": not the target's streams for the same seed */
            list_dflash(&c, &dh, ft, base);
        }
    } else {
        shape = *sh;
        if (vocab) shape.n_vocab = (int32_t)vocab;
        if (!strcmp(shape.arch, "qwen35")) list_qwen35(&c, &shape, ft, base);
        else list_qwen3(&c, &shape, ft, base);
        if (!vocab_build(&v, shape.n_vocab)) s = spex_error_set(&err, SPEX_ERR_NOMEM, "gen-model: out of memory");
    }
    for (int i = 0; i < c.n; i++)
        if (c.t[i].ne[0] > c.max_row) c.max_row = c.t[i].ne[0];

    if (s == SPEX_OK) s = spex_pool_create((int)threads, &c.pool, &err);
    if (s == SPEX_OK) {
        c.rows = malloc((size_t)threads * (size_t)c.max_row * sizeof(float));
        if (!c.rows) s = spex_error_set(&err, SPEX_ERR_NOMEM, "gen-model: out of memory");
    }
    if (s == SPEX_OK) s = spex_gguf_writer_init(&w, &err);
    if (s == SPEX_OK && (s = target ? set_dflash_metadata(w, &dh, ft, tm) : set_metadata(w, &shape, ft, &v)) != SPEX_OK)
        spex_error_set(&err, s, "gen-model: cannot set metadata: %s", spex_status_str(s));
    uint64_t total = 0, n_params = 0;
    for (int i = 0; s == SPEX_OK && i < c.n; i++) {
        const gm_tensor *t = &c.t[i];
        uint64_t nbytes = (uint64_t)spex_type_row_size(t->type, t->ne[0]) * (uint64_t)(t->ne[1] * t->ne[2]);
        total += nbytes;
        n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2]);
        s = spex_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, NULL, nbytes, &err);
    }
    double t0 = now_s();
    if (s == SPEX_OK) {
        spex_gguf_writer_set_fill(w, fill_tensor, &c);
        s = spex_gguf_writer_write(w, out, &err);
    }
    spex_gguf_writer_free(w);
    spex_pool_free(c.pool);
    free(c.rows);
    vocab_free(&v);
    spex_model_free(tm);   /* after the write: the copied tokenizer values point into its mapping */
    if (s != SPEX_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 1;
    }
    if (target) {
        printf("wrote %s: dflash2 drafter for %s (D %d, F %d, V %d), %d layers, heads %d/%d x %d, taps [", out, target,
               dh.n_embd, dh.n_ff, dh.n_vocab, dh.n_layer, dh.n_head, dh.n_head_kv, dh.head_dim);
        for (int i = 0; i < dh.n_taps; i++) printf("%s%d", i ? "," : "", dh.taps[i]);
        printf("], block %d, conv %d/%d, rank %d, top-k %d, mask %d, %s, %d tensors, %.3f B params, %.1f MiB of "
               "tensors, seed %ld, %.1f s\n",
               dh.block, dh.conv_kernel, dh.conv_group, dh.rank, dh.top_k, dh.mask, spex_ftype_name(ft), c.n,
               (double)n_params * 1e-9, (double)total / 1048576.0, seed, now_s() - t0);
        return 0;
    }
    printf("wrote %s: %s %s, %s, %d tensors, %.3f B params, %.1f MiB of tensors, seed %ld, %.1f s\n", out,
           shape.arch, shape.name, spex_ftype_name(ft), c.n, (double)n_params * 1e-9, (double)total / 1048576.0, seed,
           now_s() - t0);
    return 0;
}
