/*
 * spex.h — the embedding API of spex, a C inference engine for GGUF models with DFlash2
 * speculative decoding: load a model, open a session (any drafter, or none), tokenize or render
 * a chat, generate with sampling and speculation, read the statistics; examples/chat_stream.c is
 * the whole path. The modules' own interfaces (GGUF, thread pool, quantization, contexts and KV
 * cache, drafters, the step-level speculative loop) are src/<module>/api.h, for tools and tests.
 *
 * Conventions: functions that can fail return spex_status and fill a non-NULL spex_error with
 * one line naming the file, the field and what was expected; the library never exits. Handles
 * returned through out-parameters are the caller's, released with the matching *_free;
 * pointers from getters are views that live as long as their handle.
 */
#ifndef SPEX_H
#define SPEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Status and errors ----------------------------------------------------- */

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

/* ---- Tensor types (ggml ids, so GGUF files from llama.cpp load unchanged) --- */

typedef enum spex_type {
    SPEX_TYPE_F32 = 0, SPEX_TYPE_F16 = 1, SPEX_TYPE_BF16 = 30, SPEX_TYPE_F64 = 28,
    SPEX_TYPE_Q4_0 = 2, SPEX_TYPE_Q4_1 = 3, SPEX_TYPE_Q5_0 = 6, SPEX_TYPE_Q5_1 = 7, SPEX_TYPE_Q8_0 = 8,
    SPEX_TYPE_Q8_1 = 9,                         /* activations only (for Q4_1/Q5_1 dot products) */
    SPEX_TYPE_Q2_K = 10, SPEX_TYPE_Q3_K = 11,   /* known ids; not implemented */
    SPEX_TYPE_Q4_K = 12, SPEX_TYPE_Q5_K = 13, SPEX_TYPE_Q6_K = 14,
    SPEX_TYPE_Q8_K = 15,                        /* activations only (for K-quant dot products) */
    SPEX_TYPE_I8 = 24, SPEX_TYPE_I16 = 25, SPEX_TYPE_I32 = 26, SPEX_TYPE_I64 = 27,
    SPEX_TYPE_COUNT = 40                        /* upper bound for table sizes, not a type */
} spex_type;

/* Handles an embedder passes through (their functions: src/gguf/api.h, cpu/api.h, model/api.h). */
typedef struct spex_gguf spex_gguf;
typedef struct spex_pool spex_pool;
typedef struct spex_drafter spex_drafter;

/* A length-delimited string inside the mapped file (GGUF strings are not NUL-terminated). */
typedef struct spex_str { const char *ptr; uint64_t len; } spex_str;

#define SPEX_DRAFT_MAX_N 32   /* most tokens one step drafts */

/* ---- Tokenizer ------------------------------------------------------------- */

/* The vocabulary of a GGUF's tokenizer.ggml.* keys: SentencePiece BPE ("llama") or byte-level
 * BPE ("gpt2") with llama.cpp's pre-tokenizers (docs/tokenizers.md). Immutable once loaded
 * and safe to share between threads; it copies what it needs from the file. */
typedef struct spex_tokenizer spex_tokenizer;
#define SPEX_TOKEN_NONE (-1)   /* "no such token" in every id-returning query */

spex_status spex_tokenizer_load_gguf(const spex_gguf *g, spex_tokenizer **out, spex_error *err);
void spex_tokenizer_free(spex_tokenizer *t);
int32_t spex_tokenizer_n_vocab(const spex_tokenizer *t);
/* Special ids, or SPEX_TOKEN_NONE (eot: the file's, else <|im_end|> and the like). */
int32_t spex_token_bos(const spex_tokenizer *t);
int32_t spex_token_eos(const spex_tokenizer *t);
int32_t spex_token_eot(const spex_tokenizer *t);
/* End of generation: eos, eot and the end-of-text control tokens (<|endoftext|>, ...). */
bool spex_token_is_eog(const spex_tokenizer *t, int32_t id);
/* Tokenizes text[0..len) (any bytes, losslessly). add_special: BOS / EOS as the vocab says;
 * parse_special: control tokens written in the text become those tokens. Writes at most n_max
 * ids and the full count to *n_out (SPEX_ERR_RANGE when it exceeds n_max). */
spex_status spex_tokenize(const spex_tokenizer *t, const char *text, size_t len, bool add_special,
                          bool parse_special, int32_t *out, int n_max, int *n_out, spex_error *err);

#define SPEX_DETOK_SPECIAL 1u      /* render control/unknown tokens as their text (else nothing) */
#define SPEX_DETOK_STRIP_SPACE 2u  /* SPM: drop the leading space tokenize added (after BOS/controls) */

/* The bytes of one token (a view owned by t); control tokens only if special. */
spex_status spex_token_to_piece(const spex_tokenizer *t, int32_t id, bool special, spex_str *out,
                                spex_error *err);
/* The raw bytes of ids[0..n) (not NUL-terminated): at most cap, the full length in *n_out
 * (SPEX_ERR_RANGE beyond cap, or for a bad id). */
spex_status spex_detokenize(const spex_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                            char *out, size_t cap, size_t *n_out, spex_error *err);

/* Streaming detokenizer: each push returns only complete, valid UTF-8 (an incomplete tail is
 * held back; invalid bytes become U+FFFD; flush ends a held-back tail as U+FFFD). Push a
 * prompt's tokens first to continue after it. Views live until the next call. */
typedef struct spex_detok_stream spex_detok_stream;
spex_status spex_detok_stream_create(const spex_tokenizer *t, unsigned flags, spex_detok_stream **out,
                                     spex_error *err);
void spex_detok_stream_free(spex_detok_stream *s);
void spex_detok_stream_reset(spex_detok_stream *s);
spex_status spex_detok_stream_push(spex_detok_stream *s, int32_t id, spex_str *out, spex_error *err);
spex_str spex_detok_stream_flush(spex_detok_stream *s);

/* ---- Models ---------------------------------------------------------------- */

/* A target model (docs/models.md; targets.md §3–5): llama, qwen3 or qwen35, its weights in
 * the read-only mapping of the file (some matrices copied once into the CPU kernels' faster
 * layout: no_repack keeps them mapped). Immutable once loaded; sessions share it. */
typedef struct spex_model spex_model;

typedef enum spex_arch {
    SPEX_ARCH_LLAMA = 1,   /* "llama": NORM RoPE, optional GQA, tied or untied output  */
    SPEX_ARCH_QWEN3 = 2,   /* "qwen3": per-head QK-norm before NEOX RoPE, no biases     */
    SPEX_ARCH_QWEN35 = 3,  /* "qwen35": hybrid Gated DeltaNet + gated attention, native MTP
                            * block (targets.md §6-§9)                                   */
} spex_arch;
const char *spex_arch_name(spex_arch arch);   /* "llama", "qwen3", "qwen35"; "?" if unknown */

/* A log sink: one line (no trailing newline) per call. */
typedef void (*spex_log_fn)(void *user, const char *line);

typedef struct spex_model_params {
    bool verbose;        /* one line at load (shapes, weight bytes) and at context init
                          * (KV, compute and weight bytes), through log or on stderr     */
    spex_log_fn log; void *log_user;   /* NULL: stderr                                    */
    bool no_repack, no_mmap;   /* no R16 copies (below); read the file instead of mapping it */
    const char *const *overrides; int32_t n_overrides;   /* "KEY=TYPE:VALUE" metadata (--override-kv) */
} spex_model_params;
spex_model_params spex_model_default_params(void);

/* Loads a llama, qwen3 or qwen35 GGUF. Errors name the file and the key or tensor, with both shapes
 * for a shape mismatch ("blk.2.attn_k.weight: shape [64, 16], expected [64, 32]").
 * params may be NULL (defaults). On failure *out is NULL. */
spex_status spex_model_load(const char *path, const spex_model_params *params, spex_model **out,
                            spex_error *err);
void spex_model_free(spex_model *m);

/* The open GGUF behind the model (for the tokenizer and metadata); owned by the model. */
const spex_gguf *spex_model_gguf(const spex_model *m);
spex_arch spex_model_arch(const spex_model *m);
int32_t spex_model_n_vocab(const spex_model *m);     /* logits per token (spex_sampler_init) */
int32_t spex_model_n_ctx_train(const spex_model *m);
/* ---- Sampler --------------------------------------------------------------- */

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
/* llama.cpp's default chain less the stages spex lacks (all off at its defaults). */
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
/* Sets p->stages from llama.cpp's --samplers list (';' or ','): penalties, top_k, top_p, min_p,
 * temperature; dry, top_n_sigma, typ_p and xtc are skipped (off at llama.cpp's defaults). */
spex_status spex_sampler_parse_stages(const char *names, spex_sampler_params *p, spex_error *err);

/* A sampler for one sequence: penalty history, RNG and scratch for a vocabulary of n_vocab,
 * all allocated by init (no allocation per token). Not thread-safe; use one per sequence. */
typedef struct spex_sampler spex_sampler;
/* Checks the params (SPEX_ERR_INVALID_ARG naming the field) and allocates. */
spex_status spex_sampler_init(const spex_sampler_params *params, int32_t n_vocab, spex_sampler **out,
                              spex_error *err);
void spex_sampler_free(spex_sampler *s);
/* Empties the penalty history and reseeds the RNG from params.seed (a random seed is redrawn). */
void spex_sampler_reset(spex_sampler *s);

/* ---- Speculative decoding: paths, statistics, n-gram lookup, sessions ------ */

/* How a sequence's drafts are verified (docs/speculative.md; dflash2.md §15): greedy at
 * temp <= 0 (exact match); rejection sampling against the drafter's q at temp > 0 with a
 * sampled walk and no penalties; sample-and-match otherwise. */
typedef enum spex_spec_path {
    SPEX_SPEC_PATH_GREEDY = 1, SPEX_SPEC_PATH_REJECTION = 2, SPEX_SPEC_PATH_SAMPLE_MATCH = 3,
} spex_spec_path;
const char *spex_spec_path_name(spex_spec_path p);   /* "greedy", "rejection", "sample-and-match" */

/* Statistics of one sequence since spex_spec_seq_begin, or of all sequences in total. */
typedef struct spex_spec_stats {
    uint64_t n_steps;         /* target verify steps (including steps without a draft)      */
    uint64_t n_drafted;       /* draft tokens verified                                      */
    uint64_t n_accepted;      /* of which accepted                                          */
    uint64_t n_emitted;       /* tokens emitted by steps (accepted + corrections + bonuses) */
    uint64_t drafted_at[SPEX_DRAFT_MAX_N];    /* per slot p (index p-1): drafted at p       */
    uint64_t accepted_at[SPEX_DRAFT_MAX_N];   /* ... and accepted                           */
    double t_draft, t_verify, t_other;   /* seconds: drafting (forward + walk), verify, the rest */
    double t_flush;           /* of t_draft + t_other: injecting deferred drafter features   */
    uint64_t n_cut;           /* drafted tokens the draft cut left unverified                */
    uint64_t n_target_batches; /* total only: target forwards that verified a step's rows   */
    uint64_t n_draft_batches;  /* total only: drafter forwards of the steps                   */
    uint64_t n_guard_plain;    /* total only: steps the realized-rate guard kept plain      */
} spex_spec_stats;

double spex_spec_stats_acceptance(const spex_spec_stats *st);   /* n_accepted / n_drafted (0 if none) */
double spex_spec_stats_mean_len(const spex_spec_stats *st);   /* 1 + n_accepted / n_steps (dflash2.md §23) */

/* N-gram drafting (prompt lookup, llama.cpp's ngram-simple): the draft is what followed the
 * latest earlier occurrence of the last size_n tokens in the sequence's prompt and output. */
typedef struct spex_ngram_params {
    int32_t size_n;     /* key length (12)                          */
    int32_t size_m;     /* most tokens drafted (48; n_max caps it)  */
    int32_t min_hits;   /* occurrences of the key needed (1)        */
} spex_ngram_params;
spex_ngram_params spex_ngram_default_params(void);

/* What drafts; spex_spec_type_parse takes llama.cpp's --spec-type names (none, auto, dflash /
 * draft-dflash, mtp / draft-mtp, ngram / ngram-simple, draft-simple / draft, hybrid). auto: a
 * DFlash drafter or a draft model, told by the file's general.architecture. */
typedef enum spex_spec_type {
    SPEX_SPEC_NONE = 0, SPEX_SPEC_AUTO, SPEX_SPEC_DFLASH, SPEX_SPEC_MTP, SPEX_SPEC_NGRAM,
    SPEX_SPEC_DRAFT_MODEL, SPEX_SPEC_HYBRID,   /* HYBRID: DFlash + n-gram lookup, the better draft per step */
} spex_spec_type;
bool spex_spec_type_parse(const char *name, spex_spec_type *out);
const char *spex_spec_type_name(spex_spec_type t);   /* "none", "draft-dflash", ... */

typedef struct spex_session_params {
    spex_spec_type type;            /* AUTO (default)                                              */
    const char *draft_path;         /* DFlash drafter or draft model file                           */
    const spex_drafter *drafter;    /* or a loaded DFlash drafter (borrowed; for this target)       */
    const char *const *draft_overrides;   /* spex_drafter_params.overrides                        */
    int32_t n_draft_overrides;
    bool no_repack, no_mmap;        /* for the drafter's file, as spex_model_params                 */
    int32_t n_seq;                  /* sequences (server slots), default 1                          */
    int32_t n_ctx_per_seq;          /* 0: min(the training context, 4096)                           */
    int32_t n_batch;                /* prompt batch rows (default 512; raised to the verify rows)   */
    int32_t n_threads;              /* 0: every CPU; ignored with pool                              */
    spex_pool *pool;                /* borrowed: run everything on it                               */
    spex_type kv_type, draft_kv_type;   /* F16 (default)                                           */
    int32_t n_ctx_checkpoints, checkpoint_min_step;   /* spex_context_params                       */
    int32_t n_draft_max, n_draft_min;   /* max 0: the type's default (below); min clamped to max (warned) */
    float p_min;
    bool draft_greedy;              /* greedy walk at T > 0 (spex_spec_params.sampled_walk false)   */
    bool draft_cut, guard;          /* spex_spec_params (draft_cut on by default)                   */
    spex_ngram_params ngram;
    bool verbose;                   /* load lines of the drafter / draft model                      */
    spex_log_fn log; void *log_user;   /* warnings (clamped lengths); NULL: stderr               */
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

/* ---- Generation: one prompt, tokens out through a callback ----------------- */

/* Why a generation stopped: LENGTH n_predict tokens, EOS an end-of-generation token, EOT the end-of-turn
 * token, BOS a BOS token, CONTEXT the sequence filled its context, CALLER on_token returned false. */
typedef enum spex_stop {
    SPEX_STOP_LENGTH = 0, SPEX_STOP_EOS, SPEX_STOP_EOT, SPEX_STOP_BOS, SPEX_STOP_CONTEXT, SPEX_STOP_CALLER,
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
    int8_t draft_cut, guard;    /* 0 off, 1 on; -1 (default): the loop's setting, but off for a fixed
                                 * seed on the rejection path (both follow the clock: runs would vary) */
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
/* Generates on the loop's sequence 0: the prompt (n_prompt <= the context), then steps until a
 * stop, each bounded by what is left of n_predict; the sequence is ended on return. The output
 * equals the target alone's token for token at T = 0, and for the same seed on sample-and-match
 * (docs/speculative.md). */
spex_status spex_session_generate(spex_session *s, const spex_tokenizer *tok, const int32_t *prompt,
                                  int32_t n_prompt, const spex_gen_params *params, spex_gen_result *res,
                                  spex_error *err);

/* ---- Chat templates -------------------------------------------------------- */

/* Built-in renderers of the templates spex's targets ship (targets.md §13; no Jinja engine). */
typedef enum spex_chat_template {
    SPEX_CHAT_NONE = 0,            /* plain completion: the contents concatenated            */
    SPEX_CHAT_CHATML_QWEN3 = 1,    /* Qwen3's tokenizer_config.json template                 */
    SPEX_CHAT_CHATML_QWEN35 = 2,   /* Qwen3.5 / 3.6 / 3.8 (contents trimmed; opens <think> if thinking) */
} spex_chat_template;

typedef enum spex_chat_role {
    SPEX_CHAT_SYSTEM = 0, SPEX_CHAT_USER = 1, SPEX_CHAT_ASSISTANT = 2,
    SPEX_CHAT_TOOL = 3,            /* a tool result                                          */
} spex_chat_role;

/* One tool call of an assistant message (the template's message.tool_calls[i].function); the
 * arguments are rendered as the template's `tojson` prints them decoded, as vLLM and llama-server do. */
typedef struct spex_chat_tool_call {
    const char *name;
    const char *arguments;   /* JSON text of the arguments object (as the OpenAI API carries it) */
} spex_chat_tool_call;

/* Strings are borrowed, NUL-terminated UTF-8; NULL reads as "". The last three: assistant only. */
typedef struct spex_chat_msg {
    spex_chat_role role;
    const char *content;
    const char *reasoning_content;           /* NULL: split out of content at </think>          */
    const spex_chat_tool_call *tool_calls;   /* rendered after the content (borrowed; NULL if 0) */
    size_t n_tool_calls;
} spex_chat_msg;

const char *spex_chat_template_name(spex_chat_template t);   /* "none", "chatml-qwen3", ... */
/* "none", "chatml" (= chatml-qwen3), "chatml-qwen3", "qwen3", "chatml-qwen35", "qwen35". */
bool spex_chat_template_from_name(const char *name, spex_chat_template *out);
bool spex_chat_role_from_name(const char *name, spex_chat_role *out);   /* "system", ..., "tool" */

/* The renderer for a model's tokenizer.chat_template: Qwen3 or Qwen3.5 when recognised, else
 * ChatML when the template or vocabulary has <|im_start|> (*guessed true), else none. */
spex_chat_template spex_model_chat_template(const spex_model *m, const spex_tokenizer *tok, bool *guessed);

/* Renders msgs[0 .. n) as the template does for add_generation_prompt and enable_thinking:
 * the text and a NUL into buf, its length into *len (SPEX_ERR_RANGE with the length needed
 * when cap is too small). SPEX_ERR_INVALID_ARG where the Jinja template raises. */
spex_status spex_chat_apply(spex_chat_template tmpl, const spex_chat_msg *msgs, size_t n,
                            bool add_generation_prompt, bool enable_thinking, char *buf, size_t cap,
                            size_t *len, spex_error *err);
/* The same with the template's `tools`: the JSON texts of the tool objects (each must parse). */
spex_status spex_chat_apply_tools(spex_chat_template tmpl, const spex_chat_msg *msgs, size_t n,
                                  const char *const *tools, size_t n_tools, bool add_generation_prompt,
                                  bool enable_thinking, char *buf, size_t cap, size_t *len, spex_error *err);

#ifdef __cplusplus
}
#endif
#endif /* SPEX_H */
