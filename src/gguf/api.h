/*
 * gguf/api.h — the GGUF module's interface: the v2/v3 reader (bounds-checked views into the
 * mapping) and the v3 writer.
 * Builds on include/spex.h (the embedding API: handles, status codes, the types every
 * module shares); tools and tests include it beside spex.h. Dependencies follow
 * core <- tensor <- gguf <- cpu <- model <- spec <- server (README).
 */
#ifndef SPEX_GGUF_API_H
#define SPEX_GGUF_API_H

#include "spex.h"
#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================== */
/* GGUF reader (v2 and v3)                                                   */
/* ======================================================================== */

typedef enum spex_gguf_vtype {
    SPEX_GGUF_U8 = 0, SPEX_GGUF_I8 = 1, SPEX_GGUF_U16 = 2, SPEX_GGUF_I16 = 3,
    SPEX_GGUF_U32 = 4, SPEX_GGUF_I32 = 5, SPEX_GGUF_F32 = 6, SPEX_GGUF_BOOL = 7,
    SPEX_GGUF_STRING = 8, SPEX_GGUF_ARRAY = 9, SPEX_GGUF_U64 = 10, SPEX_GGUF_I64 = 11,
    SPEX_GGUF_F64 = 12,
    SPEX_GGUF_VTYPE_COUNT = 13
} spex_gguf_vtype;

const char *spex_gguf_vtype_name(spex_gguf_vtype t);


/* A metadata value: a view into the mapping, valid while the file is open. */
typedef struct spex_gguf_value {
    spex_gguf_vtype type;
    spex_gguf_vtype elem_type;  /* arrays: the element type                       */
    uint64_t n;                 /* arrays: element count                          */
    const uint8_t *data;        /* raw little-endian bytes of the value / payload */
    uint64_t size;              /* bytes of the value / payload                   */
} spex_gguf_value;

#define SPEX_MAX_DIMS 4

typedef struct spex_tensor_info {
    const char *name;            /* NUL-terminated, owned by the spex_gguf        */
    uint32_t n_dims;
    int64_t ne[SPEX_MAX_DIMS];   /* unused dims are 1                             */
    spex_type type;
    uint64_t offset;             /* relative to the data section                  */
    uint64_t nbytes;
    const void *data;            /* points into the read-only mapping             */
} spex_tensor_info;

typedef struct spex_gguf spex_gguf;

/* Maps and validates the whole file: every count, length and offset is checked
 * against the file size before it is used. On failure *out is NULL. */
spex_status spex_gguf_open(const char *path, spex_gguf **out, spex_error *err);
/* Same checks on a caller-owned buffer (fuzzing, tests); `name` is used in messages.
 * The buffer must outlive the handle. */
spex_status spex_gguf_open_memory(const void *buf, size_t size, const char *name,
                                  spex_gguf **out, spex_error *err);
/* spex_gguf_open, but the file is read into memory instead of mapped (--no-mmap). */
spex_status spex_gguf_open_read(const char *path, spex_gguf **out, spex_error *err);
void spex_gguf_close(spex_gguf *g);

/* llama.cpp's --override-kv: "KEY=TYPE:VALUE" with TYPE int, float, bool or str replaces the
 * key's value (or adds the key) for every later read through g; the value is stored as i64,
 * f64, bool or string, so the getters convert it as they convert the file's own values.
 * general.alignment, which places the tensors, cannot be overridden. */
spex_status spex_gguf_override(spex_gguf *g, const char *spec, spex_error *err);

const char *spex_gguf_path(const spex_gguf *g);
uint32_t spex_gguf_version(const spex_gguf *g);
uint64_t spex_gguf_alignment(const spex_gguf *g);
uint64_t spex_gguf_data_offset(const spex_gguf *g);
uint64_t spex_gguf_file_size(const spex_gguf *g);

/* Metadata: index access and lookup by key. */
int64_t spex_gguf_n_kv(const spex_gguf *g);
const char *spex_gguf_key(const spex_gguf *g, int64_t i);            /* NUL-terminated */
int64_t spex_gguf_find_key(const spex_gguf *g, const char *key);    /* -1 if absent   */
spex_status spex_gguf_value_at(const spex_gguf *g, int64_t i, spex_gguf_value *out);

/* Typed getters: SPEX_ERR_NOT_FOUND if absent, SPEX_ERR_TYPE if of another type
 * (integer getters accept any integer type whose value fits; get_f32 accepts F32/F64). */
spex_status spex_gguf_get_u32(const spex_gguf *g, const char *key, uint32_t *out, spex_error *err);
spex_status spex_gguf_get_i64(const spex_gguf *g, const char *key, int64_t *out, spex_error *err);
spex_status spex_gguf_get_u64(const spex_gguf *g, const char *key, uint64_t *out, spex_error *err);
spex_status spex_gguf_get_f32(const spex_gguf *g, const char *key, float *out, spex_error *err);
spex_status spex_gguf_get_bool(const spex_gguf *g, const char *key, bool *out, spex_error *err);
spex_status spex_gguf_get_str(const spex_gguf *g, const char *key, spex_str *out, spex_error *err);
spex_status spex_gguf_get_arr(const spex_gguf *g, const char *key, spex_gguf_value *out, spex_error *err);

/* Array elements. Fixed-size and string elements are O(1) (string arrays are indexed at
 * open); nested-array elements are found by a bounded walk. */
spex_status spex_gguf_arr_elem(const spex_gguf *g, const spex_gguf_value *arr, uint64_t i,
                               spex_gguf_value *out, spex_error *err);
spex_status spex_gguf_arr_str(const spex_gguf *g, const spex_gguf_value *arr, uint64_t i,
                              spex_str *out, spex_error *err);

/* Tensors. */
int64_t spex_gguf_n_tensors(const spex_gguf *g);
const spex_tensor_info *spex_gguf_tensor(const spex_gguf *g, int64_t i);
const spex_tensor_info *spex_gguf_find_tensor(const spex_gguf *g, const char *name);

/* ======================================================================== */
/* GGUF writer (v3)                                                          */
/* ======================================================================== */

typedef struct spex_gguf_writer spex_gguf_writer;

spex_status spex_gguf_writer_init(spex_gguf_writer **out, spex_error *err);
void spex_gguf_writer_free(spex_gguf_writer *w);
/* Default 32; also written as general.alignment when not 32. */
spex_status spex_gguf_writer_set_alignment(spex_gguf_writer *w, uint32_t alignment);

/* Keys are copied. Setting an existing key replaces its value. */
spex_status spex_gguf_writer_set_u8(spex_gguf_writer *w, const char *key, uint8_t v);
spex_status spex_gguf_writer_set_i8(spex_gguf_writer *w, const char *key, int8_t v);
spex_status spex_gguf_writer_set_u16(spex_gguf_writer *w, const char *key, uint16_t v);
spex_status spex_gguf_writer_set_i16(spex_gguf_writer *w, const char *key, int16_t v);
spex_status spex_gguf_writer_set_u32(spex_gguf_writer *w, const char *key, uint32_t v);
spex_status spex_gguf_writer_set_i32(spex_gguf_writer *w, const char *key, int32_t v);
spex_status spex_gguf_writer_set_u64(spex_gguf_writer *w, const char *key, uint64_t v);
spex_status spex_gguf_writer_set_i64(spex_gguf_writer *w, const char *key, int64_t v);
spex_status spex_gguf_writer_set_f32(spex_gguf_writer *w, const char *key, float v);
spex_status spex_gguf_writer_set_f64(spex_gguf_writer *w, const char *key, double v);
spex_status spex_gguf_writer_set_bool(spex_gguf_writer *w, const char *key, bool v);
spex_status spex_gguf_writer_set_str(spex_gguf_writer *w, const char *key, const char *s, uint64_t len);
/* Array of fixed-size elements (not STRING/ARRAY): n elements of elem_type copied from data. */
spex_status spex_gguf_writer_set_arr(spex_gguf_writer *w, const char *key, spex_gguf_vtype elem_type,
                                     const void *data, uint64_t n);
spex_status spex_gguf_writer_set_arr_str(spex_gguf_writer *w, const char *key,
                                         const spex_str *strs, uint64_t n);
/* Copies a value read from another file verbatim (any type, nested arrays included). */
spex_status spex_gguf_writer_set_value(spex_gguf_writer *w, const char *key, const spex_gguf_value *v);

/* Adds a tensor. The data pointer is borrowed until spex_gguf_writer_write returns
 * (it may point into a mapping); nbytes must equal the size implied by type and ne. */
spex_status spex_gguf_writer_add_tensor(spex_gguf_writer *w, const char *name, spex_type type,
                                        uint32_t n_dims, const int64_t *ne, const void *data,
                                        uint64_t nbytes, spex_error *err);
/* Streaming instead of borrowing: a tensor added with data == NULL gets its bytes at write
 * time from fill(ctx, index, dst, nbytes, err), called once per such tensor, in order, with a
 * writer-owned buffer of nbytes, so a producer (the quantizer) holds one output tensor at a
 * time. index is the tensor's position in the order of add_tensor calls. */
typedef spex_status (*spex_gguf_tensor_fill)(void *ctx, int64_t index, void *dst, uint64_t nbytes,
                                             spex_error *err);
void spex_gguf_writer_set_fill(spex_gguf_writer *w, spex_gguf_tensor_fill fill, void *ctx);
/* Writes to path (via a temporary file renamed into place). general.alignment is the
 * writer's: a value set under that key is replaced by set_alignment's (default 32). */
spex_status spex_gguf_writer_write(spex_gguf_writer *w, const char *path, spex_error *err);

#ifdef __cplusplus
}
#endif

#endif
