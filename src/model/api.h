/*
 * model/api.h — the model module's interface below the embedding API: target contexts, batches,
 * the forward pass and the KV cache; DFlash drafters and draft contexts; the MTP block.
 * Builds on include/spex.h (the embedding API: handles, status codes, the types every
 * module shares); tools and tests include it beside spex.h. Dependencies follow
 * core <- tensor <- gguf <- cpu <- model <- spec <- server (README).
 */
#ifndef SPEX_MODEL_API_H
#define SPEX_MODEL_API_H

#include "spex.h"
#include "core/rng.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef struct spex_tensor_info spex_tensor_info;
typedef struct spex_context spex_context;
typedef struct spex_draft_context spex_draft_context;
typedef struct spex_mtp_context spex_mtp_context;

/* ---- the model ------------------------------------------------------------------------- */

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


/* The same from an open GGUF (spex_gguf_open_memory: fuzzing, embedded files); the model takes
 * ownership of g (also on failure: g is closed). */
spex_status spex_model_load_gguf(spex_gguf *g, const spex_model_params *params, spex_model **out, spex_error *err);

const spex_model_hparams *spex_model_get_hparams(const spex_model *m);

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

/* ---- drafts ---------------------------------------------------------------------------- */

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
    bool embeddings;        /* outputs are hidden states, not logits: a token that asks for
                             * output gets RMSNorm(x; output_norm) of the last layer's output
                             * (spex_embeddings); the LM head is not run, spex_logits gives
                             * NULL and no logits buffer is allocated. Default false.          */
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
/* Embeddings contexts (params.embeddings): the final-norm hidden state [E] of the i-th token
 * that asked for output (batch order), i < spex_n_outputs; NULL otherwise or without the flag.
 * A view into the context, valid until the next forward. */
const float *spex_embeddings(const spex_context *ctx, int32_t i);
/* Taps of the last batch: [n_tokens][n_taps][E] f32, row b for batch token b, the tapped
 * layers in tap_layers order (dflash2.md §6 row layout). NULL without taps. */
const float *spex_taps(const spex_context *ctx);

/* ---- embeddings (embd.c) ------------------------------------------------------------- */
/* Pooling of a sequence's final-norm hidden states; the values are GGUF's <arch>.pooling_type
 * ids (llama.cpp's). */
typedef enum spex_pooling {
    SPEX_POOLING_UNSPECIFIED = -1, SPEX_POOLING_NONE = 0, SPEX_POOLING_MEAN = 1, SPEX_POOLING_CLS = 2,
    SPEX_POOLING_LAST = 3, SPEX_POOLING_RANK = 4,
} spex_pooling;
const char *spex_pooling_name(spex_pooling p);      /* "none", "mean", "cls", "last", "rank"  */
spex_pooling spex_pooling_parse(const char *s);     /* UNSPECIFIED for an unknown name        */
/* The file's <arch>.pooling_type; NONE when absent or out of range (llama.cpp's default for
 * a model without the key). */
spex_pooling spex_model_pooling(const spex_model *m);
/* x[0..n) scaled in place by llama.cpp's embd_normalize rule: norm < 0 none, 0 max |x_i| ->
 * 32760, 1 taxicab, 2 euclidean, > 2 the p-norm with p = norm. The zero vector stays zero. */
void spex_embd_normalize(float *x, int64_t n, int32_t norm);
/* The embedding of tokens[0..n) as sequence seq of an embeddings context: the sequence is
 * cleared, the tokens run from position 0 in batches of at most min(n_batch_max,
 * n_outputs_max), and the sequence is cleared again. out: pooling NONE n x E floats (one row
 * per token), MEAN / CLS / LAST E floats; not normalised. scratch holds n_batch_max batch
 * tokens. SPEX_ERR_RANGE when n > n_ctx_per_seq, SPEX_ERR_UNSUPPORTED for RANK (no
 * classification head). Allocates nothing. */
spex_status spex_embed_tokens(spex_context *ctx, int32_t seq, const int32_t *tokens, int32_t n, spex_pooling pooling,
                              spex_batch_token *scratch, float *out, spex_error *err);
/* Several inputs in one forward pass (the weights are read once for all of them): input i is
 * n_tokens[i] tokens of `tokens` (the inputs one after the other), run as sequence i from an
 * empty cache; sequences 0 .. n_in-1 are cleared before and after. n_in <= n_seq_max, every
 * input 1 .. n_ctx_per_seq tokens, all together at most min(n_batch_max, n_outputs_max)
 * (else SPEX_ERR_RANGE: use spex_embed_tokens for an input longer than a batch). out: pooling
 * NONE the rows of every token, input after input; else E floats per input. The vectors equal
 * spex_embed_tokens' up to fp32 rounding. */
spex_status spex_embed_batch(spex_context *ctx, const int32_t *tokens, const int32_t *n_tokens, int32_t n_in,
                             spex_pooling pooling, spex_batch_token *scratch, float *out, spex_error *err);

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
/* One sequence's cache as a byte image (kv_state.c; the server's slot save / restore): the KV
 * rows of its n positions, then (recurrent models) the state after position n - 1 and the
 * checkpoints the sequence holds. size: seq's image now; max: the largest image of n
 * positions (every checkpoint slot used), 0 for a bad n. save: seq's image into buf[0 .. size)
 * exactly. load: replaces seq by the image of tokens[0 .. n) (token ids, the size and the
 * checkpoint positions are checked first: nothing changes on error); a later rewind below n
 * replays from the image's checkpoints, or from 0. The image carries no identity: the caller
 * checks it was made by the same model and context. */
uint64_t spex_kv_seq_state_size(const spex_context *ctx, int32_t seq);
uint64_t spex_kv_seq_state_max(const spex_context *ctx, int32_t n);
spex_status spex_kv_seq_state_save(const spex_context *ctx, int32_t seq, void *buf, uint64_t size, spex_error *err);
spex_status spex_kv_seq_state_load(spex_context *ctx, int32_t seq, const int32_t *tokens, int32_t n, const void *buf,
                                   uint64_t size, spex_error *err);


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
    bool no_mmap;             /* as spex_model_params.no_mmap                              */
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

#ifdef __cplusplus
}
#endif

#endif
