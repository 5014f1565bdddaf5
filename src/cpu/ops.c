/*
 * ops.c — the ops kernel tables (one per ISA) and the drivers written once on top of them:
 * rmsnorm of rows, the RoPE angle cache, and attention over a KV cache.
 *
 * What it is: the implementation of the table and helper halves of src/cpu/ops.h. What it
 * is not: the kernels (ref/ops_ref.c, arch/x86/avx2/ops_avx2.c, arch/x86/avx512/ops_avx512.c,
 * arch/arm/ops_neon.c).
 *
 * Dimension legend: see ops.h (n, head_dim = d, n_head, n_head_kv, G = n_head / n_head_kv,
 * n_rot, n_q, n_kv, T = SPEX_ATTN_TILE kv rows per tile, QB = query rows per unit,
 * R = QB * G query (row, head) pairs per unit).
 *
 * Attention. One work unit is (kv head hk, block of up to QB query rows). Its R = QB * G
 * (row, head) pairs — every query head that reads kv head hk, for every row of the block —
 * are copied (pre-scaled) into Qs [R][d], and the KV cache is walked in tiles of T rows:
 * a tile of K is scored against all R pairs (S [R][T]; an F16 cache is read in place,
 * the kernels convert in registers and load each K/V chunk once for a few pairs), masked,
 * folded into each pair's online softmax (running max m, running sum l, accumulator
 * acc [R][d] rescaled by exp(m_old - m_new) when the max moves — the single-pass form of
 * Milakov & Gimelshein 2018 used by FlashAttention), and the V tile is accumulated
 * for all R pairs. So every K/V row is read from memory once per unit instead of once per
 * query row and head: the verify/draft regime (n_q 2..64) reuses each tile QB * G times.
 * Tiles in which no pair of the unit sees any row (the causal future, outside the window,
 * empty slots) are skipped without being read. A pair's result depends only on its own
 * scores and on the fixed tile boundaries, never on which other pairs share its unit, so
 * the output does not depend on the thread count.
 */
#include "cpu/api.h"
#include "cpu/ops.h"
#include "cpu/isa.h"
#include "tensor/api.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

/* ======================================================================== */
/* Tables                                                                    */
/* ======================================================================== */

#define N_ISA 4 /* scalar, avx2, avx512, neon */

static spex_ops_kernels g_tables[N_ISA];
static bool g_have[N_ISA];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void build_tables(void) {
    for (int i = 0; i < N_ISA; i++) {
        spex_isa isa = (spex_isa)i;
        if (!spex_cpu_isa_available(isa)) continue;
        spex_ops_kernels t;
        memset(&t, 0, sizeof t);
        spex_ops_register_scalar(&t);
        switch (isa) {
#if SPEX_HAVE_X86
        case SPEX_ISA_AVX2: spex_ops_register_avx2(&t); break;
        case SPEX_ISA_AVX512:
            /* Entries without an AVX-512 version keep the AVX2 one. */
            spex_ops_register_avx2(&t);
            spex_ops_register_avx512(&t);
            break;
#endif
#if defined(__aarch64__)
        case SPEX_ISA_NEON: spex_ops_register_neon(&t); break;
#endif
        default: break;
        }
        t.isa = isa;
        g_tables[i] = t;
        g_have[i] = true;
    }
}

const spex_ops_kernels *spex_ops_for(spex_isa isa) {
    pthread_once(&g_once, build_tables);
    if ((unsigned)isa >= N_ISA || !g_have[isa]) return NULL;
    return &g_tables[isa];
}

const spex_ops_kernels *spex_ops_get(void) {
    const spex_ops_kernels *k = spex_ops_for(spex_cpu_isa());
    return k ? k : spex_ops_for(SPEX_ISA_SCALAR);
}

/* ======================================================================== */
/* Row helpers and RoPE                                                      */
/* ======================================================================== */

void spex_rmsnorm_rows(const spex_ops_kernels *k, const float *x, int64_t ldx, const float *weight,
                       float *out, int64_t ldo, int64_t n_rows, int64_t n, float eps) {
    for (int64_t r = 0; r < n_rows; r++) k->rmsnorm(x + r * ldx, weight, out + r * ldo, n, eps);
}

void spex_rope_freqs(double *inv, int n_rot, float freq_base) {
    for (int i = 0; i < n_rot / 2; i++) inv[i] = pow((double)freq_base, -2.0 * i / (double)n_rot);
}

void spex_rope_cache_freqs(float *cs, int64_t pos, int n_rot, float freq_scale, const double *inv) {
    /* Double precision: at positions ~1e5 a float angle would already be off by ~1e-2 rad. */
    const double p = (double)pos * (double)freq_scale;
    for (int i = 0; i < n_rot / 2; i++) {
        const double theta = p * inv[i];
        cs[2 * i] = (float)cos(theta);
        cs[2 * i + 1] = (float)sin(theta);
    }
}

void spex_rope_cache(float *cs, int64_t pos, int n_rot, float freq_base, float freq_scale) {
    double inv[SPEX_ROPE_MAX_ROT / 2];
    if (n_rot > SPEX_ROPE_MAX_ROT) n_rot = SPEX_ROPE_MAX_ROT; /* documented limit */
    spex_rope_freqs(inv, n_rot, freq_base);
    spex_rope_cache_freqs(cs, pos, n_rot, freq_scale, inv);
}

void spex_rope(const spex_ops_kernels *k, float *x, int n_head, int head_dim, int n_rot,
               spex_rope_mode mode, int64_t pos, float freq_base, float freq_scale) {
    float cs[SPEX_ROPE_MAX_ROT];
    if (n_rot > SPEX_ROPE_MAX_ROT) n_rot = SPEX_ROPE_MAX_ROT; /* documented limit */
    spex_rope_cache(cs, pos, n_rot, freq_base, freq_scale);
    k->rope(x, n_head, head_dim, n_rot, mode, cs);
}

/* ======================================================================== */
/* Attention                                                                 */
/* ======================================================================== */

static int attn_qblock(const spex_attn_args *a) {
    return a->n_q < SPEX_ATTN_QBLOCK ? (a->n_q > 0 ? a->n_q : 1) : SPEX_ATTN_QBLOCK;
}

static size_t pad16(size_t n) { return (n + 15) / 16 * 16; }

/* Scratch layout of one thread (floats, each part rounded to 16 = 64 bytes). */
typedef struct attn_scratch {
    float *qs;   /* [R][d] pre-scaled queries          */
    float *acc;  /* [R][d] unnormalised outputs        */
    float *s;    /* [R][T] scores, then probabilities  */
    float *m;    /* [R] running max                    */
    float *l;    /* [R] running sum                    */
    float *kv;   /* [T][d] a Q8_0 tile as f32          */
} attn_scratch;

static size_t attn_carve(const spex_attn_args *a, float *base, attn_scratch *sc) {
    const size_t d = (size_t)a->head_dim, T = SPEX_ATTN_TILE;
    const size_t R = (size_t)attn_qblock(a) * (size_t)(a->n_head / a->n_head_kv);
    /* the Q8_0 tile whatever kv_type says: callers size scratch once for any cache type */
    const size_t parts[6] = {pad16(R * d), pad16(R * d), pad16(R * T), pad16(R), pad16(R), pad16(T * d)};
    float **dst[6] = {&sc->qs, &sc->acc, &sc->s, &sc->m, &sc->l, &sc->kv};
    size_t off = 0;
    for (int i = 0; i < 6; i++) {
        if (base) *dst[i] = base + off;
        off += parts[i];
    }
    return off;
}

size_t spex_attn_scratch_floats(const spex_attn_args *a) {
    if (!a || a->n_head_kv <= 0 || a->n_head <= 0 || a->head_dim <= 0) return 0;
    attn_scratch sc;
    return attn_carve(a, NULL, &sc);
}

spex_status spex_attn_check(const spex_attn_args *a, spex_error *err) {
    if (!a) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "attention: args is NULL");
    if (a->n_q < 0 || a->n_kv < 0 || a->n_head <= 0 || a->n_head_kv <= 0 || a->head_dim <= 0)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG,
                              "attention: n_q %d, n_kv %d, n_head %d, n_head_kv %d, head_dim %d: expected "
                              "n_q, n_kv >= 0 and heads, head_dim > 0",
                              a->n_q, a->n_kv, a->n_head, a->n_head_kv, a->head_dim);
    if (a->n_head % a->n_head_kv)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "attention: n_head %d is not a multiple of n_head_kv %d",
                              a->n_head, a->n_head_kv);
    size_t es; /* strides must be multiples of it (Q8_0: 1, blocks are not aligned) */
    if (a->kv_type == SPEX_TYPE_F32) es = 4;
    else if (a->kv_type == SPEX_TYPE_F16) es = 2;
    else if (a->kv_type == SPEX_TYPE_Q8_0) es = 1;
    else
        return spex_error_set(err, SPEX_ERR_UNSUPPORTED, "attention: kv type %d: expected F32, F16 or Q8_0",
                              (int)a->kv_type);
    if (a->kv_type == SPEX_TYPE_Q8_0 && a->head_dim % 32)
        return spex_error_set(err, SPEX_ERR_UNSUPPORTED,
                              "attention: a Q8_0 cache needs head_dim (%d) to be a multiple of 32", a->head_dim);
    const int64_t qrow = (int64_t)a->n_head * a->head_dim;
    const size_t hrow = spex_type_row_size(a->kv_type, a->head_dim) /* one kv head's slice */;
    /* Heads side by side: a row holds all of them; with a head stride a row is one head's slice. */
    const size_t krow = a->k_head_stride ? hrow : (size_t)a->n_head_kv * hrow;
    const size_t vrow = a->v_head_stride ? hrow : (size_t)a->n_head_kv * hrow;
    if (a->n_q > 0 && (!a->q || !a->out || a->q_stride < qrow || a->out_stride < qrow))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG,
                              "attention: q/out missing or row stride < n_head*head_dim = %lld", (long long)qrow);
    if (a->n_q > 0 && !a->q_pos && (a->causal || a->window > 0))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "attention: causal or windowed attention needs q_pos");
    if (a->n_kv > 0 && (!a->k || !a->v || a->k_stride < krow || a->v_stride < vrow || a->k_stride % es ||
                        a->v_stride % es || a->k_head_stride % es || a->v_head_stride % es))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG,
                              "attention: k/v missing, or row stride below %zu / %zu bytes, or a stride not a "
                              "multiple of %zu",
                              krow, vrow, es);
    return SPEX_OK;
}

static inline bool attn_visible(const spex_attn_args *a, int64_t qp, int64_t kp) {
    if (kp < 0) return false;                           /* empty cache slot */
    if (a->causal && kp > qp) return false;
    if (a->window > 0 && kp <= qp - a->window) return false;
    if (a->window > 0 && a->window_symmetric && kp >= qp + a->window) return false;
    return true;
}

/* True when every query position in [qmin, qmax] sees every kv row t0 .. t0+nt-1 (no empty
 * slot, nothing in a query's future or outside its window): attn_visible for each pair would
 * say so, at the cost of nq * nt calls. */
static bool tile_all_visible(const spex_attn_args *a, int t0, int nt, int64_t qmin, int64_t qmax) {
    int64_t kmin = INT64_MAX, kmax = INT64_MIN;
    for (int t = 0; t < nt; t++) {
        const int64_t kp = a->kv_pos ? a->kv_pos[t0 + t] : t0 + t;
        kmin = kp < kmin ? kp : kmin;
        kmax = kp > kmax ? kp : kmax;
    }
    if (kmin < 0) return false;
    if (a->causal && kmax > qmin) return false;
    if (a->window > 0 && kmin <= qmax - a->window) return false;
    if (a->window > 0 && a->window_symmetric && kmax >= qmin + a->window) return false;
    return true;
}

static void attn_unit(const spex_ops_kernels *k, const spex_attn_args *a, int hk, int q0, int nq,
                      const attn_scratch *sc) {
    const int d = a->head_dim, G = a->n_head / a->n_head_kv, T = SPEX_ATTN_TILE, R = nq * G;
    const float scale = a->scale != 0.0f ? a->scale : 1.0f / sqrtf((float)d);
    /* An F16 cache is read in place by the F16 kernels, each element converted in a register
     * (converting a tile into scratch first measured 1.0-1.7x slower at 1 to 32 query rows
     * per kv row, docs/performance.md); same bits either way (ops.h). A Q8_0 cache is
     * converted a tile at a time into sc->kv (L1-sized) for the f32 kernels: the same bits
     * as expanding the whole cache to f32 first, without writing and re-reading 4 bytes
     * per element. */
    const bool f16 = a->kv_type == SPEX_TYPE_F16, q8 = a->kv_type == SPEX_TYPE_Q8_0;

    /* Pair r = qi * G + g is query row q0 + qi, head hk * G + g. */
    for (int qi = 0; qi < nq; qi++)
        for (int g = 0; g < G; g++) {
            const float *src = a->q + (int64_t)(q0 + qi) * a->q_stride + (int64_t)(hk * G + g) * d;
            k->scale(src, scale, sc->qs + (size_t)(qi * G + g) * d, d);
        }
    for (int r = 0; r < R; r++) {
        sc->m[r] = -INFINITY;
        sc->l[r] = 0.0f;
    }
    memset(sc->acc, 0, sizeof(float) * (size_t)R * d);

    int64_t qmin = INT64_MAX, qmax = INT64_MIN;
    for (int qi = 0; qi < nq; qi++) {
        const int64_t qp = a->q_pos ? a->q_pos[q0 + qi] : 0;
        qmin = qp < qmin ? qp : qmin;
        qmax = qp > qmax ? qp : qmax;
    }
    uint8_t vis[SPEX_ATTN_QBLOCK][SPEX_ATTN_TILE];
    const size_t hb = spex_type_row_size(a->kv_type, d); /* one kv head's slice of a row */
    const size_t koff = (size_t)hk * (a->k_head_stride ? a->k_head_stride : hb);
    const size_t voff = (size_t)hk * (a->v_head_stride ? a->v_head_stride : hb);
    for (int t0 = 0; t0 < a->n_kv; t0 += T) {
        const int nt = a->n_kv - t0 < T ? a->n_kv - t0 : T;
        /* The common tile (the cache's past) is seen whole by every pair: no per-pair mask. */
        const bool all = tile_all_visible(a, t0, nt, qmin, qmax);
        bool any = all;
        for (int qi = 0; qi < nq && !all; qi++) {
            const int64_t qp = a->q_pos ? a->q_pos[q0 + qi] : 0;
            for (int t = 0; t < nt; t++) {
                const int64_t kp = a->kv_pos ? a->kv_pos[t0 + t] : t0 + t;
                vis[qi][t] = attn_visible(a, qp, kp);
                any |= vis[qi][t];
            }
        }
        if (!any) continue;

        const char *krow = (const char *)a->k + (size_t)t0 * a->k_stride + koff;
        if (q8) {
            for (int t = 0; t < nt; t++) {
                spex_attn_ahead(krow + (size_t)(t + SPEX_ATTN_AHEAD) * a->k_stride, hb);
                k->cvt_q8_0_f32(krow + (size_t)t * a->k_stride, sc->kv + (size_t)t * d, d);
            }
            k->attn_scores(R, sc->qs, d, nt, sc->kv, d, d, sc->s, T, 0);
        } else if (f16)
            k->attn_scores_f16(R, sc->qs, d, nt, (const uint16_t *)krow, (int64_t)(a->k_stride / 2), d, sc->s, T,
                               SPEX_ATTN_AHEAD);
        else
            k->attn_scores(R, sc->qs, d, nt, (const float *)krow, (int64_t)(a->k_stride / 4), d, sc->s, T,
                           SPEX_ATTN_AHEAD);

        for (int qi = 0; qi < nq && !all; qi++)
            for (int t = 0; t < nt; t++)
                if (!vis[qi][t])
                    for (int g = 0; g < G; g++) sc->s[(size_t)(qi * G + g) * T + t] = -INFINITY;

        for (int r = 0; r < R; r++) {
            float *sr = sc->s + (size_t)r * T;
            const float mt = k->max(sr, nt);
            if (mt == -INFINITY) { /* this pair sees nothing here: contributes nothing */
                memset(sr, 0, sizeof(float) * (size_t)nt);
                continue;
            }
            const float m_old = sc->m[r], m_new = mt > m_old ? mt : m_old;
            const float sum = k->exp_sum(sr, nt, m_new);
            if (m_old == -INFINITY) {
                sc->l[r] = sum;
            } else {
                const float alpha = expf(m_old - m_new);
                sc->l[r] = sc->l[r] * alpha + sum;
                if (alpha != 1.0f) k->scale(sc->acc + (size_t)r * d, alpha, sc->acc + (size_t)r * d, d);
            }
            sc->m[r] = m_new;
        }

        const char *vrow = (const char *)a->v + (size_t)t0 * a->v_stride + voff;
        if (q8) {
            for (int t = 0; t < nt; t++) {
                spex_attn_ahead(vrow + (size_t)(t + SPEX_ATTN_AHEAD) * a->v_stride, hb);
                k->cvt_q8_0_f32(vrow + (size_t)t * a->v_stride, sc->kv + (size_t)t * d, d);
            }
            k->attn_accum(R, sc->acc, d, sc->s, T, nt, sc->kv, d, d, 0);
        } else if (f16)
            k->attn_accum_f16(R, sc->acc, d, sc->s, T, nt, (const uint16_t *)vrow, (int64_t)(a->v_stride / 2), d,
                              SPEX_ATTN_AHEAD);
        else
            k->attn_accum(R, sc->acc, d, sc->s, T, nt, (const float *)vrow, (int64_t)(a->v_stride / 4), d,
                          SPEX_ATTN_AHEAD);
    }

    for (int qi = 0; qi < nq; qi++)
        for (int g = 0; g < G; g++) {
            const int r = qi * G + g;
            float *dst = a->out + (int64_t)(q0 + qi) * a->out_stride + (int64_t)(hk * G + g) * d;
            k->scale(sc->acc + (size_t)r * d, sc->l[r] > 0.0f ? 1.0f / sc->l[r] : 0.0f, dst, d);
        }
}

void spex_attention(const spex_ops_kernels *k, const spex_attn_args *a, int ith, int nth, float *scratch) {
    if (a->n_q <= 0) return;
    attn_scratch sc;
    attn_carve(a, scratch, &sc);
    /* Smaller query blocks when there would be fewer units than threads (results do not
     * depend on the blocking, see the file comment; the scratch fits the largest block). */
    int QB = attn_qblock(a);
    while (QB > 1 && a->n_head_kv * ((a->n_q + QB - 1) / QB) < nth) QB = (QB + 1) / 2;
    const int n_qb = (a->n_q + QB - 1) / QB;
    const int n_units = a->n_head_kv * n_qb;
    /* Units interleave kv heads and query blocks, so with causal masking (later blocks see
     * more rows) the static split still spreads the long units over threads. */
    for (int u = ith; u < n_units; u += nth) {
        const int hk = u % a->n_head_kv, qb = u / a->n_head_kv;
        const int q0 = qb * QB, nq = a->n_q - q0 < QB ? a->n_q - q0 : QB;
        attn_unit(k, a, hk, q0, nq, &sc);
    }
}
