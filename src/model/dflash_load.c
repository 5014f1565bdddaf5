/*
 * dflash_load.c — spex_drafter_load and the drafter getters (include/spex.h, "DFlash
 * drafters"; ../shared/docs/dflash2.md §2–§5).
 *
 * What it is: variant detection (§2: DSpark refused, DFlash2 iff selector_hidden.weight),
 * the reading of every dflash.* key of §3 through one small lookup layer that applies the
 * caller's "KEY=TYPE:VALUE" overrides first, the pair checks against the target (§5, each
 * naming both files and both values), and the validation of every tensor of §4 (presence,
 * exact shape, F32 for norms and conv bases, a multipliable type for matmul weights, a
 * type with a reference dequantizer for the row-gathered codebooks). Weights are views into
 * the drafter's GGUF mapping; the token embedding and LM head are borrowed from the target
 * unless the drafter ships its own. Also spex_drafter_log.
 *
 * What it is not: the draft context, injection or block forward (dflash_context.c,
 * dflash_forward.c) or the selector walks (dflash_select.c).
 *
 * Choices where the spec leaves room follow tools/ref/dflash_ref.py (the reference
 * loader): integer keys of any GGUF integer type, range-checked; `attention.causal` a bool,
 * the string "true", or an integer; `sliding_window_pattern` absent with a window means
 * every layer uses it; `rope.dimension_sections` only in the degenerate [n_rot/2, 0, 0, 0]
 * form; a draft without tokenizer.ggml.tokens skips the vocabulary check.
 */
#include "gguf/api.h"
#include "model/api.h"
#include "model/dflash.h"
#include "tensor/api.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Upper bound on every dimension read from a file (as model.c): keeps size products far
 * from overflow while allowing any real drafter. */
#define DIM_MAX (1 << 24)
#define V1_BLOCK_DEFAULT 16     /* §3: block_size fallback, v1 only */
#define MAX_OVERRIDES 64

/* ======================================================================== */
/* Logging                                                                   */
/* ======================================================================== */

void spex_drafter_log(const spex_drafter *d, const char *fmt, ...) {
    if (!d->params.verbose) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (d->params.log) d->params.log(d->params.log_user, line);
    else fprintf(stderr, "%s\n", line);
}

/* ======================================================================== */
/* Key lookup layer: overrides first, then the file                          */
/* ======================================================================== */

/* A scalar or array value as the readers see it. */
typedef enum { KV_INT, KV_FLOAT, KV_BOOL, KV_STR, KV_ARRAY, KV_OTHER } kv_kind;

typedef struct kv_val {
    kv_kind kind;
    spex_gguf_vtype vtype;       /* the file's type (for messages); overrides: a stand-in */
    bool int_ok;                 /* KV_INT: the value fits int64 */
    int64_t i;
    double f;
    bool b;
    spex_str s;
    spex_gguf_value arr;         /* KV_ARRAY */
} kv_val;

typedef struct override {
    char key[128];
    kv_val v;
} override;

/* Every key the drafter reads (the only keys an override may name). Arrays are read too
 * but cannot be overridden: the override syntax has no array type. */
static const char *const scalar_keys[] = {
    "dflash.block_count", "dflash.embedding_length", "dflash.feed_forward_length",
    "dflash.attention.head_count", "dflash.attention.head_count_kv", "dflash.attention.key_length",
    "dflash.attention.value_length", "dflash.attention.layer_norm_rms_epsilon", "dflash.rope.dimension_count",
    "dflash.rope.freq_base", "dflash.attention.sliding_window", "dflash.attention.causal", "dflash.block_size",
    "dflash.conv_kernel_size", "dflash.conv_group_size", "dflash.selector_rank", "dflash.selector_top_k",
    "tokenizer.ggml.mask_token_id", "dflash.logit_scale", "dflash.final_logit_softcapping",
    "dflash.input_embedding_scale", "dflash.sample_from_anchor", "dflash.has_confidence_head",
};
#define N_SCALAR_KEYS (int)(sizeof scalar_keys / sizeof scalar_keys[0])

typedef struct loader {
    spex_drafter *d;
    const spex_gguf *g;
    const char *path;            /* the drafter's */
    const char *tpath;           /* the target's  */
    override ovr[MAX_OVERRIDES];
    int n_ovr;
    spex_error *err;
} loader;

static bool is_int_vtype(spex_gguf_vtype t) {
    return t == SPEX_GGUF_U8 || t == SPEX_GGUF_I8 || t == SPEX_GGUF_U16 || t == SPEX_GGUF_I16 ||
           t == SPEX_GGUF_U32 || t == SPEX_GGUF_I32 || t == SPEX_GGUF_U64 || t == SPEX_GGUF_I64;
}

/* Decodes a fixed-size little-endian integer of type t at p; false if it does not fit int64. */
static bool decode_int(spex_gguf_vtype t, const uint8_t *p, int64_t *out) {
    switch (t) {
    case SPEX_GGUF_U8: *out = p[0]; return true;
    case SPEX_GGUF_I8: *out = (int8_t)p[0]; return true;
    case SPEX_GGUF_U16: { uint16_t v; memcpy(&v, p, 2); *out = v; return true; }
    case SPEX_GGUF_I16: { int16_t v; memcpy(&v, p, 2); *out = v; return true; }
    case SPEX_GGUF_U32: { uint32_t v; memcpy(&v, p, 4); *out = v; return true; }
    case SPEX_GGUF_I32: { int32_t v; memcpy(&v, p, 4); *out = v; return true; }
    case SPEX_GGUF_I64: { int64_t v; memcpy(&v, p, 8); *out = v; return true; }
    case SPEX_GGUF_U64: {
        uint64_t v;
        memcpy(&v, p, 8);
        if (v > (uint64_t)INT64_MAX) return false;
        *out = (int64_t)v;
        return true;
    }
    default: return false;
    }
}

static void value_from_file(const spex_gguf_value *gv, kv_val *v) {
    memset(v, 0, sizeof *v);
    v->vtype = gv->type;
    if (is_int_vtype(gv->type)) {
        v->kind = KV_INT;
        v->int_ok = decode_int(gv->type, gv->data, &v->i);
    } else if (gv->type == SPEX_GGUF_F32) {
        float f;
        memcpy(&f, gv->data, 4);
        v->kind = KV_FLOAT;
        v->f = f;
    } else if (gv->type == SPEX_GGUF_F64) {
        memcpy(&v->f, gv->data, 8);
        v->kind = KV_FLOAT;
    } else if (gv->type == SPEX_GGUF_BOOL) {
        v->kind = KV_BOOL;
        v->b = gv->data[0] != 0;
    } else if (gv->type == SPEX_GGUF_STRING) {
        v->kind = KV_STR;
        v->s.ptr = (const char *)gv->data;
        v->s.len = gv->size;
    } else if (gv->type == SPEX_GGUF_ARRAY) {
        v->kind = KV_ARRAY;
        v->arr = *gv;
    } else {
        v->kind = KV_OTHER;
    }
}

/* The value of key: an override if one names it, else the file's. false when absent. */
static bool lookup(loader *L, const char *key, kv_val *out) {
    for (int i = 0; i < L->n_ovr; i++)
        if (!strcmp(L->ovr[i].key, key)) {
            *out = L->ovr[i].v;
            return true;
        }
    int64_t idx = spex_gguf_find_key(L->g, key);
    if (idx < 0) return false;
    spex_gguf_value gv;
    if (spex_gguf_value_at(L->g, idx, &gv) != SPEX_OK) return false;
    value_from_file(&gv, out);
    return true;
}

static const char *kind_name(const kv_val *v) { return spex_gguf_vtype_name(v->vtype); }

/* Parses "KEY=TYPE:VALUE" (TYPE int, float, bool, str). */
static spex_status parse_override(const char *s, override *o, spex_error *err) {
    if (!s) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "drafter override %s: NULL entry", "(null)");
    const char *eq = strchr(s, '=');
    if (!eq || eq == s || (size_t)(eq - s) >= sizeof o->key)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "drafter override '%s': expected KEY=TYPE:VALUE", s);
    memset(o, 0, sizeof *o);
    memcpy(o->key, s, (size_t)(eq - s));
    int known = 0;
    for (int i = 0; i < N_SCALAR_KEYS; i++) known |= !strcmp(scalar_keys[i], o->key);
    if (!known)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG,
                              "drafter override '%s': the drafter never reads a scalar key '%s'", s, o->key);
    const char *colon = strchr(eq + 1, ':');
    if (!colon)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "drafter override '%s': expected KEY=TYPE:VALUE", s);
    const char *ty = eq + 1, *val = colon + 1;
    size_t tlen = (size_t)(colon - ty);
    char *end = NULL;
    kv_val *v = &o->v;
    if (tlen == 3 && !memcmp(ty, "int", 3)) {
        errno = 0;
        long long x = strtoll(val, &end, 10);
        if (!*val || *end || errno == ERANGE)
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "drafter override '%s': '%s' is not an integer", s, val);
        v->kind = KV_INT;
        v->vtype = SPEX_GGUF_I64;
        v->int_ok = true;
        v->i = x;
    } else if (tlen == 5 && !memcmp(ty, "float", 5)) {
        double x = strtod(val, &end);
        if (!*val || *end)
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "drafter override '%s': '%s' is not a number", s, val);
        v->kind = KV_FLOAT;
        v->vtype = SPEX_GGUF_F64;
        v->f = x;
    } else if (tlen == 4 && !memcmp(ty, "bool", 4)) {
        if (strcmp(val, "true") && strcmp(val, "false"))
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "drafter override '%s': bool is 'true' or 'false'", s);
        v->kind = KV_BOOL;
        v->vtype = SPEX_GGUF_BOOL;
        v->b = !strcmp(val, "true");
    } else if (tlen == 3 && !memcmp(ty, "str", 3)) {
        v->kind = KV_STR;
        v->vtype = SPEX_GGUF_STRING;
        v->s.ptr = val;   /* borrowed for the call */
        v->s.len = strlen(val);
    } else {
        return spex_error_set(err, SPEX_ERR_INVALID_ARG,
                              "drafter override '%s': type '%.*s' (expected int, float, bool or str)", s,
                              (int)(tlen > 16 ? 16 : tlen), ty);
    }
    return SPEX_OK;
}

/* An integer key in lo .. hi, of any GGUF integer type. def_missing: whether absence is fine
 * (then *out = def). */
static spex_status rd_int(loader *L, const char *key, bool required, int64_t def, int64_t lo, int64_t hi,
                          int64_t *out) {
    kv_val v;
    if (!lookup(L, key, &v)) {
        if (required)
            return spex_error_set(L->err, SPEX_ERR_NOT_FOUND, "%s: required key '%s' is missing", L->path, key);
        *out = def;
        return SPEX_OK;
    }
    if (v.kind != KV_INT)
        return spex_error_set(L->err, SPEX_ERR_TYPE, "%s: key '%s' has type %s, expected an integer", L->path, key,
                              kind_name(&v));
    if (!v.int_ok || v.i < lo || v.i > hi)
        return spex_error_set(L->err, SPEX_ERR_RANGE, "%s: key '%s' = %" PRId64 ", expected %" PRId64 " .. %" PRId64,
                              L->path, key, v.int_ok ? v.i : INT64_MAX, lo, hi);
    *out = v.i;
    return SPEX_OK;
}

static spex_status rd_dim(loader *L, const char *key, bool required, int64_t def, int32_t *out) {
    int64_t x = 0;
    spex_status s = rd_int(L, key, required, def, 1, DIM_MAX, &x);
    if (s == SPEX_OK) *out = (int32_t)x;
    return s;
}

/* present (optional out): whether the key exists. */
static spex_status rd_f32(loader *L, const char *key, bool required, float def, float *out, bool *present) {
    kv_val v;
    bool have = lookup(L, key, &v);
    if (present) *present = have;
    if (!have) {
        if (required)
            return spex_error_set(L->err, SPEX_ERR_NOT_FOUND, "%s: required key '%s' is missing", L->path, key);
        *out = def;
        return SPEX_OK;
    }
    if (v.kind != KV_FLOAT)
        return spex_error_set(L->err, SPEX_ERR_TYPE, "%s: key '%s' has type %s, expected a float", L->path, key,
                              kind_name(&v));
    if (!(v.f == v.f) || v.f > 3.4e38 || v.f < -3.4e38)
        return spex_error_set(L->err, SPEX_ERR_RANGE, "%s: key '%s' = %g is not a finite f32", L->path, key, v.f);
    *out = (float)v.f;
    return SPEX_OK;
}

/* A flag: a bool, the string "true" (llama.cpp reads attention.causal through its string
 * accessor, §3), or an integer (non-zero). */
static spex_status rd_bool(loader *L, const char *key, bool *out) {
    kv_val v;
    *out = false;
    if (!lookup(L, key, &v)) return SPEX_OK;
    if (v.kind == KV_BOOL) *out = v.b;
    else if (v.kind == KV_STR) *out = v.s.len == 4 && !memcmp(v.s.ptr, "true", 4);
    else if (v.kind == KV_INT) *out = !v.int_ok || v.i != 0;
    else
        return spex_error_set(L->err, SPEX_ERR_TYPE, "%s: key '%s' has type %s, expected a bool", L->path, key,
                              kind_name(&v));
    return SPEX_OK;
}

/* An array of integers (any integer element type): up to cap values into out. */
static spex_status rd_int_array(loader *L, const char *key, bool required, int64_t *out, int cap, int *n,
                                bool *present) {
    kv_val v;
    *n = 0;
    *present = lookup(L, key, &v);
    if (!*present) {
        if (required)
            return spex_error_set(L->err, SPEX_ERR_NOT_FOUND, "%s: required key '%s' is missing", L->path, key);
        return SPEX_OK;
    }
    if (v.kind != KV_ARRAY || !is_int_vtype(v.arr.elem_type))
        return spex_error_set(L->err, SPEX_ERR_TYPE, "%s: key '%s' must be an array of integers", L->path, key);
    if (v.arr.n > (uint64_t)cap)
        return spex_error_set(L->err, SPEX_ERR_UNSUPPORTED, "%s: key '%s' has %" PRIu64 " entries, at most %d supported",
                              L->path, key, v.arr.n, cap);
    for (uint64_t i = 0; i < v.arr.n; i++) {
        spex_gguf_value e;
        spex_status s = spex_gguf_arr_elem(L->g, &v.arr, i, &e, L->err);
        if (s != SPEX_OK) return s;
        if (!decode_int(e.type, e.data, &out[i]))
            return spex_error_set(L->err, SPEX_ERR_RANGE, "%s: key '%s': entry %" PRIu64 " out of range", L->path, key, i);
    }
    *n = (int)v.arr.n;
    return SPEX_OK;
}

/* ======================================================================== */
/* Hyper-parameters (§3) and the pair checks (§5)                           */
/* ======================================================================== */

/* §3: rotary positions (a partial rotation, the base, only degenerate M-RoPE sections), the
 * sliding window and its per-layer pattern, causality. */
static spex_status read_positions(loader *L) {
    spex_drafter *d = L->d;
    spex_drafter_hparams *hp = &d->hp;
    const char *path = L->path;
    spex_status s;
    int64_t x = 0;
    if ((s = rd_dim(L, "dflash.rope.dimension_count", false, hp->head_dim, &hp->n_rot))) return s;
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2 != 0 || hp->n_rot > SPEX_ROPE_MAX_ROT)
        return spex_error_set(L->err, SPEX_ERR_FORMAT,
                              "%s: dflash.rope.dimension_count %d: expected an even value <= key_length %d", path,
                              hp->n_rot, hp->head_dim);
    bool have_base;
    if ((s = rd_f32(L, "dflash.rope.freq_base", false, 10000.0f, &hp->rope_freq_base, &have_base))) return s;
    if (!(hp->rope_freq_base > 0.0f))
        return spex_error_set(L->err, SPEX_ERR_RANGE, "%s: dflash.rope.freq_base %g: expected > 0", path,
                              (double)hp->rope_freq_base);
    if (!have_base) spex_drafter_log(d, "dflash: warning: %s: dflash.rope.freq_base absent, using 10000", path);

    /* §3: only the degenerate M-RoPE sections, equivalent to NEOX on the temporal position. */
    int64_t sec[8];
    int n_sec;
    bool have_sec;
    if ((s = rd_int_array(L, "dflash.rope.dimension_sections", false, sec, 8, &n_sec, &have_sec))) return s;
    if (have_sec) {
        bool degenerate = n_sec == 4 && sec[0] == hp->n_rot / 2 && !sec[1] && !sec[2] && !sec[3];
        if (!degenerate)
            return spex_error_set(L->err, SPEX_ERR_UNSUPPORTED,
                                  "%s: dflash.rope.dimension_sections is not the degenerate [%d, 0, 0, 0] "
                                  "(M-RoPE drafters are not supported)",
                                  path, hp->n_rot / 2);
    }

    if ((s = rd_int(L, "dflash.attention.sliding_window", false, 0, 0, INT32_MAX, &x))) return s;
    hp->swa_window = (int32_t)x;
    kv_val pat;
    if (lookup(L, "dflash.attention.sliding_window_pattern", &pat)) {
        if (pat.kind != KV_ARRAY || pat.arr.n != (uint64_t)hp->n_layer ||
            !(pat.arr.elem_type == SPEX_GGUF_BOOL || is_int_vtype(pat.arr.elem_type)))
            return spex_error_set(L->err, SPEX_ERR_FORMAT,
                                  "%s: dflash.attention.sliding_window_pattern must be an array of %d bools", path,
                                  hp->n_layer);
        for (int l = 0; l < hp->n_layer; l++) {
            spex_gguf_value e;
            if ((s = spex_gguf_arr_elem(L->g, &pat.arr, (uint64_t)l, &e, L->err))) return s;
            bool on = false;
            for (uint64_t b = 0; b < e.size; b++) on |= e.data[b] != 0;
            hp->swa_layer[l] = on && hp->swa_window > 0;
        }
    } else {
        /* §3: absent with a window = every layer (the only published file) */
        for (int l = 0; l < hp->n_layer; l++) hp->swa_layer[l] = hp->swa_window > 0;
    }
    if ((s = rd_bool(L, "dflash.attention.causal", &hp->causal))) return s;
    return SPEX_OK;
}

static spex_status read_hparams(loader *L) {
    spex_drafter *d = L->d;
    spex_drafter_hparams *hp = &d->hp;
    const spex_model_hparams *thp = spex_model_get_hparams(d->target);
    const char *path = L->path;
    spex_status s;
    int64_t x = 0;

    if ((s = rd_dim(L, "dflash.block_count", true, 0, &hp->n_layer)) ||
        (s = rd_dim(L, "dflash.embedding_length", true, 0, &hp->n_embd)) ||
        (s = rd_dim(L, "dflash.feed_forward_length", true, 0, &hp->n_ff)) ||
        (s = rd_dim(L, "dflash.attention.head_count", true, 0, &hp->n_head)) ||
        (s = rd_dim(L, "dflash.attention.head_count_kv", true, 0, &hp->n_head_kv)) ||
        (s = rd_dim(L, "dflash.attention.key_length", true, 0, &hp->head_dim)))
        return s;
    if (hp->n_layer > 64)
        return spex_error_set(L->err, SPEX_ERR_UNSUPPORTED, "%s: dflash.block_count %d: at most 64 drafter layers supported",
                              path, hp->n_layer);
    int32_t vlen;
    if ((s = rd_dim(L, "dflash.attention.value_length", true, 0, &vlen))) return s;
    if (vlen != hp->head_dim)
        return spex_error_set(L->err, SPEX_ERR_FORMAT, "%s: dflash.attention.value_length %d != key_length %d", path,
                              vlen, hp->head_dim);
    if (hp->n_head % hp->n_head_kv != 0)
        return spex_error_set(L->err, SPEX_ERR_FORMAT,
                              "%s: dflash.attention.head_count %d is not a multiple of head_count_kv %d", path,
                              hp->n_head, hp->n_head_kv);
    if ((int64_t)hp->n_head * hp->head_dim > DIM_MAX)
        return spex_error_set(L->err, SPEX_ERR_RANGE, "%s: dflash.attention.head_count * key_length too large", path);
    if ((s = rd_f32(L, "dflash.attention.layer_norm_rms_epsilon", true, 0.0f, &hp->rms_eps, NULL))) return s;
    if (!(hp->rms_eps >= 0.0f) || hp->rms_eps > 1.0f)
        return spex_error_set(L->err, SPEX_ERR_RANGE, "%s: dflash.attention.layer_norm_rms_epsilon %g: expected 0 .. 1",
                              path, (double)hp->rms_eps);
    if ((s = read_positions(L))) return s;

    int64_t taps[SPEX_DFLASH_MAX_TAPS];
    int n_taps;
    bool have_taps;
    if ((s = rd_int_array(L, "dflash.target_layers", true, taps, SPEX_DFLASH_MAX_TAPS, &n_taps, &have_taps))) return s;
    if (n_taps == 0) return spex_error_set(L->err, SPEX_ERR_FORMAT, "%s: dflash.target_layers is empty", path);
    hp->n_taps = n_taps;
    for (int i = 0; i < n_taps; i++) {
        if (taps[i] < 0 || taps[i] > thp->n_layer)
            return spex_error_set(L->err, SPEX_ERR_RANGE,
                                  "%s: dflash.target_layers[%d] = %" PRId64 " outside 0 .. %d (target %s n_layer %d)",
                                  path, i, taps[i], thp->n_layer, L->tpath, thp->n_layer);
        for (int j = 0; j < i; j++)
            if (taps[j] == taps[i])
                return spex_error_set(L->err, SPEX_ERR_FORMAT, "%s: dflash.target_layers has duplicate id %" PRId64,
                                      path, taps[i]);
        hp->target_layers[i] = (int32_t)taps[i];
    }

    if ((s = rd_int(L, "tokenizer.ggml.mask_token_id", true, 0, 0, INT32_MAX, &x))) return s;
    hp->mask_token = (int32_t)x;
    if ((s = rd_f32(L, "dflash.logit_scale", false, 0.0f, &hp->logit_scale, NULL)) ||
        (s = rd_f32(L, "dflash.final_logit_softcapping", false, 0.0f, &hp->softcap, NULL)) ||
        (s = rd_f32(L, "dflash.input_embedding_scale", false, 1.0f, &hp->input_embd_scale, NULL)))
        return s;
    if (hp->softcap < 0.0f) hp->softcap = 0.0f;   /* §3: only cap > 0 applies */

    /* §2: selector_top_k > 0 exactly when selector_hidden.weight is present. */
    const bool v2 = hp->variant == SPEX_DFLASH2;
    int64_t top_k;
    if ((s = rd_int(L, "dflash.selector_top_k", false, 0, 0, INT32_MAX, &top_k))) return s;
    if ((top_k > 0) != v2)
        return spex_error_set(L->err, SPEX_ERR_FORMAT,
                              "%s: dflash.selector_top_k = %" PRId64 " but tensor 'selector_hidden.weight' is %s "
                              "(they must agree)",
                              path, top_k, v2 ? "present" : "absent");
    if (v2) {
        if ((s = rd_int(L, "dflash.block_size", true, 0, 2, INT32_MAX, &x))) return s;
        hp->block_size = (int32_t)x;
        if ((s = rd_dim(L, "dflash.conv_kernel_size", true, 0, &hp->conv_kernel)) ||
            (s = rd_dim(L, "dflash.conv_group_size", true, 0, &hp->conv_group)) ||
            (s = rd_dim(L, "dflash.selector_rank", true, 0, &hp->selector_rank)))
            return s;
        hp->selector_top_k = (int32_t)top_k;
        if (hp->n_embd % hp->conv_group != 0)
            return spex_error_set(L->err, SPEX_ERR_FORMAT,
                                  "%s: dflash.embedding_length %d is not a multiple of dflash.conv_group_size %d", path,
                                  hp->n_embd, hp->conv_group);
        if ((int64_t)2 * hp->conv_kernel * (hp->n_embd / hp->conv_group) > DIM_MAX)
            return spex_error_set(L->err, SPEX_ERR_RANGE, "%s: dflash.conv_kernel_size %d too large", path,
                                  hp->conv_kernel);
    } else {
        if ((s = rd_int(L, "dflash.block_size", false, V1_BLOCK_DEFAULT, 2, INT32_MAX, &x))) return s;
        hp->block_size = (int32_t)x;
    }
    if (hp->block_size > SPEX_DRAFT_MAX_N + 1)
        return spex_error_set(L->err, SPEX_ERR_UNSUPPORTED, "%s: dflash.block_size %d: spex drafts at most %d tokens "
                              "per block (block_size <= %d)", path, hp->block_size, SPEX_DRAFT_MAX_N, SPEX_DRAFT_MAX_N + 1);

    /* DSpark flags were read in detect(); the keys are still "read" here for overrides. */
    return SPEX_OK;
}

/* §5 rules 3 and 5 (and K <= V of rule 6): the drafter against its target. */
static spex_status check_pair(loader *L) {
    spex_drafter_hparams *hp = &L->d->hp;
    const spex_model_hparams *thp = spex_model_get_hparams(L->d->target);
    const char *path = L->path, *tpath = L->tpath;
    spex_status s;
    hp->n_vocab = thp->n_vocab;
    if (hp->n_embd != thp->n_embd)
        return spex_error_set(L->err, SPEX_ERR_FORMAT, "%s: dflash.embedding_length %d != target %s embedding_length %d",
                              path, hp->n_embd, tpath, thp->n_embd);
    if (hp->mask_token >= thp->n_vocab)
        return spex_error_set(L->err, SPEX_ERR_RANGE,
                              "%s: tokenizer.ggml.mask_token_id %d >= target %s vocabulary %d", path, hp->mask_token,
                              tpath, thp->n_vocab);
    if (hp->variant == SPEX_DFLASH2) {
        if (hp->selector_top_k > thp->n_vocab)
            return spex_error_set(L->err, SPEX_ERR_RANGE, "%s: dflash.selector_top_k %d > target %s vocabulary %d",
                                  path, hp->selector_top_k, tpath, thp->n_vocab);
        if (hp->selector_top_k > SPEX_DRAFT_MAX_K)
            return spex_error_set(L->err, SPEX_ERR_UNSUPPORTED,
                                  "%s: dflash.selector_top_k %d: spex supports at most %d candidates per slot", path,
                                  hp->selector_top_k, SPEX_DRAFT_MAX_K);
    }
    /* The draft's tokenizer copy is only checked (§3, §4.4); absent: skipped. */
    int64_t ti = spex_gguf_find_key(L->g, "tokenizer.ggml.tokens");
    if (ti >= 0) {
        spex_gguf_value arr;
        if ((s = spex_gguf_value_at(L->g, ti, &arr))) return spex_error_set(L->err, s, "%s: tokenizer.ggml.tokens", path);
        if (arr.type != SPEX_GGUF_ARRAY || arr.elem_type != SPEX_GGUF_STRING)
            return spex_error_set(L->err, SPEX_ERR_TYPE, "%s: tokenizer.ggml.tokens must be an array of strings", path);
        if (arr.n != (uint64_t)thp->n_vocab)
            return spex_error_set(L->err, SPEX_ERR_FORMAT,
                                  "%s: tokenizer.ggml.tokens has %" PRIu64 " tokens != target %s vocabulary %d", path,
                                  arr.n, tpath, thp->n_vocab);
        const spex_gguf *tg = spex_model_gguf(L->d->target);
        spex_gguf_value tarr;
        if (L->d->params.verbose && spex_gguf_get_arr(tg, "tokenizer.ggml.tokens", &tarr, NULL) == SPEX_OK &&
            tarr.elem_type == SPEX_GGUF_STRING && tarr.n == arr.n) {
            for (uint64_t i = 0; i < arr.n; i++) {
                spex_str a, b;
                if (spex_gguf_arr_str(L->g, &arr, i, &a, NULL) != SPEX_OK ||
                    spex_gguf_arr_str(tg, &tarr, i, &b, NULL) != SPEX_OK)
                    break;
                if (a.len != b.len || memcmp(a.ptr, b.ptr, a.len)) {
                    spex_drafter_log(L->d, "dflash: warning: %s: token %" PRIu64 " differs from target %s", path, i,
                                     tpath);
                    break;
                }
            }
        }
    }
    return SPEX_OK;
}

/* ======================================================================== */
/* Tensors (§4)                                                              */
/* ======================================================================== */

typedef enum {
    T_F32,       /* norms, conv bases, fc.scale: F32 only                  */
    T_MATMUL,    /* multiplied: a type with a matmul kernel                */
    T_GATHER,    /* row-gathered: a type with a reference dequantizer      */
} tkind;

static void fmt_shape(char *buf, size_t cap, const int64_t *ne, uint32_t n_dims) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, cap - o, "[");
    for (uint32_t i = 0; i < n_dims && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%" PRId64, i ? ", " : "", ne[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

/* Finds tensor `name` with exactly the shape ne[0 .. n_dims) and a type fit for `kind`.
 * optional: absence leaves *w zeroed. */
static spex_status find_t(loader *L, const char *name, tkind kind, uint32_t n_dims, int64_t ne0, int64_t ne1,
                          int64_t ne2, bool optional, model_weight *w) {
    const char *path = L->path;
    memset(w, 0, sizeof *w);
    const spex_tensor_info *t = spex_gguf_find_tensor(L->g, name);
    if (!t) {
        if (optional) return SPEX_OK;
        return spex_error_set(L->err, SPEX_ERR_NOT_FOUND, "%s: tensor '%s' is missing", path, name);
    }
    const int64_t want[SPEX_MAX_DIMS] = {ne0, n_dims > 1 ? ne1 : 1, n_dims > 2 ? ne2 : 1, 1};
    bool same = true;
    for (int i = 0; i < SPEX_MAX_DIMS; i++) same &= t->ne[i] == want[i];
    if (!same) {
        char got_s[96], want_s[96];
        fmt_shape(got_s, sizeof got_s, t->ne, t->n_dims ? t->n_dims : 1);
        fmt_shape(want_s, sizeof want_s, want, n_dims);
        return spex_error_set(L->err, SPEX_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected %s", path, name, got_s,
                              want_s);
    }
    const spex_type_info *ti = spex_type_get_info((int)t->type);
    const char *tname = ti ? ti->name : "unknown";
    if (kind == T_F32) {
        if (t->type != SPEX_TYPE_F32)
            return spex_error_set(L->err, SPEX_ERR_TYPE, "%s: tensor '%s' has type %s, expected f32", path, name, tname);
    } else if (kind == T_MATMUL) {
        const spex_type act = spex_matmul_act_type(t->type);
        const spex_matmul_kernels *k = spex_matmul_kernels_get();
        if (act == SPEX_TYPE_COUNT || !k->dot[t->type] || !k->act_quant[act])
            return spex_error_set(L->err, SPEX_ERR_TYPE,
                                  "%s: tensor '%s' has type %s, which spex cannot multiply (expected f32, f16, bf16, "
                                  "q8_0, q4_0, q4_1, q5_0, q5_1, q4_K, q5_K or q6_K)",
                                  path, name, tname);
        const spex_type_info *ai = spex_type_get_info((int)act);
        if (ne0 % ti->block_size != 0 || ne0 % ai->block_size != 0)
            return spex_error_set(L->err, SPEX_ERR_FORMAT,
                                  "%s: tensor '%s': row length %" PRId64 " is not a multiple of the %s block (%" PRId64 ")",
                                  path, name, ne0, tname,
                                  ti->block_size > ai->block_size ? ti->block_size : ai->block_size);
    } else {
        if (!ti || !ti->has_ref || t->type == SPEX_TYPE_Q8_1 || t->type == SPEX_TYPE_Q8_K)
            return spex_error_set(L->err, SPEX_ERR_TYPE,
                                  "%s: tensor '%s' has type %s, which spex cannot dequantize row by row", path, name,
                                  tname);
        if (ne0 % ti->block_size != 0)
            return spex_error_set(L->err, SPEX_ERR_FORMAT,
                                  "%s: tensor '%s': row length %" PRId64 " is not a multiple of the %s block (%" PRId64 ")",
                                  path, name, ne0, tname, ti->block_size);
    }
    if ((uintptr_t)t->data % sizeof(float) != 0)
        return spex_error_set(L->err, SPEX_ERR_FORMAT, "%s: tensor '%s': data is not 4-byte aligned (general.alignment)",
                              path, name);
    w->t = t;
    w->data = t->data;
    w->type = t->type;
    w->n_in = ne0;
    w->n_out = n_dims > 1 ? ne1 : 1;
    L->d->weight_bytes += t->nbytes;
    return SPEX_OK;
}

static spex_status find_f32(loader *L, const char *name, uint32_t n_dims, int64_t ne0, int64_t ne1, int64_t ne2,
                            bool optional, const float **out) {
    model_weight w;
    spex_status s = find_t(L, name, T_F32, n_dims, ne0, ne1, ne2, optional, &w);
    *out = w.data;
    return s;
}

static spex_status refuse_t(loader *L, const char *name, spex_status code, const char *why) {
    if (spex_gguf_find_tensor(L->g, name))
        return spex_error_set(L->err, code, "%s: tensor '%s' present: %s", L->path, name, why);
    return SPEX_OK;
}

static spex_status load_tensors(loader *L) {
    spex_drafter *d = L->d;
    const spex_drafter_hparams *hp = &d->hp;
    const bool v2 = hp->variant == SPEX_DFLASH2;
    const int64_t D = hp->n_embd, F = hp->n_ff, hd = hp->head_dim, V = hp->n_vocab;
    const int64_t q_dim = (int64_t)hp->n_head * hd, kv_dim = (int64_t)hp->n_head_kv * hd;
    const int64_t T_c = hp->conv_kernel, G = v2 ? D / hp->conv_group : 0, n_delta = 2 * T_c * G;
    spex_status s;

    if ((s = refuse_t(L, "d2t", SPEX_ERR_UNSUPPORTED, "reduced-vocabulary drafters are not supported"))) return s;

    model_weight w;
    if ((s = find_t(L, "fc.weight", T_MATMUL, 2, (int64_t)hp->n_taps * D, D, 0, false, &d->fc))) return s;
    const float *fc_scale = NULL;
    if ((s = find_f32(L, "fc.scale", 1, 1, 0, 0, true, &fc_scale))) return s;
    d->fc_scale = fc_scale ? fc_scale[0] : 1.0f;
    if ((s = find_f32(L, "enc.output_norm.weight", 1, D, 0, 0, false, &d->enc_norm)) ||
        (s = find_f32(L, "output_norm.weight", 1, D, 0, 0, false, &d->output_norm)))
        return s;

    /* §4.4: the drafter's own embedding / head when it ships them, else the target's. */
    if ((s = find_t(L, "token_embd.weight", T_GATHER, 2, D, V, 0, true, &w))) return s;
    d->tok_embd = w.t ? w : d->target->tok_embd;
    if ((s = find_t(L, "output.weight", T_MATMUL, 2, D, V, 0, true, &w))) return s;
    d->head = w.t ? w : d->target->output;

    d->layers = calloc((size_t)hp->n_layer, sizeof *d->layers);
    if (!d->layers) return spex_error_set(L->err, SPEX_ERR_NOMEM, "%s: out of memory", L->path);
    char name[96];
#define NAME(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, l), name)
    for (int l = 0; l < hp->n_layer; l++) {
        dflash_layer *ly = &d->layers[l];
        if ((s = find_f32(L, NAME("attn_norm.weight"), 1, D, 0, 0, false, &ly->attn_norm)) ||
            (s = find_t(L, NAME("attn_q.weight"), T_MATMUL, 2, D, q_dim, 0, false, &ly->wq)) ||
            (s = find_t(L, NAME("attn_k.weight"), T_MATMUL, 2, D, kv_dim, 0, false, &ly->wk)) ||
            (s = find_t(L, NAME("attn_v.weight"), T_MATMUL, 2, D, kv_dim, 0, false, &ly->wv)) ||
            (s = find_t(L, NAME("attn_output.weight"), T_MATMUL, 2, q_dim, D, 0, false, &ly->wo)) ||
            (s = find_f32(L, NAME("attn_q_norm.weight"), 1, hd, 0, 0, false, &ly->q_norm)) ||
            (s = find_f32(L, NAME("attn_k_norm.weight"), 1, hd, 0, 0, false, &ly->k_norm)) ||
            (s = find_f32(L, NAME("ffn_norm.weight"), 1, D, 0, 0, false, &ly->ffn_norm)) ||
            (s = find_t(L, NAME("ffn_gate.weight"), T_MATMUL, 2, D, F, 0, false, &ly->w_gate)) ||
            (s = find_t(L, NAME("ffn_up.weight"), T_MATMUL, 2, D, F, 0, false, &ly->w_up)) ||
            (s = find_t(L, NAME("ffn_down.weight"), T_MATMUL, 2, F, D, 0, false, &ly->w_down)))
            return s;
        if ((s = refuse_t(L, NAME("attn_sinks.weight"), v2 ? SPEX_ERR_FORMAT : SPEX_ERR_UNSUPPORTED,
                          v2 ? "attention sinks never occur in a DFlash2 file"
                             : "attention sinks are not implemented by spex")))
            return s;
        static const char *const conv[] = {"attn_conv_base", "attn_conv_proj.weight", "ffn_conv_base",
                                           "ffn_conv_proj.weight"};
        if (v2) {
            if ((s = find_f32(L, NAME("attn_conv_base"), 3, D, T_c, 2, false, &ly->attn_conv_base)) ||
                (s = find_t(L, NAME("attn_conv_proj.weight"), T_MATMUL, 2, D, n_delta, 0, false, &ly->attn_conv_proj)) ||
                (s = find_f32(L, NAME("ffn_conv_base"), 3, D, T_c, 2, false, &ly->ffn_conv_base)) ||
                (s = find_t(L, NAME("ffn_conv_proj.weight"), T_MATMUL, 2, D, n_delta, 0, false, &ly->ffn_conv_proj)))
                return s;
        } else {
            for (int i = 0; i < 4; i++) {
                snprintf(name, sizeof name, "blk.%d.%s", l, conv[i]);
                if ((s = refuse_t(L, name, SPEX_ERR_FORMAT, "conv tensors in a file without selector_hidden.weight")))
                    return s;
            }
        }
    }
#undef NAME
    if (v2) {
        const int64_t R = hp->selector_rank;
        if ((s = find_t(L, "selector_hidden.weight", T_MATMUL, 2, D, R, 0, false, &d->sel_hidden)) ||
            (s = find_t(L, "selector_predecessor.weight", T_GATHER, 2, R, V, 0, false, &d->sel_pred)) ||
            (s = find_t(L, "selector_successor.weight", T_GATHER, 2, R, V, 0, false, &d->sel_succ)))
            return s;
    } else {
        static const char *const sel[] = {"selector_predecessor.weight", "selector_successor.weight"};
        for (int i = 0; i < 2; i++)
            if ((s = refuse_t(L, sel[i], SPEX_ERR_FORMAT, "selector tables without selector_hidden.weight"))) return s;
    }
    return SPEX_OK;
}

/* The drafter's own matmul weights into the R16 layout where the kernels gain from it
 * (repack_weights.c). A head borrowed from the target is already in its final layout; the
 * embedding and the selector tables are read row by row and stay in the mapping. */
static spex_status repack_drafter(spex_drafter *d, spex_error *err) {
    if (d->params.no_repack) return SPEX_OK;
    const int per_layer = 9;
    const int n = d->hp.n_layer * per_layer + 3;
    model_weight **ws = calloc((size_t)n, sizeof *ws);
    if (!ws) return spex_error_set(err, SPEX_ERR_NOMEM, "%s: out of memory", spex_gguf_path(d->gguf));
    int k = 0;
    for (int l = 0; l < d->hp.n_layer; l++) {
        dflash_layer *ly = &d->layers[l];
        model_weight *lw[] = {&ly->wq, &ly->wk, &ly->wv, &ly->wo, &ly->w_gate, &ly->w_up, &ly->w_down,
                              &ly->attn_conv_proj, &ly->ffn_conv_proj};
        for (int i = 0; i < per_layer; i++) ws[k++] = lw[i];
    }
    ws[k++] = &d->fc;
    ws[k++] = &d->head;
    ws[k++] = &d->sel_hidden;
    /* the target's embedding too: a head borrowed from a tied target is that table */
    const void *keep[4] = {d->tok_embd.data, d->target->tok_embd.data, d->sel_pred.data, d->sel_succ.data};
    spex_status s = spex_model_repack(ws, k, keep, 4, d->gguf, &d->repack, err);
    free(ws);
    return s;
}

/* ======================================================================== */
/* Detection (§2) and the load                                               */
/* ======================================================================== */

static spex_status detect(loader *L) {
    spex_status s;
    spex_str an;
    if ((s = spex_gguf_get_str(L->g, "general.architecture", &an, L->err))) return s;
    if (!(an.len == 6 && !memcmp(an.ptr, "dflash", 6)))
        return spex_error_set(L->err, SPEX_ERR_UNSUPPORTED, "%s: general.architecture '%.*s' is not 'dflash'", L->path,
                              (int)(an.len > 64 ? 64 : an.len), an.ptr);
    bool anchor_first, conf_head, markov = false;
    if ((s = rd_bool(L, "dflash.sample_from_anchor", &anchor_first)) ||
        (s = rd_bool(L, "dflash.has_confidence_head", &conf_head)))
        return s;
    const char *markov_name = NULL;
    for (int64_t i = 0; i < spex_gguf_n_tensors(L->g) && !markov; i++) {
        const spex_tensor_info *t = spex_gguf_tensor(L->g, i);
        if (!strncmp(t->name, "markov_", 7)) {
            markov = true;
            markov_name = t->name;
        }
    }
    if (markov || anchor_first || conf_head)
        return spex_error_set(L->err, SPEX_ERR_UNSUPPORTED, "%s: DSpark drafters are not supported (%s%s%s)", L->path,
                              markov ? "tensor '" : "key '",
                              markov ? markov_name : anchor_first ? "dflash.sample_from_anchor" : "dflash.has_confidence_head",
                              "' present");
    L->d->hp.variant = spex_gguf_find_tensor(L->g, "selector_hidden.weight") ? SPEX_DFLASH2 : SPEX_DFLASH_V1;
    return SPEX_OK;
}

spex_drafter_params spex_drafter_default_params(void) {
    spex_drafter_params p;
    memset(&p, 0, sizeof p);
    return p;
}

spex_status spex_drafter_load_gguf(spex_gguf *g, const spex_model *target, const spex_drafter_params *params,
                                   spex_drafter **out, spex_error *err) {
    if (!out) {
        spex_gguf_close(g);
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spex_drafter_load: out is NULL");
    }
    *out = NULL;
    if (!g || !target) {
        spex_gguf_close(g);
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spex_drafter_load: %s is NULL", g ? "target" : "gguf");
    }
    loader *L = calloc(1, sizeof *L);
    spex_drafter *d = calloc(1, sizeof *d);
    spex_status s;
    if (!L || !d) {
        free(L);
        free(d);
        s = spex_error_set(err, SPEX_ERR_NOMEM, "%s: out of memory", spex_gguf_path(g));
        spex_gguf_close(g);
        return s;
    }
    d->gguf = g;
    d->target = target;
    d->params = params ? *params : spex_drafter_default_params();
    L->d = d;
    L->g = g;
    L->path = spex_gguf_path(g);
    L->tpath = spex_gguf_path(spex_model_gguf(target));
    L->err = err;

    if (d->params.n_overrides < 0 || (d->params.n_overrides > 0 && !d->params.overrides)) {
        s = spex_error_set(err, SPEX_ERR_INVALID_ARG, "spex_drafter_load: bad overrides (%d entries)",
                           d->params.n_overrides);
        goto fail;
    }
    if (d->params.n_overrides > MAX_OVERRIDES) {
        s = spex_error_set(err, SPEX_ERR_INVALID_ARG, "spex_drafter_load: at most %d overrides", MAX_OVERRIDES);
        goto fail;
    }
    for (int i = 0; i < d->params.n_overrides; i++) {
        if ((s = parse_override(d->params.overrides[i], &L->ovr[i], err))) goto fail;
        for (int j = 0; j < i; j++)
            if (!strcmp(L->ovr[j].key, L->ovr[i].key)) {
                s = spex_error_set(err, SPEX_ERR_INVALID_ARG, "drafter override: key '%s' given twice", L->ovr[i].key);
                goto fail;
            }
        L->n_ovr = i + 1;
    }

    if ((s = detect(L)) || (s = read_hparams(L)) || (s = check_pair(L)) || (s = load_tensors(L)) ||
        (s = repack_drafter(d, err)))
        goto fail;

    d->params.overrides = NULL;   /* borrowed for the call only */
    d->params.n_overrides = 0;
    free(L);
    if (d->params.verbose) {
        char line[512];
        spex_drafter_describe(d, line, sizeof line);
        spex_drafter_log(d, "%s (%s, weights %.2f MiB)", line, spex_gguf_path(g),
                         (double)d->weight_bytes / (1024.0 * 1024.0));
    }
    *out = d;
    return SPEX_OK;
fail:
    free(L);
    spex_drafter_free(d);
    return s;
}

spex_status spex_drafter_load(const char *path, const spex_model *target, const spex_drafter_params *params,
                              spex_drafter **out, spex_error *err) {
    if (!out) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spex_drafter_load: out is NULL");
    *out = NULL;
    if (!path || !target)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spex_drafter_load: %s is NULL", path ? "target" : "path");
    spex_gguf *g = NULL;
    spex_status s = params && params->no_mmap ? spex_gguf_open_read(path, &g, err) : spex_gguf_open(path, &g, err);
    if (s != SPEX_OK) return s;
    return spex_drafter_load_gguf(g, target, params, out, err);
}

void spex_drafter_free(spex_drafter *d) {
    if (!d) return;
    spex_model_repack_free(&d->repack);
    free(d->layers);
    spex_gguf_close(d->gguf);
    free(d);
}

const spex_drafter_hparams *spex_drafter_get_hparams(const spex_drafter *d) { return d ? &d->hp : NULL; }
const spex_gguf *spex_drafter_gguf(const spex_drafter *d) { return d ? d->gguf : NULL; }
const spex_model *spex_drafter_target(const spex_drafter *d) { return d ? d->target : NULL; }
uint64_t spex_drafter_weight_bytes(const spex_drafter *d) { return d ? d->weight_bytes : 0; }

void spex_drafter_describe(const spex_drafter *d, char *buf, size_t cap) {
    if (!buf || cap == 0) return;
    buf[0] = 0;
    if (!d) return;
    const spex_drafter_hparams *hp = &d->hp;
    size_t o = 0;
#define PUT(...) (o += (o < cap ? (size_t)snprintf(buf + o, cap - o, __VA_ARGS__) : 0))
    PUT("%s: layers=%d D=%d taps=[", hp->variant == SPEX_DFLASH2 ? "dflash2" : "dflash1", hp->n_layer, hp->n_embd);
    for (int i = 0; i < hp->n_taps; i++) PUT("%s%d", i ? "," : "", hp->target_layers[i]);
    PUT("] block=%d", hp->block_size);
    if (hp->variant == SPEX_DFLASH2)
        PUT(" conv=%d/%d rank=%d top_k=%d", hp->conv_kernel, hp->conv_group, hp->selector_rank, hp->selector_top_k);
    PUT(" mask=%d swa=%d causal=%d", hp->mask_token, hp->swa_window, hp->causal ? 1 : 0);
#undef PUT
}

