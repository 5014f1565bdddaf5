/*
 * spex.h — the one public API of spex, a C inference engine for GGUF models with
 * DFlash2 speculative decoding.
 *
 * What it is: opaque handles, params structs and status codes for everything a tool,
 * the server or an embedding program may use. What it is not: the kernels' dispatch
 * tables and model internals (those live in src/ and are not part of the contract).
 *
 * Conventions (stated once, they hold for every function below):
 *  - Functions that can fail return spex_status and, when given a non-NULL spex_error*,
 *    fill it with a one-line message naming the file, the field and what was expected.
 *    The library never exits or aborts on bad input.
 *  - A handle returned through an out-parameter is owned by the caller and released with
 *    the matching *_free / *_close. Pointers returned by getters are views into the
 *    handle and live as long as the handle does; the caller never frees them.
 *  - Tensor shapes use ggml's `ne` order: ne[0] is the contiguous (row) dimension.
 */
#ifndef SPEX_H
#define SPEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================== */
/* Status and errors                                                         */
/* ======================================================================== */

typedef enum spex_status {
    SPEX_OK = 0,
    SPEX_ERR_INVALID_ARG,   /* caller passed something meaningless          */
    SPEX_ERR_IO,            /* open/read/write/mmap failed                  */
    SPEX_ERR_FORMAT,        /* the file or input is malformed               */
    SPEX_ERR_NOMEM,         /* an allocation failed                          */
    SPEX_ERR_NOT_FOUND,     /* a key or tensor is absent                     */
    SPEX_ERR_TYPE,          /* present, but of another type                  */
    SPEX_ERR_UNSUPPORTED,   /* valid, but spex does not handle it            */
    SPEX_ERR_RANGE,         /* a value is out of its allowed range           */
} spex_status;

#define SPEX_ERROR_MSG_MAX 512

/* Per-call error context: no global error strings. */
typedef struct spex_error {
    spex_status status;
    char msg[SPEX_ERROR_MSG_MAX];
} spex_error;

const char *spex_status_str(spex_status s);

/* Sets err (if non-NULL) and returns status, so code can `return spex_error_set(...)`. */
spex_status spex_error_set(spex_error *err, spex_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* ======================================================================== */
/* Tensor types (ggml ids, so GGUF files from llama.cpp load unchanged)      */
/* ======================================================================== */

typedef enum spex_type {
    SPEX_TYPE_F32 = 0,
    SPEX_TYPE_F16 = 1,
    SPEX_TYPE_Q4_0 = 2,
    SPEX_TYPE_Q4_1 = 3,
    SPEX_TYPE_Q5_0 = 6,
    SPEX_TYPE_Q5_1 = 7,
    SPEX_TYPE_Q8_0 = 8,
    SPEX_TYPE_Q8_1 = 9,   /* activations only (for Q4_1/Q5_1 dot products) */
    SPEX_TYPE_Q2_K = 10,  /* known id; not implemented */
    SPEX_TYPE_Q3_K = 11,  /* known id; not implemented */
    SPEX_TYPE_Q4_K = 12,
    SPEX_TYPE_Q5_K = 13,
    SPEX_TYPE_Q6_K = 14,
    SPEX_TYPE_Q8_K = 15,  /* activations only (for K-quant dot products) */
    SPEX_TYPE_I8 = 24,
    SPEX_TYPE_I16 = 25,
    SPEX_TYPE_I32 = 26,
    SPEX_TYPE_I64 = 27,
    SPEX_TYPE_F64 = 28,
    SPEX_TYPE_BF16 = 30,
    SPEX_TYPE_COUNT = 40  /* upper bound for table sizes, not a type */
} spex_type;

typedef struct spex_type_info {
    const char *name;       /* "q4_K", as ggml spells it                     */
    int64_t block_size;     /* elements per block (1 for plain types)        */
    size_t type_size;       /* bytes per block                               */
    bool quantized;         /* block-quantized                               */
    bool has_ref;           /* spex has quantize/dequantize for it           */
} spex_type_info;

/* NULL for an id spex does not know. */
const spex_type_info *spex_type_get_info(int type);
/* Bytes of a row of n elements; 0 if n is not a multiple of the block size or the type is unknown. */
size_t spex_type_row_size(spex_type type, int64_t n);
/* Parses "q4_K", "Q4_K", "f16", "bf16", ... Returns false if unknown. */
bool spex_type_from_name(const char *name, spex_type *out);

/* Scalar reference conversions (the specification of each format).
 * n must be a multiple of the type's block size. */
spex_status spex_quantize_row_ref(spex_type type, const float *src, void *dst, int64_t n);
spex_status spex_dequantize_row_ref(spex_type type, const void *src, float *dst, int64_t n);

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

/* A length-delimited string inside the mapped file (GGUF strings are not NUL-terminated). */
typedef struct spex_str {
    const char *ptr;
    uint64_t len;
} spex_str;

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
void spex_gguf_close(spex_gguf *g);

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
/* Writes to path (via a temporary file renamed into place). */
spex_status spex_gguf_writer_write(spex_gguf_writer *w, const char *path, spex_error *err);

/* ======================================================================== */
/* CPU: ISA dispatch and the thread pool                                     */
/* ======================================================================== */

typedef enum spex_isa {
    SPEX_ISA_SCALAR = 0,
    SPEX_ISA_AVX2 = 1,     /* AVX2 + FMA + F16C                               */
    SPEX_ISA_AVX512 = 2,   /* F, BW, VL, DQ; VNNI and BF16 used when present  */
    SPEX_ISA_NEON = 3,
} spex_isa;

typedef struct spex_cpu_features {
    bool avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16, neon;
} spex_cpu_features;

const spex_cpu_features *spex_cpu_get_features(void);
/* The ISA in use: the best the CPU has, or what SPEX_ISA=scalar|avx2|avx512 asks for
 * (never more than the CPU has). Decided once, on first call. */
spex_isa spex_cpu_isa(void);
const char *spex_isa_name(spex_isa isa);
/* Tests: force a narrower ISA. Returns SPEX_ERR_UNSUPPORTED if the CPU lacks it. */
spex_status spex_cpu_set_isa(spex_isa isa);

typedef struct spex_pool spex_pool;

/* A task runs on every thread: ith in [0, nth). */
typedef void (*spex_pool_task)(void *ctx, int ith, int nth);

/* Creates n_threads - 1 workers (the caller is thread 0). n_threads <= 0 means all cores. */
spex_status spex_pool_create(int n_threads, spex_pool **out, spex_error *err);
void spex_pool_free(spex_pool *pool);
int spex_pool_n_threads(const spex_pool *pool);
/* Runs task on all threads and returns when all are done. No allocation, no thread start. */
void spex_pool_run(spex_pool *pool, spex_pool_task task, void *ctx);
/* Inside a task: wait until every thread of the pool reaches the barrier. */
void spex_pool_barrier(spex_pool *pool);
/* Inside a task: dynamic work split. Reset by spex_pool_run; returns the next chunk index,
 * or >= n_chunks when none is left. */
int64_t spex_pool_next_chunk(spex_pool *pool);

/* ======================================================================== */
/* Quantization of whole files                                               */
/* ======================================================================== */

typedef enum spex_ftype {
    SPEX_FTYPE_F32 = 0,
    SPEX_FTYPE_F16 = 1,
    SPEX_FTYPE_Q4_0 = 2,
    SPEX_FTYPE_Q8_0 = 7,
    SPEX_FTYPE_Q4_K_M = 15,
    SPEX_FTYPE_Q5_K_M = 17,
    SPEX_FTYPE_Q6_K = 18,
    SPEX_FTYPE_BF16 = 32,
} spex_ftype;   /* values are llama.cpp's general.file_type ids */

bool spex_ftype_from_name(const char *name, spex_ftype *out);
const char *spex_ftype_name(spex_ftype ft);

typedef struct spex_quantize_params {
    spex_ftype ftype;
    int n_threads;
    bool verbose;          /* one line per tensor on stderr */
} spex_quantize_params;

spex_quantize_params spex_quantize_default_params(void);
/* Refuses to overwrite the input (same path or same inode). */
spex_status spex_quantize_file(const char *in_path, const char *out_path,
                               const spex_quantize_params *params, spex_error *err);

#ifdef __cplusplus
}
#endif
#endif /* SPEX_H */
