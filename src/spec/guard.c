/*
 * guard.c — the realized-rate guard (guard.h).
 */
#include "spec/guard.h"

void spex_realized_add(spex_realized *r, bool drafted, double n_tok, double sec) {
    const int k = drafted ? 1 : 0;
    r->tok[k] = r->tok[k] * SPEX_REALIZED_DECAY + n_tok;
    r->sec[k] = r->sec[k] * SPEX_REALIZED_DECAY + sec;
    r->w[k] = r->w[k] * SPEX_REALIZED_DECAY + 1.0;
}

bool spex_realized_veto(const spex_realized *r, double min_w) {
    if (r->w[0] < min_w || r->w[1] < min_w || r->sec[0] <= 0 || r->sec[1] <= 0) return false;
    return r->tok[1] / r->sec[1] < r->tok[0] / r->sec[0];
}

void spec_guard_record(spec_guard *g, bool drafted, double n_tok, double sec) {
    const int k = drafted ? 1 : 0;
    if (g->r.w[k] >= 1.0) {
        const double cap = SPEC_GUARD_CLIP * g->r.sec[k] / g->r.w[k];
        if (sec > cap) sec = cap;
    }
    spex_realized_add(&g->r, drafted, n_tok, sec);
}

bool spec_guard_plain(spec_guard *g, double plain_est) {
    const uint64_t k = g->n_steps++;
    const spex_realized *r = &g->r;
    /* learning the plain rate once drafting's is known: one step in SPEC_GUARD_EXPLORE plain,
     * unless the estimate already shows drafting well ahead */
    if (r->w[0] < SPEC_GUARD_W) {
        if (r->w[1] < SPEC_GUARD_W) return false;
        if (plain_est > 0 && r->sec[1] > 0 && r->tok[1] / r->sec[1] > SPEC_GUARD_MARGIN * plain_est) return false;
        return k % SPEC_GUARD_EXPLORE == 0;
    }
    return spex_realized_veto(&g->r, SPEC_GUARD_W) && k % SPEC_GUARD_EVERY != 0;
}
