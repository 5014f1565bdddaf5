/*
 * dflash_select.c — the candidate selector of DFlash2 and the walks of both DFlash variants
 * (../shared/docs/dflash2.md §12 edge scores, §13 greedy walk, §14 sampled walk and its
 * proposal q; v1's per-slot argmax of §13).
 *
 * What it is: spex_selector_row (one realised row of the lattice), spex_dflash_walk (the walk
 * over explicit per-slot inputs) and spex_draft_walk (the public entry: gathers block b of
 * the last forward through the draft context's public accessors and walks it).
 * What it is not: the forward producing C, U, gate and z (dflash_forward.c), nor the
 * verification of a draft (src/spec/verify.c).
 *
 * Numerics (§20): A/B rows, the gate products, S, the softmaxes and the CDF are fp32. The
 * walk computes only realised rows (K·R MAC per slot), never the full K·K lattice: both give
 * the same walk (§12.2). tools/ref/dflash_ref.py (greedy_walk, sampled_walk, v1_greedy) is
 * the reference the goldens in tests/data/dflash fix.
 *
 * Dimension legend: dflash.h (n slots, K candidates, R rank, V vocabulary).
 */
#include "model/api.h"
#include "model/dflash_select.h"

#include <math.h>
#include <string.h>

#define T_MIN 1e-5f   /* §14: the walk's temperature is clamped to >= 1e-5 */

/* ======================================================================== */
/* §12.2 edge scores                                                         */
/* ======================================================================== */

/* S[k] = U[k] + sum_r (A[pred][r] * gate[r]) * B[C[k]][r], grouped as the reference does
 * ((A * gate) @ B^T), accumulated left to right in fp32. Arguments already validated. */
static void selector_row(const spex_drafter *d, int32_t pred, const float *gate, const int32_t *C, const float *U,
                         int32_t K, float *S) {
    const int32_t R = d->hp.selector_rank;
    float ag[SPEX_SELECTOR_MAX_R];
    float brow[SPEX_SELECTOR_MAX_R];
    spex_model_weight_row(&d->sel_pred, pred, ag);
    for (int32_t r = 0; r < R; r++) ag[r] *= gate[r];
    for (int32_t k = 0; k < K; k++) {
        spex_model_weight_row(&d->sel_succ, C[k], brow);
        float acc = 0.0f;
        for (int32_t r = 0; r < R; r++) acc += ag[r] * brow[r];
        S[k] = U[k] + acc;
    }
}

/* The drafter can score rows: DFlash2 with both codebooks {R, V}, R within the stack bound. */
static spex_status check_selector(const spex_drafter *d, spex_error *err) {
    if (!d) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "selector: drafter is NULL");
    if (d->hp.variant != SPEX_DFLASH2 || !d->sel_pred.data || !d->sel_succ.data)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "selector: the drafter is not DFlash2 (no codebooks)");
    const int32_t R = d->hp.selector_rank;
    if (R < 1 || R > SPEX_SELECTOR_MAX_R)
        return spex_error_set(err, SPEX_ERR_UNSUPPORTED, "selector: rank %d outside 1..%d", (int)R,
                              SPEX_SELECTOR_MAX_R);
    if (d->sel_pred.n_in != R || d->sel_succ.n_in != R || d->sel_pred.n_out != d->sel_succ.n_out)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG,
                              "selector: codebooks {%lld, %lld} / {%lld, %lld} do not match rank %d",
                              (long long)d->sel_pred.n_in, (long long)d->sel_pred.n_out,
                              (long long)d->sel_succ.n_in, (long long)d->sel_succ.n_out, (int)R);
    return SPEX_OK;
}

spex_status spex_selector_row(const spex_drafter *d, int32_t pred, const float *gate, const int32_t *C,
                              const float *U, int32_t K, float *S, spex_error *err) {
    spex_status st = check_selector(d, err);
    if (st != SPEX_OK) return st;
    if (!gate || !C || !U || !S) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "selector row: NULL argument");
    if (K < 1 || K > SPEX_DRAFT_MAX_K)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "selector row: K = %d outside 1..%d", (int)K,
                              SPEX_DRAFT_MAX_K);
    const int64_t V = d->sel_pred.n_out;
    if (pred < 0 || pred >= V)
        return spex_error_set(err, SPEX_ERR_RANGE, "selector row: predecessor %d outside [0, %lld)", (int)pred,
                              (long long)V);
    for (int32_t k = 0; k < K; k++)
        if (C[k] < 0 || C[k] >= V)
            return spex_error_set(err, SPEX_ERR_RANGE, "selector row: candidate %d = %d outside [0, %lld)", (int)k,
                                  (int)C[k], (long long)V);
    selector_row(d, pred, gate, C, U, K, S);
    return SPEX_OK;
}

/* ======================================================================== */
/* Walks                                                                     */
/* ======================================================================== */

/* First maximum: the lowest index wins ties (§12.3 makes that deterministic). NaN never
 * wins; *best is -inf when no entry is a number above -inf. */
static int32_t first_argmax(const float *row, int64_t n, float *best) {
    int32_t k = 0;
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (row[i] > m) {
            m = row[i];
            k = (int32_t)i;
        }
    *best = m;
    return k;
}

/* §14 inverse CDF: k = #{j : u >= CDF_j}, CDF accumulated left to right in fp32, clamped to
 * K-1 (float rounding can leave CDF_{K-1} below u). */
static int32_t inverse_cdf(const float *q, int32_t K, float u) {
    float cdf = 0.0f;
    int32_t k = 0;
    for (int32_t j = 0; j < K; j++) {
        cdf += q[j];
        if (u >= cdf) k++;
    }
    return k < K - 1 ? k : K - 1;
}

/* The p_min stop (§13, §14): off at p_min <= 0; a NaN confidence stops. p_min >= 1 always
 * stops ("p_min = 1 gives an empty draft"): in exact arithmetic the confidence of K >= 2
 * candidates is below 1, but in fp32 it rounds to 1 once the other scores trail by ~17. */
static bool stops(float conf, float p_min) {
    return p_min > 0.0f && (p_min >= 1.0f || !(conf >= p_min));
}

static void emit_slot(spex_draft *out, int32_t p, int32_t id, int32_t k, const int32_t *C, int32_t K) {
    out->ids[p] = id;
    out->kidx[p] = k;
    if (C)
        memcpy(out->cand[p], C, (size_t)K * sizeof(int32_t));
    else
        out->cand[p][0] = id;
}

/* DFlash2 (§13 at temp <= 0, §14 at temp > 0). */
static spex_status walk_dflash2(const spex_drafter *d, int32_t anchor, int32_t n, const int32_t *const *C,
                                const float *const *U, const float *const *gate, float temp, float p_min,
                                spex_rng *rng, const float *uniforms, spex_draft *out, spex_error *err) {
    const int32_t K = d->hp.selector_top_k;
    const bool sampled = temp > 0.0f;
    const float T = temp > T_MIN ? temp : T_MIN;
    if (K < 1 || K > SPEX_DRAFT_MAX_K)
        return spex_error_set(err, SPEX_ERR_UNSUPPORTED, "walk: selector_top_k %d outside 1..%d", (int)K,
                              SPEX_DRAFT_MAX_K);
    if (!C || !U || !gate) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "walk: DFlash2 needs C, U and gate");
    if (sampled && !uniforms && !rng)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "walk: a sampled walk needs an RNG");
    /* Validate every slot before walking, so a bad input never leaves a half-filled draft. */
    const int64_t V = d->sel_pred.n_out;
    if (anchor < 0 || anchor >= V)
        return spex_error_set(err, SPEX_ERR_RANGE, "walk: anchor %d outside [0, %lld)", (int)anchor, (long long)V);
    for (int32_t p = 0; p < n; p++) {
        if (!C[p] || !U[p] || !gate[p])
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "walk: slot %d has no C/U/gate row", (int)p + 1);
        for (int32_t k = 0; k < K; k++)
            if (C[p][k] < 0 || C[p][k] >= V)
                return spex_error_set(err, SPEX_ERR_RANGE, "walk: slot %d candidate %d = %d outside [0, %lld)",
                                      (int)p + 1, (int)k, (int)C[p][k], (long long)V);
    }

    out->n_cand = K;
    out->has_q = sampled;
    int32_t pred = anchor;
    float row[SPEX_DRAFT_MAX_K], q[SPEX_DRAFT_MAX_K];
    for (int32_t p = 0; p < n; p++) {
        selector_row(d, pred, gate[p], C[p], U[p], K, row);
        float best;
        int32_t k = first_argmax(row, K, &best);
        if (!isfinite(best)) break;
        if (!sampled) {
            /* Confidence of the chosen edge: softmax of the realised row at T = 1, at k*. */
            float s = 0.0f;
            for (int32_t j = 0; j < K; j++) s += expf(row[j] - best);
            const float conf = 1.0f / s;
            out->conf[p] = conf;
            if (stops(conf, p_min)) break;
            memset(out->q[p], 0, (size_t)K * sizeof(float));
            out->q[p][k] = 1.0f;
        } else {
            /* q = softmax(row / T) over the K candidates, fp32, max subtracted after the
             * division as the reference's softmax(row / T) does. */
            float m = -INFINITY;
            for (int32_t j = 0; j < K; j++) {
                q[j] = row[j] / T;
                if (q[j] > m) m = q[j];
            }
            float s = 0.0f;
            for (int32_t j = 0; j < K; j++) {
                q[j] = expf(q[j] - m);
                s += q[j];
            }
            float qmax = 0.0f;
            for (int32_t j = 0; j < K; j++) {
                q[j] /= s;
                if (q[j] > qmax) qmax = q[j];
            }
            out->conf[p] = qmax;
            if (stops(qmax, p_min)) break;
            const float u = uniforms ? uniforms[p] : spex_rng_uniform(rng);
            k = inverse_cdf(q, K, u);
            memcpy(out->q[p], q, (size_t)K * sizeof(float));
        }
        emit_slot(out, p, C[p][k], k, C[p], K);
        out->n = p + 1;
        pred = C[p][k];
    }
    return SPEX_OK;
}

/* v1 (§13): independent per-slot first argmax of z over V; p_min on the top softmax
 * probability of z (its normaliser summed in double: V is large). */
static spex_status walk_v1(const spex_drafter *d, int32_t n, const float *const *z, float p_min, spex_draft *out,
                           spex_error *err) {
    const int64_t V = d->hp.n_vocab;
    if (V < 1) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "walk: drafter has no vocabulary");
    if (!z) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "walk: a v1 walk needs the logits z");
    for (int32_t p = 0; p < n; p++)
        if (!z[p]) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "walk: slot %d has no logits", (int)p + 1);
    out->n_cand = 1;
    out->has_q = false;
    for (int32_t p = 0; p < n; p++) {
        float best;
        const int32_t t = first_argmax(z[p], V, &best);
        if (!isfinite(best)) break;
        double s = 0.0;
        for (int64_t v = 0; v < V; v++) s += (double)expf(z[p][v] - best);
        const float conf = (float)(1.0 / s);
        out->conf[p] = conf;
        if (stops(conf, p_min)) break;
        emit_slot(out, p, t, 0, NULL, 1);
        out->q[p][0] = 1.0f;
        out->n = p + 1;
    }
    return SPEX_OK;
}

spex_status spex_dflash_walk(const spex_drafter *d, int32_t anchor, int32_t n, const int32_t *const *C,
                             const float *const *U, const float *const *gate, const float *const *z, float temp,
                             float p_min, spex_rng *rng, const float *uniforms, spex_draft *out, spex_error *err) {
    if (!d || !out) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "walk: NULL drafter or output");
    if (n < 1 || n > SPEX_DRAFT_MAX_N)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "walk: n = %d outside 1..%d", (int)n, SPEX_DRAFT_MAX_N);
    if (isnan(p_min)) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "walk: p_min is NaN");
    /* Zeroed so that entries past n (and q of a greedy walk beyond K) read as nothing. */
    memset(out, 0, sizeof *out);
    if (d->hp.variant == SPEX_DFLASH_V1) return walk_v1(d, n, z, p_min, out, err);
    spex_status st = check_selector(d, err);
    if (st != SPEX_OK) return st;
    return walk_dflash2(d, anchor, n, C, U, gate, temp, p_min, rng, uniforms, out, err);
}

/* ======================================================================== */
/* spex_draft_walk: block b of the last forward                              */
/* ======================================================================== */

spex_status spex_draft_walk(const spex_draft_context *dc, int32_t b, float temp, float p_min, spex_rng *rng,
                            spex_draft *out, spex_error *err) {
    if (!dc || !out) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "draft walk: NULL context or output");
    const spex_drafter *d = spex_draft_context_drafter(dc);
    int32_t anchor = 0, n = 0;
    if (!d || !spex_draft_block_info(dc, b, &anchor, &n))
        return spex_error_set(err, SPEX_ERR_RANGE, "draft walk: no block %d in the last forward", (int)b);
    if (n < 1 || n > SPEX_DRAFT_MAX_N)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "draft walk: block %d has n = %d", (int)b, (int)n);

    /* Row pointers only: views into the context, nothing copied. */
    const int32_t *C[SPEX_DRAFT_MAX_N];
    const float *U[SPEX_DRAFT_MAX_N], *gate[SPEX_DRAFT_MAX_N], *z[SPEX_DRAFT_MAX_N];
    const bool v2 = d->hp.variant == SPEX_DFLASH2;
    for (int32_t p = 0; p < n; p++) {
        z[p] = spex_draft_logits(dc, b, p + 1);
        C[p] = NULL;
        U[p] = NULL;
        gate[p] = NULL;
        if (v2) {
            const int32_t K = spex_draft_candidates(dc, b, p + 1, &C[p], &U[p]);
            if (K != d->hp.selector_top_k)
                return spex_error_set(err, SPEX_ERR_INVALID_ARG, "draft walk: block %d slot %d has %d candidates, "
                                      "selector_top_k is %d", (int)b, (int)p + 1, (int)K,
                                      (int)d->hp.selector_top_k);
            gate[p] = spex_draft_gate(dc, b, p + 1);
        }
    }
    return spex_dflash_walk(d, anchor, n, C, U, gate, z, v2 ? temp : 0.0f, p_min, rng, NULL, out, err);
}
