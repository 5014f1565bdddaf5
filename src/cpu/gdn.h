/*
 * gdn.h — the Gated DeltaNet recurrence of one value head (../shared/docs/targets.md §7.1
 * step 7 and §7.2): the per-token (recurrent) form and the chunked form for runs of tokens.
 *
 * What it is: the only part of a qwen35 GDN layer that is neither a matmul nor a row-wise
 * op. The state of one value head is S ∈ R^{Dk×Dv}, fp32, row-major (S[i][j] at i*Dv + j).
 * For each token t, with q_t, k_t already L2-normalised (the kernels apply the 1/√Dk
 * scale to q themselves), g_t ≤ 0 the log-decay and β_t ∈ (0, 1):
 *     S ← exp(g_t) · S
 *     err = β_t · (v_t − Sᵀ k_t)
 *     S ← S + k_t ⊗ err
 *     o_t = Sᵀ (q_t / √Dk)
 * What it is not: the projections, the causal conv, the L2 norms, the gated output norm
 * (src/model/forward_qwen35.c) or the thread split (the caller runs one head per call).
 *
 * Strides are in floats between consecutive tokens' rows (q, k, v, o) or values (g, beta),
 * so the caller can point straight into its [n][Hk*Dk] / [n][Hv] activation buffers.
 * Both forms compute o_t and the state for any n ≥ 1 and agree to fp32 rounding; the
 * recurrent form is the reference (and the one decode and verify rows use, so that a
 * token's result does not depend on the batch it came in: targets.md §9 snapshots).
 * Each entry point runs the variant of spex_cpu_isa() (scalar C, AVX2+FMA, AVX-512; see
 * gdn_impl.h): the bits are fixed per variant, and variants differ by rounding only.
 */
#ifndef SPEX_CPU_GDN_H
#define SPEX_CPU_GDN_H

#include <stddef.h>
#include <stdint.h>

typedef struct spex_gdn_args {
    int Dk, Dv;              /* state dims (Dk = Dv = ssm.state_size in qwen35)               */
    int n;                   /* tokens, >= 1                                                  */
    const float *q;          /* [n] rows of Dk, stride q_stride                               */
    const float *k;          /* [n] rows of Dk, stride k_stride                               */
    const float *v;          /* [n] rows of Dv, stride v_stride                               */
    const float *g;          /* [n] log-decays, stride g_stride                               */
    const float *beta;       /* [n] betas, stride beta_stride                                 */
    float *o;                /* [n] output rows of Dv, stride o_stride                        */
    int64_t q_stride, k_stride, v_stride, g_stride, beta_stride, o_stride;
    const float *S_in;       /* [Dk][Dv] state before token 0; NULL = the zero state          */
} spex_gdn_args;

/* Recurrent form. S_after[t] ([Dk][Dv], t = 0..n-1, each non-NULL) receives the state after
 * token t; token t > 0 starts from S_after[t-1]. S_in is read only while token 0 is computed, so it
 * may alias S_after[0] (in place) or any later S_after[t] (a ring of snapshots that wraps);
 * the S_after[t] may all be the same buffer (no snapshots) or all distinct. */
void spex_gdn_recurrent(const spex_gdn_args *a, float *const *S_after);

/* Chunked form (§7.2) with chunks of `chunk` tokens (1 .. SPEX_GDN_CHUNK_MAX; the last one
 * may be shorter). Writes the state after the last token to S_out (may equal S_in). scratch:
 * spex_gdn_chunked_scratch_floats(Dk, Dv, chunk) floats, 64-byte aligned, owned by the caller
 * (one per thread). */
#define SPEX_GDN_CHUNK_MAX 64
size_t spex_gdn_chunked_scratch_floats(int Dk, int Dv, int chunk);
void spex_gdn_chunked(const spex_gdn_args *a, int chunk, float *S_out, float *scratch);

#endif
