/*
 * inflate.c — `spex inflate`: a function-preserving expansion of a trained qwen3 target and
 * its DFlash drafter to a realistic compute shape, to measure speculation where the weights,
 * not per-step overheads, set the pace (the construction and its limits are in docs/inflate.md).
 *
 * What it is: a tool that reads the pair, writes a wider and deeper qwen3 target and a wider
 * drafter (F32, from the dequantized originals) and quantizes both with spex_quantize_file.
 * Original residual channels keep their index and every new channel stays exactly zero;
 * RMSNorm weights are rescaled so the norms see the same rms; head dims are placed on the
 * NEOX pairs of the wider head that rotate at the same frequency, with QK-norm compensating
 * the new attention scale; added heads, FFN units and layers get random weights (they compute)
 * and zero output projections (they add nothing). So the inflated pair computes the original
 * logits and drafts, up to float rounding and the QK-norms' eps (docs/inflate.md, "Tolerance").
 * What it is not: a way to make a model better or a general model surgery tool: qwen3 (NEOX,
 * full rotary) targets and DFlash drafters only, and the vocabulary is kept.
 *
 * Specs: ../shared/docs/targets.md §3.1–§3.3 and §5 (the qwen3 layer, NEOX pairs (i, i+hd/2)
 * at θ_i = pos·base^(−2i/hd), query head h reads KV head ⌊h·H_kv/H⌋ as src/cpu/ops.c does),
 * §11.4 (random weights N(0, 0.02²)); ../shared/docs/dflash2.md §4 (drafter tensors), §7 (fc
 * fusion: fc.weight {L·D, D}, tap t in input columns [t·D, t·D+D)) and §10 (conv_proj's output
 * flat index grp + G·(t + T_c·s), channel c in group ⌊c/g⌋, as src/model/dflash_forward.c).
 *
 * Memory: tensors are produced one at a time by the GGUF writer's fill callback (rows split
 * over a pool), so the tool holds one output tensor, never the model. Random rows are a pure
 * function of (--seed, tensor index, row): the bytes do not depend on -t.
 */
#include "spex.h"
#include "gguf/api.h"
#include "cpu/api.h"
#include "quant/api.h"
#include "model/api.h"
#include "cli.h"
#include "tensor/api.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int cmd_inflate(int argc, char **argv); /* dispatched from tools/spex.c */

#define INF_SEED_DEFAULT 4242
#define INF_RAND_STD 0.02f /* targets.md §11.4 */

/* ======================================================================== */
/* Output tensors as row maps of a source tensor                            */
/* ======================================================================== */

/* What one output row holds: a source row (>= 0, its columns moved by col_dst and scaled),
 * or one of these. */
enum { ROW_ZERO = -1, ROW_ONES = -2, ROW_RANDOM = -3 };

/* One output tensor: ne0 columns × rows = ne1·ne2 rows (a 1-D tensor is one row). */
typedef struct inf_tensor {
    char name[64];
    uint32_t n_dims;
    int64_t ne[3];
    const spex_tensor_info *src; /* rows >= 0 of row_src index its rows; NULL: none       */
    int32_t *row_src;            /* [rows]                                                */
    int32_t *col_dst;            /* [src ne0]: new column of each source column; NULL: same */
    float scale;                 /* applied to copied values (norm rescaling)             */
} inf_tensor;

typedef struct inf_file {
    inf_tensor *t;
    int n, cap;
    const spex_gguf *src;        /* the source file (for "every tensor used" and messages) */
    bool *used;                  /* [source tensors]                                       */
} inf_file;

static int64_t n_rows(const inf_tensor *t) { return t->ne[1] * t->ne[2]; }

static void file_free(inf_file *f) {
    for (int i = 0; i < f->n; i++) {
        free(f->t[i].row_src);
        free(f->t[i].col_dst);
    }
    free(f->t);
    free(f->used);
    memset(f, 0, sizeof *f);
}

/* Error text of the planning step (tools may print and exit; this keeps the plan code flat). */
static char g_msg[512];

static bool fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static bool fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_msg, sizeof g_msg, fmt, ap);
    va_end(ap);
    return false;
}

/* The source tensor `name` with exactly the shape {ne0, ne1, ne2}; marks it used. NULL with
 * g_msg set if it is absent or shaped otherwise. */
static const spex_tensor_info *src_get(inf_file *f, const char *name, int64_t ne0, int64_t ne1, int64_t ne2) {
    const spex_tensor_info *t = spex_gguf_find_tensor(f->src, name);
    if (!t) {
        fail("%s: tensor '%s' is missing", spex_gguf_path(f->src), name);
        return NULL;
    }
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != ne2 || t->ne[3] != 1) {
        fail("%s: tensor '%s' has shape [%" PRId64 ", %" PRId64 ", %" PRId64 "], expected [%" PRId64 ", %" PRId64
             ", %" PRId64 "]",
             spex_gguf_path(f->src), name, t->ne[0], t->ne[1], t->ne[2], ne0, ne1, ne2);
        return NULL;
    }
    for (int64_t i = 0; i < spex_gguf_n_tensors(f->src); i++)
        if (spex_gguf_tensor(f->src, i) == t) f->used[i] = true;
    return t;
}

/* Appends an output tensor with every row `fill` (ROW_*) and no source; NULL if out of memory. */
static inf_tensor *add(inf_file *f, const char *name, uint32_t n_dims, int64_t ne0, int64_t ne1, int64_t ne2,
                       int32_t fill) {
    if (f->n == f->cap) {
        int cap = f->cap ? 2 * f->cap : 64;
        inf_tensor *t = realloc(f->t, (size_t)cap * sizeof *t);
        if (!t) {
            fail("out of memory");
            return NULL;
        }
        f->t = t;
        f->cap = cap;
    }
    inf_tensor *t = &f->t[f->n];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    t->scale = 1.0f;
    t->row_src = malloc((size_t)n_rows(t) * sizeof *t->row_src);
    if (!t->row_src) {
        fail("out of memory");
        return NULL;
    }
    for (int64_t r = 0; r < n_rows(t); r++) t->row_src[r] = fill;
    f->n++;
    return t;
}

/* Gives t the source tensor src and a column map (NULL: source column i -> new column i). */
static bool set_src(inf_tensor *t, const spex_tensor_info *src, bool col_map) {
    t->src = src;
    if (!col_map) return true;
    t->col_dst = malloc((size_t)src->ne[0] * sizeof *t->col_dst);
    if (!t->col_dst) return fail("out of memory");
    for (int64_t i = 0; i < src->ne[0]; i++) t->col_dst[i] = (int32_t)i;
    return true;
}

/* A tensor whose first rows (rows_copy of them) are the source's rows with columns in place,
 * the rest `rest`: matrices that read the residual stream (new input columns stay zero) or
 * whose extra output rows are new channels (zero) or new units (random). */
static inf_tensor *add_rows(inf_file *f, const char *name, uint32_t n_dims, int64_t ne0, int64_t ne1,
                            int64_t ne2, const spex_tensor_info *src, int64_t rows_copy, int32_t rest) {
    inf_tensor *t = add(f, name, n_dims, ne0, ne1, ne2, rest);
    if (!t || !set_src(t, src, false)) return NULL;
    for (int64_t r = 0; r < rows_copy; r++) t->row_src[r] = (int32_t)r;
    return t;
}

/* A norm over the residual stream: the original weights times scale, 0 on new channels. */
static bool add_norm(inf_file *f, const char *name, int64_t n_old, int64_t n_new, float scale) {
    const spex_tensor_info *s = src_get(f, name, n_old, 1, 1);
    inf_tensor *t = s ? add_rows(f, name, 1, n_new, 1, 1, s, 1, ROW_ZERO) : NULL;
    if (t) t->scale = scale;
    return t != NULL;
}

/* ======================================================================== */
/* The target (qwen3 -> qwen3)                                              */
/* ======================================================================== */

typedef struct inf_shape {
    int64_t E, N, H, Hkv, hd, F;
} inf_shape;

/* Head placement (targets.md §3.2–§3.3): the old head dim d goes to new dim dim_map[d], so
 * the NEOX pair (i, i + hd_o/2) at base^(−2i/hd_o) lands on the pair (k·i, k·i + hd_n/2) at
 * base^(−2ki/hd_n), the same frequency (k = hd_n / hd_o). Query head h reads KV head
 * ⌊h·H_kv/H⌋ = ⌊h/G⌋: each old KV head is copied into `copies` = ⌈G_o/G_n⌉ new KV heads and
 * its G_o query heads fill their query slots in order. */
typedef struct inf_heads {
    int32_t k;                   /* hd_n / hd_o                                      */
    int32_t dim_map[1024];       /* [hd_o] old dim -> new dim                        */
    int32_t dim_inv[4096];       /* [hd_n] new dim -> old dim, or -1                 */
    int32_t q_src[4096];         /* [H_n] new query head -> old query head, or -1    */
    int32_t kv_src[4096];        /* [H_kv_n] new KV head -> old KV head, or -1       */
    int32_t q_new[4096];         /* [H_o] old query head -> new query head           */
} inf_heads;

static bool plan_heads(const inf_shape *o, const inf_shape *n, inf_heads *hm) {
    if (o->hd > 1024 || n->hd > 4096 || n->H > 4096 || o->H > 4096 || n->Hkv > 4096)
        return fail("head shape out of range");
    hm->k = (int32_t)(n->hd / o->hd);
    for (int64_t j = 0; j < n->hd; j++) hm->dim_inv[j] = -1;
    for (int64_t d = 0; d < o->hd; d++) {
        int64_t j = d < o->hd / 2 ? hm->k * d : hm->k * (d - o->hd / 2) + n->hd / 2;
        hm->dim_map[d] = (int32_t)j;
        hm->dim_inv[j] = (int32_t)d;
    }
    for (int64_t h = 0; h < n->H; h++) hm->q_src[h] = -1;
    for (int64_t h = 0; h < n->Hkv; h++) hm->kv_src[h] = -1;
    const int64_t Go = o->H / o->Hkv, Gn = n->H / n->Hkv, copies = (Go + Gn - 1) / Gn;
    for (int64_t kv = 0; kv < o->Hkv; kv++) {
        for (int64_t c = 0; c < copies; c++) hm->kv_src[kv * copies + c] = (int32_t)kv;
        for (int64_t g = 0; g < Go; g++) {
            const int64_t h_new = (kv * copies + g / Gn) * Gn + g % Gn;
            hm->q_src[h_new] = (int32_t)(kv * Go + g);
            hm->q_new[kv * Go + g] = (int32_t)h_new;
        }
    }
    return true;
}

/* attn_q / attn_k / attn_v of an original layer: rows of placed dims of mapped heads come
 * from the source, unplaced dims of mapped heads are zero, unmapped heads random. q and k
 * dims follow the RoPE placement; v dims (not rotated) stay at their index d < hd_o, so the
 * attention output keeps the original's layout in 32-element blocks and a Q8_0 attn_output
 * quantizes its activations in the same blocks as the original (bit-compatible inflation). */
static bool add_qkv(inf_file *f, const char *name, const inf_shape *o, const inf_shape *n, int64_t h_old,
                    int64_t h_new, const int32_t *head_src, const inf_heads *hm, bool is_v) {
    const spex_tensor_info *s = src_get(f, name, o->E, h_old * o->hd, 1);
    inf_tensor *t = s ? add(f, name, 2, n->E, h_new * n->hd, 1, ROW_RANDOM) : NULL;
    if (!t || !set_src(t, s, false)) return false;
    for (int64_t h = 0; h < h_new; h++) {
        if (head_src[h] < 0) continue;
        for (int64_t j = 0; j < n->hd; j++) {
            const int32_t d = is_v ? (j < o->hd ? (int32_t)j : -1) : hm->dim_inv[j];
            t->row_src[h * n->hd + j] = d < 0 ? ROW_ZERO : (int32_t)(head_src[h] * o->hd + d);
        }
    }
    return true;
}

/* attn_q_norm / attn_k_norm {hd}: placed dims carry the old weights times scale, others 0. */
static bool add_qk_norm(inf_file *f, const char *name, const inf_shape *o, const inf_shape *n, const inf_heads *hm,
                        float scale) {
    const spex_tensor_info *s = src_get(f, name, o->hd, 1, 1);
    inf_tensor *t = s ? add_rows(f, name, 1, n->hd, 1, 1, s, 1, ROW_ZERO) : NULL;
    if (!t || !set_src(t, s, true)) return false;
    for (int64_t d = 0; d < o->hd; d++) t->col_dst[d] = hm->dim_map[d];
    t->scale = scale;
    return true;
}

static bool plan_target(inf_file *f, const spex_model_hparams *hp, const inf_shape *o, const inf_shape *n,
                        inf_heads *hm) {
    const int64_t V = hp->n_vocab;
    const float s_E = sqrtf((float)o->E / (float)n->E);
    if (!plan_heads(o, n, hm)) return false;
    const spex_tensor_info *s;
    if (!(s = src_get(f, "token_embd.weight", o->E, V, 1)) ||
        !add_rows(f, "token_embd.weight", 2, n->E, V, 1, s, V, ROW_ZERO))
        return false;
    if (!add_norm(f, "output_norm.weight", o->E, n->E, s_E)) return false;
    if (!hp->tied_output &&
        (!(s = src_get(f, "output.weight", o->E, V, 1)) || !add_rows(f, "output.weight", 2, n->E, V, 1, s, V, ROW_ZERO)))
        return false;

    const int64_t qd = n->H * n->hd, kvd = n->Hkv * n->hd;
    for (int64_t l = 0; l < n->N; l++) {
        char nm[64];
        const bool orig = l < o->N;
#define NM(suffix) (snprintf(nm, sizeof nm, "blk.%" PRId64 "." suffix, l), nm)
        if (!orig) {
            /* An added layer: random weights of sane scale (targets.md §11.4), norms 1, and
             * zero output projections, so it computes and adds exactly 0 to the residual. */
            if (!add(f, NM("attn_norm.weight"), 1, n->E, 1, 1, ROW_ONES) ||
                !add(f, NM("attn_q.weight"), 2, n->E, qd, 1, ROW_RANDOM) ||
                !add(f, NM("attn_k.weight"), 2, n->E, kvd, 1, ROW_RANDOM) ||
                !add(f, NM("attn_v.weight"), 2, n->E, kvd, 1, ROW_RANDOM) ||
                !add(f, NM("attn_output.weight"), 2, qd, n->E, 1, ROW_ZERO) ||
                !add(f, NM("attn_q_norm.weight"), 1, n->hd, 1, 1, ROW_ONES) ||
                !add(f, NM("attn_k_norm.weight"), 1, n->hd, 1, 1, ROW_ONES) ||
                !add(f, NM("ffn_norm.weight"), 1, n->E, 1, 1, ROW_ONES) ||
                !add(f, NM("ffn_gate.weight"), 2, n->E, n->F, 1, ROW_RANDOM) ||
                !add(f, NM("ffn_up.weight"), 2, n->E, n->F, 1, ROW_RANDOM) ||
                !add(f, NM("ffn_down.weight"), 2, n->F, n->E, 1, ROW_ZERO))
                return false;
            continue;
        }
        if (!add_norm(f, NM("attn_norm.weight"), o->E, n->E, s_E) ||
            !add_qkv(f, NM("attn_q.weight"), o, n, o->H, n->H, hm->q_src, hm, false) ||
            !add_qkv(f, NM("attn_k.weight"), o, n, o->Hkv, n->Hkv, hm->kv_src, hm, false) ||
            !add_qkv(f, NM("attn_v.weight"), o, n, o->Hkv, n->Hkv, hm->kv_src, hm, true))
            return false;
        /* attn_output {H·hd, E}: rows are residual channels (new ones zero); the columns of
         * old head h, dim d move to the new head of h, dim d (the v layout); other heads'
         * columns stay zero, so added query heads contribute nothing. */
        inf_tensor *t;
        if (!(s = src_get(f, NM("attn_output.weight"), o->H * o->hd, o->E, 1)) ||
            !(t = add_rows(f, nm, 2, qd, n->E, 1, s, o->E, ROW_ZERO)) || !set_src(t, s, true))
            return false;
        for (int64_t h = 0; h < o->H; h++)
            for (int64_t d = 0; d < o->hd; d++)
                t->col_dst[h * o->hd + d] = (int32_t)(hm->q_new[h] * n->hd + d);
        /* QK-norm over hd_n with hd_n − hd_o zeros: rms shrinks by 1/√k, so the normed q and k
         * grow by √k each while the score scale 1/√hd_n shrinks by 1/√k: q·k/√hd grows by √k,
         * undone by 1/√k on q_norm alone. */
        if (!add_qk_norm(f, NM("attn_q_norm.weight"), o, n, hm, 1.0f / sqrtf((float)hm->k)) ||
            !add_qk_norm(f, NM("attn_k_norm.weight"), o, n, hm, 1.0f) ||
            !add_norm(f, NM("ffn_norm.weight"), o->E, n->E, s_E))
            return false;
        if (!(s = src_get(f, NM("ffn_gate.weight"), o->E, o->F, 1)) ||
            !add_rows(f, nm, 2, n->E, n->F, 1, s, o->F, ROW_RANDOM) ||
            !(s = src_get(f, NM("ffn_up.weight"), o->E, o->F, 1)) ||
            !add_rows(f, nm, 2, n->E, n->F, 1, s, o->F, ROW_RANDOM) ||
            !(s = src_get(f, NM("ffn_down.weight"), o->F, o->E, 1)) ||
            !add_rows(f, nm, 2, n->F, n->E, 1, s, o->E, ROW_ZERO))
            return false;
#undef NM
    }
    return true;
}

/* ======================================================================== */
/* The drafter (DFlash v1 or DFlash2; D follows the target's E)             */
/* ======================================================================== */

static bool plan_drafter(inf_file *f, const spex_drafter_hparams *dh, int64_t D_o, int64_t D_n) {
    const float s_D = sqrtf((float)D_o / (float)D_n);
    const int64_t L = dh->n_taps, V = dh->n_vocab, F = dh->n_ff;
    const int64_t qd = (int64_t)dh->n_head * dh->head_dim, kvd = (int64_t)dh->n_head_kv * dh->head_dim;
    const bool v2 = dh->variant == SPEX_DFLASH2;
    const spex_tensor_info *s;
    inf_tensor *t;

    /* fc {L·D, D} (§7): tap t's block of input columns [t·D_o, t·D_o + D_o) moves to
     * [t·D_n, t·D_n + D_o) (the tap row layout of the wider target); new output rows 0. */
    if (!(s = src_get(f, "fc.weight", L * D_o, D_o, 1)) ||
        !(t = add_rows(f, "fc.weight", 2, L * D_n, D_n, 1, s, D_o, ROW_ZERO)) || !set_src(t, s, true))
        return false;
    for (int64_t tap = 0; tap < L; tap++)
        for (int64_t c = 0; c < D_o; c++) t->col_dst[tap * D_o + c] = (int32_t)(tap * D_n + c);
    if (spex_gguf_find_tensor(f->src, "fc.scale") &&
        (!(s = src_get(f, "fc.scale", 1, 1, 1)) || !add_rows(f, "fc.scale", 1, 1, 1, 1, s, 1, ROW_ZERO)))
        return false;
    if (!add_norm(f, "enc.output_norm.weight", D_o, D_n, s_D) || !add_norm(f, "output_norm.weight", D_o, D_n, s_D))
        return false;
    /* A drafter that ships its own embedding / head: widened like the target's. */
    static const char *const own[] = {"token_embd.weight", "output.weight"};
    for (int i = 0; i < 2; i++)
        if (spex_gguf_find_tensor(f->src, own[i]) &&
            (!(s = src_get(f, own[i], D_o, V, 1)) || !add_rows(f, own[i], 2, D_n, V, 1, s, V, ROW_ZERO)))
            return false;
    if (v2) {
        /* §12: the gate H·h_out reads the residual (zero columns for new channels); the
         * codebooks are indexed by token id and stay as they are. */
        const int64_t R = dh->selector_rank;
        if (!(s = src_get(f, "selector_hidden.weight", D_o, R, 1)) ||
            !add_rows(f, "selector_hidden.weight", 2, D_n, R, 1, s, R, ROW_ZERO) ||
            !(s = src_get(f, "selector_predecessor.weight", R, V, 1)) ||
            !add_rows(f, "selector_predecessor.weight", 2, R, V, 1, s, V, ROW_ZERO) ||
            !(s = src_get(f, "selector_successor.weight", R, V, 1)) ||
            !add_rows(f, "selector_successor.weight", 2, R, V, 1, s, V, ROW_ZERO))
            return false;
    }
    const int64_t Tc = dh->conv_kernel, g = dh->conv_group;
    const int64_t G_o = v2 ? D_o / g : 0, G_n = v2 ? D_n / g : 0;
    for (int64_t l = 0; l < dh->n_layer; l++) {
        char nm[64];
#define NM(suffix) (snprintf(nm, sizeof nm, "blk.%" PRId64 "." suffix, l), nm)
        /* The drafter keeps its own heads and FFN width: only the residual widens. */
        if (!add_norm(f, NM("attn_norm.weight"), D_o, D_n, s_D) ||
            !(s = src_get(f, NM("attn_q.weight"), D_o, qd, 1)) || !add_rows(f, nm, 2, D_n, qd, 1, s, qd, ROW_ZERO) ||
            !(s = src_get(f, NM("attn_k.weight"), D_o, kvd, 1)) || !add_rows(f, nm, 2, D_n, kvd, 1, s, kvd, ROW_ZERO) ||
            !(s = src_get(f, NM("attn_v.weight"), D_o, kvd, 1)) || !add_rows(f, nm, 2, D_n, kvd, 1, s, kvd, ROW_ZERO) ||
            !(s = src_get(f, NM("attn_output.weight"), qd, D_o, 1)) || !add_rows(f, nm, 2, qd, D_n, 1, s, D_o, ROW_ZERO) ||
            !(s = src_get(f, NM("attn_q_norm.weight"), dh->head_dim, 1, 1)) ||
            !add_rows(f, nm, 1, dh->head_dim, 1, 1, s, 1, ROW_ZERO) ||
            !(s = src_get(f, NM("attn_k_norm.weight"), dh->head_dim, 1, 1)) ||
            !add_rows(f, nm, 1, dh->head_dim, 1, 1, s, 1, ROW_ZERO) ||
            !add_norm(f, NM("ffn_norm.weight"), D_o, D_n, s_D) ||
            !(s = src_get(f, NM("ffn_gate.weight"), D_o, F, 1)) || !add_rows(f, nm, 2, D_n, F, 1, s, F, ROW_ZERO) ||
            !(s = src_get(f, NM("ffn_up.weight"), D_o, F, 1)) || !add_rows(f, nm, 2, D_n, F, 1, s, F, ROW_ZERO) ||
            !(s = src_get(f, NM("ffn_down.weight"), F, D_o, 1)) || !add_rows(f, nm, 2, F, D_n, 1, s, D_o, ROW_ZERO))
            return false;
        if (!v2) continue;
        static const char *const mod[2] = {"attn", "ffn"};
        for (int i = 0; i < 2; i++) {
            /* Conv bases {D, T_c, 2}: rows (t, s) keep their channels; new channels get 0
             * (their inputs are always zero). */
            snprintf(nm, sizeof nm, "blk.%" PRId64 ".%s_conv_base", l, mod[i]);
            if (!(s = src_get(f, nm, D_o, Tc, 2)) || !add_rows(f, nm, 3, D_n, Tc, 2, s, Tc * 2, ROW_ZERO)) return false;
            /* conv_proj {D, 2·T_c·G} (§10.1): δ[s][t][grp] is output row grp + G·(t + T_c·s);
             * with g fixed, old group grp keeps its channels and its δ moves to
             * grp + G_n·(t + T_c·s). New groups' δ rows are 0 (they scale zero inputs). */
            snprintf(nm, sizeof nm, "blk.%" PRId64 ".%s_conv_proj.weight", l, mod[i]);
            if (!(s = src_get(f, nm, D_o, 2 * Tc * G_o, 1)) || !(t = add_rows(f, nm, 2, D_n, 2 * Tc * G_n, 1, s, 0, ROW_ZERO)))
                return false;
            for (int64_t m = 0; m < 2 * Tc; m++)
                for (int64_t grp = 0; grp < G_o; grp++) t->row_src[grp + G_n * m] = (int32_t)(grp + G_o * m);
        }
#undef NM
    }
    return true;
}

/* Every source tensor must have found its place: anything else (biases, frequency factors,
 * tensors of a newer format) would be silently dropped. */
static bool check_all_used(const inf_file *f) {
    for (int64_t i = 0; i < spex_gguf_n_tensors(f->src); i++)
        if (!f->used[i])
            return fail("%s: tensor '%s' is not handled by inflate", spex_gguf_path(f->src),
                        spex_gguf_tensor(f->src, i)->name);
    return true;
}

/* ======================================================================== */
/* Producing the rows                                                       */
/* ======================================================================== */

typedef struct inf_job {
    const inf_file *f;
    spex_pool *pool;
    uint64_t seed;
    int64_t index;           /* the tensor being filled */
    float *dst;
    float **row;             /* per thread: one dequantized source row      */
    uint8_t **raw;           /* per thread: an aligned copy of a source row */
    _Atomic int failed;
} inf_job;

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* N(0, std²) approximately: the sum of four 16-bit uniforms (Irwin–Hall, unit variance after
 * centring and scaling, bounded at ±3.46σ). The tails do not matter for load or sanity. */
static void random_row(uint64_t seed, int64_t index, int64_t row, float *out, int64_t n) {
    uint64_t s = seed;
    s = splitmix64(&s) ^ ((uint64_t)index * 0xd1b54a32d192ed03ull);
    s = splitmix64(&s) ^ ((uint64_t)row * 0x8cb92ba72f3d8dd7ull);
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = splitmix64(&s);
        uint32_t sum = (uint32_t)(r & 0xffff) + (uint32_t)((r >> 16) & 0xffff) + (uint32_t)((r >> 32) & 0xffff) +
                       (uint32_t)(r >> 48);
        out[i] = INF_RAND_STD * (((float)sum + 2.0f) * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
    }
}

static void fill_task(void *arg, int ith, int nth) {
    inf_job *j = arg;
    const inf_tensor *t = &j->f->t[j->index];
    const int64_t n = t->ne[0];
    for (int64_t r = ith; r < n_rows(t); r += nth) {
        float *d = j->dst + r * n;
        const int32_t src = t->row_src[r];
        if (src == ROW_RANDOM) {
            random_row(j->seed, j->index, r, d, n);
            continue;
        }
        const float fill = src == ROW_ONES ? 1.0f : 0.0f;
        for (int64_t i = 0; i < n; i++) d[i] = fill;
        if (src < 0) continue;
        const int64_t n_src = t->src->ne[0];
        const size_t rb = spex_type_row_size(t->src->type, n_src);
        memcpy(j->raw[ith], (const uint8_t *)t->src->data + (size_t)src * rb, rb); /* rows may be misaligned */
        if (spex_dequantize_row_ref(t->src->type, j->raw[ith], j->row[ith], n_src) != SPEX_OK) {
            j->failed = 1;
            return;
        }
        for (int64_t i = 0; i < n_src; i++) d[t->col_dst ? t->col_dst[i] : i] = t->scale * j->row[ith][i];
    }
}

static spex_status fill_tensor(void *ctx, int64_t index, void *dst, uint64_t nbytes, spex_error *err) {
    inf_job *j = ctx;
    const inf_tensor *t = &j->f->t[index];
    if (nbytes != (uint64_t)(t->ne[0] * n_rows(t)) * sizeof(float))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "inflate: %s: internal size mismatch", t->name);
    j->index = index;
    j->dst = dst;
    j->failed = 0;
    spex_pool_run(j->pool, fill_task, j);
    if (j->failed)
        return spex_error_set(err, SPEX_ERR_UNSUPPORTED, "inflate: %s: cannot dequantize the source rows of type %s",
                              t->name, spex_type_get_info((int)t->src->type)->name);
    return SPEX_OK;
}

/* ======================================================================== */
/* Writing                                                                  */
/* ======================================================================== */

/* A key override: "<arch>.<suffix>" = u32 v, or f32 f when is_f32. */
typedef struct inf_key {
    const char *suffix;
    uint32_t v;
    bool is_f32;
    float f;
} inf_key;

/* Writes f's tensors as F32 to path, with the source's metadata, keys[] replaced, the name
 * suffixed and general.file_type F32. */
static spex_status write_f32(const inf_file *f, const char *arch, const inf_key *keys, int n_keys, spex_pool *pool,
                             uint64_t seed, const char *path, spex_error *err) {
    spex_gguf_writer *w = NULL;
    inf_job j = {.f = f, .pool = pool, .seed = seed};
    const int nth = spex_pool_n_threads(pool);
    int64_t max_src = 1;
    for (int i = 0; i < f->n; i++)
        if (f->t[i].src && f->t[i].src->ne[0] > max_src) max_src = f->t[i].src->ne[0];
    j.row = calloc((size_t)nth, sizeof *j.row);
    j.raw = calloc((size_t)nth, sizeof *j.raw);
    spex_status s = j.row && j.raw ? SPEX_OK : spex_error_set(err, SPEX_ERR_NOMEM, "inflate: out of memory");
    for (int i = 0; s == SPEX_OK && i < nth; i++) {
        j.row[i] = malloc((size_t)max_src * sizeof(float));
        j.raw[i] = aligned_alloc(64, ((size_t)max_src * sizeof(float) + 63) / 64 * 64); /* F32 is the widest */
        if (!j.row[i] || !j.raw[i]) s = spex_error_set(err, SPEX_ERR_NOMEM, "inflate: out of memory");
    }
    if (s == SPEX_OK) s = spex_gguf_writer_init(&w, err);
    for (int64_t i = 0; s == SPEX_OK && i < spex_gguf_n_kv(f->src); i++) {
        spex_gguf_value v;
        if ((s = spex_gguf_value_at(f->src, i, &v)) == SPEX_OK) s = spex_gguf_writer_set_value(w, spex_gguf_key(f->src, i), &v);
    }
    char key[160], name[256];
    for (int i = 0; s == SPEX_OK && i < n_keys; i++) {
        snprintf(key, sizeof key, "%s.%s", arch, keys[i].suffix);
        s = keys[i].is_f32 ? spex_gguf_writer_set_f32(w, key, keys[i].f) : spex_gguf_writer_set_u32(w, key, keys[i].v);
    }
    spex_str gn = {"spex", 4};
    spex_gguf_get_str(f->src, "general.name", &gn, NULL);
    int len = snprintf(name, sizeof name, "%.*s (inflated)", (int)(gn.len > 200 ? 200 : gn.len), gn.ptr);
    if (s == SPEX_OK) s = spex_gguf_writer_set_str(w, "general.name", name, (uint64_t)len);
    if (s == SPEX_OK) s = spex_gguf_writer_set_u32(w, "general.file_type", (uint32_t)SPEX_FTYPE_F32);
    if (s != SPEX_OK && err && !err->msg[0]) spex_error_set(err, s, "inflate: cannot set the metadata of %s", path);
    for (int i = 0; s == SPEX_OK && i < f->n; i++) {
        const inf_tensor *t = &f->t[i];
        const int64_t ne[3] = {t->ne[0], t->ne[1], t->ne[2]};
        s = spex_gguf_writer_add_tensor(w, t->name, SPEX_TYPE_F32, t->n_dims, ne, NULL,
                                        (uint64_t)(t->ne[0] * n_rows(t)) * sizeof(float), err);
    }
    if (s == SPEX_OK) {
        spex_gguf_writer_set_fill(w, fill_tensor, &j);
        s = spex_gguf_writer_write(w, path, err);
    }
    spex_gguf_writer_free(w);
    for (int i = 0; i < nth; i++) {
        if (j.row) free(j.row[i]);
        if (j.raw) free(j.raw[i]);
    }
    free(j.row);
    free(j.raw);
    return s;
}

/* F32 straight to out, or F32 to a temporary file next to it, quantized to ft. */
static spex_status write_as(const inf_file *f, const char *arch, const inf_key *keys, int n_keys, spex_pool *pool,
                            uint64_t seed, spex_ftype ft, int threads, const char *out, spex_error *err) {
    if (ft == SPEX_FTYPE_F32) return write_f32(f, arch, keys, n_keys, pool, seed, out, err);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.f32.tmp", out);
    spex_status s = write_f32(f, arch, keys, n_keys, pool, seed, tmp, err);
    if (s == SPEX_OK) {
        spex_quantize_params qp = spex_quantize_default_params();
        qp.ftype = ft;
        qp.n_threads = threads;
        s = spex_quantize_file(tmp, out, &qp, err);
    }
    unlink(tmp);
    return s;
}

/* ======================================================================== */
/* The command                                                              */
/* ======================================================================== */

static void inflate_usage(FILE *f) {
    fprintf(f,
            "usage: spex inflate -m TARGET -md DRAFTER -o OUTDIR [--embd 1024] [--layers 28] [--head-dim 128]\n"
            "                    [--heads 16] [--heads-kv 8] [--ff 3072] [--type q8_0] [--drafter-type T]\n"
            "                    [--seed %d] [-t 2]\n"
            "  Writes OUTDIR/target.gguf and OUTDIR/drafter.gguf: the qwen3 target and its DFlash drafter\n"
            "  expanded to the given shape so that they compute the original logits and drafts (the\n"
            "  construction and its limits: docs/inflate.md).\n"
            "  --embd       hidden size E (and the drafter's D), >= the original, a multiple of the drafter's\n"
            "               conv group and of the type's block (256 for K-quants, 32 for q8_0 / q4_0)\n"
            "  --layers     target layers, >= the original (added layers compute and add nothing)\n"
            "  --head-dim   a multiple of the original head dim (RoPE pairs are placed by frequency)\n"
            "  --heads, --heads-kv   query / KV heads; must hold the original heads (see the doc)\n"
            "  --ff         target FFN width, >= the original\n"
            "  --type       f32 f16 bf16 q8_0 q4_0 q4_K_M q5_K_M q6_K for the target (spex quantize's mixes)\n"
            "  --drafter-type  the drafter's type (default: --type)\n"
            "  --seed       random weights of added units are a pure function of it\n"
            "  -t           threads (default 2; no effect on the bytes)\n",
            INF_SEED_DEFAULT);
}

/* Row lengths of quantized matrices must fill whole blocks of the target type: K-quants 256,
 * the 32-blocks 32 (the quantizer would fall back to another type otherwise, which would not
 * be the shape's realistic cost). */
static int64_t type_block(spex_ftype ft) {
    switch (ft) {
    case SPEX_FTYPE_Q4_K_M: case SPEX_FTYPE_Q5_K_M: case SPEX_FTYPE_Q6_K: return 256;
    case SPEX_FTYPE_Q8_0: case SPEX_FTYPE_Q4_0: return 32;
    default: return 1;
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static long long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* Shape checks against the original; false with g_msg set. */
static bool check_shape(const spex_model_hparams *hp, const spex_drafter_hparams *dh, const inf_shape *o,
                        const inf_shape *n, spex_ftype ft) {
    if (hp->arch != SPEX_ARCH_QWEN3 || hp->rope_mode != 2 || !hp->qk_norm)
        return fail("the target must be a qwen3 model (NEOX RoPE, QK-norm)");
    if (hp->n_rot != hp->head_dim)
        return fail("the target rotates %d of %d head dims: inflate places full-rotary heads only", hp->n_rot,
                    hp->head_dim);
    if (n->E < o->E) return fail("--embd %" PRId64 " is smaller than the original %" PRId64, n->E, o->E);
    if (n->N < o->N) return fail("--layers %" PRId64 " is fewer than the original %" PRId64, n->N, o->N);
    if (n->F < o->F) return fail("--ff %" PRId64 " is smaller than the original %" PRId64, n->F, o->F);
    if (n->hd < o->hd || n->hd % o->hd)
        return fail("--head-dim %" PRId64 " is not a multiple of the original %" PRId64, n->hd, o->hd);
    if (n->H % n->Hkv) return fail("--heads %" PRId64 " is not divisible by --heads-kv %" PRId64, n->H, n->Hkv);
    const int64_t Go = o->H / o->Hkv, Gn = n->H / n->Hkv, copies = (Go + Gn - 1) / Gn;
    if (o->Hkv * copies > n->Hkv)
        return fail("--heads %" PRId64 " / --heads-kv %" PRId64 " cannot hold the original %" PRId64 "/%" PRId64
                    " heads: each original KV head needs %" PRId64 " new KV heads of %" PRId64 " query heads",
                    n->H, n->Hkv, o->H, o->Hkv, copies, Gn);
    const int64_t b = type_block(ft);
    if (n->E % b || n->F % b || (n->H * n->hd) % b)
        return fail("--embd %" PRId64 ", --ff %" PRId64 " and heads x head-dim %" PRId64
                    " must be multiples of %" PRId64 " for %s",
                    n->E, n->F, n->H * n->hd, b, spex_ftype_name(ft));
    if (dh->n_embd != hp->n_embd) return fail("drafter D %d != target E %d", dh->n_embd, hp->n_embd);
    if (dh->variant == SPEX_DFLASH2 && n->E % dh->conv_group)
        return fail("--embd %" PRId64 " is not a multiple of the drafter's conv group %d", n->E, dh->conv_group);
    return true;
}

/* Writes both files from the plans, checks that they load as a pair and prints a summary;
 * the exit code. */
static int write_pair(const spex_model_hparams *hp, const spex_drafter_hparams *dh, const inf_shape *o,
                      const inf_shape *n, const inf_file *tf, const inf_file *df, spex_ftype ft, spex_ftype dft,
                      uint64_t seed, int threads, const char *outdir, const char *target) {
    const long E = (long)n->E, N = (long)n->N, H = (long)n->H, Hkv = (long)n->Hkv, hd = (long)n->hd, F = (long)n->F;
    spex_error err = {0};
    spex_pool *pool = NULL;
    spex_model *m2 = NULL;
    spex_drafter *d2 = NULL;
    char out_t[4096], out_d[4096];
    snprintf(out_t, sizeof out_t, "%s/target.gguf", outdir);
    snprintf(out_d, sizeof out_d, "%s/drafter.gguf", outdir);
    const double t0 = now_s();
    int rc = 0;
    /* eps × E_o/E_n makes every RMSNorm over the residual exact: with w' = w·√(E_o/E_n),
     * x·w' / √(mean_n(x²) + eps') = x·w / √(mean_o(x²) + eps) since mean_n = mean_o·E_o/E_n.
     * The QK-norms share the key: they then see eps·(E_o/E_n)·(hd_n/hd_o) instead of eps
     * (docs/inflate.md, "Tolerance"). */
    const float ratio = (float)o->E / (float)E;
    const inf_key tkeys[] = {
        {"attention.layer_norm_rms_epsilon", 0, true, hp->rms_eps * ratio},
        {"embedding_length", (uint32_t)E, false, 0},     {"block_count", (uint32_t)N, false, 0},
        {"feed_forward_length", (uint32_t)F, false, 0},  {"attention.head_count", (uint32_t)H, false, 0},
        {"attention.head_count_kv", (uint32_t)Hkv, false, 0}, {"attention.key_length", (uint32_t)hd, false, 0},
        {"attention.value_length", (uint32_t)hd, false, 0},   {"rope.dimension_count", (uint32_t)hd, false, 0},
    };
    const inf_key dkeys[] = {{"embedding_length", (uint32_t)E, false, 0},
                             {"attention.layer_norm_rms_epsilon", 0, true, dh->rms_eps * ratio}};
    /* qwen3 files usually carry no rope.dimension_count (n_rot = hd): written only if present */
    char rk[64];
    snprintf(rk, sizeof rk, "%s.rope.dimension_count", spex_arch_name(hp->arch));
    const int n_tkeys = spex_gguf_find_key(tf->src, rk) >= 0 ? 9 : 8;
    spex_status s = spex_pool_create(threads, &pool, &err);
    if (s == SPEX_OK)
        s = write_as(tf, spex_arch_name(hp->arch), tkeys, n_tkeys, pool, seed, ft, threads, out_t, &err);
    if (s == SPEX_OK) s = write_as(df, "dflash", dkeys, 2, pool, seed + 1, dft, threads, out_d, &err);
    if (s != SPEX_OK) {
        fprintf(stderr, "error: inflate: %s\n", err.msg);
        rc = 1;
    } else if (spex_model_load(out_t, NULL, &m2, &err) != SPEX_OK ||
               spex_drafter_load(out_d, m2, NULL, &d2, &err) != SPEX_OK) {
        /* the outputs must load as a pair (every check of the loaders) */
        fprintf(stderr, "error: inflate: the output does not load: %s\n", err.msg);
        rc = 1;
    }
    if (rc) {
        spex_drafter_free(d2);
        spex_model_free(m2);
        spex_pool_free(pool);
        return rc;
    }
    printf("wrote %s: qwen3 E %ld, %ld layers, %ld/%ld heads of %ld, FFN %ld, V %d, %s, %.1f MiB, %.3f M params\n",
           out_t, E, N, H, Hkv, hd, F, hp->n_vocab, spex_ftype_name(ft), (double)file_size(out_t) / 1048576.0,
           (double)spex_model_n_params(m2) / 1e6);
    printf("wrote %s: dflash D %ld, %d layers, %d/%d heads of %d, FFN %d, %s, %.1f MiB\n", out_d, E, dh->n_layer,
           dh->n_head, dh->n_head_kv, dh->head_dim, dh->n_ff, spex_ftype_name(dft), (double)file_size(out_d) / 1048576.0);
    printf("from %s (E %" PRId64 ", %" PRId64 " layers, %" PRId64 "/%" PRId64 " heads of %" PRId64 ", FFN %" PRId64
           ") in %.1f s\n",
           target, o->E, o->N, o->H, o->Hkv, o->hd, o->F, now_s() - t0);
    spex_drafter_free(d2);
    spex_model_free(m2);
    spex_pool_free(pool);
    return rc;
}

int cmd_inflate(int argc, char **argv) {
    const char *target = NULL, *drafter = NULL, *outdir = NULL, *type_name = "q8_0", *dtype_name = NULL;
    long E = 1024, N = 28, hd = 128, H = 16, Hkv = 8, F = 3072, seed = INF_SEED_DEFAULT, threads = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        long *num = !strcmp(a, "--embd") ? &E : !strcmp(a, "--layers") ? &N : !strcmp(a, "--head-dim") ? &hd
                  : !strcmp(a, "--heads") ? &H : !strcmp(a, "--heads-kv") ? &Hkv : !strcmp(a, "--ff") ? &F
                  : !strcmp(a, "--seed") ? &seed : (!strcmp(a, "-t") || !strcmp(a, "--threads")) ? &threads : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            inflate_usage(stdout);
            return 0;
        } else if (num) {
            long max = num == &seed ? 0x7fffffffL : num == &threads ? 1024 : 1L << 20;
            if (!cli_parse_int(a, val, num == &seed ? 0 : 1, max, num)) return 2;
            i++;
        } else if (!strcmp(a, "-m") && val) {
            target = argv[++i];
        } else if (!strcmp(a, "-md") && val) {
            drafter = argv[++i];
        } else if (!strcmp(a, "-o") && val) {
            outdir = argv[++i];
        } else if (!strcmp(a, "--type") && val) {
            type_name = argv[++i];
        } else if (!strcmp(a, "--drafter-type") && val) {
            dtype_name = argv[++i];
        } else {
            fprintf(stderr, "error: inflate: unknown or incomplete argument '%s'\n", a);
            inflate_usage(stderr);
            return 2;
        }
    }
    if (!target || !drafter || !outdir) {
        fprintf(stderr, "error: inflate: -m TARGET, -md DRAFTER and -o OUTDIR are required\n");
        inflate_usage(stderr);
        return 2;
    }
    spex_ftype ft, dft;
    if (!spex_ftype_from_name(type_name, &ft)) {
        fprintf(stderr, "error: inflate: unknown type '%s'\n", type_name);
        return 2;
    }
    if (!spex_ftype_from_name(dtype_name ? dtype_name : type_name, &dft)) {
        fprintf(stderr, "error: inflate: unknown drafter type '%s'\n", dtype_name);
        return 2;
    }

    spex_error err = {0};
    spex_model *m = NULL;
    spex_drafter *d = NULL;
    if (spex_model_load(target, NULL, &m, &err) != SPEX_OK || spex_drafter_load(drafter, m, NULL, &d, &err) != SPEX_OK) {
        fprintf(stderr, "error: inflate: %s\n", err.msg);
        spex_model_free(m);
        return 1;
    }
    const spex_model_hparams *hp = spex_model_get_hparams(m);
    const spex_drafter_hparams *dh = spex_drafter_get_hparams(d);
    const inf_shape o = {hp->n_embd, hp->n_layer, hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_ff};
    const inf_shape n = {E, N, H, Hkv, hd, F};
    static inf_heads hm;
    inf_file tf = {.src = spex_model_gguf(m)}, df = {.src = spex_drafter_gguf(d)};
    int rc = 0;
    if (!check_shape(hp, dh, &o, &n, ft)) {
        rc = 2;
    } else if (E % type_block(dft)) {
        fail("--embd %ld must be a multiple of %" PRId64 " for the drafter's %s", E, type_block(dft),
             spex_ftype_name(dft));
        rc = 2;
    } else if (mkdir(outdir, 0777) != 0 && errno != EEXIST) {
        fail("cannot create %s: %s", outdir, strerror(errno));
        rc = 1;
    } else {
        tf.used = calloc((size_t)spex_gguf_n_tensors(tf.src) + 1, sizeof(bool));
        df.used = calloc((size_t)spex_gguf_n_tensors(df.src) + 1, sizeof(bool));
        bool ok = tf.used && df.used ? true : fail("out of memory");
        ok = ok && plan_target(&tf, hp, &o, &n, &hm) && check_all_used(&tf);
        ok = ok && plan_drafter(&df, dh, o.E, n.E) && check_all_used(&df);
        rc = ok ? 0 : 1;
    }
    if (rc) fprintf(stderr, "error: inflate: %s\n", g_msg);
    else
        rc = write_pair(hp, dh, &o, &n, &tf, &df, ft, dft, (uint64_t)seed, (int)threads, outdir, target);
    file_free(&tf);
    file_free(&df);
    spex_drafter_free(d);
    spex_model_free(m);
    return rc;
}
