/*
 * test_gguf.c — the GGUF reader and writer: round trips of every value type, alignment and
 * tensors; the real stories260K file; and hostile input (every truncation of the header,
 * samples through the data, targeted corruptions of counts, lengths, types, offsets, shapes,
 * alignment, version and nesting, and random byte flips) — each must fail with
 * SPEX_ERR_FORMAT and a one-line message, never crash (the ASan build proves it).
 *
 * The fuzz seed corpus (fuzz/corpus/gguf) is produced here too: the case corpus_seeds checks
 * the committed seeds against the generator, and SPEX_REGEN_CORPUS=1 rewrites them.
 */
#include "spex.h"
#include "gguf/api.h"
#include "test.h"
#include "tensor/api.h"

#include <errno.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

/* ======================================================================== */
/* Helpers                                                                   */
/* ======================================================================== */


static uint8_t *read_all(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(n > 0 ? (size_t)n : 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return p;
}

static bool write_all(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

/* A growable byte buffer for hand-made GGUF files. */
typedef struct bbuf {
    uint8_t *p;
    size_t n, cap;
} bbuf;

static void b_put(bbuf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void b_u32(bbuf *b, uint32_t v) { b_put(b, &v, 4); }
static void b_u64(bbuf *b, uint64_t v) { b_put(b, &v, 8); }
static void b_str(bbuf *b, const char *s) {
    b_u64(b, strlen(s));
    b_put(b, s, strlen(s));
}
static void b_header(bbuf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    b_put(b, "GGUF", 4);
    b_u32(b, version);
    b_u64(b, n_tensors);
    b_u64(b, n_kv);
}

/* Opens a malloc'd exact-size copy (so ASan sees any read past the end) and closes it. */
static spex_status open_copy(const uint8_t *p, size_t n, spex_error *err) {
    uint8_t *c = malloc(n ? n : 1);
    if (n) memcpy(c, p, n);
    spex_gguf *g = NULL;
    spex_status s = spex_gguf_open_memory(c, n, "test.gguf", &g, err);
    spex_gguf_close(g);
    free(c);
    return s;
}

/* Visits every value, array element, string and tensor of an open file, as the fuzzer does;
 * returns a checksum so the compiler cannot drop the reads. */
static uint64_t walk_value(const spex_gguf *g, const spex_gguf_value *v, int depth) {
    uint64_t sum = v->type;
    for (uint64_t i = 0; i < v->size; i++) sum += v->data[i];
    if (v->type != SPEX_GGUF_ARRAY || depth > 10) return sum;
    for (uint64_t i = 0; i < v->n && i < 100000; i++) {
        spex_gguf_value e;
        spex_error err = {0};
        if (spex_gguf_arr_elem(g, v, i, &e, &err) != SPEX_OK) return sum + 1000000;
        sum += walk_value(g, &e, depth + 1);
        if (v->elem_type == SPEX_GGUF_STRING) {
            spex_str s;
            if (spex_gguf_arr_str(g, v, i, &s, &err) != SPEX_OK || s.ptr != (const char *)e.data) return sum + 2000000;
        }
    }
    return sum;
}

static uint64_t walk_all(const spex_gguf *g) {
    uint64_t sum = 0;
    for (int64_t i = 0; i < spex_gguf_n_kv(g); i++) {
        spex_gguf_value v;
        if (spex_gguf_value_at(g, i, &v) != SPEX_OK) return UINT64_MAX;
        const char *key = spex_gguf_key(g, i);
        if (spex_gguf_find_key(g, key) != i) return UINT64_MAX;
        sum += walk_value(g, &v, 0);
    }
    for (int64_t i = 0; i < spex_gguf_n_tensors(g); i++) {
        const spex_tensor_info *t = spex_gguf_tensor(g, i);
        if (spex_gguf_find_tensor(g, t->name) != t) return UINT64_MAX;
        const uint8_t *d = t->data;
        sum += d[0] + d[t->nbytes - 1];
    }
    return sum;
}

/* ======================================================================== */
/* Round trips                                                               */
/* ======================================================================== */

/* Encoded payload of an array of arrays: {u32 [1,2,3]}, {u32 []}, {string ["a","bc"]}. */
static void nested_payload(bbuf *b) {
    b_u32(b, SPEX_GGUF_U32);
    b_u64(b, 3);
    b_u32(b, 1);
    b_u32(b, 2);
    b_u32(b, 3);
    b_u32(b, SPEX_GGUF_U32);
    b_u64(b, 0);
    b_u32(b, SPEX_GGUF_STRING);
    b_u64(b, 2);
    b_str(b, "a");
    b_str(b, "bc");
}

static spex_gguf_writer *make_all_types_writer(void) {
    spex_gguf_writer *w = NULL;
    if (spex_gguf_writer_init(&w, NULL) != SPEX_OK) return NULL;
    spex_gguf_writer_set_u8(w, "t.u8", 200);
    spex_gguf_writer_set_i8(w, "t.i8", -100);
    spex_gguf_writer_set_u16(w, "t.u16", 60000);
    spex_gguf_writer_set_i16(w, "t.i16", -30000);
    spex_gguf_writer_set_u32(w, "t.u32", 4000000000u);
    spex_gguf_writer_set_i32(w, "t.i32", -2000000000);
    spex_gguf_writer_set_u64(w, "t.u64", 18000000000000000000ull);
    spex_gguf_writer_set_i64(w, "t.i64", -9000000000000000000ll);
    spex_gguf_writer_set_f32(w, "t.f32", 3.25f);
    spex_gguf_writer_set_f64(w, "t.f64", -1e300);
    spex_gguf_writer_set_bool(w, "t.bool", true);
    spex_gguf_writer_set_str(w, "t.str", "h\0llo", 5); /* values may hold NUL bytes */
    spex_gguf_writer_set_str(w, "t.empty", "", 0);
    int16_t a16[4] = {-1, 2, -3, 4};
    double af64[2] = {0.5, -2.5};
    uint8_t abool[3] = {1, 0, 1};
    spex_gguf_writer_set_arr(w, "t.arr_i16", SPEX_GGUF_I16, a16, 4);
    spex_gguf_writer_set_arr(w, "t.arr_f64", SPEX_GGUF_F64, af64, 2);
    spex_gguf_writer_set_arr(w, "t.arr_bool", SPEX_GGUF_BOOL, abool, 3);
    spex_gguf_writer_set_arr(w, "t.arr_empty", SPEX_GGUF_U64, NULL, 0);
    spex_str strs[4] = {{"<unk>", 5}, {"", 0}, {"\xe2\x96\x81the", 6}, {"z", 1}};
    spex_gguf_writer_set_arr_str(w, "t.arr_str", strs, 4);
    bbuf nb = {0};
    nested_payload(&nb);
    spex_gguf_value nested = {SPEX_GGUF_ARRAY, SPEX_GGUF_ARRAY, 3, nb.p, nb.n};
    spex_gguf_writer_set_value(w, "t.nested", &nested);
    free(nb.p);
    spex_gguf_writer_set_u32(w, "t.replaced", 1);
    spex_gguf_writer_set_u32(w, "t.replaced", 2); /* replaces in place */
    return w;
}

TEST(roundtrip_every_value_type) {
    spex_gguf_writer *w = make_all_types_writer();
    CHECK(w);
    const char *path = test_tmp_path("types.gguf");
    spex_error err = {0};
    spex_status s = spex_gguf_writer_write(w, path, &err);
    spex_gguf_writer_free(w);
    CHECK_MSG(s == SPEX_OK, "write: %s", err.msg);
    spex_gguf *g = NULL;
    s = spex_gguf_open(path, &g, &err);
    CHECK_MSG(s == SPEX_OK, "open: %s", err.msg);
    CHECK_EQ_INT(spex_gguf_version(g), 3);
    CHECK_EQ_INT(spex_gguf_n_kv(g), 20);
    CHECK_EQ_INT(spex_gguf_n_tensors(g), 0);
    CHECK_EQ_INT(spex_gguf_alignment(g), 32);
    CHECK(!strcmp(spex_gguf_key(g, 0), "t.u8"));
    CHECK_EQ_INT(spex_gguf_find_key(g, "t.replaced"), 19);
    CHECK_EQ_INT(spex_gguf_find_key(g, "t.absent"), -1);

    uint32_t u32;
    uint64_t u64;
    int64_t i64;
    float f;
    bool b;
    spex_str str;
    CHECK_OK(spex_gguf_get_u32(g, "t.u8", &u32, NULL));
    CHECK_EQ_INT(u32, 200);
    CHECK_OK(spex_gguf_get_i64(g, "t.i8", &i64, NULL));
    CHECK_EQ_INT(i64, -100);
    CHECK_OK(spex_gguf_get_u32(g, "t.u16", &u32, NULL));
    CHECK_EQ_INT(u32, 60000);
    CHECK_OK(spex_gguf_get_i64(g, "t.i16", &i64, NULL));
    CHECK_EQ_INT(i64, -30000);
    CHECK_OK(spex_gguf_get_u32(g, "t.u32", &u32, NULL));
    CHECK(u32 == 4000000000u);
    CHECK_OK(spex_gguf_get_i64(g, "t.i32", &i64, NULL));
    CHECK_EQ_INT(i64, -2000000000);
    CHECK_OK(spex_gguf_get_u64(g, "t.u64", &u64, NULL));
    CHECK(u64 == 18000000000000000000ull);
    CHECK_OK(spex_gguf_get_i64(g, "t.i64", &i64, NULL));
    CHECK(i64 == -9000000000000000000ll);
    CHECK_OK(spex_gguf_get_f32(g, "t.f32", &f, NULL));
    CHECK(f == 3.25f);
    CHECK_OK(spex_gguf_get_f32(g, "t.f64", &f, NULL)); /* f64 accepted, converted */
    CHECK(isinf(f) && f < 0);
    CHECK_OK(spex_gguf_get_bool(g, "t.bool", &b, NULL));
    CHECK(b);
    CHECK_OK(spex_gguf_get_str(g, "t.str", &str, NULL));
    CHECK(str.len == 5 && !memcmp(str.ptr, "h\0llo", 5));
    CHECK_OK(spex_gguf_get_str(g, "t.empty", &str, NULL));
    CHECK_EQ_INT(str.len, 0);
    CHECK_OK(spex_gguf_get_u32(g, "t.replaced", &u32, NULL));
    CHECK_EQ_INT(u32, 2);

    spex_gguf_value arr, e;
    CHECK_OK(spex_gguf_get_arr(g, "t.arr_i16", &arr, NULL));
    CHECK(arr.elem_type == SPEX_GGUF_I16 && arr.n == 4 && arr.size == 8);
    CHECK_OK(spex_gguf_arr_elem(g, &arr, 2, &e, NULL));
    int16_t v16;
    memcpy(&v16, e.data, 2);
    CHECK_EQ_INT(v16, -3);
    CHECK_OK(spex_gguf_get_arr(g, "t.arr_f64", &arr, NULL));
    CHECK_OK(spex_gguf_arr_elem(g, &arr, 1, &e, NULL));
    double d;
    memcpy(&d, e.data, 8);
    CHECK(d == -2.5);
    CHECK_OK(spex_gguf_get_arr(g, "t.arr_bool", &arr, NULL));
    CHECK(arr.n == 3 && arr.data[0] == 1 && arr.data[1] == 0 && arr.data[2] == 1);
    CHECK_OK(spex_gguf_get_arr(g, "t.arr_empty", &arr, NULL));
    CHECK(arr.n == 0 && arr.elem_type == SPEX_GGUF_U64);
    CHECK(spex_gguf_arr_elem(g, &arr, 0, &e, NULL) == SPEX_ERR_RANGE);

    CHECK_OK(spex_gguf_get_arr(g, "t.arr_str", &arr, NULL));
    CHECK(arr.elem_type == SPEX_GGUF_STRING && arr.n == 4);
    CHECK_OK(spex_gguf_arr_str(g, &arr, 2, &str, NULL));
    CHECK(str.len == 6 && !memcmp(str.ptr, "\xe2\x96\x81the", 6));
    CHECK_OK(spex_gguf_arr_str(g, &arr, 1, &str, NULL));
    CHECK_EQ_INT(str.len, 0);
    CHECK_OK(spex_gguf_arr_str(g, &arr, 3, &str, NULL));
    CHECK(str.len == 1 && str.ptr[0] == 'z');
    CHECK(spex_gguf_arr_str(g, &arr, 4, &str, NULL) == SPEX_ERR_RANGE);

    /* nested: [[1,2,3], [], ["a","bc"]] */
    CHECK_OK(spex_gguf_get_arr(g, "t.nested", &arr, NULL));
    CHECK(arr.elem_type == SPEX_GGUF_ARRAY && arr.n == 3);
    spex_gguf_value inner;
    CHECK_OK(spex_gguf_arr_elem(g, &arr, 0, &inner, NULL));
    CHECK(inner.type == SPEX_GGUF_ARRAY && inner.elem_type == SPEX_GGUF_U32 && inner.n == 3);
    CHECK_OK(spex_gguf_arr_elem(g, &inner, 2, &e, NULL));
    memcpy(&u32, e.data, 4);
    CHECK_EQ_INT(u32, 3);
    CHECK_OK(spex_gguf_arr_elem(g, &arr, 1, &inner, NULL));
    CHECK(inner.elem_type == SPEX_GGUF_U32 && inner.n == 0 && inner.size == 0);
    CHECK_OK(spex_gguf_arr_elem(g, &arr, 2, &inner, NULL));
    CHECK(inner.elem_type == SPEX_GGUF_STRING && inner.n == 2);
    CHECK_OK(spex_gguf_arr_str(g, &inner, 1, &str, NULL)); /* not indexed: bounded walk */
    CHECK(str.len == 2 && !memcmp(str.ptr, "bc", 2));
    CHECK(spex_gguf_arr_str(g, &arr, 0, &str, NULL) == SPEX_ERR_TYPE);
    spex_gguf_close(g);
}

TEST(getters_report_type_range_and_absence) {
    spex_gguf_writer *w = make_all_types_writer();
    CHECK(w);
    const char *path = test_tmp_path("getters.gguf");
    CHECK_OK(spex_gguf_writer_write(w, path, NULL));
    spex_gguf_writer_free(w);
    spex_gguf *g = NULL;
    CHECK_OK(spex_gguf_open(path, &g, NULL));
    spex_error err = {0};
    uint32_t u32;
    uint64_t u64;
    int64_t i64;
    float f;
    bool b;
    spex_str str;
    spex_gguf_value arr;
    CHECK(spex_gguf_get_u32(g, "t.i8", &u32, &err) == SPEX_ERR_RANGE); /* -100 */
    CHECK_MSG(strstr(err.msg, "t.i8") && strstr(err.msg, "-100") && strstr(err.msg, path), "%s", err.msg);
    CHECK(spex_gguf_get_u32(g, "t.u64", &u32, &err) == SPEX_ERR_RANGE);
    CHECK(spex_gguf_get_u64(g, "t.i64", &u64, &err) == SPEX_ERR_RANGE);
    CHECK(spex_gguf_get_i64(g, "t.u64", &i64, &err) == SPEX_ERR_RANGE);
    CHECK(spex_gguf_get_u32(g, "t.str", &u32, &err) == SPEX_ERR_TYPE);
    CHECK_MSG(strstr(err.msg, "string") && strstr(err.msg, "integer"), "%s", err.msg);
    CHECK(spex_gguf_get_u32(g, "t.bool", &u32, &err) == SPEX_ERR_TYPE);
    CHECK(spex_gguf_get_f32(g, "t.u32", &f, &err) == SPEX_ERR_TYPE);
    CHECK(spex_gguf_get_bool(g, "t.u8", &b, &err) == SPEX_ERR_TYPE);
    CHECK(spex_gguf_get_str(g, "t.arr_str", &str, &err) == SPEX_ERR_TYPE);
    CHECK(spex_gguf_get_arr(g, "t.str", &arr, &err) == SPEX_ERR_TYPE);
    CHECK(spex_gguf_get_u32(g, "nope", &u32, &err) == SPEX_ERR_NOT_FOUND);
    CHECK_MSG(strstr(err.msg, "'nope'") && strstr(err.msg, "not found"), "%s", err.msg);
    CHECK_OK(spex_gguf_get_u64(g, "t.u8", &u64, NULL)); /* widening is fine */
    CHECK_EQ_INT(u64, 200);
    /* a value that does not point into the file is refused, not dereferenced */
    uint8_t fake[16] = {0};
    spex_gguf_value bogus = {SPEX_GGUF_ARRAY, SPEX_GGUF_U32, 4, fake, 16};
    spex_gguf_value e;
    CHECK(spex_gguf_arr_elem(g, &bogus, 0, &e, &err) == SPEX_ERR_INVALID_ARG);
    CHECK(spex_gguf_value_at(g, 99, &e) == SPEX_ERR_RANGE);
    CHECK(spex_gguf_key(g, -1) == NULL);
    CHECK(spex_gguf_tensor(g, 0) == NULL);
    CHECK(spex_gguf_find_tensor(g, "x") == NULL);
    spex_gguf_close(g);
}

static void fill_pattern(uint8_t *p, size_t n, uint32_t seed) {
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (uint8_t)x;
    }
}

typedef struct tspec {
    const char *name;
    spex_type type;
    uint32_t n_dims;
    int64_t ne[4];
} tspec;

static const tspec tensors_spec[] = {
    {"a.f32", SPEX_TYPE_F32, 1, {3, 1, 1, 1}},
    {"b.f16", SPEX_TYPE_F16, 2, {5, 3, 1, 1}},
    {"c.q8_0", SPEX_TYPE_Q8_0, 2, {64, 3, 1, 1}},
    {"d.q4_K", SPEX_TYPE_Q4_K, 3, {256, 1, 2, 1}},
    {"e.bf16", SPEX_TYPE_BF16, 4, {2, 1, 3, 2}},
};
#define N_TSPEC (int)(sizeof tensors_spec / sizeof tensors_spec[0])

static bool write_tensor_file(const char *path, uint32_t alignment, uint8_t **datas) {
    spex_gguf_writer *w = NULL;
    if (spex_gguf_writer_init(&w, NULL) != SPEX_OK) return false;
    if (alignment) spex_gguf_writer_set_alignment(w, alignment);
    spex_gguf_writer_set_str(w, "general.architecture", "test", 4);
    bool ok = true;
    for (int i = 0; i < N_TSPEC && ok; i++) {
        const tspec *t = &tensors_spec[i];
        size_t nb = spex_type_row_size(t->type, t->ne[0]) * (size_t)(t->ne[1] * t->ne[2] * t->ne[3]);
        datas[i] = malloc(nb);
        fill_pattern(datas[i], nb, (uint32_t)i);
        spex_error err = {0};
        ok = spex_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, datas[i], nb, &err) == SPEX_OK;
        if (!ok) printf("  add_tensor: %s\n", err.msg);
    }
    spex_error err = {0};
    ok = ok && spex_gguf_writer_write(w, path, &err) == SPEX_OK;
    if (!ok && err.msg[0]) printf("  write: %s\n", err.msg);
    spex_gguf_writer_free(w);
    return ok;
}

static void check_tensor_file(const char *path, uint64_t alignment) {
    uint8_t *datas[N_TSPEC] = {0};
    CHECK(write_tensor_file(path, (uint32_t)alignment, datas));
    spex_gguf *g = NULL;
    spex_error err = {0};
    CHECK_MSG(spex_gguf_open(path, &g, &err) == SPEX_OK, "%s", err.msg);
    CHECK_EQ_INT(spex_gguf_alignment(g), alignment);
    CHECK_EQ_INT(spex_gguf_data_offset(g) % alignment, 0);
    CHECK_EQ_INT(spex_gguf_n_tensors(g), N_TSPEC);
    uint32_t a = 0;
    spex_status as = spex_gguf_get_u32(g, "general.alignment", &a, NULL);
    if (alignment == 32) CHECK(as == SPEX_ERR_NOT_FOUND);
    else CHECK(as == SPEX_OK && a == alignment);
    uint64_t end = 0;
    for (int i = 0; i < N_TSPEC; i++) {
        const tspec *ts = &tensors_spec[i];
        const spex_tensor_info *t = spex_gguf_find_tensor(g, ts->name);
        CHECK(t && t == spex_gguf_tensor(g, i));
        CHECK(t->type == ts->type && t->n_dims == ts->n_dims);
        for (int d = 0; d < 4; d++) CHECK_EQ_INT(t->ne[d], ts->ne[d]);
        CHECK_EQ_INT(t->offset % alignment, 0);
        CHECK(t->offset >= end);
        CHECK(!memcmp(t->data, datas[i], t->nbytes));
        end = t->offset + t->nbytes;
        free(datas[i]);
    }
    /* ggml pads the last tensor too */
    CHECK_EQ_INT(spex_gguf_file_size(g), spex_gguf_data_offset(g) + ((end + alignment - 1) / alignment) * alignment);
    spex_gguf_close(g);
}

TEST(roundtrip_tensors_default_alignment) { check_tensor_file(test_tmp_path("t32.gguf"), 32); }
TEST(roundtrip_tensors_alignment_64) { check_tensor_file(test_tmp_path("t64.gguf"), 64); }
TEST(roundtrip_tensors_alignment_1) { check_tensor_file(test_tmp_path("t1.gguf"), 1); }

typedef struct fill_ctx {
    int calls;
    int64_t last;
} fill_ctx;

static spex_status fill_cb(void *ctx, int64_t index, void *dst, uint64_t nbytes, spex_error *err) {
    fill_ctx *c = ctx;
    c->calls++;
    c->last = index;
    fill_pattern(dst, nbytes, 99 + (uint32_t)index);
    return SPEX_OK;
}

static spex_status fill_fail(void *ctx, int64_t index, void *dst, uint64_t nbytes, spex_error *err) {
    return spex_error_set(err, SPEX_ERR_IO, "fill failed on purpose");
}

TEST(writer_streaming_fill_and_argument_checks) {
    spex_gguf_writer *w = NULL;
    CHECK_OK(spex_gguf_writer_init(&w, NULL));
    spex_error err = {0};
    int64_t ne[2] = {64, 2};
    uint8_t buf[4 * 64 * 2];
    fill_pattern(buf, sizeof buf, 1);
    CHECK(spex_gguf_writer_set_alignment(w, 3) == SPEX_ERR_INVALID_ARG);
    CHECK(spex_gguf_writer_set_alignment(w, 0) == SPEX_ERR_INVALID_ARG);
    CHECK(spex_gguf_writer_set_u32(w, "", 1) == SPEX_ERR_INVALID_ARG);
    CHECK(spex_gguf_writer_set_arr(w, "x", SPEX_GGUF_STRING, buf, 1) == SPEX_ERR_INVALID_ARG);
    bbuf bad = {0};
    b_u32(&bad, SPEX_GGUF_U32);
    b_u64(&bad, 5); /* claims 5 elements, holds none */
    spex_gguf_value badv = {SPEX_GGUF_ARRAY, SPEX_GGUF_ARRAY, 1, bad.p, bad.n};
    CHECK(spex_gguf_writer_set_value(w, "x", &badv) == SPEX_ERR_INVALID_ARG);
    free(bad.p);
    CHECK(spex_gguf_writer_add_tensor(w, "q", SPEX_TYPE_Q8_0, 2, (int64_t[]){48, 2}, buf, 68, &err) ==
          SPEX_ERR_INVALID_ARG); /* 48 is not a multiple of 32 */
    CHECK(spex_gguf_writer_add_tensor(w, "f", SPEX_TYPE_F32, 2, ne, buf, 100, &err) == SPEX_ERR_INVALID_ARG);
    CHECK_MSG(strstr(err.msg, "512"), "%s", err.msg);
    CHECK(spex_gguf_writer_add_tensor(w, "f", SPEX_TYPE_F32, 5, ne, buf, 512, &err) == SPEX_ERR_INVALID_ARG);
    CHECK(spex_gguf_writer_add_tensor(w, "f", (spex_type)4, 2, ne, buf, 512, &err) == SPEX_ERR_INVALID_ARG);
    CHECK_OK(spex_gguf_writer_add_tensor(w, "f", SPEX_TYPE_F32, 2, ne, buf, 512, &err));
    CHECK(spex_gguf_writer_add_tensor(w, "f", SPEX_TYPE_F32, 2, ne, buf, 512, &err) == SPEX_ERR_INVALID_ARG);
    CHECK_OK(spex_gguf_writer_add_tensor(w, "s1", SPEX_TYPE_F32, 2, ne, NULL, 512, &err));
    CHECK_OK(spex_gguf_writer_add_tensor(w, "s2", SPEX_TYPE_Q8_0, 2, ne, NULL, 136, &err));
    const char *path = test_tmp_path("fill.gguf");
    CHECK(spex_gguf_writer_write(w, path, &err) == SPEX_ERR_INVALID_ARG); /* no fill callback */
    CHECK(access(path, F_OK) != 0);
    spex_gguf_writer_set_fill(w, fill_fail, NULL);
    CHECK(spex_gguf_writer_write(w, path, &err) == SPEX_ERR_IO);
    CHECK(access(path, F_OK) != 0); /* the temporary file is gone, nothing under the name */
    fill_ctx fc = {0};
    spex_gguf_writer_set_fill(w, fill_cb, &fc);
    CHECK_MSG(spex_gguf_writer_write(w, path, &err) == SPEX_OK, "%s", err.msg);
    spex_gguf_writer_free(w);
    CHECK_EQ_INT(fc.calls, 2);
    CHECK_EQ_INT(fc.last, 2);
    spex_gguf *g = NULL;
    CHECK_OK(spex_gguf_open(path, &g, NULL));
    uint8_t want[512];
    fill_pattern(want, 136, 99 + 2);
    CHECK(!memcmp(spex_gguf_find_tensor(g, "s2")->data, want, 136));
    CHECK(!memcmp(spex_gguf_find_tensor(g, "f")->data, buf, 512));
    spex_gguf_close(g);
}

TEST(version_2_reads_version_1_refused) {
    bbuf b = {0};
    b_header(&b, 2, 0, 1);
    b_str(&b, "general.architecture");
    b_u32(&b, SPEX_GGUF_STRING);
    b_str(&b, "llama");
    spex_gguf *g = NULL;
    spex_error err = {0};
    CHECK_MSG(spex_gguf_open_memory(b.p, b.n, "v2.gguf", &g, &err) == SPEX_OK, "%s", err.msg);
    CHECK_EQ_INT(spex_gguf_version(g), 2);
    spex_str s;
    CHECK_OK(spex_gguf_get_str(g, "general.architecture", &s, NULL));
    CHECK(s.len == 5);
    spex_gguf_close(g);
    uint32_t v1 = 1, be3 = 0x03000000u;
    memcpy(b.p + 4, &v1, 4);
    CHECK(spex_gguf_open_memory(b.p, b.n, "v1.gguf", &g, &err) == SPEX_ERR_FORMAT && g == NULL);
    CHECK_MSG(strstr(err.msg, "v1.gguf") && strstr(err.msg, "version 1"), "%s", err.msg);
    memcpy(b.p + 4, &be3, 4);
    CHECK(spex_gguf_open_memory(b.p, b.n, "be.gguf", &g, &err) == SPEX_ERR_FORMAT);
    CHECK_MSG(strstr(err.msg, "big-endian"), "%s", err.msg);
    free(b.p);
}

TEST(open_errors_name_the_file) {
    spex_gguf *g = (spex_gguf *)1;
    spex_error err = {0};
    CHECK(spex_gguf_open("/nonexistent/x.gguf", &g, &err) == SPEX_ERR_IO && g == NULL);
    CHECK_MSG(strstr(err.msg, "/nonexistent/x.gguf"), "%s", err.msg);
    CHECK(spex_gguf_open("/tmp", &g, &err) == SPEX_ERR_IO);
    CHECK_MSG(strstr(err.msg, "regular"), "%s", err.msg);
    const char *empty = test_tmp_path("empty.gguf");
    CHECK(write_all(empty, "", 0));
    CHECK(spex_gguf_open(empty, &g, &err) == SPEX_ERR_FORMAT);
    CHECK_MSG(strstr(err.msg, empty) && strstr(err.msg, "0 bytes"), "%s", err.msg);
    CHECK(spex_gguf_open_memory("GGML", 4, "m", &g, &err) == SPEX_ERR_FORMAT);
    CHECK_MSG(strstr(err.msg, "not a GGUF"), "%s", err.msg);
    CHECK(spex_gguf_open_memory(NULL, 0, NULL, &g, &err) == SPEX_ERR_FORMAT);
    CHECK(spex_gguf_open(NULL, &g, &err) == SPEX_ERR_INVALID_ARG);
}

/* ======================================================================== */
/* Hand-made hostile headers                                                 */
/* ======================================================================== */

/* A file whose only kv is `depth` arrays nested in each other around one u8. */
static bbuf nested_file(int depth) {
    bbuf b = {0};
    b_header(&b, 3, 0, 1);
    b_str(&b, "deep");
    b_u32(&b, SPEX_GGUF_ARRAY);
    for (int i = 0; i < depth - 1; i++) {
        b_u32(&b, SPEX_GGUF_ARRAY);
        b_u64(&b, 1);
    }
    b_u32(&b, SPEX_GGUF_U8);
    b_u64(&b, 1);
    uint8_t x = 7;
    b_put(&b, &x, 1);
    return b;
}

TEST(nesting_depth_is_bounded) {
    spex_error err = {0};
    spex_gguf *g = NULL;
    bbuf ok = nested_file(8);
    CHECK_MSG(spex_gguf_open_memory(ok.p, ok.n, "deep8", &g, &err) == SPEX_OK, "%s", err.msg);
    CHECK(walk_all(g) != UINT64_MAX);
    spex_gguf_close(g);
    free(ok.p);
    bbuf bad = nested_file(9);
    CHECK(spex_gguf_open_memory(bad.p, bad.n, "deep9", &g, &err) == SPEX_ERR_FORMAT);
    CHECK_MSG(strstr(err.msg, "nested") && strstr(err.msg, "'deep'"), "%s", err.msg);
    free(bad.p);
    bbuf huge = nested_file(100000); /* would overflow the stack of a naive recursive parser */
    CHECK(spex_gguf_open_memory(huge.p, huge.n, "deep100k", &g, &err) == SPEX_ERR_FORMAT);
    free(huge.p);
}

TEST(hostile_counts_fail_before_allocating) {
    spex_error err = {0};
    spex_gguf *g = NULL;
    bbuf b = {0};
    b_header(&b, 3, UINT64_MAX, 0);
    CHECK(spex_gguf_open_memory(b.p, b.n, "h", &g, &err) == SPEX_ERR_FORMAT);
    CHECK_MSG(strstr(err.msg, "tensor count"), "%s", err.msg);
    free(b.p);
    b = (bbuf){0};
    b_header(&b, 3, 0, 1ull << 60);
    CHECK(spex_gguf_open_memory(b.p, b.n, "h", &g, &err) == SPEX_ERR_FORMAT);
    CHECK_MSG(strstr(err.msg, "kv count"), "%s", err.msg);
    free(b.p);
    /* array counts: u64 elements, strings, arrays */
    uint32_t elem[3] = {SPEX_GGUF_U64, SPEX_GGUF_STRING, SPEX_GGUF_ARRAY};
    for (int k = 0; k < 3; k++) {
        b = (bbuf){0};
        b_header(&b, 3, 0, 1);
        b_str(&b, "a");
        b_u32(&b, SPEX_GGUF_ARRAY);
        b_u32(&b, elem[k]);
        b_u64(&b, UINT64_MAX / 4);
        b_u64(&b, 0);
        CHECK(spex_gguf_open_memory(b.p, b.n, "h", &g, &err) == SPEX_ERR_FORMAT);
        CHECK_MSG(strstr(err.msg, "array of") && strstr(err.msg, "'a'"), "%s", err.msg);
        free(b.p);
    }
    /* duplicate key and an empty key */
    b = (bbuf){0};
    b_header(&b, 3, 0, 2);
    for (int i = 0; i < 2; i++) {
        b_str(&b, "k");
        b_u32(&b, SPEX_GGUF_U8);
        b_put(&b, "x", 1);
    }
    CHECK(spex_gguf_open_memory(b.p, b.n, "h", &g, &err) == SPEX_ERR_FORMAT);
    CHECK_MSG(strstr(err.msg, "kv 1 'k': duplicate key (first at kv 0)"), "%s", err.msg);
    free(b.p);
    b = (bbuf){0};
    b_header(&b, 3, 0, 1);
    b_str(&b, "");
    b_u32(&b, SPEX_GGUF_U8);
    b_put(&b, "xxxxxx", 6);
    CHECK(spex_gguf_open_memory(b.p, b.n, "h", &g, &err) == SPEX_ERR_FORMAT);
    CHECK_MSG(strstr(err.msg, "empty"), "%s", err.msg);
    free(b.p);
}

TEST(alignment_key_must_be_u32_power_of_two) {
    uint8_t *datas[N_TSPEC] = {0};
    const char *path = test_tmp_path("align.gguf");
    CHECK(write_tensor_file(path, 64, datas));
    for (int i = 0; i < N_TSPEC; i++) free(datas[i]);
    size_t n;
    uint8_t *file = read_all(path, &n);
    CHECK(file);
    spex_gguf *g = NULL;
    CHECK_OK(spex_gguf_open_memory(file, n, "align.gguf", &g, NULL));
    int64_t k = spex_gguf_find_key(g, "general.alignment");
    spex_gguf_value v;
    CHECK_OK(spex_gguf_value_at(g, k, &v));
    size_t at = (size_t)(v.data - file); /* the value's offset in the file */
    spex_gguf_close(g);
    uint32_t cur;
    memcpy(&cur, file + at, 4);
    CHECK_EQ_INT(cur, 64);
    spex_error err = {0};
    uint32_t bad[3] = {48, 0, 1u << 31};
    for (int i = 0; i < 3; i++) {
        memcpy(file + at, &bad[i], 4);
        CHECK(open_copy(file, n, &err) == SPEX_ERR_FORMAT);
        CHECK_MSG(strstr(err.msg, "align"), "%u: %s", bad[i], err.msg);
    }
    memcpy(file + at, &cur, 4);
    uint32_t i32 = SPEX_GGUF_I32;
    memcpy(file + at - 4, &i32, 4);
    CHECK(open_copy(file, n, &err) == SPEX_ERR_FORMAT);
    CHECK_MSG(strstr(err.msg, "general.alignment has type i32, expected u32"), "%s", err.msg);
    free(file);
}

/* ======================================================================== */
/* The real file: stories260K                                                */
/* ======================================================================== */

static const char *stories_path(void) { return test_shared_path("data/stories260K/stories260K.gguf"); }

TEST(stories260K_metadata_and_tensors) {
    const char *path = stories_path();
    if (!path) SKIP("../shared/data/stories260K/stories260K.gguf not found");
    spex_gguf *g = NULL;
    spex_error err = {0};
    CHECK_MSG(spex_gguf_open(path, &g, &err) == SPEX_OK, "%s", err.msg);
    CHECK_EQ_INT(spex_gguf_version(g), 3);
    CHECK_EQ_INT(spex_gguf_n_kv(g), 19);
    CHECK_EQ_INT(spex_gguf_n_tensors(g), 48);
    CHECK_EQ_INT(spex_gguf_data_offset(g), 14176);
    CHECK_EQ_INT(spex_gguf_file_size(g), 1185376);
    spex_str s;
    CHECK_OK(spex_gguf_get_str(g, "general.architecture", &s, NULL));
    CHECK(s.len == 5 && !memcmp(s.ptr, "llama", 5));
    struct { const char *key; uint32_t want; } u[] = {
        {"llama.embedding_length", 64}, {"llama.block_count", 5}, {"llama.attention.head_count", 8},
        {"llama.attention.head_count_kv", 4}, {"llama.feed_forward_length", 172}, {"llama.context_length", 2048},
        {"tokenizer.ggml.bos_token_id", 1}, {"tokenizer.ggml.eos_token_id", 2},
    };
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++) {
        uint32_t v = 0;
        CHECK_OK(spex_gguf_get_u32(g, u[i].key, &v, NULL));
        CHECK_MSG(v == u[i].want, "%s = %u, want %u", u[i].key, v, u[i].want);
    }
    float eps;
    CHECK_OK(spex_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &eps, NULL));
    CHECK_NEAR(eps, 1e-5, 1e-9);
    spex_gguf_value tok, scores;
    CHECK_OK(spex_gguf_get_arr(g, "tokenizer.ggml.tokens", &tok, NULL));
    CHECK(tok.elem_type == SPEX_GGUF_STRING && tok.n == 512);
    const char *first[] = {"<unk>", "<s>", "</s>", "<0x00>"};
    for (int i = 0; i < 4; i++) {
        CHECK_OK(spex_gguf_arr_str(g, &tok, (uint64_t)i, &s, NULL));
        CHECK(s.len == strlen(first[i]) && !memcmp(s.ptr, first[i], s.len));
    }
    CHECK_OK(spex_gguf_arr_str(g, &tok, 258, &s, NULL)); /* <0xFF> is the last byte token */
    CHECK(s.len == 6 && !memcmp(s.ptr, "<0xFF>", 6));
    CHECK_OK(spex_gguf_get_arr(g, "tokenizer.ggml.scores", &scores, NULL));
    CHECK(scores.elem_type == SPEX_GGUF_F32 && scores.n == 512);
    const spex_tensor_info *t = spex_gguf_find_tensor(g, "token_embd.weight");
    CHECK(t && t->type == SPEX_TYPE_F32 && t->n_dims == 2 && t->ne[0] == 64 && t->ne[1] == 512);
    CHECK(t->offset == 0 && t->nbytes == 131072);
    t = spex_gguf_find_tensor(g, "blk.0.ffn_down.weight");
    CHECK(t && t->ne[0] == 172 && t->ne[1] == 64 && t->offset == 355840);
    t = spex_gguf_find_tensor(g, "blk.4.ffn_norm.weight");
    CHECK(t && t->n_dims == 1 && t->ne[0] == 64 && t->ne[1] == 1);
    CHECK((const uint8_t *)t->data + t->nbytes == (const uint8_t *)spex_gguf_tensor(g, 0)->data + (1185376 - 14176));
    float w0;
    memcpy(&w0, spex_gguf_find_tensor(g, "output_norm.weight")->data, 4);
    CHECK(isfinite(w0) && w0 != 0.0f);
    CHECK(walk_all(g) != UINT64_MAX);
    spex_gguf_close(g);
}

/* Copying every kv (set_value) and tensor of stories260K reproduces the file byte for byte:
 * the writer lays files out exactly as llama.cpp does. */
TEST(stories260K_copy_is_byte_identical) {
    const char *path = stories_path();
    if (!path) SKIP("../shared/data/stories260K/stories260K.gguf not found");
    spex_gguf *g = NULL;
    CHECK_OK(spex_gguf_open(path, &g, NULL));
    spex_gguf_writer *w = NULL;
    CHECK_OK(spex_gguf_writer_init(&w, NULL));
    for (int64_t i = 0; i < spex_gguf_n_kv(g); i++) {
        spex_gguf_value v;
        CHECK_OK(spex_gguf_value_at(g, i, &v));
        CHECK_OK(spex_gguf_writer_set_value(w, spex_gguf_key(g, i), &v));
    }
    for (int64_t i = 0; i < spex_gguf_n_tensors(g); i++) {
        const spex_tensor_info *t = spex_gguf_tensor(g, i);
        CHECK_OK(spex_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes, NULL));
    }
    const char *out = test_tmp_path("copy.gguf");
    spex_error err = {0};
    CHECK_MSG(spex_gguf_writer_write(w, out, &err) == SPEX_OK, "%s", err.msg);
    spex_gguf_writer_free(w);
    spex_gguf_close(g);
    size_t na, nb;
    uint8_t *a = read_all(path, &na), *b = read_all(out, &nb);
    CHECK(a && b);
    CHECK_EQ_INT(na, nb);
    size_t diff = 0;
    while (diff < na && a[diff] == b[diff]) diff++;
    CHECK_MSG(diff == na, "first difference at byte %zu", diff);
    free(a);
    free(b);
}

TEST(stories260K_every_truncation_fails_cleanly) {
    const char *path = stories_path();
    if (!path) SKIP("../shared/data/stories260K/stories260K.gguf not found");
    size_t n;
    uint8_t *file = read_all(path, &n);
    CHECK(file);
    int bad = 0;
    size_t checked = 0;
    /* every length through the header and its padding, then samples through the data */
    for (size_t len = 0; len < n; len = len < 14200 ? len + 1 : len + 4099) {
        spex_error err = {0};
        spex_status s = open_copy(file, len, &err);
        checked++;
        if (s != SPEX_ERR_FORMAT || !strstr(err.msg, "test.gguf: ") || strchr(err.msg, '\n')) {
            if (bad++ < 5) printf("  length %zu: status %s, message '%s'\n", len, spex_status_str(s), err.msg);
        }
    }
    spex_error err = {0};
    CHECK_MSG(open_copy(file, n, &err) == SPEX_OK, "%s", err.msg);
    CHECK_MSG(bad == 0, "%d of %zu truncations misbehaved", bad, checked);
    /* one representative message of each region */
    open_copy(file, 13, &err);
    CHECK_MSG(strstr(err.msg, "too short"), "%s", err.msg);
    open_copy(file, 14160, &err);
    CHECK_MSG(strstr(err.msg, "past the end of the file"), "%s", err.msg);
    open_copy(file, n - 1, &err);
    CHECK_MSG(strstr(err.msg, "tensor 47 'blk.4.ffn_norm.weight': offset 1170944 + size 256 exceeds data section of "
                              "1171199 bytes"), "%s", err.msg);
    free(file);
}

/* Offsets of the fields of a well-formed GGUF, found by an independent walk. */
typedef struct layout {
    size_t kv_key[32], kv_type[32], kv_val[32];
    size_t t_name[64], t_ndims[64], t_ne[64], t_type[64], t_off[64];
    int n_kv, n_t;
} layout;

static size_t skip_value(const uint8_t *p, size_t o, uint32_t type) {
    static const size_t sz[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    uint64_t n;
    if (type == SPEX_GGUF_STRING) {
        memcpy(&n, p + o, 8);
        return o + 8 + n;
    }
    if (type != SPEX_GGUF_ARRAY) return o + sz[type];
    uint32_t et;
    memcpy(&et, p + o, 4);
    memcpy(&n, p + o + 4, 8);
    o += 12;
    for (uint64_t i = 0; i < n; i++) o = skip_value(p, o, et);
    return o;
}

static void find_layout(const uint8_t *p, layout *L) {
    uint64_t nt, nkv, len;
    memcpy(&nt, p + 8, 8);
    memcpy(&nkv, p + 16, 8);
    L->n_kv = (int)nkv;
    L->n_t = (int)nt;
    size_t o = 24;
    for (int i = 0; i < L->n_kv; i++) {
        L->kv_key[i] = o;
        memcpy(&len, p + o, 8);
        o += 8 + len;
        L->kv_type[i] = o;
        uint32_t t;
        memcpy(&t, p + o, 4);
        L->kv_val[i] = o + 4;
        o = skip_value(p, o + 4, t);
    }
    for (int i = 0; i < L->n_t; i++) {
        L->t_name[i] = o;
        memcpy(&len, p + o, 8);
        o += 8 + len;
        L->t_ndims[i] = o;
        uint32_t nd;
        memcpy(&nd, p + o, 4);
        L->t_ne[i] = o + 4;
        o += 4 + 8 * nd;
        L->t_type[i] = o;
        L->t_off[i] = o + 4;
        o += 12;
    }
}

typedef struct corruption {
    const char *what;
    int field;   /* which offset table */
    int index;   /* kv or tensor index */
    int delta;   /* bytes after the field start */
    int width;   /* 4 or 8 */
    uint64_t value;
    const char *expect; /* substring of the message */
} corruption;

enum { F_HDR, F_KEY, F_TYPE, F_VAL, F_TNAME, F_NDIMS, F_NE, F_TTYPE, F_TOFF };

static const corruption corruptions[] = {
    {"version 0", F_HDR, 0, 4, 4, 0, "version 0"},
    {"version 4", F_HDR, 0, 4, 4, 4, "version 4"},
    {"bad magic", F_HDR, 0, 0, 4, 0x4c4d4747u, "not a GGUF"},
    {"tensor count 2^64-1", F_HDR, 0, 8, 8, UINT64_MAX, "tensor count 18446744073709551615"},
    {"tensor count +1", F_HDR, 0, 8, 8, 49, "tensor 48: name is empty"},
    {"kv count 2^63", F_HDR, 0, 16, 8, 1ull << 63, "kv count"},
    {"kv count +1", F_HDR, 0, 16, 8, 20, "tensor 0: name length"},
    {"kv count -1", F_HDR, 0, 16, 8, 18, "tensor 0 'llama.attention.layer_norm_rms_epsilon': n_dims is 6"},
    {"key length huge", F_KEY, 0, 0, 8, 1ull << 40, "kv 0: key length 1099511627776"},
    {"key length over limit", F_KEY, 3, 0, 8, 70000, "kv 3: key length 70000"},
    {"key length zero", F_KEY, 5, 0, 8, 0, "kv 5: key is empty"},
    {"value type 13", F_TYPE, 4, 0, 4, 13, "kv 4 'general.architecture': value type 13"},
    {"value type 2^32-1", F_TYPE, 10, 0, 4, 0xffffffffu, "value type 4294967295"},
    {"array elem type 99", F_VAL, 0, 0, 4, 99, "array element type 99"},
    {"array count huge", F_VAL, 0, 4, 8, 1ull << 62, "array of 4611686018427387904 string elements"},
    {"f32 array count huge", F_VAL, 1, 4, 8, UINT64_MAX, "array of 18446744073709551615 f32"},
    {"string in array too long", F_VAL, 0, 12 + 13, 8, 1ull << 50, "'tokenizer.ggml.tokens' element [1]: string length"},
    {"string value too long", F_VAL, 4, 0, 8, 99999999, "kv 4 'general.architecture': string length 99999999"},
    {"duplicate key", F_KEY, 8, 8 + 15, 1, 'b', "kv 8 'tokenizer.ggml.bos_token_id': duplicate key (first at kv 7)"},
    {"tensor name length huge", F_TNAME, 0, 0, 8, 1ull << 33, "tensor 0: name length 8589934592"},
    {"tensor n_dims 0", F_NDIMS, 9, 0, 4, 0, "tensor 9 'blk.0.ffn_down.weight': n_dims is 0"},
    {"tensor n_dims 5", F_NDIMS, 3, 0, 4, 5, "n_dims is 5"},
    {"tensor ne 0", F_NE, 2, 8, 8, 0, "tensor 2 'output.weight': ne[1] is 0"},
    {"tensor ne 2^63", F_NE, 2, 0, 8, 1ull << 63, "ne[0] is 9223372036854775808"},
    {"tensor elements overflow", F_NE, 2, 8, 8, 1ull << 62, "more elements or bytes than 2^63"},
    {"tensor size past data", F_NE, 4, 8, 8, 1ull << 20, "tensor 4 'blk.0.attn_k.weight': offset 278784 + size 268435456 exceeds data section of 1171200 bytes"},
    {"tensor type 4", F_TTYPE, 0, 0, 4, 4, "tensor 0 'token_embd.weight': type id 4"},
    {"tensor type 1000", F_TTYPE, 7, 0, 4, 1000, "type id 1000"},
    {"tensor q4_K row 64", F_TTYPE, 0, 0, 4, SPEX_TYPE_Q4_K, "ne[0] = 64 is not a multiple of the q4_K block size 256"},
    {"tensor offset misaligned", F_TOFF, 5, 0, 8, 286976 + 4, "offset 286980 is not a multiple of the alignment 32"},
    {"tensor offset huge", F_TOFF, 47, 0, 8, UINT64_MAX - 31, "offset 18446744073709551584 + size 256 exceeds"},
    {"duplicate tensor", F_TNAME, 4, 8 + 11, 1, 'q', "tensor 4 'blk.0.attn_q.weight': duplicate tensor name (first at tensor 3)"},
};

TEST(stories260K_corruptions_give_clear_errors) {
    const char *path = stories_path();
    if (!path) SKIP("../shared/data/stories260K/stories260K.gguf not found");
    size_t n;
    uint8_t *file = read_all(path, &n);
    CHECK(file);
    layout L;
    find_layout(file, &L);
    CHECK_EQ_INT(L.n_kv, 19);
    CHECK_EQ_INT(L.n_t, 48);
    uint8_t *copy = malloc(n);
    int bad = 0;
    for (size_t c = 0; c < sizeof corruptions / sizeof corruptions[0]; c++) {
        const corruption *k = &corruptions[c];
        size_t base = 0;
        switch (k->field) {
        case F_HDR: base = 0; break;
        case F_KEY: base = L.kv_key[k->index]; break;
        case F_TYPE: base = L.kv_type[k->index]; break;
        case F_VAL: base = L.kv_val[k->index]; break;
        case F_TNAME: base = L.t_name[k->index]; break;
        case F_NDIMS: base = L.t_ndims[k->index]; break;
        case F_NE: base = L.t_ne[k->index]; break;
        case F_TTYPE: base = L.t_type[k->index]; break;
        case F_TOFF: base = L.t_off[k->index]; break;
        }
        memcpy(copy, file, n);
        memcpy(copy + base + (size_t)k->delta, &k->value, (size_t)k->width);
        spex_error err = {0};
        spex_status s = open_copy(copy, n, &err);
        if (s != SPEX_ERR_FORMAT || !strstr(err.msg, k->expect) || strncmp(err.msg, "test.gguf: ", 11)) {
            printf("  %s: status %s, message '%s' (expected '%s')\n", k->what, spex_status_str(s), err.msg, k->expect);
            bad++;
        }
    }
    free(copy);
    free(file);
    CHECK_MSG(bad == 0, "%d corruptions misbehaved", bad);
}

/* Random byte flips in the header: open either succeeds (and everything is walkable) or
 * fails with FORMAT; never anything else. */
TEST(stories260K_random_header_flips) {
    const char *path = stories_path();
    if (!path) SKIP("../shared/data/stories260K/stories260K.gguf not found");
    size_t n;
    uint8_t *file = read_all(path, &n);
    CHECK(file);
    uint32_t x = 12345;
    int ok = 0, fail = 0, other = 0;
    uint8_t *copy = malloc(n);
    memcpy(copy, file, n);
    for (int it = 0; it < 3000; it++) {
        int flips = 1 + it % 4;
        size_t at[4];
        for (int f = 0; f < flips; f++) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            at[f] = x % 14200;
            copy[at[f]] = (uint8_t)(it & 1 ? x >> 8 : copy[at[f]] ^ (1u << (x >> 29)));
        }
        spex_gguf *g = NULL;
        spex_error err = {0};
        spex_status s = spex_gguf_open_memory(copy, n, "flip", &g, &err);
        if (s == SPEX_OK) {
            walk_all(g);
            spex_gguf_close(g);
            ok++;
        } else if (s == SPEX_ERR_FORMAT && err.msg[0]) {
            fail++;
        } else {
            other++;
        }
        for (int f = 0; f < flips; f++) copy[at[f]] = file[at[f]];
    }
    free(copy);
    free(file);
    CHECK_EQ_INT(other, 0);
    CHECK(fail > 1000);
    CHECK(ok > 0);
}

/* ======================================================================== */
/* The fuzz seed corpus                                                      */
/* ======================================================================== */

static bool seed_every_type(const char *path) {
    spex_gguf_writer *w = make_all_types_writer();
    bool ok = w && spex_gguf_writer_write(w, path, NULL) == SPEX_OK;
    spex_gguf_writer_free(w);
    return ok;
}

static bool seed_tensors(const char *path, uint32_t alignment) {
    uint8_t *datas[N_TSPEC] = {0};
    bool ok = write_tensor_file(path, alignment, datas);
    for (int i = 0; i < N_TSPEC; i++) free(datas[i]);
    return ok;
}

/* A stories260K-shaped llama header with a 16-token vocab and tiny tensors. */
static bool seed_llama(const char *path) {
    spex_gguf_writer *w = NULL;
    if (spex_gguf_writer_init(&w, NULL) != SPEX_OK) return false;
    spex_gguf_writer_set_str(w, "general.architecture", "llama", 5);
    spex_gguf_writer_set_u32(w, "llama.embedding_length", 32);
    spex_gguf_writer_set_u32(w, "llama.block_count", 1);
    spex_gguf_writer_set_u32(w, "llama.attention.head_count", 2);
    spex_gguf_writer_set_u32(w, "llama.attention.head_count_kv", 1);
    spex_gguf_writer_set_u32(w, "llama.feed_forward_length", 32);
    spex_gguf_writer_set_u32(w, "llama.context_length", 64);
    spex_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    spex_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama", 5);
    spex_str toks[16];
    char names[16][8];
    float scores[16];
    int32_t types[16];
    for (int i = 0; i < 16; i++) {
        snprintf(names[i], sizeof names[i], "<0x%02X>", i);
        toks[i] = (spex_str){names[i], strlen(names[i])};
        scores[i] = -(float)i;
        types[i] = 6;
    }
    spex_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 16);
    spex_gguf_writer_set_arr(w, "tokenizer.ggml.scores", SPEX_GGUF_F32, scores, 16);
    spex_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", SPEX_GGUF_I32, types, 16);
    spex_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    static uint8_t data[32 * 16 * 4];
    fill_pattern(data, sizeof data, 5);
    int64_t emb[2] = {32, 16}, norm[1] = {32}, q[2] = {32, 32}, kv[2] = {32, 16};
    spex_gguf_writer_add_tensor(w, "token_embd.weight", SPEX_TYPE_Q8_0, 2, emb, data, 34 * 16, NULL);
    spex_gguf_writer_add_tensor(w, "output_norm.weight", SPEX_TYPE_F32, 1, norm, data, 128, NULL);
    spex_gguf_writer_add_tensor(w, "blk.0.attn_q.weight", SPEX_TYPE_Q8_0, 2, q, data, 34 * 32, NULL);
    spex_gguf_writer_add_tensor(w, "blk.0.attn_k.weight", SPEX_TYPE_F16, 2, kv, data, 32 * 16 * 2, NULL);
    bool ok = spex_gguf_writer_write(w, path, NULL) == SPEX_OK;
    spex_gguf_writer_free(w);
    return ok;
}

static bool seed_empty(const char *path) {
    spex_gguf_writer *w = NULL;
    if (spex_gguf_writer_init(&w, NULL) != SPEX_OK) return false;
    bool ok = spex_gguf_writer_write(w, path, NULL) == SPEX_OK;
    spex_gguf_writer_free(w);
    return ok;
}

static bool seed_nested(const char *path) {
    bbuf b = nested_file(8);
    bool ok = write_all(path, b.p, b.n);
    free(b.p);
    return ok;
}

typedef struct seed {
    const char *name;
    bool (*make)(const char *path);
} seed;

static bool seed_tensors_32(const char *p) { return seed_tensors(p, 32); }
static bool seed_tensors_64(const char *p) { return seed_tensors(p, 64); }

static const seed seeds[] = {
    {"empty.gguf", seed_empty},       {"every_type.gguf", seed_every_type}, {"tensors.gguf", seed_tensors_32},
    {"aligned64.gguf", seed_tensors_64}, {"llama_tiny.gguf", seed_llama},   {"nested8.gguf", seed_nested},
};

TEST(corpus_seeds) {
    bool regen = getenv("SPEX_REGEN_CORPUS") != NULL;
    int missing = 0;
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        char committed[256];
        snprintf(committed, sizeof committed, "fuzz/corpus/gguf/%s", seeds[i].name);
        const char *fresh = test_tmp_path(seeds[i].name);
        CHECK(seeds[i].make(fresh));
        size_t nf, nc = 0;
        uint8_t *f = read_all(fresh, &nf);
        CHECK(f);
        CHECK_MSG(nf <= 4096, "%s is %zu bytes", seeds[i].name, nf);
        spex_gguf *g = NULL;
        spex_error err = {0};
        CHECK_MSG(spex_gguf_open_memory(f, nf, seeds[i].name, &g, &err) == SPEX_OK, "%s", err.msg);
        CHECK(walk_all(g) != UINT64_MAX);
        spex_gguf_close(g);
        if (regen) CHECK(write_all(committed, f, nf));
        uint8_t *c = read_all(committed, &nc);
        if (!c) missing++;
        else CHECK_MSG(nc == nf && !memcmp(c, f, nf), "%s differs from the generator (SPEX_REGEN_CORPUS=1 rewrites it)",
                       committed);
        free(c);
        free(f);
    }
    if (missing) SKIP("%d seeds not found under fuzz/corpus/gguf (run from the repo root)", missing);
}

/* --override-kv: a key's value replaced (the getters convert it as a file value), a key added,
 * every type; malformed entries, unknown types and general.alignment refused with the reason. */
TEST(overrides_replace_add_and_refuse) {
    spex_gguf_writer *w = make_all_types_writer();
    CHECK(w);
    const char *path = test_tmp_path("override.gguf");
    CHECK_OK(spex_gguf_writer_write(w, path, NULL));
    spex_gguf_writer_free(w);
    spex_gguf *g = NULL;
    CHECK_OK(spex_gguf_open_read(path, &g, NULL));
    int64_t n_kv = spex_gguf_n_kv(g);
    spex_error err = {0};
    uint32_t u32 = 0;
    float f = 0;
    bool b = false;
    spex_str str;
    CHECK_OK(spex_gguf_override(g, "t.i8=int:7", &err));
    CHECK_OK(spex_gguf_get_u32(g, "t.i8", &u32, NULL));
    CHECK_EQ_INT(u32, 7);
    CHECK_OK(spex_gguf_override(g, "t.str=str:hello, world=1:2", &err));
    CHECK_OK(spex_gguf_get_str(g, "t.str", &str, NULL));
    CHECK(str.len == 16 && !memcmp(str.ptr, "hello, world=1:2", 16));
    CHECK_OK(spex_gguf_override(g, "t.arr_str=int:1", &err));   /* an array replaced by a scalar */
    CHECK_OK(spex_gguf_get_u32(g, "t.arr_str", &u32, NULL));
    CHECK_EQ_INT(u32, 1);
    CHECK_OK(spex_gguf_override(g, "x.new.flag=bool:true", &err));
    CHECK_OK(spex_gguf_override(g, "x.new.eps=float:1e-6", &err));
    CHECK_OK(spex_gguf_override(g, "x.new.n=int:-3", &err));
    CHECK_EQ_INT(spex_gguf_n_kv(g), n_kv + 3);
    CHECK_OK(spex_gguf_get_bool(g, "x.new.flag", &b, NULL));
    CHECK(b);
    CHECK_OK(spex_gguf_get_f32(g, "x.new.eps", &f, NULL));
    CHECK(f == 1e-6f);
    CHECK(spex_gguf_get_u32(g, "x.new.n", &u32, &err) == SPEX_ERR_RANGE);
    CHECK(spex_gguf_get_bool(g, "t.i8", &b, &err) == SPEX_ERR_TYPE);   /* int given, bool read */
    CHECK_OK(spex_gguf_override(g, "x.new.n=int:5", &err));   /* an added key replaced */
    CHECK_OK(spex_gguf_get_u32(g, "x.new.n", &u32, NULL));
    CHECK_EQ_INT(u32, 5);
    CHECK_EQ_INT(spex_gguf_n_kv(g), n_kv + 3);
    const struct { const char *spec, *want; } bad[] = {
        {"t.i8", "KEY=TYPE:VALUE"},           {"=int:1", "KEY=TYPE:VALUE"},
        {"t.i8=int", "KEY=TYPE:VALUE"},       {"t.i8=int:", "not a 64-bit integer"},
        {"t.i8=int:1x", "not a 64-bit integer"}, {"t.i8=int:99999999999999999999", "not a 64-bit integer"},
        {"t.f=float:abc", "not a number"},    {"t.b=bool:1", "'true' or 'false'"},
        {"t.i8=u32:1", "type 'u32'"},         {"general.alignment=int:64", "general.alignment"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_MSG(spex_gguf_override(g, bad[i].spec, &err) == SPEX_ERR_INVALID_ARG, "%s accepted", bad[i].spec);
        CHECK_MSG(strstr(err.msg, bad[i].want), "%s: %s", bad[i].spec, err.msg);
    }
    CHECK_OK(spex_gguf_get_u32(g, "t.i8", &u32, NULL));   /* a refused entry changes nothing */
    CHECK_EQ_INT(u32, 7);
    spex_gguf_close(g);
}

TEST_MAIN()
