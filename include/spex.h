/*
 * spex.h — the one public API of spex, a C inference engine for GGUF models with
 * DFlash2 speculative decoding.
 *
 * What it is: the embedding API — status codes, tensor types, models, the tokenizer, the
 * sampler, speculative sessions and the speculative loop, chat templates. What it is not:
 * the modules' own interfaces (GGUF reader/writer, the thread pool, quantization, vocabulary
 * converters, contexts and the KV cache, drafters: src/<module>/api.h, which tools and tests
 * include beside this header) and the kernels' dispatch tables.
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

/* Handles whose functions live in the module interfaces under src/ (src/gguf/api.h,
 * src/cpu/api.h, src/model/api.h): an embedding program holds them, or passes them through. */
typedef struct spex_gguf spex_gguf;
typedef struct spex_tensor_info spex_tensor_info;
typedef struct spex_pool spex_pool;
typedef struct spex_context spex_context;
typedef struct spex_drafter spex_drafter;
typedef struct spex_draft_context spex_draft_context;
typedef struct spex_mtp_context spex_mtp_context;

/* A length-delimited string inside the mapped file (GGUF strings are not NUL-terminated). */
typedef struct spex_str {
    const char *ptr;
    uint64_t len;
} spex_str;
#define SPEX_DRAFT_MAX_N 32          /* most tokens of one block (block_size <= 33)       */
#define SPEX_DRAFT_MAX_K 64          /* most selector candidates per slot                 */
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
/* Positions per sequence of the target context, and the model's vocabulary. */
int32_t spex_spec_n_ctx(const spex_spec *s);
int32_t spex_spec_n_vocab(const spex_spec *s);
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
/* Generation: one prompt, tokens out through a callback                     */
/* ======================================================================== */

typedef enum spex_stop {
    SPEX_STOP_LENGTH = 0,   /* n_predict tokens                   */
    SPEX_STOP_EOS,          /* an end-of-generation token          */
    SPEX_STOP_EOT,          /* the end-of-turn token               */
    SPEX_STOP_BOS,          /* a BOS token                         */
    SPEX_STOP_CONTEXT,      /* the sequence filled its context     */
    SPEX_STOP_CALLER,       /* on_token returned false             */
} spex_stop;

const char *spex_stop_name(spex_stop s);   /* "n_predict", "eos", "eot", "bos", "context full", "caller" */

/* Called for each generated token in order (stop tokens excluded) with its text (empty when
 * the token ends no character yet, or without text); once more at the end with token -1 for a
 * character the last token left unfinished. Returns false to stop. */
typedef bool (*spex_gen_token_fn)(void *user, int32_t token, spex_str text);

typedef struct spex_gen_params {
    int32_t n_predict;          /* most tokens; -1 (default): until a stop token or a full context */
    spex_sampler *sampler;      /* borrowed; NULL: greedy                                        */
    bool prime_sampler;         /* reset it, then the prompt into its penalty history (default)  */
    bool text;                  /* detokenize for on_token (default true)                        */
    unsigned detok_flags;       /* SPEX_DETOK_* (default STRIP_SPACE)                            */
    int8_t draft_cut, guard;    /* 0 off, 1 on; -1 (default): the loop's setting, but off for a
                                 * fixed seed on the rejection path (both follow the clock, which
                                 * would make the sampled tokens vary run to run)                */
    spex_gen_token_fn on_token;
    void *user;
} spex_gen_params;

typedef struct spex_gen_result {
    int32_t n_prompt, n_gen;    /* n_gen: tokens handed to on_token                              */
    spex_stop stop;
    spex_spec_path path;
    bool draft_cut, guard;      /* what the generation ran with                                  */
    double t_prompt, t_gen;     /* seconds: the prompt (and first token), the rest               */
    spex_spec_stats stats;      /* the steps after the prompt                                    */
} spex_gen_result;

spex_gen_params spex_gen_default_params(void);
/* Generates on sequence 0 of the loop: the prompt (n_prompt <= the context), then steps until
 * a stop; each step is bounded by what is left of n_predict. The sequence is ended on return.
 * The speculative output equals the target alone's token for token at T = 0 and for the same
 * seed on the sample-and-match path (docs/speculative.md). */
spex_status spex_spec_generate(spex_spec *spec, const spex_tokenizer *tok, const int32_t *prompt, int32_t n_prompt,
                               const spex_gen_params *params, spex_gen_result *res, spex_error *err);
spex_status spex_session_generate(spex_session *s, const spex_tokenizer *tok, const int32_t *prompt,
                                  int32_t n_prompt, const spex_gen_params *params, spex_gen_result *res,
                                  spex_error *err);

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
/* spex_chat_detect for a loaded model: its tokenizer.chat_template text, and whether its
 * vocabulary has <|im_start|>. *guessed (may be NULL): as spex_chat_detect's flag. */
spex_chat_template spex_model_chat_template(const spex_model *m, const spex_tokenizer *tok, bool *guessed);

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
