/*
 * gdn.c — the Gated DeltaNet recurrence of one value head (contract: src/cpu/gdn.h; spec:
 * ../shared/docs/targets.md §7.1 step 7 and §7.2): the per-token (recurrent) form and the
 * chunked form.
 *
 * What it is: plain C written so that gcc -O3 vectorises every inner loop (they all run
 * over a contiguous row with restrict pointers and no reduction across the vector lanes,
 * so no -ffast-math is needed and the results do not depend on the vector width). It is
 * its own scalar reference: there is no ISA-specific twin. What it is not: the projections,
 * conv, L2 norms or gated norm around it (src/model/forward_qwen35.c), nor the thread split.
 *
 * Dimension legend: Dk key dim (rows of S), Dv value dim (columns of S), n tokens,
 * L tokens of the current chunk (<= chunk), JB columns per recurrent column block.
 *
 * Recurrent form. Every column j of S evolves on its own: err[j] needs only column j
 * (Sᵀk)[j], the update of column j needs only err[j], and o[j] reads only column j. So the
 * kernel walks S in column blocks of JB and runs all n tokens over one block before moving
 * on: a block of Dk × JB floats (32 KiB for Dk = 128) stays in L1 between the two passes of
 * a token and across the tokens of a verify batch. Per token and block:
 *   pass 1: S ← exp(g)·S, kv = Sᵀ k          (reads S_after[t-1] or S_in, writes S_after[t])
 *   pass 2: S ← S + k ⊗ err, o = Sᵀ q/√Dk   (in place on S_after[t])
 * with err = β (v − kv) between them. The arithmetic on each element is the same whatever
 * the block width, the buffer aliasing or the number of tokens per call, so a token's
 * output and state are bit-identical whether it is decoded alone or verified in a batch
 * (targets.md §9).
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
 */
#include "cpu/gdn.h"

#include <math.h>
#include <string.h>

/* ======================================================================== */
/* Row helpers (the only inner loops; all contiguous, all vectorisable)      */
/* ======================================================================== */

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

/* y += a·x */
static void row_axpy(float *restrict y, const float *restrict x, float a, int n) {
    for (int j = 0; j < n; j++) y[j] += a * x[j];
}

/* y1 −= a1·x; y2 += a2·x (V_new and O against one row of S). */
static void row_axpy2(float *restrict y1, float *restrict y2, const float *restrict x, float a1, float a2, int n) {
    for (int j = 0; j < n; j++) {
        y1[j] -= a1 * x[j];
        y2[j] += a2 * x[j];
    }
}

/* y = a·x */
static void row_scale_copy(float *restrict y, const float *restrict x, float a, int n) {
    for (int j = 0; j < n; j++) y[j] = a * x[j];
}

static void row_scale_inplace(float *restrict y, float a, int n) {
    for (int j = 0; j < n; j++) y[j] *= a;
}

/* ======================================================================== */
/* Recurrent form                                                            */
/* ======================================================================== */

/* Columns per block: Dk × JB floats (32 KiB at Dk = 128) stay in L1 for both passes. */
#define JB 64

void spex_gdn_recurrent(const spex_gdn_args *a, float *const *S_after) {
    const int Dk = a->Dk, Dv = a->Dv, n = a->n;
    if (Dk <= 0 || Dv <= 0 || n <= 0) return;
    const float scale = 1.0f / sqrtf((float)Dk);

    for (int j0 = 0; j0 < Dv; j0 += JB) {
        const int jb = Dv - j0 < JB ? Dv - j0 : JB;
        for (int t = 0; t < n; t++) {
            const float *q = a->q + t * a->q_stride;
            const float *k = a->k + t * a->k_stride;
            const float *v = a->v + t * a->v_stride + j0;
            float *o = a->o + t * a->o_stride + j0;
            const float decay = expf(a->g[t * a->g_stride]);
            const float beta = a->beta[t * a->beta_stride];
            const float *src = t == 0 ? a->S_in : S_after[t - 1];
            float *dst = S_after[t];
            float kv[JB], err[JB], acc[JB];

            /* The zero state is materialised in the block, then decayed in place like any
             * other: the same operations as an explicit zero S_in, so the same bits. */
            if (!src) {
                for (int i = 0; i < Dk; i++) memset(dst + (size_t)i * Dv + j0, 0, (size_t)jb * sizeof(float));
                src = dst;
            }

            for (int j = 0; j < jb; j++) kv[j] = 0.0f;
            if (src == dst) {
                for (int i = 0; i < Dk; i++) row_decay_dot_inplace(dst + (size_t)i * Dv + j0, kv, decay, k[i], jb);
            } else {
                for (int i = 0; i < Dk; i++)
                    row_decay_dot_copy(dst + (size_t)i * Dv + j0, src + (size_t)i * Dv + j0, kv, decay, k[i], jb);
            }

            for (int j = 0; j < jb; j++) {
                err[j] = beta * (v[j] - kv[j]);
                acc[j] = 0.0f;
            }
            for (int i = 0; i < Dk; i++) row_update_out(dst + (size_t)i * Dv + j0, err, acc, k[i], q[i] * scale, jb);
            memcpy(o, acc, (size_t)jb * sizeof(float));
        }
    }
}

/* ======================================================================== */
/* Chunked form                                                              */
/* ======================================================================== */

/* Scratch pieces are padded to 16 floats so each stays 64-byte aligned. */
static size_t pad16(size_t x) { return (x + 15) & ~(size_t)15; }

/* A chunk outside 1..SPEX_GDN_CHUNK_MAX is a caller bug; clamp it rather than overrun. */
static int clamp_chunk(int chunk) { return chunk < 1 ? 1 : chunk > SPEX_GDN_CHUNK_MAX ? SPEX_GDN_CHUNK_MAX : chunk; }

typedef struct {
    float *M;  /* [C][C] decay between tokens j <= i                     */
    float *A;  /* [C][C] strict lower β_i k_i·k_j M_ij                    */
    float *P;  /* [C][C] lower incl. (q_i/√Dk)·k_j M_ij                   */
    float *U;  /* [C][Dv] U, then V_new in place                          */
    float *W;  /* [C][Dk] W = T (β e ⊙ K)                                 */
    float *Kt; /* [Dk][C] keys of the chunk, transposed                   */
    float *e;  /* [C] exp(γ_i)                                            */
} gdn_scratch;

static size_t carve(gdn_scratch *s, float *base, int Dk, int Dv, int C) {
    size_t off = 0;
#define CARVE(field, count)                    \
    do {                                       \
        if (s) s->field = base + off;          \
        off += pad16((size_t)(count));         \
    } while (0)
    CARVE(M, (size_t)C * C);
    CARVE(A, (size_t)C * C);
    CARVE(P, (size_t)C * C);
    CARVE(U, (size_t)C * Dv);
    CARVE(W, (size_t)C * Dk);
    CARVE(Kt, (size_t)Dk * C);
    CARVE(e, (size_t)C);
#undef CARVE
    return off;
}

size_t spex_gdn_chunked_scratch_floats(int Dk, int Dv, int chunk) {
    if (Dk <= 0 || Dv <= 0) return 0;
    return carve(NULL, NULL, Dk, Dv, clamp_chunk(chunk));
}

/* One chunk of L tokens starting at token t0: reads the state from cur, writes it to out
 * (cur == out allowed: every element of out is written from the same element of cur). */
static void gdn_chunk(const spex_gdn_args *a, int t0, int L, int C, const float *cur, float *out,
                      const gdn_scratch *s) {
    const int Dk = a->Dk, Dv = a->Dv;
    const float scale = 1.0f / sqrtf((float)Dk);
#define Q(i) (a->q + (int64_t)(t0 + (i)) * a->q_stride)
#define K(i) (a->k + (int64_t)(t0 + (i)) * a->k_stride)
#define V(i) (a->v + (int64_t)(t0 + (i)) * a->v_stride)
#define O(i) (a->o + (int64_t)(t0 + (i)) * a->o_stride)
#define G(i) (a->g[(int64_t)(t0 + (i)) * a->g_stride])
#define B(i) (a->beta[(int64_t)(t0 + (i)) * a->beta_stride])
    float *M = s->M, *A = s->A, *P = s->P, *U = s->U, *W = s->W, *Kt = s->Kt, *e = s->e;

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
        const float *q = Q(i), *k = K(i);
        memset(Ai, 0, (size_t)L * sizeof(float));
        memset(Pi, 0, (size_t)L * sizeof(float));
        for (int r = 0; r < Dk; r++) {
            row_axpy(Ai, Kt + r * C, k[r], i);
            row_axpy(Pi, Kt + r * C, q[r] * scale, i + 1);
        }
        const float b = B(i);
        for (int j = 0; j < i; j++) Ai[j] *= b * M[i * C + j];
        for (int j = 0; j <= i; j++) Pi[j] *= M[i * C + j];
    }

    /* 3. U = T (β ⊙ V), W = T (β e ⊙ K) with T = (I + A)^-1: forward substitution on the
     *    right-hand sides, row i minus A_ij times the already solved rows j < i. */
    for (int i = 0; i < L; i++) {
        float *Ui = U + (size_t)i * Dv, *Wi = W + (size_t)i * Dk;
        const float b = B(i);
        row_scale_copy(Ui, V(i), b, Dv);
        row_scale_copy(Wi, K(i), b * e[i], Dk);
        for (int j = 0; j < i; j++) {
            const float aij = A[i * C + j];
            row_axpy(Ui, U + (size_t)j * Dv, -aij, Dv);
            row_axpy(Wi, W + (size_t)j * Dk, -aij, Dk);
        }
    }

    /* 4-5. Per token, one walk over S: V_new_i = U_i − W_i S and the inter-chunk part of o_i,
     *      then the intra-chunk part P_i V_new (V_new_j for j <= i is final by then). */
    for (int i = 0; i < L; i++) {
        float *Ui = U + (size_t)i * Dv, *o = O(i);
        const float *Wi = W + (size_t)i * Dk, *q = Q(i);
        const float qe = e[i];
        memset(o, 0, (size_t)Dv * sizeof(float));
        for (int r = 0; r < Dk; r++) row_axpy2(Ui, o, cur + (size_t)r * Dv, Wi[r], q[r] * scale * qe, Dv);
        for (int j = 0; j <= i; j++) row_axpy(o, U + (size_t)j * Dv, P[i * C + j], Dv);
    }

    /* 6. S ← e_{L-1} S + Σ_i f_i k_i ⊗ V_new_i with f_i = M_{L-1,i}. */
    const float eL = e[L - 1];
    for (int r = 0; r < Dk; r++) {
        float *row = out + (size_t)r * Dv;
        if (cur == out)
            row_scale_inplace(row, eL, Dv);
        else
            row_scale_copy(row, cur + (size_t)r * Dv, eL, Dv);
        for (int i = 0; i < L; i++) row_axpy(row, U + (size_t)i * Dv, M[(L - 1) * C + i] * Kt[r * C + i], Dv);
    }
#undef Q
#undef K
#undef V
#undef O
#undef G
#undef B
}

void spex_gdn_chunked(const spex_gdn_args *a, int chunk, float *S_out, float *scratch) {
    const int Dk = a->Dk, Dv = a->Dv, n = a->n;
    if (Dk <= 0 || Dv <= 0 || n <= 0) return;
    const int C = clamp_chunk(chunk);
    gdn_scratch s;
    carve(&s, scratch, Dk, Dv, C);

    /* The zero state is materialised in S_out so that every chunk reads a real state. */
    const float *cur = a->S_in;
    if (!cur) {
        memset(S_out, 0, (size_t)Dk * Dv * sizeof(float));
        cur = S_out;
    }
    for (int t0 = 0; t0 < n; t0 += C) {
        const int L = n - t0 < C ? n - t0 : C;
        gdn_chunk(a, t0, L, C, cur, S_out, &s);
        cur = S_out;
    }
}
