/*
 * sampler.c — the token sampler: penalties, top-k, top-p, min-p and temperature in a
 * configurable order, and the final distribution p they leave (the RNG is src/core/rng.c).
 *
 * What it is: the contract of spex.h's "Sampler" section, with llama.cpp's semantics for each
 * stage (src/llama-sampler.cpp: penalties, top_k, top_p, min_p, temp) and llama.cpp's default
 * order; docs/sampling.md states both and where spex differs. The final distribution is exposed
 * (spex_sampler_dist) because lossless speculative verification needs p itself, not only a
 * draw from it (dflash2.md §15), and spex_sampler_sample draws from exactly that list.
 * What it is not: grammar, logit bias, DRY, XTC, typical, top-n-sigma or mirostat sampling.
 *
 * Dimension legend:
 *   V     vocabulary size (n_vocab); logits[V]
 *   n     candidates alive in the chain (n <= V)
 *   L     penalty window (repeat_last_n)
 *
 * Cost per token: O(V) to read the logits, plus O(L) for penalties, expected O(V) for top-k
 * (the ops table's heap top-K for k <= SPEX_TOPK_MAX, quickselect + sort of the k otherwise)
 * and for top-p (a quickselect that cuts by mass), so no stage sorts the whole vocabulary.
 * Nothing is allocated after spex_sampler_init.
 */
#include "spex.h"
#include "core/rng.h"
#include "sample/api.h"

#include "cpu/ops.h"

#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ======================================================================== */
/* Params                                                                    */
/* ======================================================================== */

spex_sampler_params spex_sampler_default_params(void) {
    spex_sampler_params p;
    memset(&p, 0, sizeof p);
    p.temp = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.repeat_penalty = 1.0f;
    p.repeat_last_n = 64;
    p.frequency_penalty = 0.0f;
    p.presence_penalty = 0.0f;
    p.seed = SPEX_SEED_RANDOM;
    spex_sampler_parse_stages(SPEX_SAMPLER_ORDER_LLAMA, &p, NULL);
    return p;
}

/* llama.cpp's --samplers names (common_sampler_types_from_names) and the alternates it
 * accepts; stage 0 marks a name spex knows but skips. */
static const struct {
    const char *name;
    int stage;
} stage_names[] = {
    {"penalties", SPEX_SAMPLER_PENALTIES},
    {"top_k", SPEX_SAMPLER_TOP_K},        {"top-k", SPEX_SAMPLER_TOP_K},
    {"top_p", SPEX_SAMPLER_TOP_P},        {"top-p", SPEX_SAMPLER_TOP_P},
    {"nucleus", SPEX_SAMPLER_TOP_P},
    {"min_p", SPEX_SAMPLER_MIN_P},        {"min-p", SPEX_SAMPLER_MIN_P},
    {"temperature", SPEX_SAMPLER_TEMPERATURE}, {"temp", SPEX_SAMPLER_TEMPERATURE},
    {"dry", 0}, {"top_n_sigma", 0}, {"top-n-sigma", 0}, {"typ_p", 0}, {"typical_p", 0},
    {"typ-p", 0}, {"typical-p", 0}, {"typical", 0}, {"xtc", 0},
};

spex_status spex_sampler_parse_stages(const char *names, spex_sampler_params *p, spex_error *err) {
    if (!names || !p) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "sampler stages: NULL argument");
    spex_sampler_stage st[SPEX_SAMPLER_MAX_STAGES];
    int n = 0;
    const char *c = names;
    while (*c) {
        while (*c == ';' || *c == ',' || *c == ' ') c++;
        if (!*c) break;
        size_t len = strcspn(c, ";, ");
        int found = -1;
        for (size_t i = 0; i < sizeof stage_names / sizeof stage_names[0]; i++) {
            if (strlen(stage_names[i].name) == len && strncmp(stage_names[i].name, c, len) == 0) {
                found = stage_names[i].stage;
                break;
            }
        }
        if (found < 0)
            return spex_error_set(err, SPEX_ERR_INVALID_ARG,
                                  "sampler stages: unknown stage '%.*s' (expected penalties, top_k, "
                                  "top_p, min_p, temperature)", (int)(len > 64 ? 64 : len), c);
        if (found > 0) {
            if (n == SPEX_SAMPLER_MAX_STAGES)
                return spex_error_set(err, SPEX_ERR_RANGE, "sampler stages: more than %d stages",
                                      SPEX_SAMPLER_MAX_STAGES);
            st[n++] = (spex_sampler_stage)found;
        }
        c += len;
    }
    p->n_stages = n;
    memcpy(p->stages, st, (size_t)n * sizeof st[0]);
    return SPEX_OK;
}

/* ======================================================================== */
/* The sampler                                                               */
/* ======================================================================== */

typedef struct cand {
    int32_t id;
    float logit;
    float p;       /* scratch: exp(logit - max) in the final softmax */
} cand;

struct spex_sampler {
    spex_sampler_params params;
    int32_t n_vocab;
    spex_rng rng;

    /* Penalty history: a ring of the last L accepted tokens and each token's count in it. */
    int32_t *ring;      /* [L] */
    int32_t ring_cap, ring_len, ring_head;   /* head: index of the oldest entry */
    int32_t *count;     /* [V] occurrences in the ring (temporarily negated while penalising) */

    /* Scratch, sized once. */
    float *dense;       /* [V] working copy of the logits while every token is still alive */
    cand *cand;         /* [V] candidates once a stage has cut the list */
    int32_t *topk_idx;  /* [min(V, SPEX_TOPK_MAX)] */
    float *topk_val;
    spex_token_prob *dist;   /* [V] the distribution spex_sampler_sample draws from */
};

/* The chain's working state for one call.
 * Dense: every token alive, logits in `dl` (the caller's row until a stage must write, then
 * s->dense). Sparse: cand[0 .. n) alive; cand[0 .. n_sorted) are the n_sorted best of them in
 * descending order (logit, then lower id), every later one no better than cand[n_sorted-1]. */
typedef struct chain {
    spex_sampler *s;
    bool dense_mode;
    const float *dl;
    bool dl_owned;
    int32_t n, n_sorted;
} chain;

static uint64_t random_seed(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec;
    /* The address differs between runs under ASLR; the counter between calls of one run. */
    static atomic_uint salt;
    unsigned k = atomic_fetch_add(&salt, 1u) + 1u;
    x ^= (uint64_t)(uintptr_t)&salt ^ ((uint64_t)k << 32);
    spex_rng mix;   /* its first word is splitmix64 of x: the bits mixed into one seed */
    spex_rng_seed(&mix, x);
    return mix.s[0];
}

static void reseed(spex_sampler *s) {
    spex_rng_seed(&s->rng, s->params.seed == SPEX_SEED_RANDOM ? random_seed() : s->params.seed);
}

static bool is_stage(int v) { return v >= SPEX_SAMPLER_PENALTIES && v <= SPEX_SAMPLER_TEMPERATURE; }

spex_status spex_sampler_init(const spex_sampler_params *params, int32_t n_vocab, spex_sampler **out,
                              spex_error *err) {
    if (!out) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "sampler: out is NULL");
    *out = NULL;
    if (!params) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "sampler: params is NULL");
    const spex_sampler_params *p = params;
    if (n_vocab <= 0) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "sampler: n_vocab %d <= 0", n_vocab);
    if (isnan(p->temp)) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "sampler: temp is NaN");
    if (isnan(p->top_p)) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "sampler: top_p is NaN");
    if (!(p->min_p <= 1.0f))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "sampler: min_p %g must be <= 1", (double)p->min_p);
    if (!(p->repeat_penalty > 0.0f) || isinf(p->repeat_penalty))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "sampler: repeat_penalty %g must be > 0 and finite",
                              (double)p->repeat_penalty);
    if (!isfinite(p->frequency_penalty) || !isfinite(p->presence_penalty))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "sampler: frequency/presence penalty not finite");
    if (p->repeat_last_n < 0)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG,
                              "sampler: repeat_last_n %d < 0 (pass the context size for llama.cpp's -1)",
                              p->repeat_last_n);
    if (p->n_stages < 0 || p->n_stages > SPEX_SAMPLER_MAX_STAGES)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "sampler: n_stages %d outside [0, %d]", p->n_stages,
                              SPEX_SAMPLER_MAX_STAGES);
    for (int i = 0; i < p->n_stages; i++)
        if (!is_stage((int)p->stages[i]))
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "sampler: stages[%d] = %d is not a stage", i,
                                  (int)p->stages[i]);

    spex_sampler *s = calloc(1, sizeof *s);
    if (!s) return spex_error_set(err, SPEX_ERR_NOMEM, "sampler: out of memory");
    s->params = *p;
    s->n_vocab = n_vocab;
    s->ring_cap = p->repeat_last_n;
    size_t V = (size_t)n_vocab;
    int32_t nk = n_vocab < SPEX_TOPK_MAX ? n_vocab : SPEX_TOPK_MAX;
    s->ring = malloc((size_t)(s->ring_cap > 0 ? s->ring_cap : 1) * sizeof *s->ring);
    s->count = calloc(V, sizeof *s->count);
    s->dense = malloc(V * sizeof *s->dense);
    s->cand = malloc(V * sizeof *s->cand);
    s->topk_idx = malloc((size_t)nk * sizeof *s->topk_idx);
    s->topk_val = malloc((size_t)nk * sizeof *s->topk_val);
    s->dist = malloc(V * sizeof *s->dist);
    if (!s->ring || !s->count || !s->dense || !s->cand || !s->topk_idx || !s->topk_val || !s->dist) {
        spex_sampler_free(s);
        return spex_error_set(err, SPEX_ERR_NOMEM, "sampler: out of memory for a vocabulary of %d", n_vocab);
    }
    reseed(s);
    *out = s;
    return SPEX_OK;
}

void spex_sampler_free(spex_sampler *s) {
    if (!s) return;
    free(s->ring);
    free(s->count);
    free(s->dense);
    free(s->cand);
    free(s->topk_idx);
    free(s->topk_val);
    free(s->dist);
    free(s);
}

void spex_sampler_reset(spex_sampler *s) {
    if (!s) return;
    for (int32_t i = 0; i < s->ring_len; i++) s->count[s->ring[(s->ring_head + i) % s->ring_cap]] = 0;
    s->ring_len = 0;
    s->ring_head = 0;
    reseed(s);
}

const spex_sampler_params *spex_sampler_get_params(const spex_sampler *s) { return &s->params; }
int32_t spex_sampler_n_vocab(const spex_sampler *s) { return s->n_vocab; }
spex_rng *spex_sampler_rng(spex_sampler *s) { return &s->rng; }

spex_status spex_sampler_accept(spex_sampler *s, int32_t token) {
    if (!s || token < 0 || token >= s->n_vocab) return SPEX_ERR_RANGE;
    if (s->ring_cap == 0) return SPEX_OK;   /* as llama.cpp: no window, no history */
    if (s->ring_len == s->ring_cap) {
        s->count[s->ring[s->ring_head]]--;
        s->ring[s->ring_head] = token;
        s->ring_head = (s->ring_head + 1) % s->ring_cap;
    } else {
        s->ring[(s->ring_head + s->ring_len) % s->ring_cap] = token;
        s->ring_len++;
    }
    s->count[token]++;
    return SPEX_OK;
}

/* ---- candidate ordering ----------------------------------------------------------------- */

/* a ranks before b: larger logit, then lower id (so every key is distinct). */
static inline bool cand_before(const cand *a, const cand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cand_cmp(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    return cand_before(a, b) ? -1 : cand_before(b, a) ? 1 : 0;
}

static inline void cand_swap(cand *a, cand *b) {
    cand t = *a;
    *a = *b;
    *b = t;
}

/* Partitions c[lo .. hi) (at least 3 entries) around a median-of-three pivot and returns the
 * pivot's final index q: c[lo .. q) rank before it, c[q+1 .. hi) after it. */
static int32_t partition(cand *c, int32_t lo, int32_t hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (cand_before(&c[mid], &c[lo])) cand_swap(&c[mid], &c[lo]);
    if (cand_before(&c[hi - 1], &c[lo])) cand_swap(&c[hi - 1], &c[lo]);
    if (cand_before(&c[hi - 1], &c[mid])) cand_swap(&c[hi - 1], &c[mid]);
    cand pivot = c[mid];
    cand_swap(&c[mid], &c[hi - 1]);
    int32_t q = lo;
    for (int32_t i = lo; i < hi - 1; i++)
        if (cand_before(&c[i], &pivot)) cand_swap(&c[i], &c[q++]);
    cand_swap(&c[q], &c[hi - 1]);
    return q;
}

/* Quickselect gives up on a range after this many partitions and sorts it instead, so a run of
 * bad pivots costs O(r log r), not O(r^2). */
#define SELECT_BUDGET 64

/* Rearranges c[lo .. hi) so that c[lo .. m) hold its (m - lo) best entries (in any order). */
static void select_best(cand *c, int32_t lo, int32_t hi, int32_t m) {
    int budget = SELECT_BUDGET;
    while (hi - lo > 16 && lo < m && m < hi) {
        if (--budget == 0) break;
        int32_t q = partition(c, lo, hi);
        if (q == m || q + 1 == m) return;
        if (q > m) hi = q;
        else lo = q + 1;
    }
    if (lo < m && m < hi) qsort(c + lo, (size_t)(hi - lo), sizeof *c, cand_cmp);
}

/* Weighted quickselect for top-p. Entries carry weights in .p; acc is the weight of everything
 * ranked before c[lo] (acc < target). Returns the smallest m such that the best m entries
 * overall weigh >= target, leaving them in c[.. m) in no particular order (hi if rounding
 * leaves the whole range short). Expected O(hi - lo). */
static int32_t select_mass(cand *c, int32_t lo, int32_t hi, double acc, double target) {
    int budget = SELECT_BUDGET;
    while (hi - lo > 16 && --budget > 0) {
        int32_t q = partition(c, lo, hi);
        double before = 0.0;
        for (int32_t i = lo; i < q; i++) before += c[i].p;
        if (acc + before >= target) {
            hi = q;   /* acc < target, so q > lo */
        } else if (acc + before + c[q].p >= target) {
            return q + 1;
        } else {
            acc += before + c[q].p;
            lo = q + 1;
        }
    }
    qsort(c + lo, (size_t)(hi - lo), sizeof *c, cand_cmp);
    for (int32_t i = lo; i < hi; i++) {
        acc += c[i].p;
        if (acc >= target) return i + 1;
    }
    return hi;
}

/* Makes cand[0 .. m) the m best, sorted (m <= n). */
static void ensure_sorted(chain *ch, int32_t m) {
    if (m <= ch->n_sorted) return;
    cand *c = ch->s->cand;
    select_best(c, ch->n_sorted, ch->n, m);
    qsort(c + ch->n_sorted, (size_t)(m - ch->n_sorted), sizeof *c, cand_cmp);
    ch->n_sorted = m;
}

/* Dense -> sparse with every token alive (NaN becomes -inf so it ranks last). */
static void materialize(chain *ch) {
    if (!ch->dense_mode) return;
    cand *c = ch->s->cand;
    const float *x = ch->dl;
    for (int32_t i = 0; i < ch->s->n_vocab; i++) {
        float v = x[i];
        c[i].id = i;
        c[i].logit = v != v ? -INFINITY : v;
    }
    ch->n = ch->s->n_vocab;
    ch->n_sorted = 0;
    ch->dense_mode = false;
}

/* Dense logits the chain may write. */
static float *dense_writable(chain *ch) {
    if (!ch->dl_owned) {
        memcpy(ch->s->dense, ch->dl, (size_t)ch->s->n_vocab * sizeof(float));
        ch->dl = ch->s->dense;
        ch->dl_owned = true;
    }
    return ch->s->dense;
}

static float max_logit(const chain *ch) {
    if (ch->n_sorted > 0) return ch->s->cand[0].logit;
    float m = -INFINITY;
    for (int32_t i = 0; i < ch->n; i++) m = ch->s->cand[i].logit > m ? ch->s->cand[i].logit : m;
    return m;
}

/* ---- stages ----------------------------------------------------------------------------- */

static bool penalties_active(const spex_sampler *s) {
    const spex_sampler_params *p = &s->params;
    return s->ring_cap > 0 && s->ring_len > 0 &&
           (p->repeat_penalty != 1.0f || p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f);
}

static inline float penalise(const spex_sampler_params *p, float l, int32_t c) {
    /* llama.cpp: multiply non-positive logits, divide positive ones, so the penalty always
     * lowers the logit; then subtract frequency and presence terms. */
    l = l <= 0.0f ? l * p->repeat_penalty : l / p->repeat_penalty;
    return l - (float)c * p->frequency_penalty - (float)(c > 0) * p->presence_penalty;
}

/* Applies penalties to a dense row x[V] via the ring: each distinct token once (its count is
 * negated as a visited mark, then restored). O(L). */
static void penalise_dense(spex_sampler *s, float *x) {
    const spex_sampler_params *p = &s->params;
    for (int32_t i = 0; i < s->ring_len; i++) {
        int32_t t = s->ring[(s->ring_head + i) % s->ring_cap];
        if (s->count[t] > 0) {
            x[t] = penalise(p, x[t], s->count[t]);
            s->count[t] = -s->count[t];
        }
    }
    for (int32_t i = 0; i < s->ring_len; i++) {
        int32_t t = s->ring[(s->ring_head + i) % s->ring_cap];
        if (s->count[t] < 0) s->count[t] = -s->count[t];
    }
}

static void stage_penalties(chain *ch) {
    spex_sampler *s = ch->s;
    if (!penalties_active(s)) return;
    if (ch->dense_mode) {
        penalise_dense(s, dense_writable(ch));
        return;
    }
    cand *c = s->cand;
    for (int32_t i = 0; i < ch->n; i++) {
        int32_t k = s->count[c[i].id];
        if (k > 0) c[i].logit = penalise(&s->params, c[i].logit, k);
    }
    ch->n_sorted = 0;   /* penalties may reorder */
}

static void stage_top_k(chain *ch) {
    spex_sampler *s = ch->s;
    int32_t k = s->params.top_k;
    if (k <= 0) return;
    if (ch->dense_mode && k <= SPEX_TOPK_MAX && k < s->n_vocab) {
        /* O(V) heap scan of the ops table; ties go to the lower index, as cand_before. */
        int got = spex_ops_get()->topk(ch->dl, s->n_vocab, k, s->topk_idx, s->topk_val);
        for (int j = 0; j < got; j++) {
            float v = s->topk_val[j];
            s->cand[j].id = s->topk_idx[j];
            s->cand[j].logit = v != v ? -INFINITY : v;
        }
        ch->dense_mode = false;
        ch->n = ch->n_sorted = got;
        return;
    }
    materialize(ch);
    if (k >= ch->n) return;
    ensure_sorted(ch, k);
    ch->n = ch->n_sorted = k;   /* n_sorted may have been larger (a second top_k) */
}

static void stage_top_p(chain *ch) {
    spex_sampler *s = ch->s;
    float top_p = s->params.top_p;
    if (top_p >= 1.0f) return;
    materialize(ch);
    if (ch->n <= 1) return;
    /* Weights of the current survivors: p_i = w_i / sum w, w_i = exp(l_i - max). */
    float mx = max_logit(ch);
    if (!(mx > -INFINITY)) return;   /* nothing finite: the final softmax reports it */
    cand *c = s->cand;
    double sum = 0.0;
    for (int32_t i = 0; i < ch->n; i++) {
        c[i].p = expf(c[i].logit - mx);
        sum += c[i].p;
    }
    /* Keep the shortest best-first prefix with mass >= top_p (llama.cpp: cum_sum >= p).
     * The sorted prefix (after top-k) is walked; the rest is cut by weighted quickselect,
     * so no full sort of the vocabulary. */
    double cum = 0.0, target = (double)top_p * sum;
    for (int32_t i = 0; i < ch->n_sorted; i++) {
        cum += c[i].p;
        if (cum >= target) {
            ch->n = ch->n_sorted = i + 1;
            return;
        }
    }
    if (cum >= target) {   /* top_p <= 0 with nothing sorted yet: the best token alone */
        ensure_sorted(ch, 1);
        ch->n = 1;
        return;
    }
    if (ch->n_sorted < ch->n) ch->n = select_mass(c, ch->n_sorted, ch->n, cum, target);
}

static void stage_min_p(chain *ch) {
    spex_sampler *s = ch->s;
    float min_p = s->params.min_p;
    if (min_p <= 0.0f) return;
    cand *c = s->cand;
    /* llama.cpp keeps logit >= max + log(min_p), i.e. p >= min_p * p_max. */
    if (ch->dense_mode) {
        const float *x = ch->dl;
        float mx = spex_ops_get()->max(x, s->n_vocab);
        float thr = mx + logf(min_p);
        int32_t n = 0;
        for (int32_t i = 0; i < s->n_vocab; i++)
            if (x[i] >= thr) c[n++] = (cand){.id = i, .logit = x[i]};
        ch->dense_mode = false;
        ch->n = n;
        ch->n_sorted = 0;
        return;
    }
    float thr = max_logit(ch) + logf(min_p);
    /* Order-preserving compaction keeps the sorted-prefix invariant: the entries dropped from
     * the prefix are its tail, and then every later entry (no better) is dropped as well. */
    int32_t n = 0, ns = 0;
    for (int32_t i = 0; i < ch->n; i++) {
        if (c[i].logit >= thr) {
            if (i < ch->n_sorted) ns++;
            c[n++] = c[i];
        }
    }
    ch->n = n;
    ch->n_sorted = ns;
}

static void stage_temperature(chain *ch) {
    spex_sampler *s = ch->s;
    float t = s->params.temp;   /* > 0 here: greedy never runs the chain */
    if (t == 1.0f) return;
    /* Division, as llama.cpp (logit /= temp); order-preserving, so sortedness survives. */
    if (ch->dense_mode) {
        float *x = dense_writable(ch);
        for (int32_t i = 0; i < s->n_vocab; i++) x[i] /= t;
        return;
    }
    cand *c = s->cand;
    for (int32_t i = 0; i < ch->n; i++) c[i].logit /= t;
}

/* ---- the chain and its outputs ---------------------------------------------------------- */

/* Greedy: the argmax of the penalised logits, lowest id on ties. Where the penalties sit in
 * the order does not matter: every truncation stage keeps the best token. */
static int32_t greedy_token(spex_sampler *s, const float *logits) {
    const float *x = logits;
    bool has_pen = false;
    for (int i = 0; i < s->params.n_stages; i++) has_pen |= s->params.stages[i] == SPEX_SAMPLER_PENALTIES;
    if (has_pen && penalties_active(s)) {
        memcpy(s->dense, logits, (size_t)s->n_vocab * sizeof(float));
        penalise_dense(s, s->dense);
        x = s->dense;
    }
    return (int32_t)spex_ops_get()->argmax(x, s->n_vocab);
}

static spex_status run_dist(spex_sampler *s, const float *logits, spex_token_prob *out, int32_t cap,
                            int32_t *n_out, spex_error *err) {
    if (s->params.temp <= 0.0f) {
        *n_out = 1;
        if (cap < 1) return spex_error_set(err, SPEX_ERR_RANGE, "sampler: dist needs 1 entry, cap is %d", cap);
        out[0] = (spex_token_prob){.id = greedy_token(s, logits), .p = 1.0f};
        return SPEX_OK;
    }
    chain ch = {.s = s, .dense_mode = true, .dl = logits, .dl_owned = false};
    for (int i = 0; i < s->params.n_stages; i++) {
        switch (s->params.stages[i]) {
        case SPEX_SAMPLER_PENALTIES: stage_penalties(&ch); break;
        case SPEX_SAMPLER_TOP_K: stage_top_k(&ch); break;
        case SPEX_SAMPLER_TOP_P: stage_top_p(&ch); break;
        case SPEX_SAMPLER_MIN_P: stage_min_p(&ch); break;
        case SPEX_SAMPLER_TEMPERATURE: stage_temperature(&ch); break;
        }
    }
    materialize(&ch);

    /* Softmax over the survivors, in double for the sum. */
    cand *c = s->cand;
    float mx = max_logit(&ch);
    if (ch.n == 0 || !(mx > -INFINITY) || !isfinite(mx))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "sampler: no finite logit left after the chain");
    double sum = 0.0;
    int32_t nz = 0;
    for (int32_t i = 0; i < ch.n; i++) {
        float e = expf(c[i].logit - mx);
        c[i].p = e;
        sum += e;
        nz += e > 0.0f;
    }
    *n_out = nz;
    if (nz > cap)
        return spex_error_set(err, SPEX_ERR_RANGE, "sampler: dist has %d entries, cap is %d", nz, cap);
    double inv = 1.0 / sum;
    int32_t k = 0;
    for (int32_t i = 0; i < ch.n; i++)
        if (c[i].p > 0.0f) out[k++] = (spex_token_prob){.id = c[i].id, .p = (float)(c[i].p * inv)};
    return SPEX_OK;
}

spex_status spex_sampler_dist(spex_sampler *s, const float *logits, spex_token_prob *out, int32_t cap,
                              int32_t *n_out, spex_error *err) {
    if (!s || !logits || !n_out || (cap > 0 && !out))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "sampler: dist: NULL argument");
    *n_out = 0;
    return run_dist(s, logits, out, cap, n_out, err);
}

int32_t spex_sampler_sample_from(const spex_token_prob *dist, int32_t n, double u) {
    if (!dist || n <= 0) return -1;
    double total = 0.0;
    for (int32_t i = 0; i < n; i++) total += dist[i].p > 0.0f ? dist[i].p : 0.0f;
    double target = u * total, cum = 0.0;
    int32_t last = -1;
    for (int32_t i = 0; i < n; i++) {
        if (!(dist[i].p > 0.0f)) continue;
        cum += dist[i].p;
        last = i;
        if (cum > target) return dist[i].id;
    }
    /* u * total at or past the rounded total: the last entry with mass. */
    return last >= 0 ? dist[last].id : -1;
}

spex_status spex_sampler_sample(spex_sampler *s, const float *logits, int32_t *token, spex_error *err) {
    if (!s || !logits || !token) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "sampler: sample: NULL argument");
    if (s->params.temp <= 0.0f) {
        *token = greedy_token(s, logits);
        return SPEX_OK;
    }
    int32_t n = 0;
    spex_status st = run_dist(s, logits, s->dist, s->n_vocab, &n, err);
    if (st != SPEX_OK) return st;
    *token = spex_sampler_sample_from(s->dist, n, spex_rng_uniform_f64(&s->rng));
    return SPEX_OK;
}
