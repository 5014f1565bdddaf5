/*
 * spec/api.h — the speculative loop's interface below the embedding API (src/spec/): the loop
 * on contexts and drafters the caller made (spex_spec_init*), sequences begun, fed, stepped,
 * rewound and ended one by one, replacement and lookup drafters, and the views of a session's
 * parts. The server's batched engine, the tools' timing loops and the tests use it; an
 * embedder's sessions and spex_session_generate (include/spex.h) are built on it.
 * Dependencies: model, sample (and below), spex.h.
 */
#ifndef SPEX_SPEC_API_H
#define SPEX_SPEC_API_H

#include "spex.h"
#include "model/api.h"
#include "sample/api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spex_spec spex_spec;



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
/* Saved slots (the server's /slots save and restore): image_size is the bytes of seq's target
 * cache image now, image_max the most an image of n positions takes (model/api.h
 * spex_kv_seq_state_*); image_save writes seq's image into buf[0 .. size) exactly. restore
 * ends seq and loads the image of tokens[0 .. n) (n + 1 <= the context) into the target; the
 * loop's token history becomes tokens. A drafter that keeps a cache (DFlash, MTP) has nothing
 * of it: the sequence is detached from the drafter (its steps verify the anchor alone,
 * losslessly) until it is fed from position 0 again. Drafters that catch up from the tokens
 * (n-gram, draft-simple) draft as usual. On error seq is left empty. */
uint64_t spex_spec_seq_image_size(const spex_spec *s, int32_t seq);
uint64_t spex_spec_seq_image_max(const spex_spec *s, int32_t n);
spex_status spex_spec_seq_image_save(const spex_spec *s, int32_t seq, void *buf, uint64_t size, spex_error *err);
spex_status spex_spec_seq_restore(spex_spec *s, int32_t seq, const int32_t *tokens, int32_t n, const void *img,
                                  uint64_t size, spex_error *err);
/* Forgets sequence seq (caches cleared, stats kept until the next begin). */
void spex_spec_seq_end(spex_spec *s, int32_t seq);
/* A begun sequence's own n_min and p_min (spex_spec_params' meaning; llama-server's per-request
 * speculative.n_min / p_min) until it ends; seq_start (and so seq_begin) sets the loop's. */
spex_status spex_spec_seq_set_draft_limits(spex_spec *s, int32_t seq, int32_t n_min, float p_min, spex_error *err);
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


spex_spec *spex_session_spec(spex_session *s);
spex_context *spex_session_context(spex_session *s);                 /* the target's           */
spex_draft_context *spex_session_draft_context(spex_session *s);     /* DFlash; else NULL      */
spex_context *spex_session_draft_model_context(spex_session *s);     /* draft-simple; else NULL */
const spex_drafter *spex_session_drafter(const spex_session *s);     /* DFlash; else NULL      */
const spex_model *spex_session_draft_model(const spex_session *s);   /* draft-simple; else NULL */

spex_status spex_spec_generate(spex_spec *spec, const spex_tokenizer *tok, const int32_t *prompt, int32_t n_prompt,
                               const spex_gen_params *params, spex_gen_result *res, spex_error *err);

#ifdef __cplusplus
}
#endif
#endif
