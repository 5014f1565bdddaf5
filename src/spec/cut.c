/*
 * cut.c — the cost-aware draft cut (cut.h): the price line, the acceptance bins and the
 * stopping rule. Pure arithmetic over a small struct; nothing allocated, no clock read (the
 * caller measures and passes the seconds).
 */
#include "spec/cut.h"

#include <string.h>

void spec_cut_init(spec_cut *c) {
    memset(c, 0, sizeof *c);
}

static int bin_of(float conf) {
    if (!(conf > 0.0f)) return 0; /* also NaN */
    int b = (int)(conf * (float)SPEC_CUT_BINS);
    return b < SPEC_CUT_BINS ? b : SPEC_CUT_BINS - 1;
}

double spec_cut_accept_p(const spec_cut *c, float conf) {
    const double x = conf > 0.0f ? (conf < 1.0f ? (double)conf : 1.0) : 0.0; /* NaN -> 0 */
    const int b = bin_of(conf);
    return (c->acc[b] + SPEC_CUT_PRIOR * x) / (c->tot[b] + SPEC_CUT_PRIOR);
}

bool spec_cut_price(const spec_cut *c, double *f, double *v0, double *v1) {
    /* At least a few steps, and rows that varied (variance >= 0.1 row²): a fit over one row
     * count has no slope. */
    if (c->n_steps < 4 || c->s0 <= 0 || c->f_w <= 0) return false;
    const double det = c->s0 * c->s2 - c->s1 * c->s1;
    if (det < 0.1 * c->s0 * c->s0) return false;
    double b = (c->s0 * c->sky - c->s1 * c->sy) / det;
    if (!(b >= 0)) b = 0; /* noise can tilt the line down: a row then costs nothing */
    *v1 = b;
    *v0 = (c->sy - b * c->s1) / c->s0;
    *f = c->f_s / c->f_w;
    return true;
}

int32_t spec_cut_choose(const spec_cut *c, const float *conf, int32_t n) {
    if (n <= 0) return 0;
    const uint64_t t = c->n_steps;
    if (t < SPEC_CUT_WARMUP) return t % 2 == 0 ? n : (n + 1) / 2;
    /* exploration: a full step keeps the low-confidence bins and the long rows measured, a
     * half step keeps the price line's spread, but only when the rule has settled on one
     * length (row variance below 1: its own choices no longer spread the fit) */
    if (t % SPEC_CUT_EXPLORE == 0) return n;
    if (t % SPEC_CUT_EXPLORE == SPEC_CUT_EXPLORE / 2 && c->s0 * c->s2 - c->s1 * c->s1 < c->s0 * c->s0)
        return (n + 1) / 2;
    double f, v0, v1;
    if (!spec_cut_price(c, &f, &v0, &v1)) return n;
    /* C(k) = f + v0 + v1·k, floored at a small positive time so the ratios stay defined */
    double e = 1.0, v = 1.0, cost = f + v0 + v1;
    if (cost < 1e-9) cost = 1e-9;
    for (int32_t p = 0; p < n; p++) {
        v *= spec_cut_accept_p(c, conf[p]);
        double next = cost + v1;
        /* keep slot p + 1 while (e + v) / next > e / cost */
        if (!((e + v) * cost > e * next)) return p;
        e += v;
        cost = next;
    }
    return n;
}

void spec_cut_observe(spec_cut *c, int32_t k, double t_verify, double t_rest, const float *conf, int32_t n,
                      int32_t m) {
    const double d = SPEC_CUT_DECAY, x = (double)k;
    /* A step the OS preempted (a shared machine loses whole time slices) would tilt the line
     * for dozens of steps: once the price is known, a time is clipped to SPEC_CUT_CLIP times
     * its prediction. */
    double f0, v0, v1;
    if (spec_cut_price(c, &f0, &v0, &v1)) {
        const double pv = v0 + v1 * x;
        if (pv > 0 && t_verify > SPEC_CUT_CLIP * pv) t_verify = SPEC_CUT_CLIP * pv;
        if (f0 > 0 && t_rest > SPEC_CUT_CLIP * f0) t_rest = SPEC_CUT_CLIP * f0;
    }
    c->s0 = d * c->s0 + 1.0;
    c->s1 = d * c->s1 + x;
    c->s2 = d * c->s2 + x * x;
    c->sy = d * c->sy + t_verify;
    c->sky = d * c->sky + x * t_verify;
    c->f_s = d * c->f_s + t_rest;
    c->f_w = d * c->f_w + 1.0;
    c->n_steps++;
    /* slots 1 .. m accepted; slot m + 1 (if verified) rejected; later ones never judged */
    for (int32_t p = 0; p < n && p <= m; p++) {
        const int b = bin_of(conf[p]);
        for (int i = 0; i < SPEC_CUT_BINS; i++) c->acc[i] *= SPEC_CUT_DECAY_SLOT, c->tot[i] *= SPEC_CUT_DECAY_SLOT;
        c->tot[b] += 1.0;
        if (p < m) c->acc[b] += 1.0;
    }
}
