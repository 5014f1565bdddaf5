/*
 * gdn_impl.h — the Gated DeltaNet kernels' one body (contract: src/cpu/gdn.h; spec:
 * ../shared/docs/targets.md §7.1 step 7 and §7.2), included once per ISA, and the table of
 * those variants that gdn.c dispatches through.
 *
 * What it is: two parts. The first (always) declares the variant table (spex_gdn_for, for
 * tests and for gdn.c). The second (only where GDN_VARIANT is defined, i.e. in gdn.c and in
 * arch/x86/{avx2,avx512}/gdn_*.c) is the algorithm: gdn.c compiles it as plain C (the scalar
 * twin, its own reference), the arch files compile it with their -m flags after defining
 * GDN_SIMD and the three hot helpers below in intrinsics. What it is not: the dispatch
 * (gdn.c) nor any intrinsics (those live only in the arch files).
 *
 * Dimension legend: Dk key dim (rows of S), Dv value dim (columns of S), n tokens,
 * L tokens of the current chunk (<= C = chunk), JB columns per recurrent column block.
 *
 * Recurrent form. Every column j of S evolves on its own: err[j] needs only column j
 * (Sᵀk)[j], the update of column j needs only err[j], and o[j] reads only column j. So the
 * kernel walks S in column blocks of JB and runs all n tokens over one block before moving
 * on: a block of Dk × JB floats stays in L1 between the two passes of a token and across
 * the tokens of a verify batch. Per token and block (rec_block):
 *   pass 1: S ← exp(g)·S, kv = Sᵀ k          (reads S_after[t-1] or S_in, writes S_after[t])
 *   pass 2: S ← S + k ⊗ err, o = Sᵀ q/√Dk   (in place on S_after[t])
 * with err = β (v − kv) between them. Within one variant the arithmetic on each element is
 * the same whatever the buffer aliasing or the number of tokens per call (and, in the
 * SIMD variants, whatever lane a column lands in: tails use masks, not scalar code), so a
 * token's output and state are bit-identical whether it is decoded alone or verified in a
 * batch (targets.md §9). Variants differ from each other by rounding (FMA vs mul + add).
 *
 * Chunked form (§7.2), per chunk of L tokens with state S at the chunk start:
 *   M_ij = exp(Σ_{j<t<=i} g_t) (j <= i), e_i = exp(γ_i), f_i = exp(γ_{L-1} − γ_i)
 *   A = strict_lower(β_i k_i·k_j M_ij),  P = lower_incl((q_i/√Dk)·k_j M_ij)
 *   (I + A) [U | W] = [β ⊙ V | β e ⊙ K]                    (forward substitution)
 *   V_new = U − W S,  O = (q/√Dk ⊙ e) S + P V_new,  S ← e_{L-1} S + Σ_i f_i k_i ⊗ V_new_i
 * M is built from pairwise sums of g rather than differences of the cumulative γ: the g are
 * all ≤ 0, so the running sums never cancel and a decay near 1 between two close tokens
 * keeps its full relative precision even when γ itself is large (γ ≈ −500 in a chunk of 64
 * strongly decaying tokens would otherwise leave only ~1e-4 absolute precision in γ_i − γ_j).
 * Every O(L·D) and O(D²) step is a "multi-axpy" y += Σ_r c_r x_r over contiguous rows x_r
 * (maxpy, maxpy2), which the SIMD variants run with y held in registers across r.
 *
 * Hooks an arch file defines before including this (all static, all in its intrinsics):
 *   GDN_VARIANT   suffix of the two entry points (spex_gdn_{recurrent,chunked}_<suffix>)
 *   GDN_SIMD      1: use the three functions below instead of the plain C ones
 *   GDN_JB        recurrent column block width (register budget of rec_block)
 *   gdn_rec_block(dst, src, ld, Dk, jb, k, q, scale, decay, beta, v, o)
 *   gdn_maxpy(y, n, x, ldx, c, cnt)           y[0..n) += Σ_{r<cnt} c[r]·x[r·ldx + 0..n)
 *   gdn_maxpy2(y1, y2, n, x, ldx, c1, c2, cnt) y1 −= Σ c1[r]·x_r, y2 += Σ c2[r]·x_r
 * each accumulating over r in ascending order, one rounding per step (FMA).
 */
#ifndef SPEX_CPU_GDN_IMPL_H
#define SPEX_CPU_GDN_IMPL_H

#include "spex.h"
#include "cpu/api.h"
#include "cpu/gdn.h"

typedef struct spex_gdn_kernels {
    spex_isa isa;     /* the ISA this table was built for                        */
    const char *name; /* the variant: "scalar", "avx2" or "avx512"                */
    void (*recurrent)(const spex_gdn_args *a, float *const *S_after);
    void (*chunked)(const spex_gdn_args *a, int chunk, float *S_out, float *scratch);
} spex_gdn_kernels;

/* The table for an ISA: NULL if that ISA is not compiled in or not on this CPU. An ISA
 * without its own GDN code (NEON) gets the plain C body. spex_gdn_recurrent/_chunked use
 * spex_gdn_for(spex_cpu_isa()), so SPEX_ISA and spex_cpu_set_isa pick the variant. */
const spex_gdn_kernels *spex_gdn_for(spex_isa isa);

void spex_gdn_recurrent_scalar(const spex_gdn_args *a, float *const *S_after);
void spex_gdn_chunked_scalar(const spex_gdn_args *a, int chunk, float *S_out, float *scratch);
void spex_gdn_recurrent_avx2(const spex_gdn_args *a, float *const *S_after);
void spex_gdn_chunked_avx2(const spex_gdn_args *a, int chunk, float *S_out, float *scratch);
void spex_gdn_recurrent_avx512(const spex_gdn_args *a, float *const *S_after);
void spex_gdn_chunked_avx512(const spex_gdn_args *a, int chunk, float *S_out, float *scratch);

/* Scratch pieces are padded to 16 floats so each stays 64-byte aligned. */
static inline size_t spex_gdn_pad16_(size_t x) { return (x + 15) & ~(size_t)15; }

/* A chunk outside 1..SPEX_GDN_CHUNK_MAX is a caller bug; clamp it rather than overrun. */
static inline int spex_gdn_clamp_chunk_(int chunk) {
    return chunk < 1 ? 1 : chunk > SPEX_GDN_CHUNK_MAX ? SPEX_GDN_CHUNK_MAX : chunk;
}

/* The chunked scratch, the same layout in every variant (one scratch size for all). */
typedef struct spex_gdn_scratch_ {
    float *M;  /* [C][C] decay between tokens j <= i                     */
    float *A;  /* [C][C] strict lower β_i k_i·k_j M_ij                    */
    float *P;  /* [C][C] lower incl. (q_i/√Dk)·k_j M_ij                   */
    float *U;  /* [C][Dv] U, then V_new in place                          */
    float *W;  /* [C][Dk] W = T (β e ⊙ K)                                 */
    float *Kt; /* [Dk][C] keys of the chunk, transposed                   */
    float *e;  /* [C] exp(γ_i)                                            */
    float *c1; /* [max(Dk, C)] coefficients of one multi-axpy             */
    float *c2; /* [max(Dk, C)] second coefficients (maxpy2)               */
} spex_gdn_scratch_;

static inline size_t spex_gdn_carve_(spex_gdn_scratch_ *s, float *base, int Dk, int Dv, int C) {
    size_t off = 0;
    const size_t nc = (size_t)(Dk > C ? Dk : C);
#define GDN_CARVE(field, count)                \
    do {                                       \
        if (s) s->field = base + off;          \
        off += spex_gdn_pad16_((size_t)(count)); \
    } while (0)
    GDN_CARVE(M, (size_t)C * C);
    GDN_CARVE(A, (size_t)C * C);
    GDN_CARVE(P, (size_t)C * C);
    GDN_CARVE(U, (size_t)C * Dv);
    GDN_CARVE(W, (size_t)C * Dk);
    GDN_CARVE(Kt, (size_t)Dk * C);
    GDN_CARVE(e, (size_t)C);
    GDN_CARVE(c1, nc);
    GDN_CARVE(c2, nc);
#undef GDN_CARVE
    return off;
}

#endif /* SPEX_CPU_GDN_IMPL_H */

/* ======================================================================== */
/* The body (once per including variant)                                     */
/* ======================================================================== */

#ifdef GDN_VARIANT

#include <math.h>
#include <string.h>

#define GDN_CAT2_(a, b) a##_##b
#define GDN_CAT_(a, b) GDN_CAT2_(a, b)
#define GDN_FN(name) GDN_CAT_(name, GDN_VARIANT)

#ifndef GDN_SIMD
#define GDN_SIMD 0
#endif

#if !GDN_SIMD
/* ---- plain C helpers: contiguous rows, restrict, no cross-lane reduction, so gcc -O3
 * vectorises them without -ffast-math and the bits do not depend on the vector width ---- */

#define GDN_JB 64 /* Dk × JB floats (32 KiB at Dk = 128) stay in L1 for both passes */

/* dst = d·src; kv += k·dst (pass 1, src and dst distinct). */
static void row_decay_dot_copy(float *restrict dst, const float *restrict src, float *restrict kv, float d,
                               float k, int n) {
    for (int j = 0; j < n; j++) {
        const float s = d * src[j];
        dst[j] = s;
        kv[j] += k * s;
    }
}

/* row = d·row; kv += k·row (pass 1, in place). */
static void row_decay_dot_inplace(float *restrict row, float *restrict kv, float d, float k, int n) {
    for (int j = 0; j < n; j++) {
        const float s = d * row[j];
        row[j] = s;
        kv[j] += k * s;
    }
}

/* row += k·err; acc += q·row (pass 2). */
static void row_update_out(float *restrict row, const float *restrict err, float *restrict acc, float k,
                           float q, int n) {
    for (int j = 0; j < n; j++) {
        const float s = row[j] + k * err[j];
        row[j] = s;
        acc[j] += q * s;
    }
}

/* One token on columns [0, jb) of a block (dst, src point at the block's first column;
 * src == dst in place). */
static void gdn_rec_block(float *dst, const float *src, int64_t ld, int Dk, int jb, const float *k, const float *q,
                          float scale, float decay, float beta, const float *v, float *o) {
    float kv[GDN_JB], err[GDN_JB], acc[GDN_JB];
    for (int j = 0; j < jb; j++) kv[j] = 0.0f;
    if (src == dst) {
        for (int i = 0; i < Dk; i++) row_decay_dot_inplace(dst + i * ld, kv, decay, k[i], jb);
    } else {
        for (int i = 0; i < Dk; i++) row_decay_dot_copy(dst + i * ld, src + i * ld, kv, decay, k[i], jb);
    }
    for (int j = 0; j < jb; j++) {
        err[j] = beta * (v[j] - kv[j]);
        acc[j] = 0.0f;
    }
    for (int i = 0; i < Dk; i++) row_update_out(dst + i * ld, err, acc, k[i], q[i] * scale, jb);
    memcpy(o, acc, (size_t)jb * sizeof(float));
}

static void row_axpy(float *restrict y, const float *restrict x, float a, int n) {
    for (int j = 0; j < n; j++) y[j] += a * x[j];
}

static void gdn_maxpy(float *restrict y, int n, const float *x, int64_t ldx, const float *c, int cnt) {
    for (int r = 0; r < cnt; r++) row_axpy(y, x + r * ldx, c[r], n);
}

static void gdn_maxpy2(float *restrict y1, float *restrict y2, int n, const float *x, int64_t ldx, const float *c1,
                       const float *c2, int cnt) {
    for (int r = 0; r < cnt; r++) {
        const float *restrict xr = x + r * ldx;
        const float a1 = c1[r], a2 = c2[r];
        for (int j = 0; j < n; j++) {
            y1[j] -= a1 * xr[j];
            y2[j] += a2 * xr[j];
        }
    }
}
#endif /* !GDN_SIMD */

/* y = a·x (y == x allowed) */
static void GDN_FN(row_scale)(float *y, const float *x, float a, int n) {
    for (int j = 0; j < n; j++) y[j] = a * x[j];
}

/* ---- recurrent form ---- */

void GDN_FN(spex_gdn_recurrent)(const spex_gdn_args *a, float *const *S_after) {
    const int Dk = a->Dk, Dv = a->Dv, n = a->n;
    if (Dk <= 0 || Dv <= 0 || n <= 0) return;
    const float scale = 1.0f / sqrtf((float)Dk);

    for (int j0 = 0; j0 < Dv; j0 += GDN_JB) {
        const int jb = Dv - j0 < GDN_JB ? Dv - j0 : GDN_JB;
        for (int t = 0; t < n; t++) {
            const float *src = t == 0 ? a->S_in : S_after[t - 1];
            float *dst = S_after[t] + j0;
            /* The zero state is materialised in the block, then decayed in place like any
             * other: the same operations as an explicit zero S_in, so the same bits. */
            if (!src) {
                for (int i = 0; i < Dk; i++) memset(dst + (size_t)i * Dv, 0, (size_t)jb * sizeof(float));
            }
            gdn_rec_block(dst, src ? src + j0 : dst, Dv, Dk, jb, a->k + t * a->k_stride, a->q + t * a->q_stride, scale,
                          expf(a->g[t * a->g_stride]), a->beta[t * a->beta_stride], a->v + t * a->v_stride + j0,
                          a->o + t * a->o_stride + j0);
        }
    }
}

/* ---- chunked form ---- */

/* One chunk of L tokens starting at token t0: reads the state from cur, writes it to out
 * (cur == out allowed: every element of out is written from the same element of cur). */
static void GDN_FN(gdn_chunk)(const spex_gdn_args *a, int t0, int L, int C, const float *cur, float *out,
                              const spex_gdn_scratch_ *s) {
    const int Dk = a->Dk, Dv = a->Dv;
    const float scale = 1.0f / sqrtf((float)Dk);
#define Q(i) (a->q + (int64_t)(t0 + (i)) * a->q_stride)
#define K(i) (a->k + (int64_t)(t0 + (i)) * a->k_stride)
#define V(i) (a->v + (int64_t)(t0 + (i)) * a->v_stride)
#define O(i) (a->o + (int64_t)(t0 + (i)) * a->o_stride)
#define G(i) (a->g[(int64_t)(t0 + (i)) * a->g_stride])
#define B(i) (a->beta[(int64_t)(t0 + (i)) * a->beta_stride])
    float *M = s->M, *A = s->A, *P = s->P, *U = s->U, *W = s->W, *Kt = s->Kt, *e = s->e, *c1 = s->c1, *c2 = s->c2;

    /* 1. decays: M_ij = exp(g_{j+1} + … + g_i) by running sums from the diagonal down,
     *    and e_i = exp(g_0 + … + g_i) by carrying the same sum one step further. */
    for (int i = 0; i < L; i++) {
        float acc = 0.0f;
        M[i * C + i] = 1.0f;
        for (int j = i - 1; j >= 0; j--) {
            acc += G(j + 1);
            M[i * C + j] = expf(acc);
        }
        e[i] = expf(acc + G(0));
    }

    /* 2. K transposed so that the Gram rows below run over contiguous j. */
    for (int j = 0; j < L; j++) {
        const float *k = K(j);
        for (int r = 0; r < Dk; r++) Kt[r * C + j] = k[r];
    }
    /* A_i[0..i) = k_i·k_j, P_i[0..i] = (q_i/√Dk)·k_j, then weighted by the decays. */
    for (int i = 0; i < L; i++) {
        float *Ai = A + i * C, *Pi = P + i * C;
        const float *q = Q(i);
        memset(Ai, 0, (size_t)L * sizeof(float));
        memset(Pi, 0, (size_t)L * sizeof(float));
        for (int r = 0; r < Dk; r++) c1[r] = q[r] * scale;
        gdn_maxpy(Ai, i, Kt, C, K(i), Dk);
        gdn_maxpy(Pi, i + 1, Kt, C, c1, Dk);
        const float b = B(i);
        for (int j = 0; j < i; j++) Ai[j] *= b * M[i * C + j];
        for (int j = 0; j <= i; j++) Pi[j] *= M[i * C + j];
    }

    /* 3. U = T (β ⊙ V), W = T (β e ⊙ K) with T = (I + A)^-1: forward substitution on the
     *    right-hand sides, row i minus A_ij times the already solved rows j < i. */
    for (int i = 0; i < L; i++) {
        float *Ui = U + (size_t)i * Dv, *Wi = W + (size_t)i * Dk;
        const float b = B(i);
        GDN_FN(row_scale)(Ui, V(i), b, Dv);
        GDN_FN(row_scale)(Wi, K(i), b * e[i], Dk);
        for (int j = 0; j < i; j++) c1[j] = -A[i * C + j];
        gdn_maxpy(Ui, Dv, U, Dv, c1, i);
        gdn_maxpy(Wi, Dk, W, Dk, c1, i);
    }

    /* 4-5. Per token, one walk over S: V_new_i = U_i − W_i S and the inter-chunk part of o_i,
     *      then the intra-chunk part P_i V_new (V_new_j for j <= i is final by then). */
    for (int i = 0; i < L; i++) {
        float *Ui = U + (size_t)i * Dv, *o = O(i);
        const float *q = Q(i);
        const float qe = e[i];
        memset(o, 0, (size_t)Dv * sizeof(float));
        for (int r = 0; r < Dk; r++) c2[r] = q[r] * scale * qe;
        gdn_maxpy2(Ui, o, Dv, cur, Dv, W + (size_t)i * Dk, c2, Dk);
        gdn_maxpy(o, Dv, U, Dv, P + i * C, i + 1);
    }

    /* 6. S ← e_{L-1} S + Σ_i f_i k_i ⊗ V_new_i with f_i = M_{L-1,i}. */
    const float eL = e[L - 1];
    for (int r = 0; r < Dk; r++) {
        float *row = out + (size_t)r * Dv;
        GDN_FN(row_scale)(row, cur + (size_t)r * Dv, eL, Dv);
        for (int i = 0; i < L; i++) c1[i] = M[(L - 1) * C + i] * Kt[r * C + i];
        gdn_maxpy(row, Dv, U, Dv, c1, L);
    }
#undef Q
#undef K
#undef V
#undef O
#undef G
#undef B
}

void GDN_FN(spex_gdn_chunked)(const spex_gdn_args *a, int chunk, float *S_out, float *scratch) {
    const int Dk = a->Dk, Dv = a->Dv, n = a->n;
    if (Dk <= 0 || Dv <= 0 || n <= 0) return;
    const int C = spex_gdn_clamp_chunk_(chunk);
    spex_gdn_scratch_ s;
    spex_gdn_carve_(&s, scratch, Dk, Dv, C);

    /* The zero state is materialised in S_out so that every chunk reads a real state. */
    const float *cur = a->S_in;
    if (!cur) {
        memset(S_out, 0, (size_t)Dk * Dv * sizeof(float));
        cur = S_out;
    }
    for (int t0 = 0; t0 < n; t0 += C) {
        const int L = n - t0 < C ? n - t0 : C;
        GDN_FN(gdn_chunk)(a, t0, L, C, cur, S_out, &s);
        cur = S_out;
    }
}

#endif /* GDN_VARIANT */
