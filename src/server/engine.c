/*
 * engine.c — the scheduler of `spex serve`: slots, a bounded queue, one engine thread that
 * advances every busy slot in one spex_spec_step, adaptive draft length, the counters
 * behind /metrics and the per-slot snapshot behind /slots.
 *
 * What it is: server-api.md §14.2 on top of spex_spec. Each slot is a sequence id of one target
 * context (and one draft context); a step drafts every drafting slot's block in one drafter
 * batch and verifies all rows in one target batch (spex_spec_step does both). New requests
 * join between steps: their prompt runs through spex_spec_seq_begin, then they step with the
 * others. What it is not: HTTP (http.c) or prompt rendering / tokenization (done on the
 * connection thread, so the engine never allocates per request).
 *
 * Prompts. A slot keeps its KV cache (target and draft) after a request ends, with the
 * tokens it holds (hist). A new request goes to the free slot whose cache shares the longest
 * prefix with its prompt; that prefix is kept (timings.cache_n) and only the rest is run, in
 * chunks of at most SRV_PREFILL_CHUNK tokens per engine iteration over all prefilling slots,
 * so running generations keep streaming between chunks (spex_spec_seq_feed / start).
 *
 * Adaptive draft length (§14.2 rule 5; docs/server.md "Speculation under concurrency"):
 *  - cost model, measured online: the target verify time of a step is fitted as v0 + v1·rows
 *    (rows = Σ(n_s + 1)), the drafter time as d0 + d1·rows_drafted, both by exponentially
 *    decayed least squares over spex_spec_total_stats deltas; and each step's times also go
 *    into buckets by row count (powers of two), whose measured means replace the line where
 *    they exist (a 64-row verify on a small target is compute-bound, dearer than the line
 *    through 8-row steps predicts);
 *  - acceptance: each slot keeps decayed counts of accepted / rejected draft positions, a
 *    geometric model p_s, so E_s(n) = Σ_{k=0..n} p_s^k tokens per step;
 *  - warm-up: the first 8 steps alternate full drafts and plain steps, so the verify fit sees
 *    two row counts from the start (a fit over one row count has no slope);
 *  - choice: start from n_s = 0 for all, then greedily move to the (slot, longer length) with
 *    the best step tokens/second while it improves (whole-block moves: the drafter's fixed
 *    cost makes one-position moves stop too early); if the result is not at least min_gain ×
 *    the no-draft rate, nobody drafts. Probes: a slot that has not drafted for 64 steps (and
 *    after the warm-up) drafts if the rule would draft it with an optimistic
 *    acceptance at the current load, so a stale low p_s can recover; at loads where drafting
 *    cannot pay, nobody probes;
 *  - realized-rate guard: per number of stepping slots, decayed tokens and seconds of the
 *    steps that drafted and of those that did not; where the drafting ones measured fewer
 *    tokens per second, nobody drafts or probes but for one step in SRV_GUARD_EVERY. A load
 *    not yet measured inherits the veto of the nearest lighter load that was; a load that
 *    drafts without plain-step measurements gets a plain step in SRV_GUARD_EXPLORE until it has
 *    them (else the guard could never see drafting lose there);
 *  - backlogs: a slot that starts drafting first injects the features it deferred (its prompt,
 *    its plain steps; spex_spec_stats.t_flush). That one-off cost stays out of the drafter fit
 *    (which prices a step's rows) but counts in the guard's drafted rate (it is a price of
 *    drafting, spread by the decay over the steps around it), and the search charges a slot
 *    that would start drafting its share of it (srv_backlog_price); /metrics shows it apart.
 */
#include "model/api.h"
#include "server/server.h"
#include "spec/api.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SRV_PROBE_EVERY 64   /* steps between full-length probes of a non-drafting slot */
#define SRV_WARMUP_STEPS 8   /* first engine steps: alternately full drafts and none (fits' spread) */
#define SRV_PRIOR_STEPS 2.0  /* weight of the server-wide acceptance in a new request's estimate */
#define SRV_DECAY 0.97       /* forgetting factor of the cost fits and acceptance counts */
#define SRV_GUARD_W 8.0      /* steps of each kind (decayed) before the realized-rate guard acts */
#define SRV_GUARD_EXPLORE 16 /* a load without plain-step measurements gets a plain step in this many */
#define SRV_GUARD_EVERY 256  /* a vetoed load still drafts one step in this many, so its rate stays fresh
                             * (rarely: such a step injects every pending feature of its slots) */

/* ======================================================================== */
/* Tasks                                                                     */
/* ======================================================================== */

srv_task *srv_task_new(void) {
    srv_task *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->cap = 4096;
    t->text = malloc(t->cap);
    if (!t->text) {
        free(t);
        return NULL;
    }
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    t->refs = 1;
    t->slot = -1;
    t->n_predict = -1;
    t->spec_n_max = -1;
    t->spec_n_min = -1;
    t->spec_p_min = -1.0f;
    t->stop_word = -1;
    t->slot_used = -1;
    return t;
}

void srv_task_release(srv_task *t) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    int left = --t->refs;
    pthread_mutex_unlock(&t->mu);
    if (left > 0) return;
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    spex_sampler_free(t->smp);
    spex_detok_stream_free(t->ds);
    free(t->ids);
    free(t->text);
    free(t->gen_ids);
    free(t);
}

/* ======================================================================== */
/* The engine                                                                */
/* ======================================================================== */

typedef struct srv_fit {   /* decayed least squares y = a + b x */
    double w, x, y, xx, xy;
} srv_fit;

typedef struct srv_metrics {
    double prompt_tokens, prompt_seconds, predicted_tokens, predicted_seconds;
    double prompt_tokens_cached;   /* prompt tokens reused from a slot's cache, not processed */
    double i_prompt_tokens, i_prompt_seconds, i_predicted_tokens, i_predicted_seconds;   /* since last scrape */
    uint64_t n_decode, busy_slot_sum, n_tokens_max;
    uint64_t spec_drafts, spec_draft_tokens, spec_accepted, spec_disabled_steps, verify_rows;
    uint64_t spec_vetoed_steps;   /* steps where the realized-rate guard overruled the cost model */
    uint64_t spec_cut_tokens;     /* drafted tokens the draft cut left unverified                */
    uint64_t accepted_at[SPEX_DRAFT_MAX_N];
    bool any_spec;
    uint64_t requests_total, requests_cancelled;
    uint64_t embd_requests, embd_tokens;   /* embeddings jobs finished and their input tokens */
    double draft_seconds, verify_seconds, backlog_seconds;
} srv_metrics;

#define SRV_PREFILL_CHUNK 256

struct srv_engine {
    srv_engine_params p;
    spex_spec *spec;
    const spex_tokenizer *tok;
    bool has_draft;
    int32_t n_max;

    pthread_t thread;
    pthread_mutex_t mu;       /* queue, slots' task pointers, metrics, stop */
    pthread_cond_t cv;
    bool stop, started;
    srv_task **q;             /* ring of queue_max */
    int q_head, q_len;
    srv_task **slots;         /* [n_slots], NULL when free */
    int n_busy;
    int64_t next_task_id;     /* srv_task.id_task of the next submission */

    /* engine-thread only (allocated at start) */
    int32_t *seqs, *max_emit;
    srv_task **step_tasks, **admitted;
    spex_spec_out *outs;
    uint64_t n_steps;
    srv_fit fit_v, fit_d;
    srv_bucket vb[SRV_BUCKETS], db[SRV_BUCKETS];   /* measured times by rows / drafted rows */
    double g_acc_s, g_acc_f;   /* acceptance counts over all requests (prior of a new one) */
    spex_realized real[65];    /* the realized-rate guard, by stepping slots (1..64)         */
    double bl_sec, bl_tok;     /* decayed backlog injection: seconds and features injected  */
    double len_s, len_w;       /* decayed sum / weight of finished requests' generated tokens */
    int32_t pend[64];          /* this step's slots' pending features (choose_drafts)        */
    srv_embd_job *eq_head, *eq_tail;   /* embeddings jobs waiting (under mu)                  */
    srv_slot_job *sq_head, *sq_tail;   /* slot actions waiting (under mu; slot_action_one)      */
    spex_batch_token *embd_scratch;    /* [the embeddings context's n_batch_max]              */
    int32_t **hist;           /* [n_slots][hist_cap] tokens in each slot's cache, in order  */
    int32_t *hist_len;        /* [n_slots] (valid up to spex_spec_seq_len of the slot)      */
    int32_t hist_cap;
    int32_t pub_cached[64];   /* under mu: each idle slot's cached tokens (GET /slots n_cached) */
    srv_metrics m;
};

static void fit_add(srv_fit *f, double x, double y) {
    f->w = f->w * SRV_DECAY + 1;
    f->x = f->x * SRV_DECAY + x;
    f->y = f->y * SRV_DECAY + y;
    f->xx = f->xx * SRV_DECAY + x * x;
    f->xy = f->xy * SRV_DECAY + x * y;
}

/* a, b of the fit; b from the spread of x when there is one, else a pure-rows prior. */
static void fit_get(const srv_fit *f, double *a, double *b) {
    if (f->w <= 0) {
        *a = 0, *b = 0;
        return;
    }
    double den = f->w * f->xx - f->x * f->x;
    double bb = den > 1e-9 * f->w * f->w ? (f->w * f->xy - f->x * f->y) / den : 0;
    if (bb < 0) bb = 0;
    double aa = (f->y - bb * f->x) / f->w;
    if (aa < 0) aa = 0;
    *a = aa, *b = bb;
}

/* Appends text to t (under its lock) and recomputes what may be released. */
static void task_append(srv_task *t, const char *s, size_t n) {
    if (t->len + n + 1 > t->cap) {
        size_t nc = t->cap;
        while (t->len + n + 1 > nc) nc *= 2;
        char *nt = realloc(t->text, nc);
        if (!nt) return;   /* text dropped rather than a crash; the request still ends */
        t->text = nt, t->cap = nc;
    }
    memcpy(t->text + t->len, s, n);
    t->len += n;
    t->text[t->len] = 0;
}

/* Stop strings (§8.3): cut at the first occurrence; otherwise release all but the longest
 * tail that is a prefix of some stop string. Returns true when a stop string matched. */
static bool task_check_stop(srv_task *t, size_t from) {
    for (int i = 0; i < t->n_stop; i++) {
        size_t k = strlen(t->stop[i]);
        size_t start = from >= k ? from - k + 1 : 0;
        for (size_t j = start; j + k <= t->len; j++)
            if (!memcmp(t->text + j, t->stop[i], k)) {
                t->stop_word = i;
                t->len = j;
                t->text[j] = 0;
                t->released = j;
                return true;
            }
    }
    size_t hold = 0;
    for (int i = 0; i < t->n_stop; i++) {
        size_t k = strlen(t->stop[i]);
        for (size_t h = k - 1; h > hold; h--)
            if (h <= t->len && !memcmp(t->text + t->len - h, t->stop[i], h)) {
                hold = h;
                break;
            }
    }
    t->released = t->len - hold;
    return false;
}

/* Ends a task (engine thread): frees the slot, publishes the result. */
static void task_finish(srv_engine *e, srv_task *t, const char *finish, int err_code, const char *err_msg) {
    uint64_t n_steps = 0;
    if (t->slot >= 0 && t->t_prefilled > 0) n_steps = spex_spec_seq_stats(e->spec, t->slot)->n_steps;
    if (t->slot >= 0) {
        /* Keep the cache for prefix reuse unless something went wrong with it. */
        int32_t len = spex_spec_seq_len(e->spec, t->slot);
        if (err_code || len > e->hist_len[t->slot]) {
            spex_spec_seq_end(e->spec, t->slot);
            e->hist_len[t->slot] = 0;
        } else {
            e->hist_len[t->slot] = len;
        }
    }
    pthread_mutex_lock(&t->mu);
    if (!err_code && t->ds && strcmp(finish, "stop_string")) {
        spex_str tail = spex_detok_stream_flush(t->ds);
        if (tail.len) task_append(t, tail.ptr, tail.len);
    }
    t->released = t->len;
    t->finish = !strcmp(finish, "stop_string") ? "stop" : finish;
    t->err_code = err_code;
    if (err_msg) snprintf(t->err_msg, sizeof t->err_msg, "%s", err_msg);
    t->tm.predicted_n = t->n_gen;
    if (t->t_prefilled > 0) t->tm.predicted_ms = ((t->t_last > t->t_prefilled ? t->t_last : t->t_prefilled) - t->t_prefilled) * 1e3;
    srv_timings tm = t->tm;
    pthread_mutex_unlock(&t->mu);
    if (tm.draft_n > 0)   /* §15: community scripts split this line on whitespace */
        fprintf(stderr, "slot %d: draft acceptance rate = %0.5f (%5lld accepted / %5lld generated), mean len = %.2f\n",
                t->slot, (double)tm.draft_n_accepted / (double)tm.draft_n, (long long)tm.draft_n_accepted,
                (long long)tm.draft_n, 1.0 + (double)tm.draft_n_accepted / (double)(n_steps ? n_steps : 1));

    if (t->t_prefilled > 0 && !err_code) {   /* the backlog price's view of request lengths */
        e->len_s = e->len_s * SRV_DECAY + (double)t->n_gen;
        e->len_w = e->len_w * SRV_DECAY + 1.0;
    }
    pthread_mutex_lock(&e->mu);
    if (t->slot >= 0) {
        e->slots[t->slot] = NULL;
        e->n_busy--;
        e->pub_cached[t->slot] = e->hist_len[t->slot];
    }
    if (t->t_prefilled > 0) {
        e->m.predicted_tokens += (double)t->n_gen;
        e->m.i_predicted_tokens += (double)t->n_gen;
        e->m.predicted_seconds += tm.predicted_ms * 1e-3;
        e->m.i_predicted_seconds += tm.predicted_ms * 1e-3;
    }
    e->m.requests_total++;
    if (err_code == 499) e->m.requests_cancelled++;
    pthread_mutex_unlock(&e->mu);
    /* Done only now: a client that reads /metrics right after its response sees this request
     * counted (the counters above are updated first). */
    pthread_mutex_lock(&t->mu);
    t->done = true;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    t->slot = -1;
    srv_task_release(t);   /* the engine's reference */
}

/* Records tokens the speculative loop emitted for slot s (all of them, also those a stop cuts
 * off: the cache holds them). */
static void hist_add(srv_engine *e, int s, const int32_t *toks, int n) {
    for (int k = 0; k < n && e->hist_len[s] < e->hist_cap; k++) e->hist[s][e->hist_len[s]++] = toks[k];
}

/* Emits tokens of one step for t; returns true when t finished. */
static bool task_emit(srv_engine *e, srv_task *t, const int32_t *toks, int n) {
    int32_t bos = spex_token_bos(e->tok);
    spex_error err = {0};
    t->t_last = spex_now_s();
    for (int k = 0; k < n; k++) {
        int32_t id = toks[k];
        if (spex_token_is_eog(e->tok, id) || id == bos) {
            task_finish(e, t, "stop", 0, NULL);
            return true;
        }
        t->n_gen++;
        spex_str piece;
        if (spex_detok_stream_push(t->ds, id, &piece, &err) != SPEX_OK) {
            task_finish(e, t, "error", 500, err.msg);
            return true;
        }
        bool stopped = false;
        pthread_mutex_lock(&t->mu);
        if (t->n_gen_ids == t->cap_gen_ids) {   /* grows like the text: amortized, not per token */
            int nc = t->cap_gen_ids ? 2 * t->cap_gen_ids : 256;
            int32_t *p = realloc(t->gen_ids, sizeof *p * (size_t)nc);
            if (p) t->gen_ids = p, t->cap_gen_ids = nc;
        }
        if (t->n_gen_ids < t->cap_gen_ids) t->gen_ids[t->n_gen_ids++] = id;
        size_t from = t->len;
        task_append(t, piece.ptr, piece.len);
        if (piece.len) stopped = task_check_stop(t, from);
        pthread_cond_broadcast(&t->cv);
        pthread_mutex_unlock(&t->mu);
        if (stopped) {
            task_finish(e, t, "stop_string", 0, NULL);
            return true;
        }
        if (t->n_predict >= 0 && t->n_gen >= t->n_predict) {
            task_finish(e, t, "length", 0, NULL);
            return true;
        }
    }
    if (spex_spec_seq_len(e->spec, t->slot) >= e->p.n_ctx_slot) {
        t->truncated = true;   /* read by the connection thread only after done (under mu) */
        task_finish(e, t, "length", 0, NULL);
        return true;
    }
    return false;
}

/* Longest common prefix of the slot's cached tokens and a prompt, leaving the prompt's last
 * token to run (spex_spec_seq_start needs it for the first logits). */
static int32_t common_prefix(const srv_engine *e, int s, const int32_t *ids, int32_t n) {
    int32_t have = e->hist_len[s], len = spex_spec_seq_len(e->spec, s);
    if (len < have) have = len;
    int32_t k = 0;
    while (k < have && k < n - 1 && e->hist[s][k] == ids[k]) k++;
    /* A recurrent target (qwen35) keeps states of only its last positions: reuse the prefix
     * when its state is still held, else start from 0. */
    if (k > 0 && !spex_spec_seq_can_keep(e->spec, s, k)) k = 0;
    return k;
}

/* Advances t's prompt by at most *budget tokens; starts it once the prompt is in. */
static void task_prefill(srv_engine *e, srv_task *t, int32_t *budget) {
    spex_error err = {0};
    if (!t->admitted_once) {
        t->admitted_once = true;
        t->t_start = spex_now_s();
        pthread_mutex_lock(&t->mu);
        bool cancelled = t->cancelled;
        pthread_mutex_unlock(&t->mu);
        if (cancelled) {
            task_finish(e, t, "error", 499, "cancelled");
            return;
        }
        if (t->n_predict == 0) {
            t->t_prefilled = t->t_last = t->t_start;
            task_finish(e, t, "length", 0, NULL);
            return;
        }
        int32_t k = common_prefix(e, t->slot, t->ids, t->n_ids);
        /* Settle both caches at the reused prefix (feed with no tokens). */
        if (spex_spec_seq_feed(e->spec, t->slot, k, t->ids, 0, &err) != SPEX_OK) {
            task_finish(e, t, "error", 500, err.msg);
            return;
        }
        t->fed = k;
        t->tm.cache_n = k;
        e->hist_len[t->slot] = 0;
        hist_add(e, t->slot, t->ids, t->n_ids);
    }
    int32_t c = t->n_ids - 1 - t->fed;
    if (c > *budget) c = *budget;
    if (c > 0) {
        if (spex_spec_seq_feed(e->spec, t->slot, t->fed, t->ids + t->fed, c, &err) != SPEX_OK) {
            task_finish(e, t, "error", 500, err.msg);
            return;
        }
        t->fed += c;
        *budget -= c;
    }
    if (t->fed < t->n_ids - 1) return;   /* more chunks next iteration */
    int32_t first;
    if (spex_spec_seq_start(e->spec, t->slot, t->ids[t->n_ids - 1], t->smp, &first, &err) != SPEX_OK) {
        task_finish(e, t, "error", 500, err.msg);
        return;
    }
    if ((t->spec_n_min >= 0 || t->spec_p_min >= 0) && e->has_draft) {
        /* n_min within the request's draft length, as /slots shows it */
        const spex_spec_params *sp = spex_spec_get_params(e->spec);
        int32_t n_min = t->spec_n_min >= 0 ? t->spec_n_min : sp->n_min, n_max = e->n_max;
        if (t->spec_n_max >= 0 && t->spec_n_max < n_max) n_max = t->spec_n_max;
        if (n_min > n_max) n_min = n_max;
        if (spex_spec_seq_set_draft_limits(e->spec, t->slot, n_min, t->spec_p_min >= 0 ? t->spec_p_min : sp->p_min,
                                           &err) != SPEX_OK) {
            task_finish(e, t, "error", 500, err.msg);
            return;
        }
    }
    t->t_prefilled = spex_now_s();
    int32_t processed = t->n_ids - (int32_t)t->tm.cache_n;
    t->tm.prompt_n = processed;
    t->tm.prompt_ms = (t->t_prefilled - t->t_start) * 1e3;
    /* prior: the server's recent acceptance (all requests), worth SRV_PRIOR_STEPS drafted
     * steps, so a new request drafts from its first step where drafting has been paying and
     * its own outcomes take over within a few steps; p = 0.5 before anything was drafted */
    double gp = e->g_acc_s + e->g_acc_f > 0 ? e->g_acc_s / (e->g_acc_s + e->g_acc_f) : 0.5;
    t->p_acc_s = SRV_PRIOR_STEPS * gp, t->p_acc_f = SRV_PRIOR_STEPS * (1 - gp);
    t->last_probe = e->n_steps;
    pthread_mutex_lock(&e->mu);
    e->m.prompt_tokens += processed;
    e->m.prompt_tokens_cached += (double)t->tm.cache_n;
    t->pub_cache_n = t->tm.cache_n;
    t->pub_processed = processed;
    e->m.i_prompt_tokens += processed;
    e->m.prompt_seconds += t->t_prefilled - t->t_start;
    e->m.i_prompt_seconds += t->t_prefilled - t->t_start;
    e->m.n_decode++;
    e->m.busy_slot_sum += (uint64_t)e->n_busy;
    pthread_mutex_unlock(&e->mu);
    hist_add(e, t->slot, &first, 1);
    task_emit(e, t, &first, 1);
}

double srv_expect_tokens(double p, int n) {
    double s = 0, pk = 1;
    for (int k = 0; k <= n; k++) s += pk, pk *= p;
    return s;
}

static int bucket_of(int x) {
    int k = 0;
    while (x > 1 && k < SRV_BUCKETS - 1) x >>= 1, k++;
    return k;
}

static void bucket_add(srv_bucket *b, int x, double t) {
    srv_bucket *k = &b[bucket_of(x)];
    k->t = k->t * SRV_DECAY + t;
    k->r = k->r * SRV_DECAY + x;
    k->w = k->w * SRV_DECAY + 1;
}

/* The time of x rows: the measured bucket's mean moved along the fit's slope, else the fit. */
static double measured_or_fit(const srv_bucket *b, double a0, double a1, int x) {
    if (b) {
        const srv_bucket *k = &b[bucket_of(x)];
        if (k->w >= 1.0) {
            const double t = k->t / k->w, v = t + a1 * ((double)x - k->r / k->w);
            return v > 0 ? v : t;
        }
    }
    return a0 + a1 * x;
}

static double cost_of(const srv_step_cost *c, int rows, int drows) {
    const double sunk = c->d0_sunk ? c->d0 : 0;
    return measured_or_fit(c->vb, c->v0, c->v1, rows) + sunk +
           (drows > 0 ? measured_or_fit(c->db, c->d0, c->d1, drows) - sunk : 0);
}

/* cost_of plus the start prices of the slots that draft in nd. */
static double cost_nd(const srv_step_cost *c, int n, const int *nd, int rows, int drows) {
    double t = cost_of(c, rows, drows);
    if (c->start)
        for (int i = 0; i < n; i++)
            if (nd[i] > 0) t += c->start[i];
    return t;
}

double srv_backlog_price(int32_t pending, double sec_per_tok, double step_tok, double remaining) {
    if (pending <= 0 || sec_per_tok <= 0) return 0;
    const double share = remaining > step_tok ? step_tok / remaining : 1.0;
    return (double)pending * sec_per_tok * share;
}

/* Each move lengthens one slot's draft to ANY longer length, not just by one: the drafter's
 * per-step cost d0 and the block's extra row make the first drafted position expensive, so
 * one-position moves would stop at 0 where a whole block pays (the fit has d1 = 0 when every
 * drafted step has the same rows). */
static double greedy_drafts(const srv_step_cost *c, bool d0_sunk, int n, const double *p, const int *cap,
                            const bool *fixed, int *nd, int *rows_io, int *drows_io) {
    /* d0_sunk: the drafter's fixed cost counts as paid in every configuration */
    srv_step_cost cc = *c;
    cc.d0_sunk = d0_sunk;
    int rows = *rows_io, drows = *drows_io;
    double tok = 0, extra = 0;
    for (int i = 0; i < n; i++) {
        tok += srv_expect_tokens(p[i], nd[i]);
        if (c->start && nd[i] > 0) extra += c->start[i];
    }
    for (;;) {
        double best = tok / (cost_of(&cc, rows, drows) + extra);
        int bi = -1, bn = 0;
        for (int i = 0; i < n; i++) {
            if (fixed[i]) continue;
            double e0 = srv_expect_tokens(p[i], nd[i]);
            const double ex = extra + (c->start && !nd[i] ? c->start[i] : 0);
            for (int m = nd[i] + 1; m <= cap[i]; m++) {
                int add = m - nd[i];
                double r = (tok + srv_expect_tokens(p[i], m) - e0) /
                           (cost_of(&cc, rows + add, drows + add + (nd[i] ? 0 : 1)) + ex);
                if (r > best * 1.0001) best = r, bi = i, bn = m;
            }
        }
        if (bi < 0) break;
        int add = bn - nd[bi];
        if (c->start && !nd[bi]) extra += c->start[bi];
        tok += srv_expect_tokens(p[bi], bn) - srv_expect_tokens(p[bi], nd[bi]);
        drows += add + (nd[bi] ? 0 : 1);
        rows += add;
        nd[bi] = bn;
    }
    *rows_io = rows, *drows_io = drows;
    return tok;
}

/* Two greedy searches, the better one wins: one with the true cost, and one where the
 * drafter's fixed cost d0 is taken as paid — several slots can make drafting pay together
 * when no single slot's block pays d0 alone, which the first search cannot see. */
double srv_best_drafts(const srv_step_cost *c, int n, const double *p, const int *cap, const bool *fixed, int *nd,
                       int *rows_io, int *drows_io) {
    int nd2[64], rows2 = *rows_io, drows2 = *drows_io;
    for (int i = 0; i < n && i < 64; i++) nd2[i] = nd[i];
    double tok = greedy_drafts(c, false, n, p, cap, fixed, nd, rows_io, drows_io);
    if (n > 64 || c->d0 <= 0) return tok;
    double tok2 = greedy_drafts(c, true, n, p, cap, fixed, nd2, &rows2, &drows2);
    if (tok2 / cost_nd(c, n, nd2, rows2, drows2) > tok / cost_nd(c, n, nd, *rows_io, *drows_io)) {
        for (int i = 0; i < n; i++) nd[i] = nd2[i];
        *rows_io = rows2, *drows_io = drows2;
        tok = tok2;
    }
    return tok;
}

bool srv_guard_veto(const spex_realized *real, int n, double min_w) {
    for (int m = n; m >= 1; m--) {
        const spex_realized *r = &real[m];
        if (r->w[0] < min_w || r->w[1] < min_w) continue;
        /* the nearest measured load decides; from a lighter one that is a veto or nothing */
        return spex_realized_veto(r, min_w);
    }
    return false;
}

bool srv_guard_explore(const spex_realized *real, int n, double min_w, uint64_t step, int every) {
    const spex_realized *r = &real[n];
    return every > 0 && r->w[1] > 0 && r->w[0] < min_w && step % (uint64_t)every == 0;
}

/* max_emit for each stepping task (§14.2 rule 5; the header comment says how). */
static void choose_drafts(srv_engine *e, int n) {
    int nd[64], cap[64];
    bool due[64], fixed[64];
    double p[64], start[64];   /* start: the slots' backlog prices (srv_step_cost.start) */
    for (int i = 0; i < n; i++) {
        srv_task *t = e->step_tasks[i];
        long rem = t->n_predict >= 0 ? t->n_predict - t->n_gen : SPEX_DRAFT_MAX_N + 1;
        int c = e->has_draft ? e->n_max : 0;
        if (t->spec_n_max >= 0 && t->spec_n_max < c) c = t->spec_n_max;
        if (rem - 1 < c) c = (int)(rem - 1 > 0 ? rem - 1 : 0);
        cap[i] = c;
        nd[i] = 0;
        fixed[i] = false;
        p[i] = t->p_acc_s / (t->p_acc_s + t->p_acc_f);
        due[i] = c > 0 && e->n_steps - t->last_probe >= SRV_PROBE_EVERY;
        e->pend[i] = e->has_draft ? spex_spec_seq_pending(e->spec, e->seqs[i]) : 0;
    }
    if (!e->p.adaptive || n > 64) {
        if (!e->p.adaptive)
            for (int i = 0; i < n; i++) nd[i] = cap[i];
    } else if (e->n_steps < SRV_WARMUP_STEPS) {
        /* warm-up: full drafts and plain steps alternate, so both fits see two row counts */
        if (e->n_steps % 2 == 0)
            for (int i = 0; i < n; i++) nd[i] = cap[i];
    } else if (srv_guard_explore(e->real, n, SRV_GUARD_W, e->n_steps, SRV_GUARD_EXPLORE)) {
        /* a plain step, so that the guard learns this load's plain rate (see srv_guard_explore) */
    } else if (srv_guard_veto(e->real, n, SRV_GUARD_W) && e->n_steps % SRV_GUARD_EVERY != 0) {
        /* The realized-rate guard: where the steps that drafted have delivered fewer tokens per
         * second than the plain ones at this number of slots, nobody drafts (nor probes), but
         * for one step in SRV_GUARD_EVERY, which keeps the drafting side's rate current. The
         * cost model's search is skipped (about 2 µs for 8 slots: small, but for nothing). */
        e->m.spec_vetoed_steps++;
    } else {
        srv_step_cost c;
        fit_get(&e->fit_v, &c.v0, &c.v1);
        fit_get(&e->fit_d, &c.d0, &c.d1);
        c.vb = e->vb, c.db = e->db, c.d0_sunk = false, c.start = NULL;
        if (c.v0 + c.v1 <= 0) c.v0 = 1e-3;
        /* Backlog prices: a slot with deferred features pays their injection once when it starts
         * drafting, spread over the tokens it has left (its n_predict, and no more than the
         * recent requests' mean length suggests). */
        if (e->bl_tok >= 1.0 && e->bl_sec > 0) {
            const double spt = e->bl_sec / e->bl_tok, mean_len = e->len_w >= 1.0 ? e->len_s / e->len_w : 0;
            for (int i = 0; i < n; i++) {
                const srv_task *t = e->step_tasks[i];
                double rem = t->n_predict >= 0 ? (double)(t->n_predict - t->n_gen) : 1e9;
                if (mean_len > 0 && mean_len - (double)t->n_gen < rem) rem = mean_len - (double)t->n_gen;
                start[i] = srv_backlog_price(e->pend[i], spt, srv_expect_tokens(p[i], cap[i]), rem);
            }
            c.start = start;
        }
        int rows = n, drows = 0;
        double tok = srv_best_drafts(&c, n, p, cap, fixed, nd, &rows, &drows);
        double base_rate = (double)n / cost_of(&c, n, 0);
        if (tok / cost_nd(&c, n, nd, rows, drows) < base_rate * e->p.min_gain) {
            for (int i = 0; i < n; i++) nd[i] = 0;
            rows = n, drows = 0;
        }
        /* Probes. A slot that drafts refreshes its acceptance estimate by drafting; one that
         * has not drafted for SRV_PROBE_EVERY steps may be kept off by a stale, low p_s. It
         * is probed only if the rule would draft it with an optimistic p (the best of its own
         * and the other slots' estimates, at least 0.8) at the current load, and then at the
         * length the rule picks for that p: at a load where drafting cannot pay (many slots
         * on a small target), nobody probes and the step costs what a plain step does. */
        double p_hi = 0.8;
        for (int i = 0; i < n; i++)
            if (p[i] > p_hi) p_hi = p[i];
        for (int i = 0; i < n; i++) {
            if (!due[i] || nd[i] > 0) continue;
            int tnd[64], trows = rows, tdrows = drows;
            double tp[64];
            for (int j = 0; j < n; j++) tnd[j] = nd[j], tp[j] = p[j], fixed[j] = j != i;
            tp[i] = p_hi;
            double ttok = srv_best_drafts(&c, n, tp, cap, fixed, tnd, &trows, &tdrows);
            fixed[i] = false;
            if (tnd[i] > 0 && ttok / cost_nd(&c, n, tnd, trows, tdrows) >= base_rate * e->p.min_gain) {
                nd[i] = tnd[i];
                rows = trows, drows = tdrows;
            }
        }
    }
    bool any = false;
    for (int i = 0; i < n; i++) {
        e->max_emit[i] = nd[i] + 1;
        any |= nd[i] > 0;
        if (nd[i] > 0) e->step_tasks[i]->last_probe = e->n_steps;   /* its estimate is fresh again */
    }
    if (e->has_draft && !any) e->m.spec_disabled_steps++;
}

static void engine_step(srv_engine *e) {
    int n = 0;
    for (int s = 0; s < e->p.n_slots; s++) {
        srv_task *t = e->slots[s];   /* only the engine thread writes non-NULL entries */
        if (!t || t->t_prefilled <= 0) continue;
        pthread_mutex_lock(&t->mu);
        bool c = t->cancelled;
        pthread_mutex_unlock(&t->mu);
        if (c) {
            task_finish(e, t, "error", 499, "cancelled");
            continue;
        }
        e->step_tasks[n] = t;
        e->seqs[n] = t->slot;
        n++;
    }
    if (n == 0) return;
    choose_drafts(e, n);
    const spex_spec_stats *tot = spex_spec_total_stats(e->spec);
    /* The verify side of the cost model includes the step's "other" time: per verify row the
     * loop runs the sampler over the vocabulary and injects features, which grows with rows
     * just like the target batch does. */
    double td0 = tot->t_draft, tv0 = tot->t_verify + tot->t_other, tf0 = tot->t_flush;
    spex_error err = {0};
    if (spex_spec_step(e->spec, e->seqs, n, e->max_emit, e->outs, &err) != SPEX_OK) {
        for (int i = 0; i < n; i++) task_finish(e, e->step_tasks[i], "error", 500, err.msg);
        return;
    }
    e->n_steps++;
    double dt_d = tot->t_draft - td0, dt_v = tot->t_verify + tot->t_other - tv0;
    /* A slot that drafts after steps without a draft first injects that backlog (its prompt,
     * its plain steps): a one-off cost of the switch, not of this step's rows. It stays out of
     * the drafter fit (the cost model prices a step's rows), but the guard's drafted rate
     * includes it: with short requests the prompts' injection is a real price of drafting
     * (at -np 4 on the default pair, 0.18 s of 2.4 s of decoding), and the guard's decayed
     * sums spread each one-off over the steps around it. */
    double dt_f = tot->t_flush - tf0;
    if (dt_f > dt_d) dt_f = dt_d;
    int rows = 0, drows = 0, drafted_seqs = 0;
    for (int i = 0; i < n; i++) {
        /* the drafter ran n_drafted + n_cut slots (the draft cut trims after the walk), the
         * target verified n_drafted + 1 rows */
        const int walked = e->outs[i].n_drafted + e->outs[i].n_cut;
        rows += e->outs[i].n_drafted + 1;
        if (walked) drows += walked + 1, drafted_seqs++;
    }
    fit_add(&e->fit_v, rows, dt_v);
    bucket_add(e->vb, rows, dt_v);
    if (e->has_draft && n <= 64) {
        int emitted = 0;
        for (int i = 0; i < n; i++) emitted += e->outs[i].n;
        spex_realized_add(&e->real[n], drafted_seqs > 0, emitted, dt_d + dt_v);
    }
    if (drows) {
        fit_add(&e->fit_d, drows, dt_d - dt_f);
        bucket_add(e->db, drows, dt_d - dt_f);
    }
    if (dt_f > 0 && n <= 64) {   /* the backlog's price per injected feature */
        double flushed = 0;
        for (int i = 0; i < n; i++)
            if (e->outs[i].n_drafted + e->outs[i].n_cut) flushed += e->pend[i];
        if (flushed >= 1.0) {
            e->bl_sec = e->bl_sec * SRV_DECAY + dt_f;
            e->bl_tok = e->bl_tok * SRV_DECAY + flushed;
        }
    }

    pthread_mutex_lock(&e->mu);
    e->m.n_decode++;
    e->m.busy_slot_sum += (uint64_t)e->n_busy;
    e->m.verify_rows += (uint64_t)rows;
    e->m.draft_seconds += dt_d;
    e->m.backlog_seconds += dt_f;
    e->m.verify_seconds += dt_v;
    for (int i = 0; i < n; i++) {
        const spex_spec_out *o = &e->outs[i];
        e->m.spec_cut_tokens += (uint64_t)o->n_cut;
        if (!o->n_drafted) continue;
        int acc = o->n - 1;
        e->m.any_spec = true;
        e->m.spec_drafts++;
        e->m.spec_draft_tokens += (uint64_t)o->n_drafted;
        e->m.spec_accepted += (uint64_t)acc;
        for (int k = 0; k < acc && k < SPEX_DRAFT_MAX_N; k++) e->m.accepted_at[k]++;
    }
    for (int s = 0; s < e->p.n_slots; s++) {
        int32_t len = e->slots[s] ? spex_spec_seq_len(e->spec, s) : 0;
        if ((uint64_t)len > e->m.n_tokens_max) e->m.n_tokens_max = (uint64_t)len;
    }
    pthread_mutex_unlock(&e->mu);

    for (int i = 0; i < n; i++) {
        srv_task *t = e->step_tasks[i];
        const spex_spec_out *o = &e->outs[i];
        if (o->n_drafted) {
            int acc = o->n - 1;
            t->tm.draft_n += o->n_drafted;
            t->tm.draft_n_accepted += acc;
            t->tm.draft_rounds++;
            t->p_acc_s = t->p_acc_s * SRV_DECAY + acc;
            t->p_acc_f = t->p_acc_f * SRV_DECAY + (acc < o->n_drafted ? 1 : 0);
            e->g_acc_s = e->g_acc_s * SRV_DECAY + acc;
            e->g_acc_f = e->g_acc_f * SRV_DECAY + (acc < o->n_drafted ? 1 : 0);
        }
        hist_add(e, t->slot, o->tokens, o->n);
        if (task_emit(e, t, o->tokens, o->n)) e->step_tasks[i] = NULL;   /* finished: maybe freed */
    }
    /* GET /slots reads these under e->mu (srv_engine_slots_json) */
    pthread_mutex_lock(&e->mu);
    for (int i = 0; i < n; i++) {
        srv_task *t = e->step_tasks[i];
        if (!t) continue;
        t->pub_n_gen = t->n_gen;
        t->pub_draft_n = t->tm.draft_n;
        t->pub_draft_n_accepted = t->tm.draft_n_accepted;
    }
    pthread_mutex_unlock(&e->mu);
    if (e->p.step_delay_ms > 0) usleep((useconds_t)e->p.step_delay_ms * 1000u);
}

/* Runs inputs of the oldest embeddings job until SRV_PREFILL_CHUNK tokens have run this
 * iteration (one forward at least), so a large job does not stall running streams. Inputs go
 * several to a forward (spex_embed_batch: up to the context's sequences and batch), so the
 * weights are read once for all of them. A finished job leaves the queue and its waiter is
 * woken. */
static void embd_run(srv_engine *e) {
    pthread_mutex_lock(&e->mu);
    srv_embd_job *j = e->eq_head;
    if (j && j->cancelled) {   /* its client left: drop it, unfinished */
        e->eq_head = j->q_next;
        if (!e->eq_head) e->eq_tail = NULL;
        e->m.requests_cancelled++;
        j->done = true;
        pthread_cond_broadcast(&e->cv);
        j = NULL;
    }
    pthread_mutex_unlock(&e->mu);
    if (!j) return;
    spex_context *ctx = e->p.embd_ctx;
    const spex_context_params *cp = spex_context_get_params(ctx);
    const int64_t E = spex_model_get_hparams(spex_context_model(ctx))->n_embd;
    const bool none = e->p.embd_pooling == SPEX_POOLING_NONE;
    spex_error err = {0};
    spex_status st = SPEX_OK;
    for (int32_t budget = SRV_PREFILL_CHUNK; j->next < j->n_in && budget > 0 && st == SPEX_OK;) {
        int32_t k = 0, tok = 0;
        while (j->next + k < j->n_in && k < cp->n_seq_max && tok + j->n_ids[j->next + k] <= cp->n_batch_max)
            tok += j->n_ids[j->next + k++];
        st = spex_embed_batch(ctx, j->ids + j->ids_off, j->n_ids + j->next, k, (spex_pooling)e->p.embd_pooling,
                              e->embd_scratch, j->out + j->out_off, &err);
        j->next += k;
        j->ids_off += tok;
        j->out_off += (none ? tok : k) * E;
        budget -= tok;
    }
    if (st == SPEX_OK && j->next < j->n_in) return;
    pthread_mutex_lock(&e->mu);
    e->eq_head = j->q_next;
    if (!e->eq_head) e->eq_tail = NULL;
    if (st != SPEX_OK) {
        j->err_code = st == SPEX_ERR_INVALID_ARG || st == SPEX_ERR_RANGE ? 400 : 500;
        snprintf(j->err_msg, sizeof j->err_msg, "%.200s", err.msg);
    } else {
        e->m.embd_requests++;
        e->m.embd_tokens += (uint64_t)j->ids_off;
    }
    j->done = true;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

/* Slot actions (POST /slots/{id}?action=...): each waiting one runs now, between steps, on an
 * idle slot. The file I/O stays on the connection's thread (slots_io.c): here only the
 * cache image is copied out or in. */
static void slot_action_one(srv_engine *e, srv_slot_job *j) {
    double t0 = spex_now_s();
    int s = j->slot;
    spex_error err = {0};
    int32_t len = spex_spec_seq_len(e->spec, s);
    if (len > e->hist_len[s]) len = 0;   /* tokens unknown: nothing reusable (task_finish) */
    if (j->action == SRV_SLOT_ERASE) {
        spex_spec_seq_end(e->spec, s);
        e->hist_len[s] = 0;
        j->n = len;
    } else if (j->action == SRV_SLOT_SAVE) {
        if (len != spex_spec_seq_len(e->spec, s)) {   /* out of step: save it empty */
            spex_spec_seq_end(e->spec, s);
            e->hist_len[s] = 0;
        }
        uint64_t img = spex_spec_seq_image_size(e->spec, s);
        j->len = j->hdr_room + 4u * (size_t)len + (size_t)img;
        j->buf = malloc(j->len);
        if (!j->buf) {
            j->err_code = 500;
            snprintf(j->err_msg, sizeof j->err_msg, "out of memory (%zu bytes for slot %d's image)", j->len, s);
            return;
        }
        memcpy(j->buf + j->hdr_room, e->hist[s], 4u * (size_t)len);   /* u32 LE: see slots_io.c */
        if (spex_spec_seq_image_save(e->spec, s, j->buf + j->hdr_room + 4u * (size_t)len, img, &err) != SPEX_OK) {
            free(j->buf);
            j->buf = NULL;
            j->err_code = 500;
            snprintf(j->err_msg, sizeof j->err_msg, "%.250s", err.msg);
            return;
        }
        j->n = len;
    } else {
        e->hist_len[s] = 0;
        if (j->n < 0 || j->n > e->hist_cap ||
            spex_spec_seq_restore(e->spec, s, j->tokens, j->n, j->image, j->image_bytes, &err) != SPEX_OK) {
            j->err_code = 400;
            snprintf(j->err_msg, sizeof j->err_msg, "invalid slot file: %.230s", err.msg[0] ? err.msg : "bad size");
            return;
        }
        if (j->n > 0) memcpy(e->hist[s], j->tokens, sizeof(int32_t) * (size_t)j->n);
        e->hist_len[s] = j->n;
    }
    j->ms = (spex_now_s() - t0) * 1e3;
}

/* Runs the waiting actions whose slot is idle; an action on a busy slot waits until its
 * request ends (llama-server defers it the same way). engine_main runs it before admission,
 * so a slot freed by the last step gets its action before a new request can take it. */
static void slot_actions_run(srv_engine *e) {
    pthread_mutex_lock(&e->mu);
    srv_slot_job **pp = &e->sq_head, *prev = NULL;
    while (*pp) {
        srv_slot_job *j = *pp;
        if (e->slots[j->slot]) {   /* busy: stays queued */
            prev = j;
            pp = &j->q_next;
            continue;
        }
        *pp = j->q_next;
        if (e->sq_tail == j) e->sq_tail = prev;
        pthread_mutex_unlock(&e->mu);
        slot_action_one(e, j);   /* the slots array changes only on this thread */
        pthread_mutex_lock(&e->mu);
        e->pub_cached[j->slot] = e->hist_len[j->slot];
        j->done = true;
        pthread_cond_broadcast(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
}

bool srv_engine_slot_action(srv_engine *e, srv_slot_job *job) {
    pthread_mutex_lock(&e->mu);
    if (e->stop || job->slot < 0 || job->slot >= e->p.n_slots) {
        pthread_mutex_unlock(&e->mu);
        return false;
    }
    job->q_next = NULL;
    job->done = false;
    job->err_code = 0;
    if (e->sq_tail) e->sq_tail->q_next = job;
    else e->sq_head = job;
    e->sq_tail = job;
    pthread_cond_broadcast(&e->cv);
    while (!job->done) pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
    return true;
}

uint64_t srv_engine_image_max(srv_engine *e, int32_t n) { return spex_spec_seq_image_max(e->spec, n); }

static void *engine_main(void *arg) {
    srv_engine *e = arg;
    srv_task **admitted = e->admitted;
    for (;;) {
        int n_adm = 0;
        pthread_mutex_lock(&e->mu);
        while (!e->stop && e->n_busy == 0 && e->q_len == 0 && !e->eq_head && !e->sq_head)
            pthread_cond_wait(&e->cv, &e->mu);
        if (e->stop) {
            pthread_mutex_unlock(&e->mu);
            break;
        }
        /* slot actions first: a slot freed by the last step gets its waiting action (an erase,
         * a restore) before a new request can take the slot */
        pthread_mutex_unlock(&e->mu);
        slot_actions_run(e);
        pthread_mutex_lock(&e->mu);
        /* new requests join between steps, each on the free slot whose cache shares the
         * longest prefix with its prompt (a restored slot's included) */
        while (e->q_len > 0 && e->n_busy < e->p.n_slots) {
            srv_task *t = e->q[e->q_head];
            e->q_head = (e->q_head + 1) % e->p.queue_max;
            e->q_len--;
            int best = -1;
            int32_t best_k = -1;
            for (int s = 0; s < e->p.n_slots; s++) {
                if (e->slots[s]) continue;
                int32_t k = common_prefix(e, s, t->ids, t->n_ids);
                if (k > best_k) best_k = k, best = s;
            }
            t->slot = t->slot_used = best;
            e->slots[best] = t;
            e->n_busy++;
        }
        pthread_mutex_unlock(&e->mu);
        embd_run(e);
        /* Prompts advance by at most SRV_PREFILL_CHUNK tokens per iteration in all. */
        int32_t budget = SRV_PREFILL_CHUNK;
        for (int s = 0; s < e->p.n_slots; s++) {
            srv_task *t = e->slots[s];
            if (t && t->t_prefilled <= 0) {
                admitted[n_adm++] = t;
                task_prefill(e, t, &budget);
            }
        }
        engine_step(e);
    }
    /* shutdown: everything still queued or running ends with 503 */
    pthread_mutex_lock(&e->mu);
    while (e->q_len > 0) {
        srv_task *t = e->q[e->q_head];
        e->q_head = (e->q_head + 1) % e->p.queue_max;
        e->q_len--;
        pthread_mutex_unlock(&e->mu);
        task_finish(e, t, "error", 503, "the server is shutting down");
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    for (int s = 0; s < e->p.n_slots; s++)
        if (e->slots[s]) task_finish(e, e->slots[s], "error", 503, "the server is shutting down");
    pthread_mutex_lock(&e->mu);
    for (srv_embd_job *j = e->eq_head; j; j = j->q_next) {
        j->err_code = 503;
        snprintf(j->err_msg, sizeof j->err_msg, "the server is shutting down");
        j->done = true;
    }
    e->eq_head = e->eq_tail = NULL;
    for (srv_slot_job *j = e->sq_head; j; j = j->q_next) {
        j->err_code = 503;
        snprintf(j->err_msg, sizeof j->err_msg, "the server is shutting down");
        j->done = true;
    }
    e->sq_head = e->sq_tail = NULL;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

spex_status srv_engine_start(const srv_engine_params *p, spex_spec *spec, const spex_tokenizer *tok, int32_t n_max,
                             srv_engine **out, spex_error *err) {
    *out = NULL;
    if (p->n_slots < 1 || p->n_slots > 64 || p->queue_max < 1)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "slots must be 1..64 and the queue at least 1");
    srv_engine *e = calloc(1, sizeof *e);
    if (!e) return spex_error_set(err, SPEX_ERR_NOMEM, "out of memory");
    e->p = *p;
    e->spec = spec;
    e->tok = tok;
    e->n_max = n_max;
    e->has_draft = n_max > 0;
    e->q = calloc((size_t)p->queue_max, sizeof *e->q);
    e->slots = calloc((size_t)p->n_slots, sizeof *e->slots);
    e->seqs = calloc((size_t)p->n_slots, sizeof *e->seqs);
    e->max_emit = calloc((size_t)p->n_slots, sizeof *e->max_emit);
    e->step_tasks = calloc((size_t)p->n_slots, sizeof *e->step_tasks);
    e->outs = calloc((size_t)p->n_slots, sizeof *e->outs);
    e->admitted = calloc((size_t)p->n_slots, sizeof *e->admitted);
    e->hist_cap = p->n_ctx_slot + SPEX_DRAFT_MAX_N + 2;
    e->hist = calloc((size_t)p->n_slots, sizeof *e->hist);
    e->hist_len = calloc((size_t)p->n_slots, sizeof *e->hist_len);
    for (int s = 0; e->hist && s < p->n_slots; s++) e->hist[s] = malloc(sizeof(int32_t) * (size_t)e->hist_cap);
    for (int s = 0; e->hist && s < p->n_slots; s++)
        if (!e->hist[s]) e->hist_len = NULL;   /* reported below */
    if (p->embd_ctx)
        e->embd_scratch = calloc((size_t)spex_context_get_params(p->embd_ctx)->n_batch_max, sizeof *e->embd_scratch);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    if ((p->embd_ctx && !e->embd_scratch) || !e->q || !e->slots || !e->seqs || !e->max_emit || !e->step_tasks || !e->outs || !e->admitted || !e->hist ||
        !e->hist_len) {
        srv_engine_free(e);
        return spex_error_set(err, SPEX_ERR_NOMEM, "out of memory");
    }
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        srv_engine_free(e);
        return spex_error_set(err, SPEX_ERR_INTERNAL, "cannot start the engine thread");
    }
    e->started = true;
    *out = e;
    return SPEX_OK;
}

void srv_engine_stop(srv_engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->stop = true;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (e->started) pthread_join(e->thread, NULL);
    e->started = false;
}

void srv_engine_free(srv_engine *e) {
    if (!e) return;
    srv_engine_stop(e);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e->q);
    free(e->slots);
    free(e->seqs);
    free(e->max_emit);
    free(e->step_tasks);
    free(e->outs);
    free(e->admitted);
    free(e->embd_scratch);
    for (int s = 0; e->hist && s < e->p.n_slots; s++) free(e->hist[s]);
    free(e->hist);
    free(e->hist_len);
    free(e);
}

bool srv_engine_submit(srv_engine *e, srv_task *t) {
    pthread_mutex_lock(&e->mu);
    bool ok = !e->stop && e->q_len < e->p.queue_max;
    if (ok) {
        pthread_mutex_lock(&t->mu);
        t->refs++;
        pthread_mutex_unlock(&t->mu);
        t->t_queued = spex_now_s();
        t->id_task = e->next_task_id++;
        e->q[(e->q_head + e->q_len) % e->p.queue_max] = t;
        e->q_len++;
        pthread_cond_broadcast(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    return ok;
}

bool srv_engine_embed(srv_engine *e, srv_embd_job *job, bool (*client_gone)(void *user), void *user) {
    pthread_mutex_lock(&e->mu);
    if (e->stop || !e->p.embd_ctx) {
        pthread_mutex_unlock(&e->mu);
        return false;
    }
    job->next = 0;
    job->ids_off = job->out_off = 0;
    job->q_next = NULL;
    job->done = job->cancelled = false;
    job->err_code = 0;
    if (e->eq_tail) e->eq_tail->q_next = job;
    else e->eq_head = job;
    e->eq_tail = job;
    pthread_cond_broadcast(&e->cv);
    while (!job->done) {
        struct timespec ts;   /* the client is checked every 100 ms */
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&e->cv, &e->mu, &ts);
        if (job->done || job->cancelled || !client_gone || !client_gone(user)) continue;
        job->cancelled = true;
        if (e->eq_head == job) continue;   /* the engine may be running it: it drops it */
        for (srv_embd_job **p = &e->eq_head; *p; p = &(*p)->q_next)   /* still waiting: unlink it */
            if (*p == job) {
                *p = job->q_next;
                if (e->eq_tail == job)
                    for (e->eq_tail = e->eq_head; e->eq_tail && e->eq_tail->q_next;) e->eq_tail = e->eq_tail->q_next;
                break;
            }
        e->m.requests_cancelled++;
        job->done = true;
    }
    pthread_mutex_unlock(&e->mu);
    return true;
}

void srv_task_cancel(srv_engine *e, srv_task *t) {
    pthread_mutex_lock(&t->mu);
    t->cancelled = true;
    pthread_mutex_unlock(&t->mu);
    /* a queued task never reaches a slot: take it out now */
    pthread_mutex_lock(&e->mu);
    for (int i = 0; i < e->q_len; i++) {
        int k = (e->q_head + i) % e->p.queue_max;
        if (e->q[k] != t) continue;
        for (int j = i; j < e->q_len - 1; j++)
            e->q[(e->q_head + j) % e->p.queue_max] = e->q[(e->q_head + j + 1) % e->p.queue_max];
        e->q_len--;
        e->m.requests_cancelled++;
        e->m.requests_total++;
        pthread_mutex_unlock(&e->mu);
        pthread_mutex_lock(&t->mu);
        t->done = true;
        t->err_code = 499;
        pthread_mutex_unlock(&t->mu);
        srv_task_release(t);   /* the queue's reference */
        return;
    }
    pthread_mutex_unlock(&e->mu);
}

/* ======================================================================== */
/* /metrics (§11)                                                            */
/* ======================================================================== */

typedef struct srv_buf {
    char *p;
    size_t n, cap;
} srv_buf;

static void bprintf(srv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bprintf(srv_buf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = b->p ? vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap) : -1;
        va_end(ap);
        if (k >= 0 && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t nc = b->cap ? b->cap * 2 : 4096;
        char *np = realloc(b->p, nc);
        if (!np) return;
        b->p = np, b->cap = nc;
    }
}

static void metric(srv_buf *b, const char *name, const char *type, const char *help, double v) {
    bprintf(b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

char *srv_engine_metrics(srv_engine *e) {
    srv_buf b = {0};
    bprintf(&b, "%s", "");
    pthread_mutex_lock(&e->mu);
    srv_metrics *m = &e->m;
    metric(&b, "llamacpp:prompt_tokens_total", "counter", "Number of prompt tokens processed.", m->prompt_tokens);
    metric(&b, "llamacpp:prompt_tokens_cached_total", "counter", "Number of prompt tokens reused from the cache.",
           m->prompt_tokens_cached);
    metric(&b, "llamacpp:prompt_seconds_total", "counter", "Prompt process time", m->prompt_seconds);
    metric(&b, "llamacpp:tokens_predicted_total", "counter", "Number of generation tokens processed.",
           m->predicted_tokens);
    metric(&b, "llamacpp:tokens_predicted_seconds_total", "counter", "Predict process time", m->predicted_seconds);
    metric(&b, "llamacpp:prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.",
           m->i_prompt_seconds > 0 ? m->i_prompt_tokens / m->i_prompt_seconds : 0);
    metric(&b, "llamacpp:predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s.",
           m->i_predicted_seconds > 0 ? m->i_predicted_tokens / m->i_predicted_seconds : 0);
    m->i_prompt_tokens = m->i_prompt_seconds = m->i_predicted_tokens = m->i_predicted_seconds = 0;
    metric(&b, "llamacpp:requests_processing", "gauge", "Number of requests processing.", e->n_busy);
    metric(&b, "llamacpp:requests_deferred", "gauge", "Number of requests deferred.", e->q_len);
    metric(&b, "llamacpp:n_tokens_max", "counter", "Largest observed n_tokens.", (double)m->n_tokens_max);
    metric(&b, "llamacpp:n_decode_total", "counter", "Total number of llama_decode() calls", (double)m->n_decode);
    metric(&b, "llamacpp:n_busy_slots_per_decode", "gauge", "Average number of busy slots per llama_decode() call",
           m->n_decode ? (double)m->busy_slot_sum / (double)m->n_decode : 0);
    metric(&b, "llamacpp:spec_decode_num_drafts_total", "counter", "Verification steps that carried a draft.",
           (double)m->spec_drafts);
    metric(&b, "llamacpp:spec_decode_num_draft_tokens_total", "counter", "Draft tokens submitted for verification.",
           (double)m->spec_draft_tokens);
    metric(&b, "llamacpp:spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted.",
           (double)m->spec_accepted);
    if (m->any_spec) {
        const char *nm = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total";
        bprintf(&b, "# HELP %s Accepted draft tokens per position.\n# TYPE %s counter\n", nm, nm);
        for (int k = 0; k < e->n_max && k < SPEX_DRAFT_MAX_N; k++)
            bprintf(&b, "%s{position=\"%d\"} %llu\n", nm, k, (unsigned long long)m->accepted_at[k]);
    }
    metric(&b, "spex:draft_seconds_total", "counter", "Seconds spent drafting (forward and walk).", m->draft_seconds);
    metric(&b, "spex:verify_seconds_total", "counter", "Seconds spent in target verify batches.", m->verify_seconds);
    metric(&b, "spex:draft_backlog_seconds_total", "counter",
           "Of the drafting seconds: injecting the features a slot deferred while it did not draft.", m->backlog_seconds);
    metric(&b, "spex:spec_disabled_steps_total", "counter", "Steps where the adaptive rule drafted nothing.",
           (double)m->spec_disabled_steps);
    metric(&b, "spex:spec_vetoed_steps_total", "counter",
           "Steps the realized-rate guard kept plain (drafting steps measured slower than plain ones there).",
           (double)m->spec_vetoed_steps);
    metric(&b, "spex:spec_cut_tokens_total", "counter",
           "Drafted tokens the draft cut left unverified (--spec-draft-cut; steps of one busy slot).",
           (double)m->spec_cut_tokens);
    metric(&b, "spex:verify_rows_total", "counter", "Target rows verified by decode steps.", (double)m->verify_rows);
    metric(&b, "spex:requests_total", "counter", "Requests that reached the engine and ended.",
           (double)m->requests_total);
    metric(&b, "spex:requests_cancelled_total", "counter", "Requests cancelled by their client.",
           (double)m->requests_cancelled);
    metric(&b, "spex:embeddings_requests_total", "counter", "Embeddings requests computed.", (double)m->embd_requests);
    metric(&b, "spex:embeddings_tokens_total", "counter", "Input tokens of the embeddings requests computed.",
           (double)m->embd_tokens);
    pthread_mutex_unlock(&e->mu);
    return b.p;
}

/* ======================================================================== */
/* /slots (§12)                                                              */
/* ======================================================================== */

/* Runs on an HTTP thread. e->mu keeps every busy slot's task alive (task_finish clears the
 * slot under e->mu before it drops the engine's reference) and orders these reads after the
 * engine's writes: the pub_* fields are written under e->mu, the request fields before
 * srv_engine_submit. The task's text is read under its own mutex, taken inside e->mu as
 * srv_engine_submit does. Engine-only fields (n_gen, tm, ...) are never read here. */
int srv_engine_idle_slots(srv_engine *e) {
    pthread_mutex_lock(&e->mu);
    int n = 0;
    for (int s = 0; s < e->p.n_slots; s++) n += e->slots[s] == NULL;
    pthread_mutex_unlock(&e->mu);
    return n;
}

char *srv_engine_slots_json(srv_engine *e, const srv_gen_defaults *d) {
    cJSON *arr = cJSON_CreateArray();
    if (!arr) return NULL;
    pthread_mutex_lock(&e->mu);
    for (int s = 0; s < e->p.n_slots; s++) {
        srv_task *t = e->slots[s];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(arr, o);
        cJSON_AddNumberToObject(o, "id", s);
        cJSON_AddNumberToObject(o, "n_ctx", e->p.n_ctx_slot);
        cJSON_AddBoolToObject(o, "speculative", e->has_draft);
        cJSON_AddBoolToObject(o, "is_processing", t != NULL);
        /* spex: tokens an idle slot holds for prefix reuse (0 after erase; a restore's count) */
        cJSON_AddNumberToObject(o, "n_cached", t ? 0 : e->pub_cached[s]);
        cJSON_AddItemToObject(o, "params", srv_params_json(d, t));
        long n_gen = t ? t->pub_n_gen : 0;
        long n_predict = t ? t->n_predict : d->n_predict;
        bool nl = false;
        if (t) {
            pthread_mutex_lock(&t->mu);
            nl = t->len > 0 && memchr(t->text, '\n', t->len) != NULL;
            pthread_mutex_unlock(&t->mu);
        }
        cJSON_AddNumberToObject(o, "id_task", t ? (double)t->id_task : -1);
        cJSON_AddNumberToObject(o, "n_prompt_tokens", t ? t->n_ids : 0);
        cJSON_AddNumberToObject(o, "n_prompt_tokens_processed", t ? (double)t->pub_processed : 0);
        cJSON_AddNumberToObject(o, "n_prompt_tokens_cache", t ? (double)t->pub_cache_n : 0);
        /* llama-server's current shape: an array of one object */
        cJSON *nt = cJSON_CreateObject();
        cJSON *nta = cJSON_AddArrayToObject(o, "next_token");
        if (nta && nt) cJSON_AddItemToArray(nta, nt);
        else cJSON_Delete(nt), nt = NULL;
        cJSON_AddBoolToObject(nt, "has_next_token", t != NULL);
        cJSON_AddBoolToObject(nt, "has_new_line", nl);
        cJSON_AddNumberToObject(nt, "n_remain", n_predict >= 0 ? (double)(n_predict - n_gen) : -1);
        cJSON_AddNumberToObject(nt, "n_decoded", (double)n_gen);
        /* spex: the running request's draft counts (timings.draft_n, draft_n_accepted) */
        cJSON_AddNumberToObject(o, "draft_n", t ? (double)t->pub_draft_n : 0);
        cJSON_AddNumberToObject(o, "draft_n_accepted", t ? (double)t->pub_draft_n_accepted : 0);
    }
    pthread_mutex_unlock(&e->mu);
    char *out = cJSON_PrintUnformatted(arr);
    cJSON_Delete(arr);
    return out;
}
