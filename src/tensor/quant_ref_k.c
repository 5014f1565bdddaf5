/*
 * quant_ref_k.c — scalar reference quantize/dequantize of the K-quants: Q4_K, Q5_K, Q6_K
 * (weights, 256-element super-blocks) and Q8_K (activations for their dot products).
 *
 * This file is the specification of those formats in spex. Layouts: src/tensor/blocks.h.
 * The algorithms are ggml's reference ones (ggml-quants.c: quantize_row_q{4,5,6,8}_K_ref
 * with make_qkx2_quants / make_qx_quants), which llama.cpp's quantizer runs when it has no
 * importance matrix; keeping every fp32 expression in the same order makes spex write the
 * same bytes. It is not the importance-matrix variant (make_qkx3/make_qp) and not fast.
 *
 * Legend: QK_K = 256 elements per super-block; a super-block holds 8 sub-blocks of 32
 * (Q4_K, Q5_K: each with a 6-bit scale and a 6-bit min, packed in 12 bytes) or 16
 * sub-blocks of 16 (Q6_K: int8 scales). The super-block scale d (and dmin) is fp16; the
 * value is x = d*sc*q - dmin*m (Q4_K, Q5_K) or x = d*sc*(q - 32) (Q6_K).
 *
 * Why a search: a sub-block's scale/min from its plain min/max wastes levels when the
 * distribution is not uniform; trying ~20 nearby scales and solving the weighted least
 * squares for (scale, min) at each (make_qkx2) lowers the error by about a fifth, and
 * Q6_K's signed search (make_qx) does the same for symmetric scales.
 */
#include "tensor/quant_ref.h"

#include <math.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF  /* ggml's separate multiply and add, bit for bit */
#endif

#define GROUP_MAX_EPS 1e-15f  /* Q6_K: a sub-block below this magnitude is all zero */

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ======================================================================== */
/* Scale searches                                                            */
/* ======================================================================== */

/*
 * Asymmetric search (make_qkx2_quants): finds scale > 0 and min <= 0 so that
 * x[i] ~ scale*L[i] + min with L[i] in 0..nmax, minimising sum w[i]*(error)^2.
 * Starts from the min/max mapping, then for is = 0..nstep tries
 * iscale = (nmax + rmin + rdelta*is) / (max - min), rounds, and solves the 2x2 weighted
 * least-squares system for (scale, min) with those levels; keeps the best. The grid of each
 * trial is laid from the best min so far (ggml's behaviour: a winning trial moves the grid
 * of the later ones), which an independent implementation must reproduce. Returns scale,
 * stores -min in *neg_min (so it is >= 0, as the packed 6-bit mins are unsigned).
 */
static float make_qkx2(int n, int nmax, const float *x, const float *w, uint8_t *L,
                       float *neg_min, uint8_t *Laux, float rmin, float rdelta, int nstep) {
    float min = x[0], max = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;  /* the min only ever shifts down: codes start at zero */
    if (max == min) {
        memset(L, 0, (size_t)n);
        *neg_min = -min;
        return 0.0f;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1.0f / iscale;
    float best_err = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(spex_nearest_int(iscale * (x[i] - min)), 0, nmax);
        const float diff = scale * (float)L[i] + min - x[i];
        best_err += w[i] * (diff * diff);
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi(spex_nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * (float)l;
            sum_l2 += w[i] * (float)l * (float)l;
            sum_xl += w[i] * (float)l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {  /* the min must stay <= 0: refit the scale alone */
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float err = 0;
            for (int i = 0; i < n; i++) {
                const float diff = this_scale * (float)Laux[i] + this_min - x[i];
                err += w[i] * (diff * diff);
            }
            if (err < best_err) {
                memcpy(L, Laux, (size_t)n);
                best_err = err;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *neg_min = -min;
    return scale;
}

/*
 * Symmetric search (make_qx_quants with rmse_type 1, no importance weights): L[i] in
 * 0..2*nmax-1 stands for l = L[i] - nmax in -nmax..nmax-1 and x ~ scale*l. Weights are x^2
 * (large values matter most). Tries iscale = -(nmax + 0.1*is)/max for is = -9..9 and keeps
 * the one maximising (sum w*x*l)^2 / sum w*l^2, i.e. the least-squares error. The scale is
 * negative when the largest-magnitude element is positive (it maps to l = -nmax).
 */
static float make_qx(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = (float)(-nmax) / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = clampi(spex_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi(spex_nearest_int(iscale * x[i]), -nmax, nmax - 1);
            const float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + clampi(spex_nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* ======================================================================== */
/* 6-bit scale/min packing (Q4_K, Q5_K)                                      */
/* ======================================================================== */

void spex_kq_pack_scale_min(const uint8_t sc[8], const uint8_t m[8], uint8_t q[K_SCALE_SIZE]) {
    for (int j = 0; j < 4; j++) {
        q[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] & 63) >> 4) << 6);
        q[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] & 63) >> 4) << 6);
        q[j + 8] = (uint8_t)((sc[j + 4] & 0x0f) | (m[j + 4] & 0x0f) << 4);
    }
}

/*
 * Q4_K and Q5_K share everything but the code range and the search parameters:
 * per sub-block of 32, weights w = rms(sub-block) + |x| and a make_qkx2 search; then the
 * 8 scales and 8 mins are quantized to 6 bits against the largest of each (d = max/63,
 * dmin = maxmin/63), and every element is re-quantized against its rounded scale and min.
 * L receives codes 0..nmax in element order.
 */
static void quantize_kq_superblock(const float *x, int nmax, float rmin, float rdelta, int nstep,
                                   uint8_t L[QK_K], spex_fp16 *d_out, spex_fp16 *dmin_out,
                                   uint8_t packed[K_SCALE_SIZE]) {
    float scales[QK_K / 32], mins[QK_K / 32], w[32];
    uint8_t Laux[32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK_K / 32; j++) {
        const float *xs = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += xs[l] * xs[l];
        const float av_x = sqrtf(sum_x2 / 32.0f);
        for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(xs[l]);
        scales[j] = make_qkx2(32, nmax, xs, w, L + 32 * j, &mins[j], Laux, rmin, rdelta, nstep);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    uint8_t ls[QK_K / 32], lm[QK_K / 32];
    for (int j = 0; j < QK_K / 32; j++) {
        /* ggml stores nearest_int into a uint8_t, then caps at 63 */
        const uint8_t s = (uint8_t)spex_nearest_int(inv_scale * scales[j]);
        const uint8_t m = (uint8_t)spex_nearest_int(inv_min * mins[j]);
        ls[j] = s < 63 ? s : 63;
        lm[j] = m < 63 ? m : 63;
    }
    spex_kq_pack_scale_min(ls, lm, packed);
    *d_out = spex_f32_to_fp16(max_scale / 63.0f);
    *dmin_out = spex_f32_to_fp16(max_min / 63.0f);

    const float d_all = spex_fp16_to_f32(*d_out), dmin_all = spex_fp16_to_f32(*dmin_out);
    for (int j = 0; j < QK_K / 32; j++) {
        uint8_t sc, m;
        spex_kq_get_scale_min(j, packed, &sc, &m);
        const float d = d_all * (float)sc;
        if (d == 0.0f) continue;  /* keep the search's codes (they multiply a zero scale) */
        const float dm = dmin_all * (float)m;
        for (int ii = 0; ii < 32; ii++)
            L[32 * j + ii] = (uint8_t)clampi(spex_nearest_int((x[32 * j + ii] + dm) / d), 0, nmax);
    }
}

/* ======================================================================== */
/* Q4_K: codes 0..15; qs[32*c + l] holds element 64c+l (low nibble) and 64c+32+l (high) */
/* ======================================================================== */

void spex_quantize_row_q4_K_ref(const float *x, block_q4_K *y, int64_t n) {
    const int64_t nb = n / QK_K;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        quantize_kq_superblock(x, 15, -1.0f, 0.1f, 20, L, &y[i].d, &y[i].dmin, y[i].scales);
        for (int c = 0; c < QK_K / 64; c++)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | L[64 * c + 32 + l] << 4);
    }
}

void spex_dequantize_row_q4_K_ref(const block_q4_K *x, float *y, int64_t n) {
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; i++) {
        const float d = spex_fp16_to_f32(x[i].d);
        const float dmin = spex_fp16_to_f32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        for (int c = 0; c < QK_K / 64; c++, q += 32) {
            uint8_t sc, m;
            spex_kq_get_scale_min(2 * c, x[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            spex_kq_get_scale_min(2 * c + 1, x[i].scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0x0f) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

/* ======================================================================== */
/* Q5_K: Q4_K's low bits plus qh[l] bit 2c (element 64c+l) and bit 2c+1 (64c+32+l)   */
/* ======================================================================== */

void spex_quantize_row_q5_K_ref(const float *x, block_q5_K *y, int64_t n) {
    const int64_t nb = n / QK_K;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        quantize_kq_superblock(x, 31, -0.5f, 0.1f, 15, L, &y[i].d, &y[i].dmin, y[i].scales);
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int c = 0; c < QK_K / 64; c++) {
            for (int l = 0; l < 32; l++) {
                const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
                y[i].qs[32 * c + l] = (uint8_t)((lo & 0x0f) | (hi & 0x0f) << 4);
                y[i].qh[l] |= (uint8_t)((lo >> 4) << (2 * c) | (hi >> 4) << (2 * c + 1));
            }
        }
    }
}

void spex_dequantize_row_q5_K_ref(const block_q5_K *x, float *y, int64_t n) {
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; i++) {
        const float d = spex_fp16_to_f32(x[i].d);
        const float dmin = spex_fp16_to_f32(x[i].dmin);
        const uint8_t *ql = x[i].qs, *qh = x[i].qh;
        for (int c = 0; c < QK_K / 64; c++, ql += 32) {
            uint8_t sc, m;
            spex_kq_get_scale_min(2 * c, x[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            spex_kq_get_scale_min(2 * c + 1, x[i].scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            const int b1 = 2 * c, b2 = 2 * c + 1;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)((ql[l] & 0x0f) | ((qh[l] >> b1) & 1) << 4) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (float)((ql[l] >> 4) | ((qh[l] >> b2) & 1) << 4) - m2;
        }
    }
}

/* ======================================================================== */
/* Q6_K: codes 0..63 (value q-32), 16 int8 scales. Per half h (128 elements):          */
/*   ql[64h + l]      = low4(e 128h+l)    | low4(e 128h+64+l) << 4                     */
/*   ql[64h + 32 + l] = low4(e 128h+32+l) | low4(e 128h+96+l) << 4                     */
/*   qh[32h + l]      = high2 of e 128h+l, +32+l, +64+l, +96+l at bits 0,2,4,6         */
/* ======================================================================== */

void spex_quantize_row_q6_K_ref(const float *x, block_q6_K *y, int64_t n) {
    const int64_t nb = n / QK_K;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < QK_K / 16; ib++) {
            scales[ib] = make_qx(16, 32, x + 16 * ib, L + 16 * ib);
            if (fabsf(scales[ib]) > max_abs_scale) {
                max_abs_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* signed: the largest sub-block scale maps to -128, so the others fit in int8 */
        const float iscale = -128.0f / max_scale;
        y[i].d = spex_f32_to_fp16(1.0f / iscale);
        for (int ib = 0; ib < QK_K / 16; ib++)
            y[i].scales[ib] = (int8_t)clampi(spex_nearest_int(iscale * scales[ib]), -128, 127);
        const float d_all = spex_fp16_to_f32(y[i].d);
        for (int j = 0; j < QK_K / 16; j++) {
            const float d = d_all * (float)y[i].scales[j];
            if (d == 0.0f) continue;
            for (int ii = 0; ii < 16; ii++)
                L[16 * j + ii] = (int8_t)(clampi(spex_nearest_int(x[16 * j + ii] / d), -32, 31) + 32);
        }
        for (int h = 0; h < QK_K / 128; h++) {
            uint8_t *ql = y[i].ql + 64 * h, *qh = y[i].qh + 32 * h;
            const int8_t *Lh = L + 128 * h;
            for (int l = 0; l < 32; l++) {
                const int a = Lh[l], b = Lh[l + 32], c = Lh[l + 64], e = Lh[l + 96];
                ql[l] = (uint8_t)((a & 0x0f) | (c & 0x0f) << 4);
                ql[l + 32] = (uint8_t)((b & 0x0f) | (e & 0x0f) << 4);
                qh[l] = (uint8_t)((a >> 4) | (b >> 4) << 2 | (c >> 4) << 4 | (e >> 4) << 6);
            }
        }
    }
}

void spex_dequantize_row_q6_K_ref(const block_q6_K *x, float *y, int64_t n) {
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; i++) {
        const float d = spex_fp16_to_f32(x[i].d);
        for (int h = 0; h < QK_K / 128; h++, y += 128) {
            const uint8_t *ql = x[i].ql + 64 * h, *qh = x[i].qh + 32 * h;
            const int8_t *sc = x[i].scales + 8 * h;
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0x0f) | ((qh[l] >> 0) & 3) << 4) - 32;
                const int q2 = ((ql[l + 32] & 0x0f) | ((qh[l] >> 2) & 3) << 4) - 32;
                const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                y[l] = d * (float)sc[is] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

/* ======================================================================== */
/* Q8_K: fp32 d, q = nearest-even(x / d) in -127..127, bsums of each 16      */
/* ======================================================================== */

void spex_quantize_row_q8_K_ref(const float *x, block_q8_K *y, int64_t n) {
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < QK_K; j++) {
            const float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            /* ggml leaves bsums stale here; spex zeroes them so the block is fully defined */
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < QK_K; j++)
            y[i].qs[j] = (int8_t)clampi(spex_nearest_int(iscale * x[j]), -128, 127);
        for (int j = 0; j < QK_K / 16; j++) {
            int sum = 0;
            for (int ii = 0; ii < 16; ii++) sum += y[i].qs[16 * j + ii];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1.0f / iscale;
    }
}

void spex_dequantize_row_q8_K_ref(const block_q8_K *x, float *y, int64_t n) {
    const int64_t nb = n / QK_K;
    for (int64_t i = 0; i < nb; i++, y += QK_K)
        for (int j = 0; j < QK_K; j++) y[j] = x[i].d * (float)x[i].qs[j];
}
