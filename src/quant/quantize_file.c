/*
 * quantize_file.c — spex_quantize_file: a GGUF in, the same model in another tensor format
 * out (include/spex.h, "Quantization of whole files"; recipe and fallbacks in
 * docs/quantization.md).
 *
 * What it is: the per-tensor type choice of llama.cpp's quantizer (llama-quant.cpp,
 * llama_tensor_get_type, without an importance matrix), the conversion of each tensor row by
 * row (any type with a reference dequantizer → f32 → spex_quantize_row_ref) on the thread
 * pool, and a streaming write: metadata is copied verbatim, tensors are produced one at a
 * time by the writer's fill callback, so memory holds one output tensor, never the model.
 * What it is not: an importance-matrix (imatrix) quantizer, nor one for the IQ and TQ types.
 *
 * Where llama.cpp gives up (a Q8_0/Q4_0 target whose block does not divide a row, e.g.
 * stories260K's 172-wide ffn_down), spex falls back to F16, the same last resort llama.cpp
 * uses after its K-quant fallback table.
 */
#include "spex.h"
#include "gguf/api.h"
#include "cpu/api.h"
#include "quant/api.h"
#include "core/file.h"
#include "tensor/api.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================== */
/* File types                                                                */
/* ======================================================================== */

static const struct {
    spex_ftype ftype;
    const char *name;
    spex_type base;   /* the type most tensors get */
} ftypes[] = {
    {SPEX_FTYPE_F32, "F32", SPEX_TYPE_F32},       {SPEX_FTYPE_F16, "F16", SPEX_TYPE_F16},
    {SPEX_FTYPE_BF16, "BF16", SPEX_TYPE_BF16},    {SPEX_FTYPE_Q8_0, "Q8_0", SPEX_TYPE_Q8_0},
    {SPEX_FTYPE_Q4_0, "Q4_0", SPEX_TYPE_Q4_0},    {SPEX_FTYPE_Q4_K_M, "Q4_K_M", SPEX_TYPE_Q4_K},
    {SPEX_FTYPE_Q5_K_M, "Q5_K_M", SPEX_TYPE_Q5_K}, {SPEX_FTYPE_Q6_K, "Q6_K", SPEX_TYPE_Q6_K},
};
#define N_FTYPES (int)(sizeof ftypes / sizeof ftypes[0])

static bool name_eq(const char *a, const char *b) {
    while (*a && *b && toupper((unsigned char)*a) == toupper((unsigned char)*b)) a++, b++;
    return *a == 0 && *b == 0;
}

bool spex_ftype_from_name(const char *name, spex_ftype *out) {
    if (!name) return false;
    for (int i = 0; i < N_FTYPES; i++)
        if (name_eq(name, ftypes[i].name)) {
            *out = ftypes[i].ftype;
            return true;
        }
    /* llama-quantize accepts the bare K-quant names for the _M mixes */
    if (name_eq(name, "Q4_K") || name_eq(name, "Q5_K")) {
        *out = name_eq(name, "Q4_K") ? SPEX_FTYPE_Q4_K_M : SPEX_FTYPE_Q5_K_M;
        return true;
    }
    return false;
}

const char *spex_ftype_name(spex_ftype ft) {
    for (int i = 0; i < N_FTYPES; i++)
        if (ftypes[i].ftype == ft) return ftypes[i].name;
    return NULL;
}

static bool ftype_base(spex_ftype ft, spex_type *base) {
    for (int i = 0; i < N_FTYPES; i++)
        if (ftypes[i].ftype == ft) {
            *base = ftypes[i].base;
            return true;
        }
    return false;
}

spex_quantize_params spex_quantize_default_params(void) {
    return (spex_quantize_params){.ftype = SPEX_FTYPE_Q8_0, .n_threads = 0, .verbose = false};
}

/* ======================================================================== */
/* The recipe                                                                */
/* ======================================================================== */

/* What the whole model tells the per-tensor choice. */
typedef struct recipe {
    spex_ftype ftype;
    spex_type base;
    bool has_output;          /* false: output tied to token_embd, which then gets output's type */
    int64_t n_layer;          /* <arch>.block_count, or the number of ffn_down tensors */
    int64_t n_attn_v;         /* attention value tensors (attn_v, attn_qkv, attn_kv_b) */
    uint32_t n_expert;        /* <arch>.expert_count, 0 if dense */
} recipe;

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !memcmp(s + n - m, suffix, m);
}

/* "blk.N." → N, or -1. */
static int64_t layer_of(const char *name) {
    if (strncmp(name, "blk.", 4)) return -1;
    int64_t v = 0;
    const char *p = name + 4;
    if (!isdigit((unsigned char)*p)) return -1;
    while (isdigit((unsigned char)*p) && v < 1000000000) v = v * 10 + (*p++ - '0');
    return *p == '.' ? v : -1;
}

/* Should this tensor be converted at all? llama.cpp converts 2-D+ weights except norms and a
 * few small or position-like tensors; spex adds DFlash2's conv bases, which it keeps in F32
 * (their convolution runs on the F32 base, see docs/quantization.md).
 * qwen35 (targets.md §6.3): ssm_conv1d.weight {d_conv, C} is 2-D but read element-wise by the
 * forward, so it stays F32 (listed below, as llama.cpp lists it); ssm_a and ssm_dt.bias are 1-D
 * and do not end in "weight"; ssm_norm and the MTP block's nextn.*norm contain "norm". The
 * loader (src/model/model_qwen35.c) requires all of these in F32. ssm_beta / ssm_alpha {E, Hv}
 * are ordinary matrices: llama.cpp has no rule for them, so they take the base type. */
static bool is_quantizable(const spex_tensor_info *t) {
    static const char *const keep[] = {
        "norm",                 /* *_norm.weight and friends: tiny, precision-critical */
        "_conv_base",           /* DFlash2 */
        "ffn_gate_inp.weight",  /* MoE router */
        "ssm_conv1d.weight", "shortconv.conv.weight", "attn_rel_b.weight",
        "position_embd.weight", "token_types.weight",
    };
    if (!ends_with(t->name, "weight") || t->n_dims < 2) return false;
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++)
        if (strstr(t->name, keep[i])) return false;
    return true;
}

/* llama.cpp's use_more_bits: the first and last eighth of the layers, and every third one in
 * between, get more bits in the _M mixes. */
static bool use_more_bits(int64_t i, int64_t n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static bool divides(spex_type t, int64_t n) {
    return n % spex_type_get_info((int)t)->block_size == 0;
}

/* The output type of a quantizable tensor (llama_tensor_get_type for the ftypes spex offers). */
spex_type spex_quantize_tensor_type(spex_ftype ft, const spex_quant_tensor *t, const char **why, spex_type *wanted) {
    const char *dummy_why;
    spex_type dummy_wanted;
    if (!why) why = &dummy_why;
    if (!wanted) wanted = &dummy_wanted;
    spex_type base = SPEX_TYPE_F32;
    (void)ftype_base(ft, &base);
    spex_type ty = base;
    *why = NULL;
    *wanted = ty;
    if (base == SPEX_TYPE_F32 || base == SPEX_TYPE_F16 || base == SPEX_TYPE_BF16) return ty; /* no mix */
    bool km = ft == SPEX_FTYPE_Q4_K_M, k5m = ft == SPEX_FTYPE_Q5_K_M;
    const char *n = t->name;
    if (!strcmp(n, "output.weight") || (!t->has_output && !strcmp(n, "token_embd.weight"))) {
        /* the output projection decides every logit: Q6_K unless the row does not fit a block */
        if (!divides(base, t->row)) ty = SPEX_TYPE_Q8_0;
        else if (base != SPEX_TYPE_Q8_0) ty = SPEX_TYPE_Q6_K;
        *why = "output";
    } else if (!strcmp(n, "token_embd.weight")) {
        /* base type: only rows are looked up */
    } else if (strstr(n, "attn_v.weight")) {
        if ((km || k5m) && use_more_bits(t->i_attn_v, t->n_attn_v)) ty = SPEX_TYPE_Q6_K, *why = "more bits";
        if (t->n_expert == 8) ty = SPEX_TYPE_Q8_0, *why = "8 experts";
    } else if (strstr(n, "attn_k.weight")) {
        if (t->n_expert == 8) ty = SPEX_TYPE_Q8_0, *why = "8 experts";
    } else if (strstr(n, "ffn_down")) {
        int64_t i = t->n_expert > 1 ? layer_of(n) : t->i_ffn_down;
        if ((km || k5m) && i >= 0 && use_more_bits(i, t->n_layer)) ty = SPEX_TYPE_Q6_K, *why = "more bits";
    } else if (strstr(n, "attn_output.weight")) {
        if (km && t->n_expert == 8) ty = SPEX_TYPE_Q5_K, *why = "8 experts";
    } else if (strstr(n, "attn_qkv.weight")) {
        if (km) ty = SPEX_TYPE_Q5_K, *why = "fused qkv";
        if (k5m) ty = SPEX_TYPE_Q6_K, *why = "fused qkv";
    }
    *wanted = ty;
    if (!divides(ty, t->row)) {
        /* llama.cpp's fallback table for rows that are not a whole number of super-blocks */
        spex_type fb = ty == SPEX_TYPE_Q4_K ? SPEX_TYPE_Q5_0
                     : ty == SPEX_TYPE_Q5_K ? SPEX_TYPE_Q5_1
                     : ty == SPEX_TYPE_Q6_K ? SPEX_TYPE_Q8_0
                     : SPEX_TYPE_F16;
        if (!divides(fb, t->row)) fb = SPEX_TYPE_F16;
        ty = fb;
    }
    return ty;
}

static spex_type choose_type(const recipe *r, const spex_tensor_info *t, int64_t i_attn_v, int64_t i_ffn_down,
                             const char **why, spex_type *wanted) {
    spex_quant_tensor q = {.name = t->name, .row = t->ne[0], .has_output = r->has_output, .i_attn_v = i_attn_v,
                           .n_attn_v = r->n_attn_v, .i_ffn_down = i_ffn_down, .n_layer = r->n_layer,
                           .n_expert = r->n_expert};
    return spex_quantize_tensor_type(r->ftype, &q, why, wanted);
}

/* ======================================================================== */
/* Conversion on the pool                                                    */
/* ======================================================================== */

typedef struct plan {
    spex_type out;
    bool convert;      /* false: bytes copied unchanged */
    const char *why;   /* the recipe rule that picked the type, if any */
    spex_type wanted;  /* the type before the row-size fallback */
} plan;

typedef struct job {
    spex_gguf *in;
    plan *plans;
    spex_pool *pool;
    /* the tensor being converted */
    const spex_tensor_info *src;
    spex_type dst_type;
    uint8_t *dst;
    int64_t row_len, n_rows, rows_per_chunk, n_chunks;
    size_t src_row_bytes, dst_row_bytes;
    /* per thread */
    float **f32;       /* row_len_max floats */
    uint8_t **raw;     /* an aligned copy of a source row, when the mapping's row is misaligned */
    spex_status *status;
} job;

static void convert_task(void *ctx, int ith, int nth) {
    job *j = ctx;
    float *f = j->f32[ith];
    for (int64_t c = spex_pool_next_chunk(j->pool); c < j->n_chunks; c = spex_pool_next_chunk(j->pool)) {
        int64_t r0 = c * j->rows_per_chunk, r1 = r0 + j->rows_per_chunk < j->n_rows ? r0 + j->rows_per_chunk : j->n_rows;
        for (int64_t r = r0; r < r1 && j->status[ith] == SPEX_OK; r++) {
            const uint8_t *src = (const uint8_t *)j->src->data + (size_t)r * j->src_row_bytes;
            if ((uintptr_t)src % 16 != 0) { /* files with general.alignment < 16 */
                memcpy(j->raw[ith], src, j->src_row_bytes);
                src = j->raw[ith];
            }
            spex_status s = spex_dequantize_row_ref(j->src->type, src, f, j->row_len);
            if (s == SPEX_OK)
                s = spex_quantize_row_ref(j->dst_type, f, j->dst + (size_t)r * j->dst_row_bytes, j->row_len);
            j->status[ith] = s;
        }
    }
}

static spex_status fill_tensor(void *ctx, int64_t index, void *dst, uint64_t nbytes, spex_error *err) {
    job *j = ctx;
    const spex_tensor_info *t = spex_gguf_tensor(j->in, index);
    j->src = t;
    j->dst_type = j->plans[index].out;
    j->dst = dst;
    j->row_len = t->ne[0];
    j->n_rows = t->ne[1] * t->ne[2] * t->ne[3];
    j->src_row_bytes = spex_type_row_size(t->type, t->ne[0]);
    j->dst_row_bytes = spex_type_row_size(j->dst_type, t->ne[0]);
    if ((uint64_t)j->dst_row_bytes * (uint64_t)j->n_rows != nbytes)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "%s: tensor '%s': internal size mismatch", spex_gguf_path(j->in),
                              t->name);
    /* chunks of about 64K elements: enough work per claim, enough claims per thread */
    j->rows_per_chunk = j->row_len >= 65536 ? 1 : 65536 / j->row_len;
    j->n_chunks = (j->n_rows + j->rows_per_chunk - 1) / j->rows_per_chunk;
    int nth = spex_pool_n_threads(j->pool);
    for (int i = 0; i < nth; i++) j->status[i] = SPEX_OK;
    spex_pool_run(j->pool, convert_task, j);
    for (int i = 0; i < nth; i++)
        if (j->status[i] != SPEX_OK)
            return spex_error_set(err, j->status[i], "%s: tensor '%s': converting %s to %s failed: %s",
                                  spex_gguf_path(j->in), t->name, spex_type_get_info((int)t->type)->name,
                                  spex_type_get_info((int)j->dst_type)->name, spex_status_str(j->status[i]));
    return SPEX_OK;
}

/* ======================================================================== */
/* The file                                                                  */
/* ======================================================================== */

static spex_status refuse_same_file(const char *in_path, const char *out_path, spex_error *err) {
    if (!strcmp(in_path, out_path))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "%s: refusing to overwrite the input file", out_path);
    spex_file_id a, b;
    spex_status s = spex_file_get_id(in_path, &a, err);
    if (s != SPEX_OK) return s;
    s = spex_file_get_id(out_path, &b, NULL);
    if (s == SPEX_OK && a.dev == b.dev && a.ino == b.ino)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "%s: refusing to overwrite the input file %s (same file)",
                              out_path, in_path);
    return SPEX_OK;
}

/* Reads what the recipe needs from the whole model. */
static void read_recipe(spex_gguf *g, spex_ftype ftype, spex_type base, recipe *r) {
    memset(r, 0, sizeof *r);
    r->ftype = ftype;
    r->base = base;
    r->has_output = spex_gguf_find_tensor(g, "output.weight") != NULL;
    char arch[64] = "", key[128];
    spex_str a;
    if (spex_gguf_get_str(g, "general.architecture", &a, NULL) == SPEX_OK && a.len < sizeof arch) {
        memcpy(arch, a.ptr, (size_t)a.len);
        arch[a.len] = 0;
    }
    int64_t n_ffn_down = 0;
    for (int64_t i = 0; i < spex_gguf_n_tensors(g); i++) {
        const char *n = spex_gguf_tensor(g, i)->name;
        if (strstr(n, "attn_v.weight") || strstr(n, "attn_qkv.weight") || strstr(n, "attn_kv_b.weight")) r->n_attn_v++;
        if (strstr(n, "ffn_down")) n_ffn_down++;
    }
    uint32_t v;
    snprintf(key, sizeof key, "%s.block_count", arch);
    r->n_layer = spex_gguf_get_u32(g, key, &v, NULL) == SPEX_OK ? v : n_ffn_down;
    snprintf(key, sizeof key, "%s.expert_count", arch);
    if (spex_gguf_get_u32(g, key, &v, NULL) == SPEX_OK) r->n_expert = v;
}

/* Rank of tensor i among the tensors whose name contains `kind`, ordered by layer then name
 * (llama.cpp walks tensors in that order and counts). */
static int64_t rank_of(spex_gguf *g, int64_t i, const char *kind) {
    const char *me = spex_gguf_tensor(g, i)->name;
    int64_t my_layer = layer_of(me), rank = 0;
    for (int64_t j = 0; j < spex_gguf_n_tensors(g); j++) {
        const char *o = spex_gguf_tensor(g, j)->name;
        if (j == i || !strstr(o, kind)) continue;
        int64_t l = layer_of(o);
        if (l < my_layer || (l == my_layer && strcmp(o, me) < 0)) rank++;
    }
    return rank;
}

static spex_status make_plans(spex_gguf *g, const recipe *r, plan *plans) {
    for (int64_t i = 0; i < spex_gguf_n_tensors(g); i++) {
        const spex_tensor_info *t = spex_gguf_tensor(g, i);
        plan *p = &plans[i];
        p->out = t->type;
        p->convert = false;
        p->why = NULL;
        p->wanted = t->type;
        if (!is_quantizable(t)) continue;
        if (!spex_type_get_info((int)t->type)->has_ref) {
            p->why = "kept: no reference dequantizer for its type";
            continue;
        }
        int64_t i_v = strstr(t->name, "attn_v.weight") ? rank_of(g, i, "attn_v.weight") : 0;
        int64_t i_down = strstr(t->name, "ffn_down") ? rank_of(g, i, "ffn_down") : 0;
        spex_type out = choose_type(r, t, i_v, i_down, &p->why, &p->wanted);
        if (out != t->type) {
            p->out = out;
            p->convert = true;
        }
    }
    return SPEX_OK;
}

spex_status spex_quantize_file(const char *in_path, const char *out_path, const spex_quantize_params *params,
                               spex_error *err) {
    if (!in_path || !out_path || !params)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "quantize: input, output and params are required");
    spex_type base;
    if (!ftype_base(params->ftype, &base))
        return spex_error_set(err, SPEX_ERR_UNSUPPORTED, "quantize: file type %d is not one spex writes",
                              (int)params->ftype);
    spex_status s = refuse_same_file(in_path, out_path, err);
    if (s != SPEX_OK) return s;

    spex_gguf *g = NULL;
    spex_gguf_writer *w = NULL;
    job j = {0};
    if ((s = spex_gguf_open(in_path, &g, err)) != SPEX_OK) return s;
    int64_t n_t = spex_gguf_n_tensors(g);
    j.in = g;
    j.plans = calloc((size_t)n_t + 1, sizeof *j.plans);
    if (!j.plans) {
        s = spex_error_set(err, SPEX_ERR_NOMEM, "quantize: out of memory");
        goto done;
    }
    recipe r;
    read_recipe(g, params->ftype, base, &r);
    make_plans(g, &r, j.plans);

    if ((s = spex_gguf_writer_init(&w, err)) != SPEX_OK) goto done;
    spex_gguf_writer_set_alignment(w, (uint32_t)spex_gguf_alignment(g));
    for (int64_t i = 0; i < spex_gguf_n_kv(g) && s == SPEX_OK; i++) {
        spex_gguf_value v;
        spex_gguf_value_at(g, i, &v);
        s = spex_gguf_writer_set_value(w, spex_gguf_key(g, i), &v);
    }
    /* llama.cpp records the quantization format version (GGML_QNT_VERSION, 2) and the ftype */
    if (s == SPEX_OK) s = spex_gguf_writer_set_u32(w, "general.quantization_version", 2);
    if (s == SPEX_OK) s = spex_gguf_writer_set_u32(w, "general.file_type", (uint32_t)params->ftype);
    if (s != SPEX_OK) {
        s = spex_error_set(err, s, "%s: cannot copy the metadata: %s", in_path, spex_status_str(s));
        goto done;
    }
    int64_t max_row = 1;
    for (int64_t i = 0; i < n_t; i++) {
        const spex_tensor_info *t = spex_gguf_tensor(g, i);
        const plan *p = &j.plans[i];
        uint64_t nbytes = (uint64_t)spex_type_row_size(p->out, t->ne[0]) * (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
        s = spex_gguf_writer_add_tensor(w, t->name, p->out, t->n_dims, t->ne, p->convert ? NULL : t->data, nbytes, err);
        if (s != SPEX_OK) goto done;
        if (p->convert && t->ne[0] > max_row) max_row = t->ne[0];
        if (params->verbose) {
            char note[160] = "";
            if (p->wanted != p->out)
                snprintf(note, sizeof note, " (%s%s%s -> %s: rows of %" PRId64 " do not fill its blocks)",
                         p->why ? p->why : "", p->why ? ": " : "", spex_type_get_info((int)p->wanted)->name,
                         spex_type_get_info((int)p->out)->name, t->ne[0]);
            else if (p->why)
                snprintf(note, sizeof note, " (%s)", p->why);
            fprintf(stderr, "[%4" PRId64 "/%4" PRId64 "] %-32s %-5s -> %-5s %12" PRIu64 " -> %12" PRIu64 " bytes%s\n",
                    i + 1, n_t, t->name, spex_type_get_info((int)t->type)->name,
                    p->convert ? spex_type_get_info((int)p->out)->name : "copy", t->nbytes, nbytes, note);
        }
    }

    if ((s = spex_pool_create(params->n_threads, &j.pool, err)) != SPEX_OK) goto done;
    int nth = spex_pool_n_threads(j.pool);
    j.f32 = calloc((size_t)nth, sizeof *j.f32);
    j.raw = calloc((size_t)nth, sizeof *j.raw);
    j.status = calloc((size_t)nth, sizeof *j.status);
    bool ok = j.f32 && j.raw && j.status;
    /* the widest source row: f32 is the widest source type spex dequantizes (8 bytes for safety) */
    for (int i = 0; ok && i < nth; i++) {
        j.f32[i] = malloc((size_t)max_row * sizeof(float));
        j.raw[i] = aligned_alloc(64, ((size_t)max_row * 8 + 63) / 64 * 64);
        ok = j.f32[i] && j.raw[i];
    }
    if (!ok) {
        s = spex_error_set(err, SPEX_ERR_NOMEM, "quantize: out of memory for %d thread buffers", nth);
        goto done;
    }
    spex_gguf_writer_set_fill(w, fill_tensor, &j);
    s = spex_gguf_writer_write(w, out_path, err);

done:
    if (j.pool) {
        int n = spex_pool_n_threads(j.pool);
        for (int i = 0; i < n; i++) {
            if (j.f32) free(j.f32[i]);
            if (j.raw) free(j.raw[i]);
        }
        spex_pool_free(j.pool);
    }
    free(j.f32);
    free(j.raw);
    free(j.status);
    free(j.plans);
    spex_gguf_writer_free(w);
    spex_gguf_close(g);
    return s;
}
