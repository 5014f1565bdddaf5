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
    SPEX_ERR_INTERNAL,      /* an invariant of spex itself broke (a bug)     */
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
    /* AVX-VNNI: the 256-bit VEX vpdpbusd (Alder Lake and later client cores, Zen 5). The
     * AVX2 table's Q4_K / Q5_K / Q6_K kernels use it when present (and the loader then
     * repacks those types to R16). */
    bool avxvnni;
    /* AMX-TILE + AMX-INT8 usable: the CPU has them, the OS granted this process the tile
     * state (Linux arch_prctl), and SPEX_AMX is not 0. Used with AVX-512 VNNI by the R16
     * Q4_K / Q5_K matmuls of 9+ activation rows (verify blocks, prompts). */
    bool amx_int8;
    /* The x86 matmul kernels' weight read-ahead uses the non-temporal hint (prefetchnta)
     * instead of the L2 one (prefetcht1): on AMD CPUs, where it measured faster (decode ~8-12 %,
     * verify blocks ~2-3 % on Zen 5; docs/performance.md, "Decode against the streaming-read
     * probe"). SPEX_PREFETCH=l2|nta overrides the choice. Results are the same either way. */
    bool prefetch_nta;
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
 * or >= n_chunks when none is left. Purely dynamic: the counter starts at 0 and every call,
 * from any thread (thread 0 included), returns the next index once, so the loop is
 *   for (int64_t c = spex_pool_next_chunk(p); c < n_chunks; c = spex_pool_next_chunk(p)) ...
 * One counter per run; for a second chunked phase after a barrier (every thread having
 * stopped at its first index >= n1), indices continue at n1 + nth.
 * A pool is driven by one thread at a time; a task must not call spex_pool_run. A pool of 1
 * thread runs tasks inline; n_threads <= 0 means the number of online CPUs. */
int64_t spex_pool_next_chunk(spex_pool *pool);
/* Inside a task: puts the chunk counter back to 0 for another chunked phase in the same run.
 * Contract: exactly one thread calls it, between two barriers — every thread has finished its
 * previous chunked loop (barrier), one thread resets, barrier — and after that second barrier
 * every thread's next spex_pool_next_chunk numbers from 0 again. */
void spex_pool_chunk_reset(spex_pool *pool);
/* Inside a task: a contiguous work split with stealing. bounds[0..nth] (non-decreasing, the
 * same array on every thread, each range under 2^31 chunks) gives thread t the chunks
 * [bounds[t], bounds[t + 1]); thread ith gets its own range front to back, then what is left
 * of the other ranges from their back ends; -1 once every chunk is handed out. Each chunk is
 * returned once. Reset with the chunk counter (spex_pool_run, spex_pool_chunk_reset); a
 * chunked phase uses this or spex_pool_next_chunk, not both. A thread reading its weights
 * as one stretch keeps the hardware prefetchers' streams going from chunk to chunk. */
int64_t spex_pool_next_chunk_ranged(spex_pool *pool, int ith, const int64_t *bounds);
/* The same with claims of several chunks from the front of a thread's own range: up to
 * n_front consecutive chunks [c, c + *n_got) at once, while chunks taken from another range's
 * back end still come one at a time. So the owner pays one claim per n_front chunks, and the
 * chunks can be small enough that the last ones, which a faster thread takes over, leave
 * little to wait for at the end. */
int64_t spex_pool_next_chunks_ranged(spex_pool *pool, int ith, const int64_t *bounds, int n_front, int *n_got);
/* Wait accounting, off by default: while on, each thread adds the time it spends waiting for
 * the others (a worker for the next run, the driving thread for the workers at a run's end,
 * any thread at a barrier) to its own counter, at two clock reads per wait. Switching it on
 * zeroes the counters. spex_pool_wait_s: thread ith's seconds since then, a wait in progress
 * included. Call both from the thread that drives the pool, between runs. */
void spex_pool_set_wait_accounting(spex_pool *pool, bool on);
double spex_pool_wait_s(const spex_pool *pool, int ith);
/* The part of a step a run belongs to, for wait accounting by site (spex_pool_run_site): a
 * dense layer's Q/K/V phase, its attention and W_o phase, gate/up, down, the output head, a
 * drafter forward's runs, anything else. */
typedef enum spex_pool_site {
    SPEX_SITE_OTHER,
    SPEX_SITE_QKV,
    SPEX_SITE_ATTN,
    SPEX_SITE_FFN_UP,
    SPEX_SITE_FFN_DOWN,
    SPEX_SITE_HEAD,
    SPEX_SITE_DRAFT,
    SPEX_SITE_COUNT
} spex_pool_site;
/* spex_pool_run, its waits (with accounting on) also counted under `site` (out of range:
 * SPEX_SITE_OTHER; spex_pool_run itself uses OTHER). */
void spex_pool_run_site(spex_pool *pool, spex_pool_task task, void *ctx, int site);
/* Thread ith's waits under `site` since accounting was switched on: at the runs' boundaries
 * (barrier false: a worker's wait for the run to start, the driving thread's for the others
 * at its end) or at barriers inside them (true). *seconds: their time; *count: how many
 * (every barrier but the last arrival's is one, every run boundary is one, however short:
 * the counts follow the runs and barriers posted, not the timing). A wait still in progress
 * is not in them (a worker's wait for the next run is counted under that run's site when
 * it starts). Either pointer may be NULL. */
void spex_pool_wait_site(const spex_pool *pool, int ith, int site, bool barrier, double *seconds, int64_t *count);
/* Splits every wait in progress at now: its time so far is counted as closed (under
 * SPEX_SITE_OTHER, at a run boundary, one count) and it goes on from now. For a benchmark that
 * reads the counters at both ends of a window: called before each reading, the by-site
 * counters then cover exactly what spex_pool_wait_s covers (otherwise a worker's wait that
 * began before the window is counted by site in full when it ends inside it, and one still
 * open at the end not at all). From the driving thread, between runs; nothing with
 * accounting off. */
void spex_pool_wait_split(spex_pool *pool);

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

/* One tensor as the per-tensor recipe sees it. */
typedef struct spex_quant_tensor {
    const char *name;             /* GGUF tensor name                                      */
    int64_t row;                  /* ne[0]                                                 */
    bool has_output;              /* the file has output.weight (else token_embd is the head) */
    int64_t i_attn_v, n_attn_v;   /* its rank among attention value tensors, their count   */
    int64_t i_ffn_down, n_layer;  /* its rank among ffn_down tensors, block_count          */
    uint32_t n_expert;            /* 0: dense                                              */
} spex_quant_tensor;

/* The type llama.cpp's recipe gives a quantizable tensor in a file quantized to ft (what
 * spex_quantize_file writes; `spex gen-model` types its tensors the same way). why (may be
 * NULL): the rule that picked it, or NULL; wanted (may be NULL): the type before the
 * row-size fallback. */
spex_type spex_quantize_tensor_type(spex_ftype ft, const spex_quant_tensor *t, const char **why, spex_type *wanted);
/* Refuses to overwrite the input (same path or same inode). */
spex_status spex_quantize_file(const char *in_path, const char *out_path,
                               const spex_quantize_params *params, spex_error *err);

/* ======================================================================== */
/* Tokenizer                                                                 */
/* ======================================================================== */

/* The vocabulary a GGUF file carries in its tokenizer.ggml.* keys, as llama.cpp writes them:
 *  - model "llama": SentencePiece BPE (score-driven merges, byte fallback to <0xNN> tokens,
 *    add_space_prefix: a leading space, and every space written as U+2581);
 *  - model "gpt2": byte-level BPE (merge ranks, GPT-2 byte<->unicode mapping) with the
 *    pre-tokenizer named by tokenizer.ggml.pre: qwen2, qwen35, llama-bpe, gpt-2, default.
 * docs/tokenizers.md states every behaviour, including where spex deliberately differs from
 * llama.cpp. A loaded tokenizer copies what it needs (the spex_gguf may be closed), is
 * immutable apart from spex_tokenizer_set_nfc, and may be used from several threads at once. */
typedef struct spex_tokenizer spex_tokenizer;

typedef enum spex_tokenizer_kind {
    SPEX_TOKENIZER_SPM = 1,   /* tokenizer.ggml.model = llama */
    SPEX_TOKENIZER_BPE = 2,   /* tokenizer.ggml.model = gpt2  */
} spex_tokenizer_kind;

/* tokenizer.ggml.token_type values (SentencePiece's numbering, which llama.cpp keeps). */
typedef enum spex_token_type {
    SPEX_TOKEN_UNDEFINED = 0,
    SPEX_TOKEN_NORMAL = 1,
    SPEX_TOKEN_UNKNOWN = 2,
    SPEX_TOKEN_CONTROL = 3,
    SPEX_TOKEN_USER_DEFINED = 4,
    SPEX_TOKEN_UNUSED = 5,
    SPEX_TOKEN_BYTE = 6,
} spex_token_type;

#define SPEX_TOKEN_NONE (-1)   /* "no such token" in every id-returning query */

spex_status spex_tokenizer_load_gguf(const spex_gguf *g, spex_tokenizer **out, spex_error *err);
void spex_tokenizer_free(spex_tokenizer *t);
/* NFC-normalise raw text before byte-level BPE (gpt2 only; on by default, targets.md §12.1). */
void spex_tokenizer_set_nfc(spex_tokenizer *t, bool on);

spex_tokenizer_kind spex_tokenizer_get_kind(const spex_tokenizer *t);
const char *spex_tokenizer_pre(const spex_tokenizer *t);   /* "qwen2", ...; "" for SPM */
int32_t spex_tokenizer_n_vocab(const spex_tokenizer *t);
bool spex_tokenizer_add_bos(const spex_tokenizer *t);      /* add_special adds BOS */
bool spex_tokenizer_add_eos(const spex_tokenizer *t);      /* add_special adds EOS */
/* Special ids, or SPEX_TOKEN_NONE. eot is tokenizer.ggml.eot_token_id, else <|im_end|> /
 * <|eot_id|> / <end_of_turn> when the vocab has it as a control or user-defined token. */
int32_t spex_token_bos(const spex_tokenizer *t);
int32_t spex_token_eos(const spex_tokenizer *t);
int32_t spex_token_eot(const spex_tokenizer *t);
int32_t spex_token_unk(const spex_tokenizer *t);
int32_t spex_token_pad(const spex_tokenizer *t);
/* Out-of-range ids are SPEX_TOKEN_UNDEFINED / false. */
spex_token_type spex_token_get_type(const spex_tokenizer *t, int32_t id);
bool spex_token_is_control(const spex_tokenizer *t, int32_t id);
/* End of generation: eos, eot, and the control tokens <|endoftext|>, <|im_end|>, <|fim_pad|>,
 * <|repo_name|>, <|file_sep|>, <|eot_id|>, <|end_of_text|>, <end_of_turn>. */
bool spex_token_is_eog(const spex_tokenizer *t, int32_t id);
/* The id whose stored text (as in tokenizer.ggml.tokens: "\xe2\x96\x81the", "\xc4\xa0the",
 * "<|im_end|>") equals text[0..len), or SPEX_TOKEN_NONE. */
int32_t spex_token_find(const spex_tokenizer *t, const char *text, size_t len);
/* The stored text of a token (a view owned by t); {NULL, 0} for an out-of-range id. */
spex_str spex_token_text(const spex_tokenizer *t, int32_t id);

/* Tokenizes text[0..len) (any bytes: invalid UTF-8 and NUL are tokenized losslessly through
 * byte tokens / the byte-level mapping). add_special: BOS (and EOS) as the vocab's add_bos /
 * add_eos flags say. parse_special: control and unknown tokens written in the text become
 * those tokens (user-defined tokens always do, as in llama.cpp). Writes at most n_max ids to
 * out (NULL allowed when n_max is 0) and the full count to *n_out; if that count exceeds n_max
 * the result is SPEX_ERR_RANGE (out holds the first n_max ids). */
spex_status spex_tokenize(const spex_tokenizer *t, const char *text, size_t len, bool add_special,
                          bool parse_special, int32_t *out, int n_max, int *n_out, spex_error *err);

/* Detokenizer flags. */
#define SPEX_DETOK_SPECIAL 1u      /* render control/unknown tokens as their text (else nothing) */
#define SPEX_DETOK_STRIP_SPACE 2u  /* SPM with add_space_prefix: drop one leading space of the
                                      first piece and of any piece right after a control,
                                      unknown or user-defined token (the inverse of tokenize) */

/* The bytes of one token (a view owned by t): SPM "\xe2\x96\x81" -> " ", <0xNN> -> that byte;
 * gpt2 byte-level text -> raw bytes; user-defined tokens as written; control and unknown
 * tokens as written if special, else empty; unused tokens empty. SPEX_ERR_RANGE for a bad id. */
spex_status spex_token_to_piece(const spex_tokenizer *t, int32_t id, bool special, spex_str *out,
                                spex_error *err);
/* Longest piece in bytes (bounds the output of one stream push). */
size_t spex_tokenizer_max_piece(const spex_tokenizer *t);
/* Concatenated raw bytes of ids[0..n) (not NUL-terminated, not UTF-8-repaired). Writes at
 * most cap bytes (out may be NULL when cap is 0) and the full length to *n_out;
 * SPEX_ERR_RANGE if it exceeds cap, SPEX_ERR_RANGE too for an out-of-range id. */
spex_status spex_detokenize(const spex_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                            char *out, size_t cap, size_t *n_out, spex_error *err);

/* Streaming detokenizer for generation: each push returns only complete, valid UTF-8; an
 * incomplete sequence at the end of a piece is held back until the next piece completes it.
 * Bytes that cannot be valid UTF-8 become U+FFFD (one per maximal invalid subpart, as
 * Unicode §3.9 recommends); flush turns a held-back incomplete tail into U+FFFD. To continue
 * after a prompt, push the prompt's tokens first and ignore their output. The views returned
 * live until the next call on the stream. Allocates only in create. */
typedef struct spex_detok_stream spex_detok_stream;

spex_status spex_detok_stream_create(const spex_tokenizer *t, unsigned flags, spex_detok_stream **out,
                                     spex_error *err);
void spex_detok_stream_free(spex_detok_stream *s);
void spex_detok_stream_reset(spex_detok_stream *s);
spex_status spex_detok_stream_push(spex_detok_stream *s, int32_t id, spex_str *out, spex_error *err);
spex_str spex_detok_stream_flush(spex_detok_stream *s);

/* Converters: the tokenizer.ggml.* keys of a vocabulary read from its original files, added to
 * a GGUF writer (the caller sets general.architecture and writes; tools/convert.c does so for
 * `spex convert-vocab`). docs/tokenizers.md, "Converting tokenizers", lists the keys.
 *  - hf_json: a Hugging Face byte-level BPE tokenizer.json (model gpt2; pre qwen2, qwen35,
 *    llama-bpe or gpt-2, recognised from the Split regex); tokenizer_config.json (NULL: none)
 *    gives bos/eos/pad/unk, add_bos/add_eos and tokenizer.chat_template. The _padded form
 *    pads with unused "[PADn]" tokens up to n_vocab (the model's embedding rows, config.json
 *    vocab_size), as llama.cpp's converter does.
 *  - spm_model: a SentencePiece BPE tokenizer.model (model llama: scores, types, add_bos on).
 * Malformed or unsupported input is an error naming the file and the field. */
spex_status spex_vocab_from_hf_json(const char *tokenizer_json_path, const char *tokenizer_config_json_path,
                                    spex_gguf_writer *w, spex_error *err);
spex_status spex_vocab_from_hf_json_padded(const char *tokenizer_json_path, const char *tokenizer_config_json_path,
                                           int32_t n_vocab, spex_gguf_writer *w, spex_error *err);
spex_status spex_vocab_from_spm_model(const char *tokenizer_model_path, spex_gguf_writer *w, spex_error *err);

/* ======================================================================== */
/* Models: target architectures, contexts, batched forward, KV cache         */
/* ======================================================================== */

/* A target model (docs/models.md; ../shared/docs/targets.md §3–5). spex_model_load maps the
 * GGUF, reads the hyper-parameters, and checks every tensor the forward pass reads (present,
 * of a type spex can multiply, of the exact shape); the weights stay in the read-only mapping,
 * except Q4_K / Q5_K / Q4_0 / Q4_1 / Q5_0 / Q5_1 matrices when the CPU's kernels read them
 * faster in spex's 16-row interleaved layout (AVX-512): those are copied into it once at load
 * (same bytes; the mapped pages are released; docs/performance.md "R16"; no_repack turns it
 * off). A loaded
 * model is immutable and may be shared by several contexts
 * (and threads). All the per-run state — KV cache, activations, logits, taps, thread pool —
 * lives in a spex_context. */
typedef struct spex_model spex_model;
typedef struct spex_context spex_context;

typedef enum spex_arch {
    SPEX_ARCH_LLAMA = 1,   /* "llama": NORM RoPE, optional GQA, tied or untied output  */
    SPEX_ARCH_QWEN3 = 2,   /* "qwen3": per-head QK-norm before NEOX RoPE, no biases     */
    SPEX_ARCH_QWEN35 = 3,  /* "qwen35": hybrid Gated DeltaNet + gated attention, native
                            * MTP block (targets.md §6-§9)                               */
} spex_arch;

const char *spex_arch_name(spex_arch arch);   /* "llama", "qwen3", "qwen35"; "?" if unknown */

/* A log sink: one line (no trailing newline) per call. */
typedef void (*spex_log_fn)(void *user, const char *line);

typedef struct spex_model_params {
    bool verbose;        /* one line at load (shapes, weight bytes) and at context init
                          * (KV, compute and weight bytes), through log or on stderr     */
    spex_log_fn log;     /* NULL: stderr                                                  */
    void *log_user;
    bool no_repack;      /* keep every weight in the mapping: no R16 copies (below)       */
} spex_model_params;

spex_model_params spex_model_default_params(void);

/* Hyper-parameters as read from <arch>.* keys (defaults of targets.md §4.1 / §5.1 applied). */
typedef struct spex_model_hparams {
    spex_arch arch;
    int32_t n_vocab;        /* V: rows of token_embd.weight                                 */
    int32_t n_embd;         /* E                                                            */
    int32_t n_layer;        /* N                                                            */
    int32_t n_head;         /* H                                                            */
    int32_t n_head_kv;      /* H_kv (GQA: H % H_kv == 0)                                    */
    int32_t head_dim;       /* hd: attention.key_length, else E / H                         */
    int32_t n_ff;           /* F                                                            */
    int32_t n_rot;          /* rope.dimension_count, else hd (even, <= hd)                  */
    int32_t n_ctx_train;    /* context_length                                               */
    float rope_freq_base;   /* rope.freq_base, else 10000                                   */
    float rope_freq_scale;  /* 1 / rope.scaling.factor for "linear" scaling, else 1          */
    float rms_eps;          /* attention.layer_norm_rms_epsilon                             */
    int32_t rope_mode;      /* 0 NORM (llama), 2 NEOX (qwen3): ggml's rope type ids         */
    bool qk_norm;           /* per-head RMSNorm of q and k before RoPE (qwen3)              */
    bool tied_output;       /* no output.weight: the LM head is token_embd.weight           */
    /* qwen35 only (zero for llama / qwen3). n_layer above counts the trunk layers N; the
     * file's block_count is N + n_nextn. */
    bool attn_gated;        /* attention: attn_q packs [q_h | gate_h], output * sigmoid(gate)  */
    int32_t n_nextn;        /* nextn_predict_layers: MTP blocks after the trunk (0 or 1)      */
    int32_t n_recurrent;    /* Gated DeltaNet layers among the N trunk layers                */
    int32_t ssm_d_conv;     /* causal conv kernel (4)                                         */
    int32_t ssm_d_state;    /* Dk = Dv                                                        */
    int32_t ssm_n_group;    /* Hk: GDN key heads                                              */
    int32_t ssm_dt_rank;    /* Hv: GDN value heads (a multiple of Hk; tiled order)            */
    int32_t ssm_d_inner;    /* Hv x Dv                                                        */
} spex_model_hparams;

/* Layer l of the trunk is a Gated DeltaNet (recurrent) layer; false for attention layers, for
 * l outside 0 .. N-1 and for the dense architectures. */
bool spex_model_layer_is_recurrent(const spex_model *m, int32_t l);
/* Bytes of one recurrent-state copy of one sequence (every GDN layer's S and conv window,
 * fp32); 0 for models without recurrent layers. targets.md §6.4. */
uint64_t spex_model_recurrent_state_bytes(const spex_model *m);

/* The qwen35 memory plan from hyper-parameters alone (src/model/plan.c; targets.md §6.4, §9):
 * what the context allocates, computable before (or without) loading a model. */
typedef struct spex_qwen35_plan_in {
    int64_t n_layer;     /* N: trunk layers (block_count - nextn_predict_layers)       */
    int64_t n_attn;      /* full-attention layers among them                           */
    int64_t n_head_kv;   /* H_kv                                                       */
    int64_t head_dim;    /* hd (attention.key_length = value_length for qwen35)         */
    int64_t ssm_n_group; /* Hk (ssm.group_count)                                       */
    int64_t ssm_dt_rank; /* Hv (ssm.time_step_rank)                                    */
    int64_t ssm_d_state; /* D = Dk = Dv (ssm.state_size)                               */
    int64_t ssm_d_conv;  /* d_conv (ssm.conv_kernel)                                   */
    int64_t n_max;       /* drafts per verify batch: the ring keeps 1 + n_max copies    */
} spex_qwen35_plan_in;

typedef struct spex_qwen35_plan {
    int64_t n_gdn;            /* N - n_attn Gated DeltaNet layers                          */
    int64_t conv_channels;    /* C                                                         */
    uint64_t kv_per_token;    /* n_attn x 2 (K and V) x H_kv x hd x 2 bytes (F16)          */
    uint64_t state_S;         /* n_gdn x Hv x D x D x 4 bytes (fp32 delta-rule state)      */
    uint64_t state_conv;      /* n_gdn x (d_conv - 1) x C x 4 bytes (conv windows)         */
    uint64_t state;           /* state_S + state_conv: one copy of one sequence's state    */
    uint64_t snapshots;       /* (1 + n_max) x state: the live copy plus one per draft     */
    uint64_t layer_S_floats;  /* one GDN layer's state S: Hv x D x D                       */
    uint64_t layer_conv_floats; /* one GDN layer's conv window: (d_conv - 1) x C           */
} spex_qwen35_plan;
/* Fills *out from *in; returns 0, or -1 (and *out zeroed) when a number is negative, the
 * attention layers outnumber the trunk, d_conv is 0, or a number is beyond what any real model
 * has (layers 4096, heads and hd 65536, D and d_conv 1024, n_max 256): inspect feeds it the
 * keys of untrusted files, and these caps keep every product below 2^62. */
int spex_qwen35_plan_compute(const spex_qwen35_plan_in *in, spex_qwen35_plan *out);

/* Loads a llama, qwen3 or qwen35 GGUF. Errors name the file and the key or tensor, with both shapes
 * for a shape mismatch ("blk.2.attn_k.weight: shape [64, 16], expected [64, 32]").
 * params may be NULL (defaults). On failure *out is NULL. */
spex_status spex_model_load(const char *path, const spex_model_params *params, spex_model **out,
                            spex_error *err);
/* The same from an open GGUF (spex_gguf_open_memory: fuzzing, embedded files); the model takes
 * ownership of g (also on failure: g is closed). */
spex_status spex_model_load_gguf(spex_gguf *g, const spex_model_params *params, spex_model **out, spex_error *err);
void spex_model_free(spex_model *m);

const spex_model_hparams *spex_model_get_hparams(const spex_model *m);
/* The open GGUF behind the model (for the tokenizer and metadata); owned by the model. */
const spex_gguf *spex_model_gguf(const spex_model *m);
/* Bytes of the tensors the forward pass reads (mapped, not allocated) and their element count. */
uint64_t spex_model_weight_bytes(const spex_model *m);
uint64_t spex_model_n_params(const spex_model *m);
/* Views of the tensors a drafter borrows (dflash2.md §4.4): the embedding table {E, V} and
 * the LM head {E, V} (the embedding table itself when tied). Owned by the model. */
const spex_tensor_info *spex_model_token_embd(const spex_model *m);
const spex_tensor_info *spex_model_lm_head(const spex_model *m);
/* out[i][0..E) = f32 embedding of tokens[i] (dequantized from the table's type).
 * SPEX_ERR_RANGE for a token outside [0, V). */
spex_status spex_model_embed(const spex_model *m, const int32_t *tokens, int32_t n, float *out,
                             spex_error *err);

/* ---- contexts ------------------------------------------------------------------------- */

typedef struct spex_context_params {
    int32_t n_seq_max;      /* sequences, ids 0 .. n_seq_max-1 (default 1)                      */
    int32_t n_ctx_per_seq;  /* KV capacity of EACH sequence in tokens: the cache holds
                             * n_seq_max x n_ctx_per_seq rows in all. 0: min(context_length,
                             * 4096). Positions of a sequence run from 0 to n_ctx_per_seq - 1. */
    int32_t n_batch_max;    /* most tokens in one spex_forward (default 512)                    */
    int32_t n_outputs_max;  /* most tokens of one batch that ask for logits: the logits buffer
                             * is n_outputs_max x V floats. 0: min(n_batch_max, 64)             */
    spex_type kv_type;      /* SPEX_TYPE_F16 (default), SPEX_TYPE_F32 or SPEX_TYPE_Q8_0 (needs
                             * H_kv x hd to be a multiple of 32)                                 */
    int32_t n_threads;      /* threads of the pool the context creates when pool is NULL;
                             * <= 0: all online CPUs (default 1)                                 */
    spex_pool *pool;        /* a caller pool to run on instead (borrowed: must outlive the
                             * context, and must not run anything else during a forward)        */
    const int32_t *tap_layers; /* layer ids whose residual-stream INPUT is captured (§3.4):
                             * id l < N is the value entering layer l (id 0: the embeddings),
                             * id N the output of the last layer before output_norm. Copied.    */
    int32_t n_taps;         /* entries of tap_layers (0: no taps)                               */
    bool tap_clamp;         /* default true: NaN -> 0, values beyond +-65504 clamped (dflash2.md
                             * §6 "Sanitising"; a no-op on healthy activations)                  */
    int32_t n_rs_seq;       /* models with recurrent layers (qwen35): how many tokens a sequence
                             * can be truncated back by (speculative rollback, targets.md §9
                             * strategy A). The context keeps 1 + n_rs_seq copies of each
                             * sequence's recurrent state, one per recent position (a ring), so
                             * spex_kv_seq_truncate to any of the last n_rs_seq positions costs
                             * nothing. Set it to the drafter's n_max. Default 0. Ignored by
                             * dense models, whose KV cache truncates anywhere.                  */
    int32_t n_ctx_checkpoints; /* recurrent models: state checkpoints kept per sequence, so that
                             * spex_kv_seq_rewind (prompt-prefix reuse) restarts from the latest
                             * one instead of position 0 (llama-server --ctx-checkpoints).
                             * Default 0. Memory: n x the state per sequence (not committed
                             * until used).                                                      */
    int32_t checkpoint_min_step; /* a forward saves a checkpoint when the sequence has grown by at
                             * least this many tokens since its last one (llama-server
                             * --checkpoint-min-step; default 8192)                              */
} spex_context_params;

spex_context_params spex_context_default_params(void);

/* Allocates everything the forward pass needs (KV cache, activations, logits, taps, matmul
 * and attention workspaces, pool); spex_forward allocates nothing. The model must outlive
 * the context. On failure *out is NULL. */
spex_status spex_context_init(const spex_model *m, const spex_context_params *params, spex_context **out,
                              spex_error *err);
void spex_context_free(spex_context *ctx);

const spex_model *spex_context_model(const spex_context *ctx);
/* The thread pool the context runs on (its own or the caller's); a draft context beside it
 * should run on the same pool (spex_draft_context_params.pool): two spinning pools on the
 * same cores slow each other down. */
spex_pool *spex_context_pool(const spex_context *ctx);
/* The parameters in effect (defaults resolved; tap_layers points at the context's copy). */
const spex_context_params *spex_context_get_params(const spex_context *ctx);

typedef struct spex_memory_usage {
    uint64_t weights;   /* bytes of mapped weights the forward reads (not allocated) */
    uint64_t kv;        /* bytes of the KV cache                                     */
    uint64_t compute;   /* bytes of activations, logits, taps and workspaces         */
    uint64_t recurrent; /* bytes of recurrent state incl. rollback copies (qwen35)   */
} spex_memory_usage;

spex_memory_usage spex_context_memory(const spex_context *ctx);

/* ---- batches and the forward pass ------------------------------------------------------ */

/* One token of a batch. */
typedef struct spex_batch_token {
    int32_t token;      /* vocabulary id, 0 <= token < V                                     */
    int32_t pos;        /* its position in sequence seq (see the rule at spex_forward)       */
    int32_t seq;        /* sequence id, 0 <= seq < n_seq_max                                 */
    bool logits;        /* produce this token's logits                                      */
} spex_batch_token;

typedef struct spex_batch {
    const spex_batch_token *tokens;   /* [n_tokens], borrowed for the call */
    int32_t n_tokens;                 /* 1 .. n_batch_max                   */
} spex_batch;

/* Runs the model on a batch that may mix several sequences in any order. Position rule: the
 * tokens of sequence s, taken in batch order, must have positions L, L+1, ..., L+k-1 where
 * L = spex_kv_seq_len(ctx, s) (each sequence continues its cache; no gaps, no overwrites), and
 * L + k <= n_ctx_per_seq. Each token attends causally to its own sequence only. The whole batch
 * is validated before anything changes: on error (SPEX_ERR_INVALID_ARG for a bad token, seq or
 * position, SPEX_ERR_RANGE for too many tokens, outputs or a full sequence) the cache and the
 * previous outputs are untouched. On success every sequence's length grows by its k tokens,
 * and the outputs below describe this batch until the next forward. A context is used by one
 * thread at a time; contexts sharing a pool must not run at the same time. */
spex_status spex_forward(spex_context *ctx, const spex_batch *batch, spex_error *err);

/* Rows of the last batch that asked for logits (in batch order). */
int32_t spex_n_outputs(const spex_context *ctx);
/* Logits [V] of the i-th token that asked for them (batch order), i < spex_n_outputs; NULL
 * otherwise. A view into the context, valid until the next forward. */
const float *spex_logits(const spex_context *ctx, int32_t i);
/* Logits of batch token b (its index in batch.tokens); NULL if it did not ask for them. */
const float *spex_logits_of_token(const spex_context *ctx, int32_t b);
/* Taps of the last batch: [n_tokens][n_taps][E] f32, row b for batch token b, the tapped
 * layers in tap_layers order (dflash2.md §6 row layout). NULL without taps. */
const float *spex_taps(const spex_context *ctx);

/* ---- KV cache ------------------------------------------------------------------------- */
/* Each sequence owns a contiguous region of n_ctx_per_seq rows in every layer; row p holds
 * position p. A sequence's length is all the cache state it has, so truncation is O(1) (no
 * data moves: rows >= the new length are simply overwritten later). */

/* Cached tokens of sequence seq; -1 for an invalid id. */
int32_t spex_kv_seq_len(const spex_context *ctx, int32_t seq);
/* Keeps positions 0 .. new_len-1 (speculative rollback). 0 <= new_len <= current length.
 * Models with recurrent layers can only go back to a position whose state copy is kept
 * (see n_rs_seq) or to 0; otherwise SPEX_ERR_UNSUPPORTED and nothing changes. */
spex_status spex_kv_seq_truncate(spex_context *ctx, int32_t seq, int32_t new_len, spex_error *err);
/* Whether spex_kv_seq_truncate(ctx, seq, new_len) would succeed (always for dense models and
 * any 0 <= new_len <= length; for recurrent models new_len 0, the length, or a kept copy). */
bool spex_kv_seq_can_truncate(const spex_context *ctx, int32_t seq, int32_t new_len);
/* spex_kv_seq_truncate for any 0 <= new_len <= length, also where a recurrent model's ring no
 * longer holds the state of new_len - 1: the latest checkpoint at or before new_len - 1 is
 * restored (else the zero state at 0) and the tokens from there to new_len - 1 are run again
 * (targets.md §9, checkpoint + replay). The replay is a forward pass: it overwrites the last
 * batch's logits and taps. *n_replayed (may be NULL) gets the tokens run again (0 when the
 * truncation was free, always for dense models). */
spex_status spex_kv_seq_rewind(spex_context *ctx, int32_t seq, int32_t new_len, int32_t *n_replayed,
                               spex_error *err);
/* Saves a checkpoint of seq's current recurrent state (a no-op for dense models or with
 * n_ctx_checkpoints 0); when all slots are used the oldest is replaced. Truncation drops the
 * checkpoints beyond the new length. */
spex_status spex_kv_seq_checkpoint(spex_context *ctx, int32_t seq, spex_error *err);
/* Checkpoints seq holds, and the position of the latest (the state after it), or -1. */
int32_t spex_kv_seq_n_checkpoints(const spex_context *ctx, int32_t seq, int32_t *last_pos);
/* dst := the first len positions of src (prompt-prefix reuse); dst's own content is dropped.
 * 0 <= len <= length of src; len < 0 means all of src. O(len) copy. src == dst truncates.
 * Recurrent models: a len spex_kv_seq_can_truncate(src, len) refuses is reached by
 * spex_kv_seq_rewind on dst (replay). */
spex_status spex_kv_seq_copy(spex_context *ctx, int32_t src, int32_t dst, int32_t len, spex_error *err);
/* Empties sequence seq (seq < 0: every sequence). */
spex_status spex_kv_seq_clear(spex_context *ctx, int32_t seq, spex_error *err);

/* ======================================================================== */
/* Sampler                                                                   */
/* ======================================================================== */

/* Random numbers: xoshiro256** seeded through splitmix64. A plain value: copy it to fork a
 * stream; keep one per purpose for independent streams (dflash2.md §15.5: draft walk,
 * acceptance uniforms, residual/bonus sampling). Not cryptographic. */
typedef struct spex_rng {
    uint64_t s[4];
} spex_rng;

void spex_rng_seed(spex_rng *r, uint64_t seed);
/* Stream `stream` of `seed`: distinct (seed, stream) pairs give unrelated sequences. */
void spex_rng_seed_stream(spex_rng *r, uint64_t seed, uint64_t stream);
uint64_t spex_rng_next(spex_rng *r);
float spex_rng_uniform(spex_rng *r);       /* [0, 1) from the top 24 bits */
double spex_rng_uniform_f64(spex_rng *r);  /* [0, 1) from the top 53 bits */

/* The stages of the sampling chain (docs/sampling.md). After the chain, the final
 * distribution is the softmax of the surviving logits. */
typedef enum spex_sampler_stage {
    SPEX_SAMPLER_PENALTIES = 1,    /* repeat / frequency / presence over the last n accepted  */
    SPEX_SAMPLER_TOP_K = 2,        /* keep the k largest logits (ties: lower id)              */
    SPEX_SAMPLER_TOP_P = 3,        /* keep the smallest prefix of mass >= top_p               */
    SPEX_SAMPLER_MIN_P = 4,        /* keep p >= min_p * p_max                                 */
    SPEX_SAMPLER_TEMPERATURE = 5,  /* logits /= temp                                          */
} spex_sampler_stage;

#define SPEX_SAMPLER_MAX_STAGES 16
/* llama.cpp's default chain (common_params_sampling::samplers: penalties; dry; top_n_sigma;
 * top_k; typ_p; top_p; min_p; xtc; temperature) less the stages spex lacks, all of which are
 * off at llama.cpp's defaults. The spex default. */
#define SPEX_SAMPLER_ORDER_LLAMA "penalties;top_k;top_p;min_p;temperature"
/* dflash2.md §15.1's reference order (temperature before the truncations). */
#define SPEX_SAMPLER_ORDER_REFERENCE "penalties;temperature;top_k;top_p;min_p"
#define SPEX_SEED_RANDOM 0xFFFFFFFFu   /* llama.cpp's LLAMA_DEFAULT_SEED: seed from the clock */

typedef struct spex_sampler_params {
    float temp;               /* 0.8; <= 0: greedy (argmax after penalties, lowest id on ties) */
    int32_t top_k;            /* 40; <= 0: off                                                  */
    float top_p;              /* 0.95; >= 1: off                                                */
    float min_p;              /* 0.05; <= 0: off; must be <= 1                                  */
    float repeat_penalty;     /* 1.0 (off); > 0                                                 */
    int32_t repeat_last_n;    /* 64; tokens of history the penalties see; 0: off; >= 0 (map
                                 llama.cpp's -1 to the context size before init)               */
    float frequency_penalty;  /* 0.0: subtract count * this                                     */
    float presence_penalty;   /* 0.0: subtract this once if count > 0                           */
    uint64_t seed;            /* SPEX_SEED_RANDOM                                               */
    int32_t n_stages;         /* the chain, in order; a stage may be absent (then it is off)   */
    spex_sampler_stage stages[SPEX_SAMPLER_MAX_STAGES];
} spex_sampler_params;

/* llama.cpp's defaults (common_params_sampling) and SPEX_SAMPLER_ORDER_LLAMA. */
spex_sampler_params spex_sampler_default_params(void);
/* Sets p->stages from a ';'- or ','-separated list of llama.cpp's --samplers names: penalties,
 * top_k, top_p, min_p, temperature (also top-k, top-p, min-p, temp). dry, top_n_sigma, typ_p,
 * typical_p and xtc are accepted and skipped (spex lacks them; llama.cpp's defaults disable
 * them). Anything else is SPEX_ERR_INVALID_ARG naming it. */
spex_status spex_sampler_parse_stages(const char *names, spex_sampler_params *p, spex_error *err);

/* One entry of a final distribution. */
typedef struct spex_token_prob {
    int32_t id;
    float p;
} spex_token_prob;

/* A sampler for one sequence: penalty history, RNG and scratch for a vocabulary of n_vocab,
 * all allocated by init (no allocation per token). Not thread-safe; use one per sequence. */
typedef struct spex_sampler spex_sampler;

/* Checks the params (SPEX_ERR_INVALID_ARG naming the field) and allocates. */
spex_status spex_sampler_init(const spex_sampler_params *params, int32_t n_vocab, spex_sampler **out,
                              spex_error *err);
void spex_sampler_free(spex_sampler *s);
/* Empties the penalty history and reseeds the RNG from params.seed (a random seed is redrawn). */
void spex_sampler_reset(spex_sampler *s);
const spex_sampler_params *spex_sampler_get_params(const spex_sampler *s);
int32_t spex_sampler_n_vocab(const spex_sampler *s);
/* The sampler's own RNG (the stream spex_sampler_sample draws from); owned by s. */
spex_rng *spex_sampler_rng(spex_sampler *s);
/* Appends an emitted token to the penalty history (sample does not accept by itself).
 * SPEX_ERR_RANGE for an id outside [0, n_vocab). */
spex_status spex_sampler_accept(spex_sampler *s, int32_t token);

/* The final distribution p for logits[0 .. n_vocab): the whole chain applied to the logits
 * with the current penalty history, then softmax over the survivors. Writes the tokens of
 * nonzero probability to out[0 .. *n_out) as (id, p), p summing to 1 (within float rounding),
 * in an unspecified but deterministic order (the chain's working order; descending after a
 * top-k that nothing later reorders). Greedy (temp <= 0) gives the single entry (argmax, 1). At most
 * n_vocab entries, so cap = n_vocab always suffices; SPEX_ERR_RANGE with the needed count in
 * *n_out if cap is smaller. NaN logits count as -inf; SPEX_ERR_INVALID_ARG if no logit is
 * finite after the chain (greedy always picks by the argmax rule). Exactly what
 * spex_sampler_sample draws from (dflash2.md §15.1). */
spex_status spex_sampler_dist(spex_sampler *s, const float *logits, spex_token_prob *out, int32_t cap,
                              int32_t *n_out, spex_error *err);
/* One token from logits: greedy, or spex_sampler_sample_from(dist, u) with u drawn from the
 * sampler's RNG (one spex_rng_uniform_f64 per call; greedy draws none). */
spex_status spex_sampler_sample(spex_sampler *s, const float *logits, int32_t *token, spex_error *err);
/* Inverse CDF over dist in its order: the first entry whose running sum exceeds u * sum(p)
 * (running sums in double), u in [0, 1). Entries with p <= 0 are never chosen. -1 if n <= 0. */
int32_t spex_sampler_sample_from(const spex_token_prob *dist, int32_t n, double u);

/* ======================================================================== */
/* DFlash drafters: loading, draft context, block drafting, selector walks   */
/* ======================================================================== */

/* A DFlash v1 or DFlash2 drafter (../shared/docs/dflash2.md; docs/speculative.md), loaded
 * against the target it drafts for: the pair is validated at load (§5) and the drafter
 * borrows the target's token embedding and LM head (§4.4; the target must outlive it). The
 * variant is detected from the file (§2); DSpark files are refused. Immutable once loaded. */
typedef struct spex_drafter spex_drafter;
typedef struct spex_draft_context spex_draft_context;

typedef enum spex_dflash_variant {
    SPEX_DFLASH_V1 = 1,    /* no conv, no selector: independent per-slot argmax          */
    SPEX_DFLASH2 = 2,      /* grouped dynamic conv + candidate selector                  */
} spex_dflash_variant;

#define SPEX_DFLASH_MAX_TAPS 64      /* most entries of dflash.target_layers              */
#define SPEX_DRAFT_MAX_N 32          /* most tokens of one block (block_size <= 33)       */
#define SPEX_DRAFT_MAX_K 64          /* most selector candidates per slot                 */

typedef struct spex_drafter_hparams {
    spex_dflash_variant variant;
    int32_t n_layer;          /* N_d                                                       */
    int32_t n_embd;           /* D (== the target's E)                                     */
    int32_t n_ff;             /* F                                                         */
    int32_t n_head, n_head_kv, head_dim, n_rot;
    float rope_freq_base;
    float rms_eps;
    int32_t n_taps;           /* L                                                         */
    int32_t target_layers[SPEX_DFLASH_MAX_TAPS];  /* tap ids (layer-input residuals, §6)    */
    int32_t block_size;       /* B (v1 without the key: 16)                                */
    int32_t mask_token;       /* tokenizer.ggml.mask_token_id                              */
    int32_t swa_window;       /* W; 0: none                                                */
    bool swa_layer[64];       /* per layer (N_d <= 64): uses the window                    */
    bool causal;              /* attention.causal                                          */
    int32_t conv_kernel;      /* T_c (DFlash2)                                             */
    int32_t conv_group;       /* g (DFlash2); G = D / g                                    */
    int32_t selector_rank;    /* R (DFlash2)                                               */
    int32_t selector_top_k;   /* K (DFlash2; 0 for v1)                                     */
    float logit_scale;        /* 0: absent                                                 */
    float softcap;            /* 0: absent                                                 */
    float input_embd_scale;   /* dflash.input_embedding_scale, default 1 (whole block, §8) */
    int32_t n_vocab;          /* V, the target's                                           */
} spex_drafter_hparams;

typedef struct spex_drafter_params {
    bool verbose;             /* the one-line summary of §5 at load                        */
    spex_log_fn log;          /* NULL: stderr                                              */
    void *log_user;
    /* Draft-only metadata overrides "KEY=TYPE:VALUE" (llama.cpp's --override-kv syntax;
     * TYPE int, float, bool or str), applied before the file's own value of KEY is read,
     * e.g. "dflash.block_size=int:6". Borrowed for the call. A malformed entry or an
     * override of a key the drafter never reads is SPEX_ERR_INVALID_ARG. */
    const char *const *overrides;
    int32_t n_overrides;
    bool no_repack;           /* as spex_model_params.no_repack, for the drafter's own weights */
} spex_drafter_params;

spex_drafter_params spex_drafter_default_params(void);

/* Loads the drafter at path for `target`. Every check of dflash2.md §5; a pair mismatch
 * names both files and both values ("draft.gguf: dflash.embedding_length 64 != target
 * tiny.gguf embedding_length 128"). params may be NULL. On failure *out is NULL. */
spex_status spex_drafter_load(const char *path, const spex_model *target, const spex_drafter_params *params,
                              spex_drafter **out, spex_error *err);
void spex_drafter_free(spex_drafter *d);
const spex_drafter_hparams *spex_drafter_get_hparams(const spex_drafter *d);
const spex_gguf *spex_drafter_gguf(const spex_drafter *d);
const spex_model *spex_drafter_target(const spex_drafter *d);
uint64_t spex_drafter_weight_bytes(const spex_drafter *d);   /* own tensors (not borrowed) */
/* The §5 summary line, e.g. "dflash2: layers=5 D=5120 taps=[6,20,34,48,62] block=8 ...". */
void spex_drafter_describe(const spex_drafter *d, char *buf, size_t cap);

/* ---- draft contexts ---------------------------------------------------------------------- */

typedef struct spex_draft_context_params {
    int32_t n_seq_max;        /* sequences 0 .. n_seq_max-1 (default 1)                        */
    int32_t n_ctx_per_seq;    /* positions per sequence (default 4096); with a sliding window
                               * on every layer the cache still holds all positions (simple
                               * O(1) truncation; the window limits what attention reads)      */
    int32_t n_blocks_max;     /* blocks per spex_draft_forward (0: n_seq_max)                  */
    int32_t n_inject_max;     /* feature rows per spex_draft_inject (default 512)              */
    spex_type kv_type;        /* SPEX_TYPE_F16 (default), F32 or Q8_0 (quantized draft KV is
                               * known to destroy acceptance, dflash2.md §21 item 10)          */
    int32_t n_threads;        /* when pool is NULL (default 1; <= 0: all CPUs)                 */
    spex_pool *pool;          /* borrowed; may be the target context's pool                    */
} spex_draft_context_params;

spex_draft_context_params spex_draft_context_default_params(void);
spex_status spex_draft_context_init(const spex_drafter *d, const spex_draft_context_params *params,
                                    spex_draft_context **out, spex_error *err);
void spex_draft_context_free(spex_draft_context *dc);
const spex_drafter *spex_draft_context_drafter(const spex_draft_context *dc);
const spex_draft_context_params *spex_draft_context_get_params(const spex_draft_context *dc);
spex_memory_usage spex_draft_context_memory(const spex_draft_context *dc);

/* Context K/V injection (§7): for each row i, c = RMSNorm(W_fc f_i; enc.output_norm) with f_i
 * = features[i * ld_features .. + L*D) (the target context's spex_taps row layout), and K/V of
 * every drafter layer written at (seq[i], pos[i]). Position rule as spex_forward: the rows of
 * one sequence, in order, continue its draft cache (pos = spex_draft_kv_seq_len, +1, ...).
 * Validated before anything changes. */
spex_status spex_draft_inject(spex_draft_context *dc, const float *features, int64_t ld_features,
                              const int32_t *seq, const int32_t *pos, int32_t n_rows, spex_error *err);

int32_t spex_draft_kv_seq_len(const spex_draft_context *dc, int32_t seq);   /* -1: bad seq */
spex_status spex_draft_kv_seq_truncate(spex_draft_context *dc, int32_t seq, int32_t new_len, spex_error *err);
spex_status spex_draft_kv_seq_copy(spex_draft_context *dc, int32_t src, int32_t dst, int32_t len,
                                   spex_error *err);
spex_status spex_draft_kv_seq_clear(spex_draft_context *dc, int32_t seq, spex_error *err);

/* One block to draft: rows [anchor, MASK x n] at positions P .. P+n with P = the sequence's
 * draft cache length (Invariant A, §16: the caller keeps it equal to the target's). */
typedef struct spex_draft_block {
    int32_t seq;
    int32_t anchor;
    int32_t n;                /* 1 .. block_size - 1 */
} spex_draft_block;

/* Drafts every block in one batched forward (§8–§12): attention over each sequence's own
 * context and block, the convolutions (DFlash2), the final norm, the borrowed head with the
 * logit transforms, the per-slot top-K (DFlash2: K = selector_top_k; v1: 1) and the selector
 * gate. Block K/V are scratch (Invariant B): the cache is unchanged. Distinct sequences. */
spex_status spex_draft_forward(spex_draft_context *dc, const spex_draft_block *blocks, int32_t n_blocks,
                               spex_error *err);

/* Outputs of the last spex_draft_forward, for block b and slot p (1 .. n of that block); NULL
 * when out of range. Views into the context, valid until the next forward. */
const float *spex_draft_logits(const spex_draft_context *dc, int32_t b, int32_t p);   /* z [V] (transformed) */
const float *spex_draft_hidden(const spex_draft_context *dc, int32_t b, int32_t p);   /* h_out [D]           */
const float *spex_draft_gate(const spex_draft_context *dc, int32_t b, int32_t p);     /* [R] (DFlash2)       */
/* C_p and U_p (K entries, sorted by U descending, ties by lower id, §12.3); returns K. */
int32_t spex_draft_candidates(const spex_draft_context *dc, int32_t b, int32_t p, const int32_t **ids,
                              const float **U);

/* §12.2 for one predecessor token: S[k] = U[k] + sum_r A[pred][r] gate[r] B[C[k]][r], k < K,
 * in fp32 (quantized codebook rows dequantized). DFlash2 only. */
spex_status spex_selector_row(const spex_drafter *d, int32_t pred, const float *gate, const int32_t *C,
                              const float *U, int32_t K, float *S, spex_error *err);

/* A drafted continuation of one block. */
typedef struct spex_draft {
    int32_t n;                                /* tokens drafted (prefix of the block)       */
    int32_t ids[SPEX_DRAFT_MAX_N];            /* d_1 .. d_n                                  */
    int32_t kidx[SPEX_DRAFT_MAX_N];           /* DFlash2: index of d_p in C_p; v1: 0         */
    float conf[SPEX_DRAFT_MAX_N];             /* greedy: confidence of the chosen edge       */
    bool has_q;                               /* sampled walk: q below is the proposal       */
    int32_t n_cand;                           /* K                                           */
    int32_t cand[SPEX_DRAFT_MAX_N][SPEX_DRAFT_MAX_K];   /* C_p                               */
    float q[SPEX_DRAFT_MAX_N][SPEX_DRAFT_MAX_K];        /* q_p over C_p (has_q)              */
} spex_draft;

/* Walks block b of the last forward (§13, §14). temp <= 0: the greedy walk (DFlash2: chained
 * first argmax with the p_min stop on the edge confidence; v1: per-slot argmax with p_min on
 * the top softmax probability). temp > 0 (DFlash2): the sampled walk, q_p = softmax(S/T)
 * (T clamped to >= 1e-5), p_min on max q_p, one uniform of `rng` per drafted slot (inverse
 * CDF in candidate order, k = #{j : u >= CDF_j} clamped to K-1). v1 at temp > 0 walks
 * greedily (verified by sample-and-match). */
spex_status spex_draft_walk(const spex_draft_context *dc, int32_t b, float temp, float p_min, spex_rng *rng,
                            spex_draft *out, spex_error *err);

/* ---- MTP drafter: the qwen35 native nextn block (targets.md §8) ----------------------- */
/* The target's own multi-token-prediction block drafts autoregressively: step 1 takes the
 * anchor at position P and the target's hidden state of position P-1, step i+1 the draft d_i
 * and the block's own output hidden of step i (§8.2). It keeps a one-layer KV cache per
 * sequence that a catch-up after every target batch fills at every position p with (token at
 * p, target hidden of p-1), the zero vector at p = 0. Hidden rows are passed as the target's
 * tap of id N (the residual before output_norm; create the target context with tap_layers =
 * {N}); the drafter applies output_norm itself (§8.1: the post-norm state, unless
 * hidden_pre_norm). Drafts are greedy (argmax), so temperature > 0 verifies by
 * sample-and-match. */
typedef struct spex_mtp_context spex_mtp_context;

typedef struct spex_mtp_params {
    int32_t n_seq_max;        /* = the target context's (default 1)                        */
    int32_t n_ctx_per_seq;    /* = the target context's (0: min(context_length, 4096))      */
    int32_t n_batch_max;      /* rows of one catch-up batch (default 512)                   */
    spex_type kv_type;        /* F16 (default), F32 or Q8_0                                 */
    int32_t n_threads;        /* own pool when pool is NULL                                 */
    spex_pool *pool;          /* borrowed: run on the target's pool                         */
    bool hidden_pre_norm;     /* feed the residual itself instead of RMSNorm(.; output_norm) */
} spex_mtp_params;

spex_mtp_params spex_mtp_default_params(void);
/* SPEX_ERR_UNSUPPORTED when the model has no MTP block (nextn_predict_layers = 0). The model
 * must outlive the context. */
spex_status spex_mtp_init(const spex_model *m, const spex_mtp_params *params, spex_mtp_context **out,
                          spex_error *err);
void spex_mtp_free(spex_mtp_context *mc);
const spex_mtp_params *spex_mtp_get_params(const spex_mtp_context *mc);
/* Catch-up: row i is token tokens[i] at position pos[i] of sequence seq[i] paired with
 * h[i * E ..] = the target's id-N tap of position pos[i] - 1 (any values at pos[i] = 0: the
 * zero vector is used). Positions of each sequence continue its cache (spex_forward's rule).
 * Logits and hidden of every row are available afterwards (spex_mtp_logits / _hidden). */
spex_status spex_mtp_feed(spex_mtp_context *mc, const int32_t *tokens, const int32_t *pos, const int32_t *seq,
                          const float *h, int32_t n, spex_error *err);
typedef struct spex_mtp_block {
    int32_t seq;
    int32_t anchor;           /* at position spex_mtp_seq_len(seq)                          */
    int32_t n_max;            /* 1 .. SPEX_DRAFT_MAX_N                                       */
    const float *h;           /* [E]: the target's id-N tap of the position before the anchor */
} spex_mtp_block;
/* Drafts every block, all sequences stepping together (one forward of one row per drafting
 * sequence per step); a block stops early when its top probability falls below p_min. out[b]
 * gets the ids (has_q false). Each sequence's cache is left as it was. */
spex_status spex_mtp_draft(spex_mtp_context *mc, const spex_mtp_block *blocks, int32_t n_blocks, float p_min,
                           spex_draft *out, spex_error *err);
int32_t spex_mtp_seq_len(const spex_mtp_context *mc, int32_t seq);
spex_status spex_mtp_seq_truncate(spex_mtp_context *mc, int32_t seq, int32_t new_len, spex_error *err);
/* Of the last feed or draft step, row i: logits [V] and the block's output hidden [E]
 * (RMSNorm(.; shared_head_norm), the state fed back when chaining). NULL out of range. */
const float *spex_mtp_logits(const spex_mtp_context *mc, int32_t i);
const float *spex_mtp_hidden(const spex_mtp_context *mc, int32_t i);

/* ======================================================================== */
/* Speculative decoding: draft -> verify -> accept -> rollback               */
/* ======================================================================== */

/* Drives a target context and (optionally) a draft context over several sequences
 * (dflash2.md §15–§19; docs/speculative.md). Each sequence has a sampler (borrowed) and an
 * anchor: the last token emitted, which the target has not processed yet. One step drafts a
 * block for every stepping sequence in one drafter batch, verifies all the blocks in one
 * target batch (taps captured in the same pass), accepts, emits, rolls both caches back to
 * the accepted prefix and injects the accepted rows' features. Emitted tokens follow the
 * target alone exactly (temp <= 0) or in distribution (temp > 0).
 *
 * Verification path of a sequence (fixed by its sampler params, reported by
 * spex_spec_seq_path): greedy (temp <= 0): exact match; temp > 0 without penalties and with
 * a sampled walk: rejection sampling against q (§15.4); otherwise (penalties, v1 drafter,
 * greedy walk at T > 0, a draft function without q): sample-and-match (§15.3). */
typedef struct spex_spec spex_spec;

typedef enum spex_spec_path {
    SPEX_SPEC_PATH_GREEDY = 1,
    SPEX_SPEC_PATH_REJECTION = 2,
    SPEX_SPEC_PATH_SAMPLE_MATCH = 3,
} spex_spec_path;

const char *spex_spec_path_name(spex_spec_path p);   /* "greedy", "rejection", "sample-and-match" */

typedef struct spex_spec_params {
    int32_t n_max;            /* drafted tokens per step; 0: block_size - 1; larger values are
                               * clamped to block_size - 1 (spex_spec_init warns through log) */
    int32_t n_min;            /* drafts shorter than this are dropped (plain decode step)      */
    float p_min;              /* walk stop (§13, §14); 0: off                                  */
    bool sampled_walk;        /* temp > 0 with DFlash2: sampled walk + rejection (default true);
                               * false: greedy walk + sample-and-match                          */
    bool draft_cut;           /* cost-aware cut of the drafts in steps of one sequence: verify
                               * only the slots that raise the step's expected tokens per second
                               * (acceptance by the drafts' conf, verify price learned online;
                               * docs/speculative.md). DFlash and MTP drafts, draft functions
                               * (which should fill conf). Lossless; default false              */
    bool guard;               /* realized-rate guard for steps of one sequence: decayed tokens
                               * per second of the steps that drafted and of plain steps; while
                               * drafting measures slower every step is plain but one in 64;
                               * while the plain rate is unknown one step in 3 is plain, none
                               * where the draft cut's price shows drafting well ahead
                               * (docs/speculative.md). Lossless, but clock-driven: with a fixed
                               * seed at T > 0 on the rejection path the sampled tokens then vary
                               * run to run (as with draft_cut). Default false; spex run sets it */
    spex_log_fn log;          /* warnings (clamps); NULL: stderr                               */
    void *log_user;
} spex_spec_params;

spex_spec_params spex_spec_default_params(void);

/* Statistics of one sequence since spex_spec_seq_begin, or of all sequences in total. */
typedef struct spex_spec_stats {
    uint64_t n_steps;         /* target verify steps (including steps without a draft)      */
    uint64_t n_drafted;       /* draft tokens verified                                      */
    uint64_t n_accepted;      /* of which accepted                                          */
    uint64_t n_emitted;       /* tokens emitted by steps (accepted + corrections + bonuses) */
    uint64_t drafted_at[SPEX_DRAFT_MAX_N];    /* per slot p (index p-1): drafted at p       */
    uint64_t accepted_at[SPEX_DRAFT_MAX_N];   /* ... and accepted                           */
    double t_draft;           /* seconds in drafting (forward + walk), verify, the rest     */
    double t_verify;
    double t_other;
    double t_flush;           /* of t_draft + t_other: injecting deferred features (a backlog
                               * of prompt rows and of steps without a draft); per sequence,
                               * only its own backlog                                         */
    uint64_t n_cut;           /* drafted tokens the draft cut left unverified                */
    uint64_t n_target_batches; /* total only: target forwards that verified a step's rows   */
    uint64_t n_draft_batches;  /* total only: drafter forwards (DFlash or MTP) of the steps;
                                * each spex_spec_step makes at most one of each, for all its
                                * sequences together                                        */
    uint64_t n_guard_plain;    /* total only: steps the realized-rate guard kept plain      */
} spex_spec_stats;

/* Acceptance rate n_accepted / n_drafted (0 if none) and mean acceptance length
 * 1 + n_accepted / n_steps (dflash2.md §23). */
double spex_spec_stats_acceptance(const spex_spec_stats *st);
double spex_spec_stats_mean_len(const spex_spec_stats *st);

/* A replacement drafter (tests, lookup drafting): called instead of the DFlash walk for each
 * stepping sequence with n_max = this step's bound; fills out (out->n <= n_max; has_q with
 * cand/q when it proposes a law q). anchor is at position pos. */
typedef spex_status (*spex_spec_draft_fn)(void *user, int32_t seq, int32_t anchor, int32_t pos, int32_t n_max,
                                          spex_draft *out, spex_error *err);

/* dc may be NULL (target-only: every step verifies [anchor] alone). With dc, the target
 * context's tap layers must equal the drafter's target_layers, both contexts must have the
 * same n_seq_max, and the target's n_outputs_max must hold (n_max + 1) x n_seq_max rows.
 * Both contexts are borrowed. */
spex_status spex_spec_init(spex_context *tctx, spex_draft_context *dc, const spex_spec_params *params,
                           spex_spec **out, spex_error *err);
/* The same loop with the target's MTP block as the drafter (--spec-type mtp): the target
 * context must have tap_layers = {N} (its hidden state for the MTP catch-up), n_rs_seq >=
 * n_max when it has recurrent layers, and as many sequences as mc. n_max 0 means 3. */
spex_status spex_spec_init_mtp(spex_context *tctx, spex_mtp_context *mc, const spex_spec_params *params,
                               spex_spec **out, spex_error *err);
/* The same loop with a small model of the target's vocabulary drafting autoregressively in its
 * own context dctx (--spec-type draft-simple; e.g. Qwen3-0.6B for Qwen3-8B): greedy drafts
 * (T > 0 verifies by sample-and-match), p_min stops a draft where the draft model's top
 * probability falls below it. dctx: the same n_seq_max as the target's, a row per sequence in
 * n_batch_max and n_outputs_max; its cache catches up from the sequence's tokens right before
 * each draft and keeps only accepted tokens. n_max 0 means 16. Both contexts are borrowed. */
spex_status spex_spec_init_draft_model(spex_context *tctx, spex_context *dctx, const spex_spec_params *params,
                                       spex_spec **out, spex_error *err);
void spex_spec_free(spex_spec *s);
const spex_spec_params *spex_spec_get_params(const spex_spec *s);   /* n_max resolved */
/* The drafter's name: "dflash", "mtp", "draft-simple", "ngram", "function" or "none". */
const char *spex_spec_drafter_name(const spex_spec *s);
void spex_spec_set_draft_fn(spex_spec *s, spex_spec_draft_fn fn, void *user);

/* N-gram drafting (prompt lookup; llama.cpp's --spec-type ngram-simple and its
 * --spec-ngram-size-n / -size-m / --spec-ngram-min-hits): the draft is what followed the most
 * recent earlier occurrence of the last size_n tokens (the anchor last) in the sequence's own
 * prompt and output, at most size_m tokens; the key must have stood min_hits times. Free
 * drafting for code edits, quotes of the prompt, RAG and other repetition. */
typedef struct spex_ngram_params {
    int32_t size_n;     /* key length (12)                          */
    int32_t size_m;     /* most tokens drafted (48; n_max caps it)  */
    int32_t min_hits;   /* occurrences of the key needed (1)        */
} spex_ngram_params;

spex_ngram_params spex_ngram_default_params(void);
/* The draft for toks[0 .. len) (toks[len - 1] the anchor) into out (n_max entries): its length,
 * 0 when the key does not stand min_hits times before. */
int32_t spex_ngram_lookup(const int32_t *toks, int32_t len, const spex_ngram_params *p, int32_t n_max, int32_t *out);
/* Makes s draft by n-gram lookup over each sequence's tokens (the loop keeps them: prompt,
 * accepted drafts, anchors; allocated here, n_seq x n_ctx tokens). s must have neither a draft
 * nor an MTP context; it replaces any draft function. Sequences begun before draft nothing
 * until they are fed from position 0 again. */
spex_status spex_spec_set_ngram(spex_spec *s, const spex_ngram_params *p, spex_error *err);
/* Hybrid drafting (--spec-type hybrid): the DFlash drafter and n-gram lookup compete in every
 * step; a sequence takes the lookup's draft when its expected accepted length (the lookup's
 * learned per-token acceptance over the draft's length) exceeds the mean accepted length of
 * recent DFlash steps, else the DFlash draft. The choice reads nothing of the step's DFlash
 * draft, so every path stays lossless. init_hybrid: as spex_spec_init with a draft context,
 * n_max up to SPEX_DRAFT_MAX_N (DFlash drafts stay within its block; 0 means block_size - 1);
 * set_hybrid_ngram: the same on a loop made by spex_spec_init with a draft context (its n_max
 * stays). */
spex_status spex_spec_init_hybrid(spex_context *tctx, spex_draft_context *dc, const spex_ngram_params *ng,
                                  const spex_spec_params *params, spex_spec **out, spex_error *err);
spex_status spex_spec_set_hybrid_ngram(spex_spec *s, const spex_ngram_params *p, spex_error *err);
/* Turns spex_spec_params.draft_cut on or off for the steps after this call (what the cut has
 * learned is kept), e.g. once spex_spec_seq_path shows a sequence on the rejection path. */
void spex_spec_set_draft_cut(spex_spec *s, bool on);
/* Turns spex_spec_params.guard on or off for the steps after this call (its measurements are
 * kept). */
void spex_spec_set_guard(spex_spec *s, bool on);

/* Starts sequence seq: clears both caches of seq, runs the prompt through the target in
 * batches of n_batch_max (its features injected into the draft cache), samples the first
 * token from the prompt's last logits with `sampler` (borrowed until the next begin/end of
 * seq; spex_sampler_accept is called for every emitted token, the first one included) and
 * returns it in *first: it is the anchor of the first step. The draft and acceptance RNG
 * streams are derived from the sampler's RNG. n_prompt >= 1. */
spex_status spex_spec_seq_begin(spex_spec *s, int32_t seq, const int32_t *prompt, int32_t n_prompt,
                                spex_sampler *sampler, int32_t *first, spex_error *err);
/* spex_spec_seq_begin in pieces, for prompt-prefix reuse and prompts processed in chunks
 * between other sequences' steps. feed: makes seq inactive, keeps the first n_keep positions
 * of both its caches (the caller knows they hold tokens equal to its new prompt's first n_keep;
 * n_keep <= the cached length), then runs tokens[0 .. n) at positions n_keep .. with their
 * features injected (may be called again to continue, with n_keep = spex_spec_seq_len). start:
 * runs the prompt's last token, samples the first token with `sampler` and makes seq active
 * (stats restart). begin(prompt, n) = feed(0, prompt, n - 1) + start(prompt[n - 1]). */
spex_status spex_spec_seq_feed(spex_spec *s, int32_t seq, int32_t n_keep, const int32_t *tokens, int32_t n,
                               spex_error *err);
/* Whether spex_spec_seq_feed can keep n_keep positions of seq (0 <= n_keep <= length): yes,
 * except with the MTP drafter, which keeps only 0 or all of them. A recurrent target (qwen35)
 * gets there by spex_kv_seq_rewind: free inside its state ring, else from the latest
 * checkpoint (n_ctx_checkpoints; feed saves one at each prompt's end) with a replay. */
bool spex_spec_seq_can_keep(const spex_spec *s, int32_t seq, int32_t n_keep);
spex_status spex_spec_seq_start(spex_spec *s, int32_t seq, int32_t last, spex_sampler *sampler, int32_t *first,
                                spex_error *err);
/* Rewinds begun sequence seq to its first n_keep positions (0 < n_keep <= its length) with
 * `anchor` as the next token (at position n_keep), in both caches; sampler, when not NULL,
 * replaces the sequence's sampler (path and draft / acceptance streams are derived again).
 * The caller keeps the sampler's penalty history consistent. For stops inside an emitted run,
 * prefix reuse, and tests that repeat a step from one state. */
spex_status spex_spec_seq_rewind(spex_spec *s, int32_t seq, int32_t n_keep, int32_t anchor, spex_sampler *sampler,
                                 spex_error *err);
/* Forgets sequence seq (caches cleared, stats kept until the next begin). */
void spex_spec_seq_end(spex_spec *s, int32_t seq);
spex_spec_path spex_spec_seq_path(const spex_spec *s, int32_t seq);
const spex_spec_stats *spex_spec_seq_stats(const spex_spec *s, int32_t seq);
const spex_spec_stats *spex_spec_total_stats(const spex_spec *s);

/* Tokens one step emitted for one sequence. */
typedef struct spex_spec_out {
    int32_t n;                              /* 1 .. n_drafted + 1                              */
    int32_t tokens[SPEX_DRAFT_MAX_N + 1];   /* accepted drafts, then the correction or bonus   */
    int32_t n_drafted;                      /* drafted and verified this step                  */
    int32_t n_cut;                          /* drafted but left unverified by the draft cut    */
} spex_spec_out;

/* One step for seqs[0 .. n_seqs) (distinct, begun). max_emit[i] >= 1 bounds what sequence i
 * may emit (max_emit may be NULL: no bound beyond n_max + 1); the draft is clamped to
 * max_emit - 1 and to the context space left. On return out[i] holds what sequence i emitted.
 * The caller checks stop conditions per token; to stop inside an emitted run, it calls
 * spex_spec_seq_end (or spex_spec_seq_rewind). */
spex_status spex_spec_step(spex_spec *s, const int32_t *seqs, int32_t n_seqs, const int32_t *max_emit,
                           spex_spec_out *out, spex_error *err);

/* Positions the target holds for seq. The draft cache holds the same positions (Invariant A)
 * except the last spex_spec_seq_pending of them: prompt tokens and tokens verified in steps
 * where seq did not draft, whose features wait (up to a per-sequence capacity: 64 MiB over
 * all sequences, at least 32 rows, at most the context) and are injected in one batch before
 * its next draft, so a sequence that does not draft costs no drafter work per token. */
int32_t spex_spec_seq_len(const spex_spec *s, int32_t seq);
int32_t spex_spec_seq_pending(const spex_spec *s, int32_t seq);

/* ======================================================================== */
/* Speculative sessions: drafter + contexts + loop, every size resolved once  */
/* ======================================================================== */

/* What drafts (llama.cpp's --spec-type names, spex_spec_type_parse): none; auto (a DFlash
 * drafter or a draft model, told by the file's general.architecture; none without a file);
 * dflash / draft-dflash; mtp / draft-mtp (the target's own MTP block); ngram / ngram-simple /
 * ngram-map-k (prompt lookup); draft-simple / draft (a small model of the target's vocabulary);
 * hybrid / dflash+ngram (spex_spec_set_hybrid_ngram). */
typedef enum spex_spec_type {
    SPEX_SPEC_NONE = 0,
    SPEX_SPEC_AUTO,
    SPEX_SPEC_DFLASH,
    SPEX_SPEC_MTP,
    SPEX_SPEC_NGRAM,
    SPEX_SPEC_DRAFT_MODEL,
    SPEX_SPEC_HYBRID,               /* DFlash + n-gram lookup, the better draft per step */
} spex_spec_type;

bool spex_spec_type_parse(const char *name, spex_spec_type *out);
const char *spex_spec_type_name(spex_spec_type t);   /* "none", "draft-dflash", ... */

typedef struct spex_session_params {
    spex_spec_type type;            /* AUTO (default)                                              */
    const char *draft_path;         /* DFlash drafter or draft model file                           */
    const spex_drafter *drafter;    /* or a loaded DFlash drafter (borrowed; for this target)       */
    const char *const *draft_overrides;   /* spex_drafter_params.overrides                        */
    int32_t n_draft_overrides;
    bool no_repack;
    int32_t n_seq;                  /* sequences (server slots), default 1                          */
    int32_t n_ctx_per_seq;          /* 0: min(the training context, 4096)                           */
    int32_t n_batch;                /* prompt batch rows (default 512; raised to the verify rows)   */
    int32_t n_threads;              /* 0: every CPU; ignored with pool                              */
    spex_pool *pool;                /* borrowed: run everything on it                               */
    spex_type kv_type, draft_kv_type;   /* F16 (default)                                           */
    int32_t n_ctx_checkpoints, checkpoint_min_step;   /* spex_context_params                       */
    int32_t n_draft_max;            /* 0: the type's default (below)                                */
    int32_t n_draft_min;            /* clamped to n_max with a warning                              */
    float p_min;
    bool draft_greedy;              /* greedy walk at T > 0 (spex_spec_params.sampled_walk false)   */
    bool draft_cut, guard;          /* spex_spec_params (draft_cut on by default)                   */
    spex_ngram_params ngram;
    bool verbose;                   /* load lines of the drafter / draft model                      */
    spex_log_fn log;                /* warnings (clamped lengths); NULL: stderr                     */
    void *log_user;
} spex_session_params;

/* What the session resolved. n_max: the asked length, else DFlash block_size - 1, MTP 3,
 * n-gram 16 within size_m, draft model 16; never above SPEX_DRAFT_MAX_N (0 for none). */
typedef struct spex_session_info {
    spex_spec_type type;            /* AUTO resolved                                   */
    const char *variant;            /* "dflash2", "dflash1", "mtp", "ngram", "draft-simple", "none";
                                     * hybrid: "dflash2+ngram" or "dflash1+ngram"                    */
    int32_t block_size;             /* DFlash; else 0                                  */
    int32_t n_max, n_min, n_seq, n_ctx_per_seq;
} spex_session_info;

typedef struct spex_session spex_session;

spex_session_params spex_session_default_params(void);
/* Loads the drafter or draft model, creates the target context (taps, verify rows n_seq x
 * (n_max + 1), state ring n_max on recurrent targets), the drafter's context on the target's
 * pool, and the loop. The target model must outlive the session. */
spex_status spex_session_create(const spex_model *target, const spex_session_params *params, spex_session **out,
                                spex_error *err);
void spex_session_free(spex_session *s);
const spex_session_info *spex_session_get_info(const spex_session *s);
spex_spec *spex_session_spec(spex_session *s);
spex_context *spex_session_context(spex_session *s);                 /* the target's           */
spex_draft_context *spex_session_draft_context(spex_session *s);     /* DFlash; else NULL      */
spex_context *spex_session_draft_model_context(spex_session *s);     /* draft-simple; else NULL */
const spex_drafter *spex_session_drafter(const spex_session *s);     /* DFlash; else NULL      */
const spex_model *spex_session_draft_model(const spex_session *s);   /* draft-simple; else NULL */

/* ======================================================================== */
/* Chat templates                                                            */
/* ======================================================================== */

/* Built-in renderers for the templates spex's targets ship (targets.md §13); there is no Jinja
 * engine. src/tok/chat.c's opening comment lists what each reproduces and which substrings
 * recognise a template text. */
typedef enum spex_chat_template {
    SPEX_CHAT_NONE = 0,            /* plain completion: the contents concatenated            */
    SPEX_CHAT_CHATML_QWEN3 = 1,    /* Qwen3's tokenizer_config.json template                 */
    SPEX_CHAT_CHATML_QWEN35 = 2,   /* Qwen3.5 / 3.6 / 3.8 (contents trimmed, template opens
                                      <think> when thinking)                                  */
} spex_chat_template;

typedef enum spex_chat_role {
    SPEX_CHAT_SYSTEM = 0,
    SPEX_CHAT_USER = 1,
    SPEX_CHAT_ASSISTANT = 2,
    SPEX_CHAT_TOOL = 3,            /* a tool result                                          */
} spex_chat_role;

/* One tool call of an assistant message (the template's message.tool_calls[i].function). */
typedef struct spex_chat_tool_call {
    const char *name;
    /* JSON text of the arguments object, as the OpenAI API carries it (a string). Valid JSON
     * is rendered as the template's `tojson` prints the decoded value (Python json.dumps:
     * ", " and ": " separators, non-ASCII kept), i.e. as if the client's string had been
     * decoded into an object before templating, as vLLM and llama-server do; other text is
     * rendered verbatim by Qwen3 and refused by Qwen3.5 (whose template iterates the object). */
    const char *arguments;
} spex_chat_tool_call;

/* Strings are borrowed, NUL-terminated UTF-8; NULL reads as "". */
typedef struct spex_chat_msg {
    spex_chat_role role;
    const char *content;
    /* Assistant only: the reasoning text. NULL: the template splits it out of content at
     * </think> as the Jinja template does. */
    const char *reasoning_content;
    /* Assistant only: tool calls rendered after the content (borrowed; may be NULL when 0). */
    const spex_chat_tool_call *tool_calls;
    size_t n_tool_calls;
} spex_chat_msg;

const char *spex_chat_template_name(spex_chat_template t);   /* "none", "chatml-qwen3", ... */
/* "none", "chatml" (= chatml-qwen3), "chatml-qwen3", "qwen3", "chatml-qwen35", "qwen35". */
bool spex_chat_template_from_name(const char *name, spex_chat_template *out);
/* "system", "user", "assistant", "tool". */
bool spex_chat_role_from_name(const char *name, spex_chat_role *out);

/* Picks the renderer for a GGUF's tokenizer.chat_template (NULL or "" if absent). A recognised
 * Qwen3 or Qwen3.5 template: *warned = false. Anything else: ChatML (Qwen3 rules) when the
 * template or the vocabulary has <|im_start|>, else plain completion; *warned = true when a
 * template was given but not recognised, or when ChatML is guessed without one. */
void spex_chat_detect(const char *jinja_template, bool vocab_has_im_start, spex_chat_template *out,
                      bool *warned);

/* Renders msgs[0 .. n) as the template does for add_generation_prompt and enable_thinking
 * (the Jinja variables of those names). Writes the text and a NUL to buf and its length
 * (without the NUL) to *len. If cap < length + 1: SPEX_ERR_RANGE, *len = the length needed
 * (allocate *len + 1), buf holds a NUL-terminated prefix when cap > 0 (buf may be NULL when
 * cap is 0). SPEX_ERR_INVALID_ARG where the Jinja template raises (Qwen3.5: no messages, no
 * user query, a system message not first) and for an unknown role or template. */
spex_status spex_chat_apply(spex_chat_template tmpl, const spex_chat_msg *msgs, size_t n,
                            bool add_generation_prompt, bool enable_thinking, char *buf, size_t cap,
                            size_t *len, spex_error *err);
/* spex_chat_apply with the template's `tools` variable: tools[0 .. n_tools) are the JSON texts
 * of the tool objects ({"type": "function", "function": {...}}, any formatting; each rendered
 * as `tojson` prints it, key order kept). n_tools == 0 is spex_chat_apply. SPEX_ERR_INVALID_ARG
 * also for a tool text that is not valid JSON. SPEX_CHAT_NONE ignores tools. */
spex_status spex_chat_apply_tools(spex_chat_template tmpl, const spex_chat_msg *msgs, size_t n,
                                  const char *const *tools, size_t n_tools, bool add_generation_prompt,
                                  bool enable_thinking, char *buf, size_t cap, size_t *len, spex_error *err);

#ifdef __cplusplus
}
#endif
#endif /* SPEX_H */
