/*
 * reader.c — the GGUF reader behind spex_gguf_* (include/spex.h, "GGUF reader"; the format
 * is summarised in gguf/gguf.h).
 *
 * What it is: a validating parser over a read-only mapping (or a caller's buffer). Everything
 * is checked once, at open: magic, version, counts, every string length, every value type
 * (nested arrays included, to SPEX_GGUF_MAX_DEPTH), every array's byte size, the alignment,
 * every tensor's shape, type, offset and size against the data section, duplicate keys and
 * tensor names. After a successful open every getter is a bounds-safe view into the mapping.
 * What it is not: a loader (no tensor data is copied or converted) or a writer (writer.c).
 *
 * Hostile input. The parser never trusts a count: a count is first checked against the
 * bytes left (each element has a minimum encoded size), and arrays that grow with counts
 * (kv table, tensor table, string index) grow only as elements are actually parsed, so the
 * memory used is proportional to the bytes the file really holds. Recursion is bounded by
 * SPEX_GGUF_MAX_DEPTH and every loop consumes at least 8 bytes per iteration, so a hostile
 * file cannot crash, hang or exhaust memory. Errors name the file, the item (kv or tensor,
 * with index and name), the field, and what was expected, in one line.
 */
#include "gguf/api.h"
#include "gguf/gguf.h"
#include "core/file.h"
#include "tensor/api.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Smallest encodings: a kv is key length + 1-byte key + type + 1-byte value; a tensor info
 * is name length + 1-byte name + n_dims + one dim + type + offset. */
#define MIN_KV_BYTES (8u + 1u + 4u + 1u)
#define MIN_TINFO_BYTES (8u + 1u + 4u + 8u + 4u + 8u)
#define MIN_STRING_BYTES 8u
#define MIN_ARRAY_BYTES 12u

typedef struct gguf_kv {
    const char *key;          /* NUL-terminated, in g->names (a view into the buffer while parsing) */
    uint32_t key_len;
    spex_gguf_value v;
    uint64_t *str_off;        /* string arrays: offset of element i's length field from v.data */
} gguf_kv;

struct spex_gguf {
    char *path;
    spex_mapped_file map;     /* empty for spex_gguf_open_memory */
    const uint8_t *base;
    uint64_t size;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;
    int64_t n_kv, cap_kv;
    gguf_kv *kv;
    int64_t n_tensors, cap_tensors;
    spex_tensor_info *tensors;
    uint32_t *tname_len;      /* while parsing only */
    char *names;              /* keys and tensor names, NUL-terminated */
    int64_t *kv_hash, *t_hash;
    uint64_t kv_mask, t_mask;
    void **owned;             /* keys and values of overrides (spex_gguf_override) */
    int64_t n_owned, cap_owned;
};

/* ======================================================================== */
/* Value types                                                               */
/* ======================================================================== */

static const char *const vtype_names[SPEX_GGUF_VTYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
};
static const uint8_t vtype_sizes[SPEX_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *spex_gguf_vtype_name(spex_gguf_vtype t) {
    return (unsigned)t < SPEX_GGUF_VTYPE_COUNT ? vtype_names[t] : "unknown";
}

uint64_t spex_gguf_vtype_size(spex_gguf_vtype t) {
    return (unsigned)t < SPEX_GGUF_VTYPE_COUNT ? vtype_sizes[t] : 0;
}

/* ======================================================================== */
/* The cursor: bounds-checked reads that explain themselves on failure       */
/* ======================================================================== */

typedef struct rd {
    const uint8_t *buf;
    uint64_t size, pos;
    const char *file;           /* NULL: silent (validation only) */
    spex_error *err;
    char item[128];             /* "kv 3 'general.name'", "tensor 12 'blk.0.attn_q.weight'" */
    int depth;                  /* array levels entered; path[d] is the element at level d */
    uint64_t path[SPEX_GGUF_MAX_DEPTH];
} rd;

static uint64_t rd_left(const rd *r) { return r->size - r->pos; }

/* Printable, bounded copy of a name from the file for messages. */
static void fmt_name(char *dst, size_t cap, const uint8_t *s, uint64_t len) {
    size_t o = 0;
    uint64_t i = 0;
    for (; i < len && o + 4 < cap; i++) dst[o++] = (s[i] >= 0x20 && s[i] < 0x7f) ? (char)s[i] : '?';
    if (i < len) for (int k = 0; k < 3; k++) dst[o++] = '.';
    dst[o] = 0;
}

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static bool rd_fail(rd *r, const char *fmt, ...) {
    if (!r->err) return false;
    char where[256], what[SPEX_ERROR_MSG_MAX];
    int o = snprintf(where, sizeof where, "%s", r->item);
    for (int d = 0; d < r->depth && o > 0 && (size_t)o < sizeof where; d++)
        o += snprintf(where + o, sizeof where - (size_t)o, "%s[%llu]", d == 0 ? " element " : "",
                      (unsigned long long)r->path[d]);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    spex_error_set(r->err, SPEX_ERR_FORMAT, "%s: %s: %s", r->file, where, what);
    return false;
}

static bool rd_need(rd *r, uint64_t n, const char *what) {
    if (n <= rd_left(r)) return true;
    return rd_fail(r, "%s needs %llu bytes at offset %llu, but the file ends at %llu", what,
                   (unsigned long long)n, (unsigned long long)r->pos, (unsigned long long)r->size);
}

static bool rd_u32(rd *r, uint32_t *out, const char *what) {
    if (!rd_need(r, 4, what)) return false;
    memcpy(out, r->buf + r->pos, 4);
    r->pos += 4;
    return true;
}

static bool rd_u64(rd *r, uint64_t *out, const char *what) {
    if (!rd_need(r, 8, what)) return false;
    memcpy(out, r->buf + r->pos, 8);
    r->pos += 8;
    return true;
}

/* A GGUF string: u64 length, then bytes. */
static bool rd_str(rd *r, const uint8_t **s, uint64_t *len, uint64_t max_len, const char *what) {
    uint64_t at = r->pos;
    if (rd_left(r) < 8)
        return rd_fail(r, "%s length needs 8 bytes at offset %llu, but the file ends at %llu", what,
                       (unsigned long long)at, (unsigned long long)r->size);
    rd_u64(r, len, what);
    if (*len > max_len)
        return rd_fail(r, "%s length %llu (at offset %llu) exceeds the limit of %llu", what,
                       (unsigned long long)*len, (unsigned long long)at, (unsigned long long)max_len);
    if (*len > rd_left(r))
        return rd_fail(r, "%s length %llu (at offset %llu) exceeds the %llu bytes left in the file", what,
                       (unsigned long long)*len, (unsigned long long)at, (unsigned long long)rd_left(r));
    *s = r->buf + r->pos;
    r->pos += *len;
    return true;
}

/* ======================================================================== */
/* Values                                                                    */
/* ======================================================================== */

static bool walk_value(rd *r, uint32_t type, spex_gguf_value *out);

/* Array payload: n elements of elem_type starting at r->pos (the array's type and count have
 * been read). Nested arrays recurse with r->depth + 1. */
static bool walk_payload(rd *r, uint32_t elem_type, uint64_t n) {
    uint64_t es = spex_gguf_vtype_size((spex_gguf_vtype)elem_type);
    if (es) {
        if (n > rd_left(r) / es)
            return rd_fail(r, "array of %llu %s elements needs more than the %llu bytes left in the file",
                           (unsigned long long)n, vtype_names[elem_type], (unsigned long long)rd_left(r));
        r->pos += n * es;
        return true;
    }
    uint64_t min = elem_type == SPEX_GGUF_STRING ? MIN_STRING_BYTES : MIN_ARRAY_BYTES;
    if (n > rd_left(r) / min)
        return rd_fail(r, "array of %llu %s elements cannot fit in the %llu bytes left in the file "
                       "(each needs at least %llu)", (unsigned long long)n, vtype_names[elem_type],
                       (unsigned long long)rd_left(r), (unsigned long long)min);
    if (elem_type == SPEX_GGUF_ARRAY && r->depth + 1 >= SPEX_GGUF_MAX_DEPTH)
        return rd_fail(r, "arrays nested more than %d levels deep", SPEX_GGUF_MAX_DEPTH);
    int d = r->depth++;
    for (uint64_t i = 0; i < n; i++) {
        r->path[d] = i;
        spex_gguf_value ignored;
        if (!walk_value(r, elem_type, &ignored)) return false;
    }
    r->depth--;
    return true;
}

/* One value of the given type at r->pos; fills out with its payload view. */
static bool walk_value(rd *r, uint32_t type, spex_gguf_value *out) {
    memset(out, 0, sizeof *out);
    if (type >= SPEX_GGUF_VTYPE_COUNT)
        return rd_fail(r, "value type %u is not a GGUF type (0..12)", type);
    out->type = (spex_gguf_vtype)type;
    out->n = 1;
    if (type == SPEX_GGUF_STRING) {
        const uint8_t *s;
        uint64_t len;
        if (!rd_str(r, &s, &len, UINT64_MAX, "string")) return false;
        out->data = s;
        out->size = len;
        return true;
    }
    if (type != SPEX_GGUF_ARRAY) {
        uint64_t es = vtype_sizes[type];
        if (!rd_need(r, es, vtype_names[type])) return false;
        out->data = r->buf + r->pos;
        out->size = es;
        r->pos += es;
        return true;
    }
    uint32_t et;
    uint64_t n;
    if (!rd_u32(r, &et, "array element type")) return false;
    if (et >= SPEX_GGUF_VTYPE_COUNT) return rd_fail(r, "array element type %u is not a GGUF type (0..12)", et);
    if (!rd_u64(r, &n, "array element count")) return false;
    uint64_t start = r->pos;
    if (!walk_payload(r, et, n)) return false;
    out->elem_type = (spex_gguf_vtype)et;
    out->n = n;
    out->data = r->buf + start;
    out->size = r->pos - start;
    return true;
}

bool spex_gguf_payload_valid(const uint8_t *buf, uint64_t size, spex_gguf_vtype elem_type, uint64_t n,
                             int depth) {
    if ((unsigned)elem_type >= SPEX_GGUF_VTYPE_COUNT || depth < 0 || depth >= SPEX_GGUF_MAX_DEPTH) return false;
    if (size && !buf) return false;
    rd r = {.buf = buf, .size = size, .depth = depth};
    return walk_payload(&r, elem_type, n) && r.pos == size;
}

/* ======================================================================== */
/* Open                                                                      */
/* ======================================================================== */

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    while (*s) h = (h ^ (uint8_t)*s++) * 1099511628211ull;
    return h;
}

static bool grow(void **arr, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return true;
    int64_t c = *cap ? *cap * 2 : 64;
    while (c < need) c *= 2;
    void *p = realloc(*arr, (size_t)c * elem);
    if (!p) return false;
    *arr = p;
    *cap = c;
    return true;
}

static spex_status nomem(const spex_gguf *g, spex_error *err) {
    return spex_error_set(err, SPEX_ERR_NOMEM, "%s: out of memory while reading the header", g->path);
}

static spex_status parse_kvs(spex_gguf *g, rd *r, uint64_t n_kv, spex_error *err) {
    for (uint64_t i = 0; i < n_kv; i++) {
        snprintf(r->item, sizeof r->item, "kv %llu", (unsigned long long)i);
        const uint8_t *key;
        uint64_t len;
        if (!rd_str(r, &key, &len, SPEX_GGUF_MAX_KEY_LEN, "key")) return SPEX_ERR_FORMAT;
        if (len == 0) return rd_fail(r, "key is empty"), SPEX_ERR_FORMAT;
        if (memchr(key, 0, len)) return rd_fail(r, "key contains a NUL byte"), SPEX_ERR_FORMAT;
        char shown[80];
        fmt_name(shown, sizeof shown, key, len);
        snprintf(r->item, sizeof r->item, "kv %llu '%s'", (unsigned long long)i, shown);
        uint32_t type;
        if (!rd_u32(r, &type, "value type")) return SPEX_ERR_FORMAT;
        spex_gguf_value v;
        if (!walk_value(r, type, &v)) return SPEX_ERR_FORMAT;
        if (!grow((void **)&g->kv, &g->cap_kv, g->n_kv + 1, sizeof *g->kv)) return nomem(g, err);
        gguf_kv *kv = &g->kv[g->n_kv++];
        kv->key = (const char *)key;
        kv->key_len = (uint32_t)len;
        kv->v = v;
        kv->str_off = NULL;
        if (len == 17 && !memcmp(key, "general.alignment", 17)) {
            if (type != SPEX_GGUF_U32)
                return rd_fail(r, "general.alignment has type %s, expected u32", spex_gguf_vtype_name(type)),
                       SPEX_ERR_FORMAT;
            uint32_t a;
            memcpy(&a, v.data, 4);
            if (a == 0 || (a & (a - 1)))
                return rd_fail(r, "general.alignment is %u, expected a power of two", a), SPEX_ERR_FORMAT;
            g->alignment = a;
        }
        /* Index string arrays now that the walk proved every element is in the file: the
         * index (8 bytes per string) is never larger than the strings themselves. */
        if (type == SPEX_GGUF_ARRAY && v.elem_type == SPEX_GGUF_STRING && v.n > 0) {
            kv->str_off = malloc((size_t)v.n * sizeof *kv->str_off);
            if (!kv->str_off) return nomem(g, err);
            uint64_t o = 0;
            for (uint64_t j = 0; j < v.n; j++) {
                uint64_t l;
                kv->str_off[j] = o;
                memcpy(&l, v.data + o, 8);
                o += 8 + l;
            }
        }
    }
    return SPEX_OK;
}

static spex_status parse_tensor_infos(spex_gguf *g, rd *r, uint64_t n_tensors, spex_error *err) {
    for (uint64_t i = 0; i < n_tensors; i++) {
        snprintf(r->item, sizeof r->item, "tensor %llu", (unsigned long long)i);
        const uint8_t *name;
        uint64_t len;
        if (!rd_str(r, &name, &len, SPEX_GGUF_MAX_NAME_LEN, "name")) return SPEX_ERR_FORMAT;
        if (len == 0) return rd_fail(r, "name is empty"), SPEX_ERR_FORMAT;
        if (memchr(name, 0, len)) return rd_fail(r, "name contains a NUL byte"), SPEX_ERR_FORMAT;
        char shown[80];
        fmt_name(shown, sizeof shown, name, len);
        snprintf(r->item, sizeof r->item, "tensor %llu '%s'", (unsigned long long)i, shown);
        int64_t old_cap = g->cap_tensors;
        if (!grow((void **)&g->tensors, &g->cap_tensors, g->n_tensors + 1, sizeof *g->tensors)) return nomem(g, err);
        if (g->cap_tensors != old_cap) { /* tname_len shares the capacity of the tensor table */
            uint32_t *lens = realloc(g->tname_len, (size_t)g->cap_tensors * sizeof *lens);
            if (!lens) return nomem(g, err);
            g->tname_len = lens;
        }
        spex_tensor_info *t = &g->tensors[g->n_tensors];
        memset(t, 0, sizeof *t);
        t->name = (const char *)name;
        g->tname_len[g->n_tensors] = (uint32_t)len;
        g->n_tensors++;
        if (!rd_u32(r, &t->n_dims, "n_dims")) return SPEX_ERR_FORMAT;
        if (t->n_dims < 1 || t->n_dims > SPEX_MAX_DIMS)
            return rd_fail(r, "n_dims is %u, expected 1 to %d", t->n_dims, SPEX_MAX_DIMS), SPEX_ERR_FORMAT;
        for (int d = 0; d < SPEX_MAX_DIMS; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            uint64_t ne;
            if (!rd_u64(r, &ne, "dimension")) return SPEX_ERR_FORMAT;
            if (ne == 0 || ne > (uint64_t)INT64_MAX)
                return rd_fail(r, "ne[%u] is %llu, expected 1 to 2^63-1", d, (unsigned long long)ne), SPEX_ERR_FORMAT;
            t->ne[d] = (int64_t)ne;
        }
        uint32_t type;
        if (!rd_u32(r, &type, "type")) return SPEX_ERR_FORMAT;
        if (!spex_type_get_info((int)type))
            return rd_fail(r, "type id %u is not a ggml type spex knows", type), SPEX_ERR_FORMAT;
        t->type = (spex_type)type;
        if (!rd_u64(r, &t->offset, "offset")) return SPEX_ERR_FORMAT;
    }
    return SPEX_OK;
}

/* Shape, size and placement of every tensor, once the data section is known. */
static spex_status check_tensors(spex_gguf *g, rd *r) {
    uint64_t data_size = g->size > g->data_offset ? g->size - g->data_offset : 0;
    if (g->n_tensors > 0 && g->data_offset > g->size) {
        snprintf(r->item, sizeof r->item, "data section");
        return rd_fail(r, "starts at offset %llu (header end aligned to %llu), past the end of the file at %llu",
                       (unsigned long long)g->data_offset, (unsigned long long)g->alignment,
                       (unsigned long long)g->size), SPEX_ERR_FORMAT;
    }
    for (int64_t i = 0; i < g->n_tensors; i++) {
        spex_tensor_info *t = &g->tensors[i];
        char shown[80];
        fmt_name(shown, sizeof shown, (const uint8_t *)t->name, g->tname_len[i]);
        snprintf(r->item, sizeof r->item, "tensor %lld '%s'", (long long)i, shown);
        const spex_type_info *ti = spex_type_get_info((int)t->type);
        if (t->ne[0] % ti->block_size != 0)
            return rd_fail(r, "ne[0] = %lld is not a multiple of the %s block size %lld", (long long)t->ne[0],
                           ti->name, (long long)ti->block_size), SPEX_ERR_FORMAT;
        uint64_t rows = 1, nbytes = 0;
        for (int d = 1; d < SPEX_MAX_DIMS; d++)
            if (__builtin_mul_overflow(rows, (uint64_t)t->ne[d], &rows)) rows = UINT64_MAX;
        uint64_t row_bytes = (uint64_t)(t->ne[0] / ti->block_size) * ti->type_size;
        int64_t nel;
        if (rows > (uint64_t)INT64_MAX || __builtin_mul_overflow((int64_t)rows, t->ne[0], &nel) ||
            __builtin_mul_overflow(row_bytes, rows, &nbytes))
            return rd_fail(r, "shape [%lld, %lld, %lld, %lld] has more elements or bytes than 2^63",
                           (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]),
                   SPEX_ERR_FORMAT;
        t->nbytes = nbytes;
        if (t->offset % g->alignment != 0)
            return rd_fail(r, "offset %llu is not a multiple of the alignment %llu", (unsigned long long)t->offset,
                           (unsigned long long)g->alignment), SPEX_ERR_FORMAT;
        if (t->offset > data_size || nbytes > data_size - t->offset)
            return rd_fail(r, "offset %llu + size %llu exceeds data section of %llu bytes",
                           (unsigned long long)t->offset, (unsigned long long)nbytes, (unsigned long long)data_size),
                   SPEX_ERR_FORMAT;
        t->data = g->base + g->data_offset + t->offset;
    }
    return SPEX_OK;
}

/* Copies keys and names into one NUL-terminated block owned by the handle. */
static spex_status copy_names(spex_gguf *g, spex_error *err) {
    uint64_t total = 1;
    for (int64_t i = 0; i < g->n_kv; i++) total += g->kv[i].key_len + 1u;
    for (int64_t i = 0; i < g->n_tensors; i++) total += g->tname_len[i] + 1u;
    g->names = malloc((size_t)total);
    if (!g->names) return nomem(g, err);
    char *p = g->names;
    for (int64_t i = 0; i < g->n_kv; i++) {
        memcpy(p, g->kv[i].key, g->kv[i].key_len);
        p[g->kv[i].key_len] = 0;
        g->kv[i].key = p;
        p += g->kv[i].key_len + 1;
    }
    for (int64_t i = 0; i < g->n_tensors; i++) {
        memcpy(p, g->tensors[i].name, g->tname_len[i]);
        p[g->tname_len[i]] = 0;
        g->tensors[i].name = p;
        p += g->tname_len[i] + 1;
    }
    free(g->tname_len);
    g->tname_len = NULL;
    return SPEX_OK;
}

/* Open-addressing table of indices (-1 = empty); reports the first duplicate name. */
static spex_status build_hash(spex_gguf *g, int64_t n, bool keys, int64_t **table, uint64_t *mask,
                              spex_error *err) {
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 2) cap *= 2;
    *table = malloc(cap * sizeof **table);
    if (!*table) return nomem(g, err);
    for (uint64_t i = 0; i < cap; i++) (*table)[i] = -1;
    *mask = cap - 1;
    for (int64_t i = 0; i < n; i++) {
        const char *s = keys ? g->kv[i].key : g->tensors[i].name;
        uint64_t h = hash_str(s) & *mask;
        while ((*table)[h] >= 0) {
            int64_t j = (*table)[h];
            const char *o = keys ? g->kv[j].key : g->tensors[j].name;
            if (!strcmp(o, s)) {
                char shown[80];
                fmt_name(shown, sizeof shown, (const uint8_t *)s, strlen(s));
                return spex_error_set(err, SPEX_ERR_FORMAT, "%s: %s %lld '%s': duplicate %s (first at %s %lld)",
                                      g->path, keys ? "kv" : "tensor", (long long)i, shown,
                                      keys ? "key" : "tensor name", keys ? "kv" : "tensor", (long long)j);
            }
            h = (h + 1) & *mask;
        }
        (*table)[h] = i;
    }
    return SPEX_OK;
}

static spex_status parse(spex_gguf *g, spex_error *err) {
    rd r = {.buf = g->base, .size = g->size, .file = g->path, .err = err};
    snprintf(r.item, sizeof r.item, "header");
    if (g->size < SPEX_GGUF_HEADER_SIZE) {
        if (g->size >= 4 && memcmp(g->base, "GGUF", 4) != 0)
            return spex_error_set(err, SPEX_ERR_FORMAT, "%s: not a GGUF file (magic %02x %02x %02x %02x, expected 'GGUF')",
                                  g->path, g->base[0], g->base[1], g->base[2], g->base[3]);
        return spex_error_set(err, SPEX_ERR_FORMAT, "%s: file is %llu bytes, too short for the %u-byte GGUF header",
                              g->path, (unsigned long long)g->size, SPEX_GGUF_HEADER_SIZE);
    }
    uint32_t magic = 0, version = 0;
    uint64_t n_tensors = 0, n_kv = 0;
    rd_u32(&r, &magic, "magic");
    if (magic != SPEX_GGUF_MAGIC)
        return spex_error_set(err, SPEX_ERR_FORMAT, "%s: not a GGUF file (magic %02x %02x %02x %02x, expected 'GGUF')",
                              g->path, g->base[0], g->base[1], g->base[2], g->base[3]);
    rd_u32(&r, &version, "version");
    if (version == 1)
        return spex_error_set(err, SPEX_ERR_FORMAT, "%s: header: GGUF version 1 is not supported (expected 2 or 3; "
                              "re-convert the model with a current llama.cpp)", g->path);
    if (version != 2 && version != 3) {
        uint32_t sw = __builtin_bswap32(version);
        if (sw == 2 || sw == 3)
            return spex_error_set(err, SPEX_ERR_FORMAT, "%s: header: big-endian GGUF (version %u byte-swapped) "
                                  "is not supported, expected a little-endian file", g->path, sw);
        return spex_error_set(err, SPEX_ERR_FORMAT, "%s: header: GGUF version %u is not supported (expected 2 or 3)",
                              g->path, version);
    }
    g->version = version;
    rd_u64(&r, &n_tensors, "tensor count");
    rd_u64(&r, &n_kv, "kv count");
    uint64_t left = rd_left(&r);
    if (n_kv > left / MIN_KV_BYTES)
        return rd_fail(&r, "kv count %llu cannot fit in the %llu bytes after the header (each kv needs at least %u)",
                       (unsigned long long)n_kv, (unsigned long long)left, MIN_KV_BYTES), SPEX_ERR_FORMAT;
    left -= n_kv * MIN_KV_BYTES;
    if (n_tensors > left / MIN_TINFO_BYTES)
        return rd_fail(&r, "tensor count %llu cannot fit in the %llu bytes left after %llu kvs (each tensor info "
                       "needs at least %u)", (unsigned long long)n_tensors, (unsigned long long)left,
                       (unsigned long long)n_kv, MIN_TINFO_BYTES), SPEX_ERR_FORMAT;
    g->alignment = SPEX_GGUF_DEFAULT_ALIGNMENT;
    spex_status s = parse_kvs(g, &r, n_kv, err);
    if (s == SPEX_OK) s = parse_tensor_infos(g, &r, n_tensors, err);
    if (s != SPEX_OK) return s;
    g->data_offset = spex_gguf_align_up(r.pos, g->alignment);
    if ((s = check_tensors(g, &r)) != SPEX_OK) return s;
    if ((s = copy_names(g, err)) != SPEX_OK) return s;
    if ((s = build_hash(g, g->n_kv, true, &g->kv_hash, &g->kv_mask, err)) != SPEX_OK) return s;
    return build_hash(g, g->n_tensors, false, &g->t_hash, &g->t_mask, err);
}

static spex_status open_common(spex_gguf *g, spex_gguf **out, spex_error *err) {
    spex_status s = parse(g, err);
    if (s != SPEX_OK) {
        spex_gguf_close(g);
        return s;
    }
    *out = g;
    return SPEX_OK;
}

static spex_gguf *new_handle(const char *name) {
    spex_gguf *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    size_t n = strlen(name) + 1;
    g->path = malloc(n);
    if (!g->path) {
        free(g);
        return NULL;
    }
    memcpy(g->path, name, n);
    return g;
}

static spex_status open_file(const char *path, bool read, spex_gguf **out, spex_error *err) {
    if (!out) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spex_gguf_open: out is NULL");
    *out = NULL;
    if (!path) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spex_gguf_open: path is NULL");
    spex_gguf *g = new_handle(path);
    if (!g) return spex_error_set(err, SPEX_ERR_NOMEM, "%s: out of memory", path);
    spex_status s = read ? spex_file_read(path, &g->map, err) : spex_file_map(path, &g->map, err);
    if (s != SPEX_OK) {
        spex_gguf_close(g);
        return s;
    }
    g->base = g->map.data;
    g->size = g->map.size;
    return open_common(g, out, err);
}

spex_status spex_gguf_open(const char *path, spex_gguf **out, spex_error *err) {
    return open_file(path, false, out, err);
}

spex_status spex_gguf_open_read(const char *path, spex_gguf **out, spex_error *err) {
    return open_file(path, true, out, err);
}

spex_status spex_gguf_open_memory(const void *buf, size_t size, const char *name, spex_gguf **out,
                                  spex_error *err) {
    if (!out) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spex_gguf_open_memory: out is NULL");
    *out = NULL;
    if (!buf && size) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spex_gguf_open_memory: buf is NULL");
    spex_gguf *g = new_handle(name ? name : "<memory>");
    if (!g) return spex_error_set(err, SPEX_ERR_NOMEM, "%s: out of memory", name ? name : "<memory>");
    static const uint8_t empty[1];
    g->base = buf ? buf : empty;
    g->size = size;
    return open_common(g, out, err);
}

void spex_gguf_close(spex_gguf *g) {
    if (!g) return;
    for (int64_t i = 0; i < g->n_kv; i++) free(g->kv[i].str_off);
    free(g->kv);
    free(g->tensors);
    free(g->tname_len);
    free(g->names);
    free(g->kv_hash);
    free(g->t_hash);
    for (int64_t i = 0; i < g->n_owned; i++) free(g->owned[i]);
    free(g->owned);
    spex_file_unmap(&g->map);
    free(g->path);
    free(g);
}

/* ======================================================================== */
/* File-level accessors                                                      */
/* ======================================================================== */

const char *spex_gguf_path(const spex_gguf *g) { return g->path; }

void spex_gguf_release_data(const spex_gguf *g, const void *p, size_t n) {
    if (g) spex_file_release(&g->map, p, n);
}
uint32_t spex_gguf_version(const spex_gguf *g) { return g->version; }
uint64_t spex_gguf_alignment(const spex_gguf *g) { return g->alignment; }
uint64_t spex_gguf_data_offset(const spex_gguf *g) { return g->data_offset; }
uint64_t spex_gguf_file_size(const spex_gguf *g) { return g->size; }

/* ======================================================================== */
/* Metadata                                                                  */
/* ======================================================================== */

int64_t spex_gguf_n_kv(const spex_gguf *g) { return g->n_kv; }

const char *spex_gguf_key(const spex_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_kv ? g->kv[i].key : NULL;
}

int64_t spex_gguf_find_key(const spex_gguf *g, const char *key) {
    if (!key || !g->kv_hash) return -1;
    for (uint64_t h = hash_str(key) & g->kv_mask;; h = (h + 1) & g->kv_mask) {
        int64_t j = g->kv_hash[h];
        if (j < 0) return -1;
        if (!strcmp(g->kv[j].key, key)) return j;
    }
}

spex_status spex_gguf_value_at(const spex_gguf *g, int64_t i, spex_gguf_value *out) {
    if (i < 0 || i >= g->n_kv) return SPEX_ERR_RANGE;
    *out = g->kv[i].v;
    return SPEX_OK;
}

static spex_status lookup(const spex_gguf *g, const char *key, const spex_gguf_value **v, spex_error *err) {
    int64_t i = spex_gguf_find_key(g, key);
    if (i < 0) return spex_error_set(err, SPEX_ERR_NOT_FOUND, "%s: key '%s' not found", g->path, key ? key : "(null)");
    *v = &g->kv[i].v;
    return SPEX_OK;
}

static spex_status wrong_type(const spex_gguf *g, const char *key, const spex_gguf_value *v, const char *want,
                              spex_error *err) {
    return spex_error_set(err, SPEX_ERR_TYPE, "%s: key '%s' has type %s, expected %s", g->path, key,
                          spex_gguf_vtype_name(v->type), want);
}

/* Integer value as sign + magnitude, so every integer type converts exactly. */
static bool int_value(const spex_gguf_value *v, bool *neg, uint64_t *mag) {
    int64_t s = 0;
    uint64_t u = 0;
    bool is_signed = false;
    switch (v->type) {
    case SPEX_GGUF_U8: { uint8_t x; memcpy(&x, v->data, 1); u = x; break; }
    case SPEX_GGUF_U16: { uint16_t x; memcpy(&x, v->data, 2); u = x; break; }
    case SPEX_GGUF_U32: { uint32_t x; memcpy(&x, v->data, 4); u = x; break; }
    case SPEX_GGUF_U64: memcpy(&u, v->data, 8); break;
    case SPEX_GGUF_I8: { int8_t x; memcpy(&x, v->data, 1); s = x; is_signed = true; break; }
    case SPEX_GGUF_I16: { int16_t x; memcpy(&x, v->data, 2); s = x; is_signed = true; break; }
    case SPEX_GGUF_I32: { int32_t x; memcpy(&x, v->data, 4); s = x; is_signed = true; break; }
    case SPEX_GGUF_I64: memcpy(&s, v->data, 8); is_signed = true; break;
    default: return false;
    }
    if (is_signed) {
        *neg = s < 0;
        *mag = s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s;
    } else {
        *neg = false;
        *mag = u;
    }
    return true;
}

static spex_status get_int(const spex_gguf *g, const char *key, bool *neg, uint64_t *mag, spex_error *err) {
    const spex_gguf_value *v = NULL;
    spex_status s = lookup(g, key, &v, err);
    if (s != SPEX_OK) return s;
    if (!int_value(v, neg, mag)) return wrong_type(g, key, v, "an integer", err);
    return SPEX_OK;
}

static spex_status out_of_range(const spex_gguf *g, const char *key, bool neg, uint64_t mag, const char *type,
                                spex_error *err) {
    return spex_error_set(err, SPEX_ERR_RANGE, "%s: key '%s' = %s%llu does not fit in %s", g->path, key,
                          neg ? "-" : "", (unsigned long long)mag, type);
}

spex_status spex_gguf_get_u32(const spex_gguf *g, const char *key, uint32_t *out, spex_error *err) {
    bool neg;
    uint64_t mag;
    spex_status s = get_int(g, key, &neg, &mag, err);
    if (s != SPEX_OK) return s;
    if (neg || mag > UINT32_MAX) return out_of_range(g, key, neg, mag, "u32", err);
    *out = (uint32_t)mag;
    return SPEX_OK;
}

spex_status spex_gguf_get_u64(const spex_gguf *g, const char *key, uint64_t *out, spex_error *err) {
    bool neg;
    uint64_t mag;
    spex_status s = get_int(g, key, &neg, &mag, err);
    if (s != SPEX_OK) return s;
    if (neg) return out_of_range(g, key, neg, mag, "u64", err);
    *out = mag;
    return SPEX_OK;
}

spex_status spex_gguf_get_i64(const spex_gguf *g, const char *key, int64_t *out, spex_error *err) {
    bool neg;
    uint64_t mag;
    spex_status s = get_int(g, key, &neg, &mag, err);
    if (s != SPEX_OK) return s;
    if (neg ? mag > (uint64_t)INT64_MAX + 1 : mag > (uint64_t)INT64_MAX)
        return out_of_range(g, key, neg, mag, "i64", err);
    *out = neg ? (int64_t)(0 - mag) : (int64_t)mag;
    return SPEX_OK;
}

spex_status spex_gguf_get_f32(const spex_gguf *g, const char *key, float *out, spex_error *err) {
    const spex_gguf_value *v = NULL;
    spex_status s = lookup(g, key, &v, err);
    if (s != SPEX_OK) return s;
    if (v->type == SPEX_GGUF_F32) {
        memcpy(out, v->data, 4);
    } else if (v->type == SPEX_GGUF_F64) {
        double d;
        memcpy(&d, v->data, 8);
        /* out-of-range conversion is undefined in C: saturate to infinity explicitly */
        *out = d > FLT_MAX ? INFINITY : d < -FLT_MAX ? -INFINITY : (float)d;
    } else {
        return wrong_type(g, key, v, "f32 or f64", err);
    }
    return SPEX_OK;
}

spex_status spex_gguf_get_bool(const spex_gguf *g, const char *key, bool *out, spex_error *err) {
    const spex_gguf_value *v = NULL;
    spex_status s = lookup(g, key, &v, err);
    if (s != SPEX_OK) return s;
    if (v->type != SPEX_GGUF_BOOL) return wrong_type(g, key, v, "bool", err);
    *out = v->data[0] != 0;
    return SPEX_OK;
}

spex_status spex_gguf_get_str(const spex_gguf *g, const char *key, spex_str *out, spex_error *err) {
    const spex_gguf_value *v = NULL;
    spex_status s = lookup(g, key, &v, err);
    if (s != SPEX_OK) return s;
    if (v->type != SPEX_GGUF_STRING) return wrong_type(g, key, v, "string", err);
    out->ptr = (const char *)v->data;
    out->len = v->size;
    return SPEX_OK;
}

spex_status spex_gguf_get_arr(const spex_gguf *g, const char *key, spex_gguf_value *out, spex_error *err) {
    const spex_gguf_value *v = NULL;
    spex_status s = lookup(g, key, &v, err);
    if (s != SPEX_OK) return s;
    if (v->type != SPEX_GGUF_ARRAY) return wrong_type(g, key, v, "array", err);
    *out = *v;
    return SPEX_OK;
}

/* ---- array elements ----------------------------------------------------- */

/* The top-level kv whose array payload starts at data (kvs are in file order, so their
 * payload pointers increase strictly), or NULL. */
static const gguf_kv *kv_of_payload(const spex_gguf *g, const uint8_t *data) {
    int64_t lo = 0, hi = g->n_kv - 1;
    while (lo <= hi) {
        int64_t mid = lo + (hi - lo) / 2;
        const uint8_t *d = g->kv[mid].v.data;
        if (d == data) return &g->kv[mid];
        if (d < data) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

spex_status spex_gguf_arr_elem(const spex_gguf *g, const spex_gguf_value *arr, uint64_t i, spex_gguf_value *out,
                               spex_error *err) {
    if (!arr || arr->type != SPEX_GGUF_ARRAY || (unsigned)arr->elem_type >= SPEX_GGUF_VTYPE_COUNT)
        return spex_error_set(err, SPEX_ERR_TYPE, "%s: value is not an array", g->path);
    /* A caller-made value must still lie inside the file. */
    if (arr->data < g->base || arr->data > g->base + g->size ||
        arr->size > (uint64_t)(g->base + g->size - arr->data))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "%s: array value does not point into this file", g->path);
    if (i >= arr->n)
        return spex_error_set(err, SPEX_ERR_RANGE, "%s: array index %llu out of range (%llu elements)", g->path,
                              (unsigned long long)i, (unsigned long long)arr->n);
    uint64_t es = spex_gguf_vtype_size(arr->elem_type);
    if (es) {
        if (arr->n > arr->size / es)
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "%s: array value is inconsistent", g->path);
        memset(out, 0, sizeof *out);
        out->type = arr->elem_type;
        out->n = 1;
        out->data = arr->data + i * es;
        out->size = es;
        return SPEX_OK;
    }
    rd r = {.buf = arr->data, .size = arr->size, .depth = 1};
    if (arr->elem_type == SPEX_GGUF_STRING) {
        const gguf_kv *kv = kv_of_payload(g, arr->data);
        if (kv && kv->str_off && kv->v.n == arr->n && kv->v.size == arr->size) r.pos = kv->str_off[i];
        else
            for (uint64_t j = 0; j < i; j++) {
                uint64_t len;
                const uint8_t *s;
                if (!rd_str(&r, &s, &len, UINT64_MAX, "string")) goto bad;
            }
    } else {
        for (uint64_t j = 0; j < i; j++) {
            spex_gguf_value skip;
            if (!walk_value(&r, SPEX_GGUF_ARRAY, &skip)) goto bad;
        }
    }
    if (walk_value(&r, arr->elem_type, out)) return SPEX_OK;
bad:
    return spex_error_set(err, SPEX_ERR_INVALID_ARG, "%s: array value is inconsistent with its element count", g->path);
}

spex_status spex_gguf_arr_str(const spex_gguf *g, const spex_gguf_value *arr, uint64_t i, spex_str *out,
                              spex_error *err) {
    if (!arr || arr->type != SPEX_GGUF_ARRAY || arr->elem_type != SPEX_GGUF_STRING)
        return spex_error_set(err, SPEX_ERR_TYPE, "%s: value is not an array of strings", g->path);
    spex_gguf_value v;
    spex_status s = spex_gguf_arr_elem(g, arr, i, &v, err);
    if (s != SPEX_OK) return s;
    out->ptr = (const char *)v.data;
    out->len = v.size;
    return SPEX_OK;
}

/* ======================================================================== */
/* Tensors                                                                   */
/* ======================================================================== */

int64_t spex_gguf_n_tensors(const spex_gguf *g) { return g->n_tensors; }

const spex_tensor_info *spex_gguf_tensor(const spex_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const spex_tensor_info *spex_gguf_find_tensor(const spex_gguf *g, const char *name) {
    if (!name || !g->t_hash) return NULL;
    for (uint64_t h = hash_str(name) & g->t_mask;; h = (h + 1) & g->t_mask) {
        int64_t j = g->t_hash[h];
        if (j < 0) return NULL;
        if (!strcmp(g->tensors[j].name, name)) return &g->tensors[j];
    }
}

/* ======================================================================== */
/* Overrides                                                                 */
/* ======================================================================== */

/* A copy of n bytes (plus a NUL) that lives as long as g. */
static void *own_copy(spex_gguf *g, const void *p, size_t n) {
    if (!grow((void **)&g->owned, &g->cap_owned, g->n_owned + 1, sizeof *g->owned)) return NULL;
    char *c = malloc(n + 1);
    if (!c) return NULL;
    if (n) memcpy(c, p, n);
    c[n] = '\0';
    g->owned[g->n_owned++] = c;
    return c;
}

spex_status spex_gguf_override(spex_gguf *g, const char *spec, spex_error *err) {
    if (!g || !spec) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spex_gguf_override: NULL argument");
    const char *eq = strchr(spec, '='), *colon = eq ? strchr(eq + 1, ':') : NULL;
    if (!eq || eq == spec || !colon)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "override '%s': expected KEY=TYPE:VALUE (TYPE int, float, bool or str)",
                              spec);
    size_t klen = (size_t)(eq - spec), tlen = (size_t)(colon - eq - 1);
    const char *ty = eq + 1, *val = colon + 1;
    if (klen >= 128) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "override '%.40s...': key longer than 127 bytes", spec);
    char key[128];
    memcpy(key, spec, klen);
    key[klen] = '\0';
    if (!strcmp(key, "general.alignment"))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "override '%s': general.alignment places the tensors and cannot change",
                              spec);
    uint8_t buf[8];
    spex_gguf_value v = {0};
    char *end = NULL;
    if (tlen == 3 && !memcmp(ty, "int", 3)) {
        errno = 0;
        long long x = strtoll(val, &end, 10);
        if (!*val || *end || errno == ERANGE)
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "override '%s': '%s' is not a 64-bit integer", spec, val);
        int64_t i = x;
        memcpy(buf, &i, 8);
        v.type = SPEX_GGUF_I64, v.size = 8;
    } else if (tlen == 5 && !memcmp(ty, "float", 5)) {
        double x = strtod(val, &end);
        if (!*val || *end)
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "override '%s': '%s' is not a number", spec, val);
        memcpy(buf, &x, 8);
        v.type = SPEX_GGUF_F64, v.size = 8;
    } else if (tlen == 4 && !memcmp(ty, "bool", 4)) {
        if (strcmp(val, "true") && strcmp(val, "false"))
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "override '%s': a bool is 'true' or 'false'", spec);
        buf[0] = !strcmp(val, "true");
        v.type = SPEX_GGUF_BOOL, v.size = 1;
    } else if (tlen == 3 && !memcmp(ty, "str", 3)) {
        v.type = SPEX_GGUF_STRING, v.size = strlen(val);
    } else {
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "override '%s': type '%.*s' is not int, float, bool or str", spec,
                              (int)tlen, ty);
    }
    v.data = own_copy(g, v.type == SPEX_GGUF_STRING ? (const void *)val : buf, (size_t)v.size);
    if (!v.data) return nomem(g, err);
    int64_t i = spex_gguf_find_key(g, key);
    if (i >= 0) {
        free(g->kv[i].str_off);   /* an array replaced by a scalar */
        g->kv[i].str_off = NULL;
        g->kv[i].v = v;
        return SPEX_OK;
    }
    const char *k = own_copy(g, key, klen);
    if (!k || !grow((void **)&g->kv, &g->cap_kv, g->n_kv + 1, sizeof *g->kv)) return nomem(g, err);
    g->kv[g->n_kv++] = (gguf_kv){.key = k, .key_len = (uint32_t)klen, .v = v, .str_off = NULL};
    free(g->kv_hash);
    g->kv_hash = NULL;
    return build_hash(g, g->n_kv, true, &g->kv_hash, &g->kv_mask, err);
}
