/*
 * dflash_select.h — the candidate selector walks of the DFlash drafters over explicit inputs
 * (../shared/docs/dflash2.md §12–§14), so that tests can drive them from golden tensors.
 *
 * What it is: spex_dflash_walk, the walk spex_draft_walk runs after gathering a block's
 * per-slot C, U, gate and z from the draft context; and spex_draft_block_info, the block
 * metadata it needs from the context (implemented with the context, dflash_context.c).
 * What it is not: the block forward that produces C/U/gate/z (dflash_forward.c), or
 * verification (src/spec/verify.h).
 *
 * Dimension legend: dflash.h (n slots of the block, K candidates, R rank, V vocabulary).
 */
#ifndef SPEX_MODEL_DFLASH_SELECT_H
#define SPEX_MODEL_DFLASH_SELECT_H

#include "model/dflash.h"

/* Largest selector rank the walk handles (its rows live on the stack). Real drafters use
 * R = 256; a larger R is SPEX_ERR_UNSUPPORTED. */
#define SPEX_SELECTOR_MAX_R 4096

/* Block b of the last spex_draft_forward: its anchor token and drafted-slot count n.
 * false when b is out of range or there was no forward. */
bool spex_draft_block_info(const spex_draft_context *dc, int32_t b, int32_t *anchor, int32_t *n);

/* Walks one block of n slots (1 <= n <= SPEX_DRAFT_MAX_N), slot p (1-based) given by row
 * pointers at index p-1:
 *   DFlash2: C[p-1], U[p-1] (K = selector_top_k entries each) and gate[p-1] (R); z unused
 *            (may be NULL). The predecessor of slot 1 is `anchor`, of slot p the token drafted
 *            at p-1 (§12.1).
 *   v1:      z[p-1] (V transformed logits); C, U, gate and anchor unused (may be NULL).
 * temp <= 0 (or v1 at any temp): the greedy walk (§13). temp > 0 (DFlash2): the sampled walk
 * (§14); slot p draws uniforms[p-1] when `uniforms` is non-NULL (tests replaying stored
 * uniforms), else one spex_rng_uniform(rng) per drafted slot (a stopped slot draws none).
 *
 * out: n drafted, ids, kidx (v1: 0), cand (C_p; v1: the drafted id, n_cand 1) and q (the
 * proposal when has_q; the greedy walks store the one-hot of §13). conf: the greedy walks'
 * confidence of each drafted slot, and of the slot that stopped the walk at conf[out->n]
 * (when < SPEX_DRAFT_MAX_N); the sampled walk stores max q_p there instead. A slot whose
 * scores are not finite stops the walk (a draft is only a proposal: verification stays
 * lossless). Allocates nothing. */
spex_status spex_dflash_walk(const spex_drafter *d, int32_t anchor, int32_t n, const int32_t *const *C,
                             const float *const *U, const float *const *gate, const float *const *z, float temp,
                             float p_min, spex_rng *rng, const float *uniforms, spex_draft *out, spex_error *err);

#endif
