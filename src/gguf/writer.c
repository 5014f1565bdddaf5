/*
 * writer.c — the GGUF v3 writer behind spex_gguf_writer_* (include/spex.h, "GGUF writer";
 * the format is summarised in gguf/gguf.h).
 *
 * What it is: metadata and tensors collected in memory (values copied, tensor data borrowed
 * or produced by a fill callback at write time), then written in one pass: header, kvs,
 * tensor infos, zero padding to the alignment, and each tensor padded to the alignment, as
 * ggml's gguf writer lays them out, so llama.cpp reads the result unchanged. The file is
 * written under a temporary name and renamed into place (core/file.h).
 * What it is not: an editor of existing files (read them with reader.c and copy values with
 * spex_gguf_writer_set_value).
 */
#include "gguf/api.h"
#include "gguf/gguf.h"
#include "core/file.h"
#include "tensor/api.h"

#include <stdlib.h>
#include <string.h>

typedef struct wkv {
    char *key;
    spex_gguf_vtype type, elem_type;
    uint64_t n;
    uint8_t *payload;          /* encoded payload (gguf.h): scalar bytes, string bytes, array elements */
    uint64_t size;
} wkv;

typedef struct wtensor {
    char *name;
    spex_type type;
    uint32_t n_dims;
    int64_t ne[SPEX_MAX_DIMS];
    const void *data;          /* borrowed; NULL: produced by the fill callback */
    uint64_t nbytes;
    uint64_t offset;
} wtensor;

struct spex_gguf_writer {
    uint32_t alignment;
    wkv *kv;
    int64_t n_kv, cap_kv;
    wtensor *t;
    int64_t n_t, cap_t;
    spex_gguf_tensor_fill fill;
    void *fill_ctx;
};

static bool grow(void **arr, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return true;
    int64_t c = *cap ? *cap * 2 : 32;
    while (c < need) c *= 2;
    void *p = realloc(*arr, (size_t)c * elem);
    if (!p) return false;
    *arr = p;
    *cap = c;
    return true;
}

spex_status spex_gguf_writer_init(spex_gguf_writer **out, spex_error *err) {
    if (!out) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spex_gguf_writer_init: out is NULL");
    *out = calloc(1, sizeof **out);
    if (!*out) return spex_error_set(err, SPEX_ERR_NOMEM, "gguf writer: out of memory");
    (*out)->alignment = SPEX_GGUF_DEFAULT_ALIGNMENT;
    return SPEX_OK;
}

void spex_gguf_writer_free(spex_gguf_writer *w) {
    if (!w) return;
    for (int64_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].payload);
    }
    for (int64_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

spex_status spex_gguf_writer_set_alignment(spex_gguf_writer *w, uint32_t alignment) {
    if (!w || alignment == 0 || (alignment & (alignment - 1))) return SPEX_ERR_INVALID_ARG;
    w->alignment = alignment;
    return SPEX_OK;
}

void spex_gguf_writer_set_fill(spex_gguf_writer *w, spex_gguf_tensor_fill fill, void *ctx) {
    w->fill = fill;
    w->fill_ctx = ctx;
}

/* ---- metadata ----------------------------------------------------------- */

/* Stores a copy of payload under key, replacing the value of an existing key in place. */
static spex_status set_kv(spex_gguf_writer *w, const char *key, spex_gguf_vtype type, spex_gguf_vtype elem_type,
                          uint64_t n, const void *payload, uint64_t size) {
    if (!w || !key) return SPEX_ERR_INVALID_ARG;
    size_t klen = strlen(key);
    if (klen == 0 || klen > SPEX_GGUF_MAX_KEY_LEN || (size && !payload) || size > SIZE_MAX - 1)
        return SPEX_ERR_INVALID_ARG;
    uint8_t *copy = malloc(size ? (size_t)size : 1);
    if (!copy) return SPEX_ERR_NOMEM;
    if (size) memcpy(copy, payload, (size_t)size);
    wkv *kv = NULL;
    for (int64_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->kv[i].key, key)) kv = &w->kv[i];
    if (kv) {
        free(kv->payload);
    } else {
        char *k = malloc(klen + 1);
        if (!k || !grow((void **)&w->kv, &w->cap_kv, w->n_kv + 1, sizeof *w->kv)) {
            free(k);
            free(copy);
            return SPEX_ERR_NOMEM;
        }
        memcpy(k, key, klen + 1);
        kv = &w->kv[w->n_kv++];
        kv->key = k;
    }
    kv->type = type;
    kv->elem_type = elem_type;
    kv->n = n;
    kv->payload = copy;
    kv->size = size;
    return SPEX_OK;
}

#define SCALAR_SETTER(fn, ctype, vt)                                                  \
    spex_status fn(spex_gguf_writer *w, const char *key, ctype v) {                   \
        return set_kv(w, key, vt, SPEX_GGUF_U8, 1, &v, sizeof v);                     \
    }
SCALAR_SETTER(spex_gguf_writer_set_u8, uint8_t, SPEX_GGUF_U8)
SCALAR_SETTER(spex_gguf_writer_set_i8, int8_t, SPEX_GGUF_I8)
SCALAR_SETTER(spex_gguf_writer_set_u16, uint16_t, SPEX_GGUF_U16)
SCALAR_SETTER(spex_gguf_writer_set_i16, int16_t, SPEX_GGUF_I16)
SCALAR_SETTER(spex_gguf_writer_set_u32, uint32_t, SPEX_GGUF_U32)
SCALAR_SETTER(spex_gguf_writer_set_i32, int32_t, SPEX_GGUF_I32)
SCALAR_SETTER(spex_gguf_writer_set_u64, uint64_t, SPEX_GGUF_U64)
SCALAR_SETTER(spex_gguf_writer_set_i64, int64_t, SPEX_GGUF_I64)
SCALAR_SETTER(spex_gguf_writer_set_f32, float, SPEX_GGUF_F32)
SCALAR_SETTER(spex_gguf_writer_set_f64, double, SPEX_GGUF_F64)
#undef SCALAR_SETTER

spex_status spex_gguf_writer_set_bool(spex_gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    return set_kv(w, key, SPEX_GGUF_BOOL, SPEX_GGUF_U8, 1, &b, 1);
}

spex_status spex_gguf_writer_set_str(spex_gguf_writer *w, const char *key, const char *s, uint64_t len) {
    if (len && !s) return SPEX_ERR_INVALID_ARG;
    return set_kv(w, key, SPEX_GGUF_STRING, SPEX_GGUF_U8, 1, s, len);
}

spex_status spex_gguf_writer_set_arr(spex_gguf_writer *w, const char *key, spex_gguf_vtype elem_type,
                                     const void *data, uint64_t n) {
    uint64_t es = spex_gguf_vtype_size(elem_type);
    if (es == 0 || (n && !data) || n > UINT64_MAX / es) return SPEX_ERR_INVALID_ARG;
    return set_kv(w, key, SPEX_GGUF_ARRAY, elem_type, n, data, n * es);
}

spex_status spex_gguf_writer_set_arr_str(spex_gguf_writer *w, const char *key, const spex_str *strs, uint64_t n) {
    if (n && !strs) return SPEX_ERR_INVALID_ARG;
    uint64_t size = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (strs[i].len && !strs[i].ptr) return SPEX_ERR_INVALID_ARG;
        if (__builtin_add_overflow(size, 8 + strs[i].len, &size) || strs[i].len > UINT64_MAX - 8)
            return SPEX_ERR_INVALID_ARG;
    }
    if (size > SIZE_MAX) return SPEX_ERR_INVALID_ARG;
    uint8_t *buf = malloc(size ? (size_t)size : 1);
    if (!buf) return SPEX_ERR_NOMEM;
    uint8_t *p = buf;
    for (uint64_t i = 0; i < n; i++) {
        memcpy(p, &strs[i].len, 8);
        if (strs[i].len) memcpy(p + 8, strs[i].ptr, (size_t)strs[i].len);
        p += 8 + strs[i].len;
    }
    spex_status s = set_kv(w, key, SPEX_GGUF_ARRAY, SPEX_GGUF_STRING, n, buf, size);
    free(buf);
    return s;
}

spex_status spex_gguf_writer_set_value(spex_gguf_writer *w, const char *key, const spex_gguf_value *v) {
    if (!v || (unsigned)v->type >= SPEX_GGUF_VTYPE_COUNT) return SPEX_ERR_INVALID_ARG;
    if (v->type == SPEX_GGUF_STRING) return spex_gguf_writer_set_str(w, key, (const char *)v->data, v->size);
    if (v->type != SPEX_GGUF_ARRAY) {
        if (v->size != spex_gguf_vtype_size(v->type) || !v->data) return SPEX_ERR_INVALID_ARG;
        return set_kv(w, key, v->type, SPEX_GGUF_U8, 1, v->data, v->size);
    }
    /* The payload is copied verbatim, so it must be exactly n well-formed elements. */
    if (!spex_gguf_payload_valid(v->data, v->size, v->elem_type, v->n, 0)) return SPEX_ERR_INVALID_ARG;
    return set_kv(w, key, SPEX_GGUF_ARRAY, v->elem_type, v->n, v->data, v->size);
}

/* ---- tensors ------------------------------------------------------------ */

spex_status spex_gguf_writer_add_tensor(spex_gguf_writer *w, const char *name, spex_type type, uint32_t n_dims,
                                        const int64_t *ne, const void *data, uint64_t nbytes, spex_error *err) {
    if (!w || !name || !ne)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "gguf writer: add_tensor needs a writer, a name and a shape");
    size_t len = strlen(name);
    if (len == 0 || len > SPEX_GGUF_MAX_NAME_LEN)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "gguf writer: tensor name '%.64s' must have 1 to %u bytes",
                              name, SPEX_GGUF_MAX_NAME_LEN);
    const spex_type_info *ti = spex_type_get_info((int)type);
    if (!ti) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "gguf writer: tensor '%s': unknown type id %d", name, (int)type);
    if (n_dims < 1 || n_dims > SPEX_MAX_DIMS)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "gguf writer: tensor '%s': n_dims %u, expected 1 to %d", name,
                              n_dims, SPEX_MAX_DIMS);
    uint64_t rows = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] <= 0)
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "gguf writer: tensor '%s': ne[%u] = %lld, expected > 0",
                                  name, d, (long long)ne[d]);
        if (d > 0 && __builtin_mul_overflow(rows, (uint64_t)ne[d], &rows))
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "gguf writer: tensor '%s': shape overflows", name);
    }
    if (ne[0] % ti->block_size != 0)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG,
                              "gguf writer: tensor '%s': ne[0] = %lld is not a multiple of the %s block size %lld",
                              name, (long long)ne[0], ti->name, (long long)ti->block_size);
    uint64_t want;
    if (__builtin_mul_overflow((uint64_t)(ne[0] / ti->block_size) * ti->type_size, rows, &want))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "gguf writer: tensor '%s': shape overflows", name);
    if (nbytes != want)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "gguf writer: tensor '%s': %llu bytes given, its %s shape needs %llu",
                              name, (unsigned long long)nbytes, ti->name, (unsigned long long)want);
    for (int64_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name))
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "gguf writer: duplicate tensor name '%s'", name);
    char *copy = malloc(len + 1);
    if (!copy || !grow((void **)&w->t, &w->cap_t, w->n_t + 1, sizeof *w->t)) {
        free(copy);
        return spex_error_set(err, SPEX_ERR_NOMEM, "gguf writer: out of memory");
    }
    memcpy(copy, name, len + 1);
    wtensor *t = &w->t[w->n_t++];
    memset(t, 0, sizeof *t);
    t->name = copy;
    t->type = type;
    t->n_dims = n_dims;
    for (int d = 0; d < SPEX_MAX_DIMS; d++) t->ne[d] = (uint32_t)d < n_dims ? ne[d] : 1;
    t->data = data;
    t->nbytes = nbytes;
    return SPEX_OK;
}

/* ---- output ------------------------------------------------------------- */

typedef struct wout {
    spex_out_file f;
    uint64_t pos;
    spex_error *err;
} wout;

static spex_status put(wout *o, const void *p, uint64_t n) {
    o->pos += n;
    return spex_out_file_write(&o->f, p, (size_t)n, o->err);
}
static spex_status put_u32(wout *o, uint32_t v) { return put(o, &v, 4); }
static spex_status put_u64(wout *o, uint64_t v) { return put(o, &v, 8); }
static spex_status put_str(wout *o, const char *s, uint64_t len) {
    spex_status st = put_u64(o, len);
    return st == SPEX_OK ? put(o, s, len) : st;
}
static spex_status pad(wout *o, uint64_t alignment) {
    uint64_t n = spex_gguf_align_up(o->pos, alignment) - o->pos;
    o->pos += n;
    return spex_out_file_zeros(&o->f, (size_t)n, o->err);
}

static spex_status write_header(spex_gguf_writer *w, wout *o) {
    spex_status s = put_u32(o, SPEX_GGUF_MAGIC);
    if (s == SPEX_OK) s = put_u32(o, SPEX_GGUF_VERSION);
    if (s == SPEX_OK) s = put_u64(o, (uint64_t)w->n_t);
    if (s == SPEX_OK) s = put_u64(o, (uint64_t)w->n_kv);
    for (int64_t i = 0; s == SPEX_OK && i < w->n_kv; i++) {
        const wkv *kv = &w->kv[i];
        s = put_str(o, kv->key, strlen(kv->key));
        if (s == SPEX_OK) s = put_u32(o, (uint32_t)kv->type);
        if (s == SPEX_OK && kv->type == SPEX_GGUF_STRING) s = put_u64(o, kv->size);
        if (s == SPEX_OK && kv->type == SPEX_GGUF_ARRAY) {
            s = put_u32(o, (uint32_t)kv->elem_type);
            if (s == SPEX_OK) s = put_u64(o, kv->n);
        }
        if (s == SPEX_OK) s = put(o, kv->payload, kv->size);
    }
    for (int64_t i = 0; s == SPEX_OK && i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        s = put_str(o, t->name, strlen(t->name));
        if (s == SPEX_OK) s = put_u32(o, t->n_dims);
        for (uint32_t d = 0; s == SPEX_OK && d < t->n_dims; d++) s = put_u64(o, (uint64_t)t->ne[d]);
        if (s == SPEX_OK) s = put_u32(o, (uint32_t)t->type);
        if (s == SPEX_OK) s = put_u64(o, t->offset);
    }
    if (s == SPEX_OK) s = pad(o, w->alignment);
    return s;
}

spex_status spex_gguf_writer_write(spex_gguf_writer *w, const char *path, spex_error *err) {
    if (!w || !path) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "gguf writer: write needs a writer and a path");
    /* The alignment is recorded whenever it is not the default, or a key was already there. */
    bool has_key = false;
    for (int64_t i = 0; i < w->n_kv; i++) has_key |= !strcmp(w->kv[i].key, "general.alignment");
    if ((has_key || w->alignment != SPEX_GGUF_DEFAULT_ALIGNMENT) &&
        spex_gguf_writer_set_u32(w, "general.alignment", w->alignment) != SPEX_OK)
        return spex_error_set(err, SPEX_ERR_NOMEM, "%s: out of memory", path);
    uint64_t off = 0, max_fill = 0;
    for (int64_t i = 0; i < w->n_t; i++) {
        wtensor *t = &w->t[i];
        if (!t->data && !w->fill)
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "%s: tensor '%s' has no data and the writer no fill callback",
                                  path, t->name);
        if (!t->data && t->nbytes > max_fill) max_fill = t->nbytes;
        t->offset = off;
        if (t->nbytes > UINT64_MAX - off - w->alignment)
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "%s: tensor data exceeds 2^64 bytes", path);
        off = spex_gguf_align_up(off + t->nbytes, w->alignment);
    }
    if (max_fill > SIZE_MAX) return spex_error_set(err, SPEX_ERR_NOMEM, "%s: tensor too large to buffer", path);
    uint8_t *buf = NULL;
    if (max_fill && !(buf = malloc((size_t)max_fill)))
        return spex_error_set(err, SPEX_ERR_NOMEM, "%s: cannot allocate a %llu-byte tensor buffer", path,
                              (unsigned long long)max_fill);
    wout o = {.err = err};
    spex_status s = spex_out_file_open(path, &o.f, err);
    if (s != SPEX_OK) {
        free(buf);
        return s;
    }
    s = write_header(w, &o);
    uint64_t data_start = o.pos;
    for (int64_t i = 0; s == SPEX_OK && i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        const void *src = t->data;
        if (!src) {
            s = w->fill(w->fill_ctx, i, buf, t->nbytes, err);
            src = buf;
        }
        if (s == SPEX_OK) s = put(&o, src, t->nbytes);
        if (s == SPEX_OK) s = pad(&o, w->alignment);
        if (s == SPEX_OK && o.pos - data_start != spex_gguf_align_up(t->offset + t->nbytes, w->alignment))
            s = spex_error_set(err, SPEX_ERR_IO, "%s: internal error: tensor '%s' written at the wrong offset", path,
                               t->name);
    }
    free(buf);
    if (s != SPEX_OK) {
        spex_out_file_abort(&o.f);
        return s;
    }
    return spex_out_file_commit(&o.f, err);
}
