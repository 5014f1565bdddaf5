/*
 * dot_avx2.c — AVX2 + FMA + F16C matmul kernels for the float and 32-element-block weight
 * types, and the Q8_0 / Q8_1 activation quantizers.
 *
 * What it is: the AVX2 entries of the kernel table (src/cpu/matmul.h contract), also
 * inherited by the AVX-512 table for any type it lacks; the scalar kernels in
 * src/cpu/ref/dot_ref.c are their specification. Compiled with -mavx2 -mfma -mf16c only
 * (Makefile). What it is not: the K-quants (dot_kquants*.c).
 *
 * Dimension legend: n elements per row; nb = n / 32 blocks (one ymm of quants per block);
 * RW weight rows × RX activation rows form the register tile (RW <= 2, RX <= 4, or RW <= 4
 * for a single activation row: 16 ymm registers hold RW*RX accumulators plus operands);
 * y[j*ldy + i] = dot(weight row i, activation row j).
 *
 * Scheme (quantized weights), per block and tile: each weight block is expanded once to
 * bytes, each activation block loaded once, and for every (i, j):
 *   S = vpmaddwd(vpmaddubsw(u_i, x_j), 1)   (8 int32 lanes; unsigned × signed bytes)
 *   acc_ij += float(S) * broadcast(dw_i * dx_j)
 * q4_0 / q5_0 use their unsigned codes (0..15 / 0..31) and subtract off * sum(x) (off = 8 /
 * 16, computed once per activation block); q8_0 puts w's sign on x and uses |w| (vpsignb),
 * so no pair sum can saturate vpmaddubsw's int16 (<= 2*127*127). q4_1 / q5_1 add m_i * s_j
 * per block through lane 0. The integer sums are exact; every output goes through the same
 * sequence of operations whatever the tile shape, so splits never change a result.
 */
#include <immintrin.h>
#include <string.h>

#include "cpu/matmul.h"
#include "tensor/blocks.h"
#include "tensor/quant_ref.h"

#define AI static inline __attribute__((always_inline))
#define MAXW 4
#define MAXX 4

enum { K_Q8_0, K_Q4_0, K_Q5_0, K_Q4_1, K_Q5_1 };

AI size_t wblock_bytes(const int K) {
    switch (K) {
    case K_Q8_0: return sizeof(block_q8_0);
    case K_Q4_0: return sizeof(block_q4_0);
    case K_Q5_0: return sizeof(block_q5_0);
    case K_Q4_1: return sizeof(block_q4_1);
    default: return sizeof(block_q5_1);
    }
}
AI bool has_min(const int K) { return K == K_Q4_1 || K == K_Q5_1; }
AI int code_offset(const int K) { return K == K_Q4_0 ? 8 : K == K_Q5_0 ? 16 : 0; }

AI uint16_t ld16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
AI uint32_t ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
AI float h2f(uint16_t h) { return _cvtsh_ss(h); }

/* 4-bit codes: 16 bytes -> [low nibbles (elements 0..15) | high nibbles (16..31)]. */
AI __m256i unpack_nibbles(const uint8_t *qs) {
    const __m128i q = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0f));
}

/* Bit 4 of the 5-bit codes: byte k = 0x10 if bit k of qh is set. */
AI __m256i fifth_bits(const uint8_t *qh) {
    const __m256i v = _mm256_set1_epi32((int)ld32(qh));
    /* byte k takes byte k/8 of qh, then tests bit k%8 */
    const __m256i spread = _mm256_shuffle_epi8(
        v, _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL, 0x0101010101010101LL, 0));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i on = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    return _mm256_and_si256(on, _mm256_set1_epi8(0x10));
}

AI __m256i dp_u8s8(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* One weight block: unsigned codes (q8_0: the signed bytes), scale, min. */
AI void load_w(const int K, const uint8_t *p, __m256i *u, float *dw, float *mw) {
    *dw = h2f(ld16(p));
    switch (K) {
    case K_Q8_0: *u = _mm256_loadu_si256((const __m256i *)(p + 2)); break;
    case K_Q4_0: *u = unpack_nibbles(p + 2); break;
    case K_Q5_0: *u = _mm256_or_si256(unpack_nibbles(p + 6), fifth_bits(p + 2)); break;
    case K_Q4_1:
        *u = unpack_nibbles(p + 4);
        *mw = h2f(ld16(p + 2));
        break;
    default:
        *u = _mm256_or_si256(unpack_nibbles(p + 8), fifth_bits(p + 4));
        *mw = h2f(ld16(p + 2));
        break;
    }
}

AI void qstep(const int K, const int RW, const int RX, const uint8_t *w, size_t wst, const uint8_t *x, size_t xst,
              __m256 acc[MAXW][MAXX]) {
    const size_t xq = has_min(K) ? 4 : 2;
    __m256i u[MAXW], au[MAXW];
    float dw[MAXW], mw[MAXW];
#pragma GCC unroll 4
    for (int r = 0; r < RW; r++) {
        load_w(K, w + (size_t)r * wst, &u[r], &dw[r], &mw[r]);
        if (K == K_Q8_0) au[r] = _mm256_abs_epi8(u[r]);
    }
#pragma GCC unroll 4
    for (int j = 0; j < RX; j++) {
        const uint8_t *q = x + (size_t)j * xst;
        const __m256i X = _mm256_loadu_si256((const __m256i *)(q + xq));
        const float dx = h2f(ld16(q));
        __m256 sx = _mm256_setzero_ps();
        if (has_min(K)) sx = _mm256_setr_ps(h2f(ld16(q + 2)), 0, 0, 0, 0, 0, 0, 0);
        __m256i corr = _mm256_setzero_si256();
        if (code_offset(K)) corr = dp_u8s8(_mm256_set1_epi8((char)code_offset(K)), X);
#pragma GCC unroll 4
        for (int r = 0; r < RW; r++) {
            __m256i S;
            if (K == K_Q8_0) S = dp_u8s8(au[r], _mm256_sign_epi8(X, u[r]));
            else if (code_offset(K)) S = _mm256_sub_epi32(dp_u8s8(u[r], X), corr);
            else S = dp_u8s8(u[r], X);
            acc[r][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S), _mm256_set1_ps(dw[r] * dx), acc[r][j]);
            if (has_min(K)) acc[r][j] = _mm256_fmadd_ps(_mm256_set1_ps(mw[r]), sx, acc[r][j]);
        }
    }
}

/* Sum of the 8 lanes in a fixed order (every output uses this same order). */
AI float hsum8(__m256 v) {
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

AI void qtile(const int K, const int RW, const int RX, int64_t nb, const uint8_t *w, size_t wst, const uint8_t *x,
              size_t xst, float *y, size_t ystep, size_t ldy) {
    const size_t wbs = wblock_bytes(K);
    const size_t xbs = has_min(K) ? sizeof(block_q8_1) : sizeof(block_q8_0);
    __m256 acc[MAXW][MAXX];
#pragma GCC unroll 4
    for (int r = 0; r < RW; r++)
#pragma GCC unroll 4
        for (int j = 0; j < RX; j++) acc[r][j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) qstep(K, RW, RX, w + (size_t)b * wbs, wst, x + (size_t)b * xbs, xst, acc);
#pragma GCC unroll 4
    for (int r = 0; r < RW; r++)
#pragma GCC unroll 4
        for (int j = 0; j < RX; j++) y[(size_t)j * ldy + (size_t)r * ystep] = hsum8(acc[r][j]);
}

/* ---- float weights × f32 activations ---------------------------------------------- */

enum { K_F32, K_F16, K_BF16 };

/* 8 weights at p as f32. */
AI __m256 widen_wf(const int K, const void *p) {
    switch (K) {
    case K_F32: return _mm256_loadu_ps((const float *)p);
    case K_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    default: {
        const __m128i h = _mm_loadu_si128((const __m128i *)p);
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    }
}

/* 8 weights from element k of a row; the last partial group (cnt < 8) goes through a
 * zero-padded copy so no byte past the row is read. */
AI __m256 load_wf(const int K, const uint8_t *row, int64_t k, int cnt) {
    const size_t es = K == K_F32 ? 4 : 2;
    if (cnt < 8) {
        _Alignas(32) uint8_t buf[32] = {0};
        memcpy(buf, row + (size_t)k * es, (size_t)cnt * es);
        return widen_wf(K, buf);
    }
    return widen_wf(K, row + (size_t)k * es);
}

AI __m256 load_xf(const float *p, int cnt) {
    if (cnt < 8) {
        _Alignas(32) float buf[8] = {0};
        memcpy(buf, p, (size_t)cnt * sizeof(float));
        return _mm256_load_ps(buf);
    }
    return _mm256_loadu_ps(p);
}

AI void fstep(const int K, const int RW, const int RX, const uint8_t *w, size_t wst, const uint8_t *x, size_t xst,
              int64_t k, int cnt, __m256 acc[MAXW][MAXX]) {
    __m256 wv[MAXW];
#pragma GCC unroll 4
    for (int r = 0; r < RW; r++) wv[r] = load_wf(K, w + (size_t)r * wst, k, cnt);
#pragma GCC unroll 4
    for (int j = 0; j < RX; j++) {
        const __m256 xv = load_xf((const float *)(x + (size_t)j * xst) + k, cnt);
#pragma GCC unroll 4
        for (int r = 0; r < RW; r++) acc[r][j] = _mm256_fmadd_ps(wv[r], xv, acc[r][j]);
    }
}

AI void ftile(const int K, const int RW, const int RX, int64_t n, const uint8_t *w, size_t wst, const uint8_t *x,
              size_t xst, float *y, size_t ystep, size_t ldy) {
    __m256 acc[MAXW][MAXX];
#pragma GCC unroll 4
    for (int r = 0; r < RW; r++)
#pragma GCC unroll 4
        for (int j = 0; j < RX; j++) acc[r][j] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) fstep(K, RW, RX, w, wst, x, xst, k, 8, acc);
    if (k < n) fstep(K, RW, RX, w, wst, x, xst, k, (int)(n - k), acc);
#pragma GCC unroll 4
    for (int r = 0; r < RW; r++)
#pragma GCC unroll 4
        for (int j = 0; j < RX; j++) y[(size_t)j * ldy + (size_t)r * ystep] = hsum8(acc[r][j]);
}

/* ---- tiling of a kernel call into register tiles ----------------------------------- */

#define SPEX_TILE_SWITCH(rw, rx, TILE)                                                         \
    switch ((rw) * 8 + (rx)) {                                                                 \
    case 1 * 8 + 1: TILE(1, 1); break;                                                         \
    case 1 * 8 + 2: TILE(1, 2); break;                                                         \
    case 1 * 8 + 3: TILE(1, 3); break;                                                         \
    case 1 * 8 + 4: TILE(1, 4); break;                                                         \
    case 2 * 8 + 1: TILE(2, 1); break;                                                         \
    case 2 * 8 + 2: TILE(2, 2); break;                                                         \
    case 2 * 8 + 3: TILE(2, 3); break;                                                         \
    case 2 * 8 + 4: TILE(2, 4); break;                                                         \
    case 3 * 8 + 1: TILE(3, 1); break;                                                         \
    default: TILE(4, 1); break;                                                                \
    }

/* Weight groups outer (their bytes come from memory once, then stay in L1/L2 while every
 * activation group is applied); a single activation row takes 4 weight rows at a time. A
 * group's rows are 1/mw of the call's rows apart (g, g+Q, ...), so the weights stream as
 * long runs rather than as interleaved neighbouring rows, which DRAM serves more slowly. */
#define SPEX_TILE_LOOP(TILE)                                                                   \
    const uint8_t *w8 = (const uint8_t *)w, *x8 = (const uint8_t *)x;                          \
    const int mw = nx == 1 ? 4 : 2;                                                            \
    const int Q = (nw + mw - 1) / mw;                                                          \
    const size_t wst = (size_t)Q * w_stride;                                                   \
    for (int i = 0; i < Q; i++) {                                                              \
        const int rw = (nw - 1 - i) / Q + 1; /* rows i + r*Q < nw */                           \
        for (int j = 0; j < nx; j += MAXX) {                                                   \
            const int rx = nx - j < MAXX ? nx - j : MAXX;                                      \
            const uint8_t *wt = w8 + (size_t)i * w_stride, *xt = x8 + (size_t)j * x_stride;    \
            float *yt = y + (size_t)j * ldy + (size_t)i;                                       \
            SPEX_TILE_SWITCH(rw, rx, TILE)                                                     \
        }                                                                                      \
    }

#define SPEX_KERNEL(name, TILE, PRE)                                                           \
    static void name(int64_t n, const void *w, size_t w_stride, int nw, const void *x,         \
                     size_t x_stride, int nx, float *y, size_t ldy) {                          \
        PRE;                                                                                   \
        SPEX_TILE_LOOP(TILE)                                                                   \
    }

#define QT(K, a, b) qtile(K, a, b, nb, wt, wst, xt, x_stride, yt, (size_t)Q, ldy)
#define QT_Q8_0(a, b) QT(K_Q8_0, a, b)
#define QT_Q4_0(a, b) QT(K_Q4_0, a, b)
#define QT_Q5_0(a, b) QT(K_Q5_0, a, b)
#define QT_Q4_1(a, b) QT(K_Q4_1, a, b)
#define QT_Q5_1(a, b) QT(K_Q5_1, a, b)
#define FT(K, a, b) ftile(K, a, b, n, wt, wst, xt, x_stride, yt, (size_t)Q, ldy)
#define FT_F32(a, b) FT(K_F32, a, b)
#define FT_F16(a, b) FT(K_F16, a, b)
#define FT_BF16(a, b) FT(K_BF16, a, b)
#define NB_PRE const int64_t nb = n / 32
#define NO_PRE (void)0

SPEX_KERNEL(dot_q8_0, QT_Q8_0, NB_PRE)
SPEX_KERNEL(dot_q4_0, QT_Q4_0, NB_PRE)
SPEX_KERNEL(dot_q5_0, QT_Q5_0, NB_PRE)
SPEX_KERNEL(dot_q4_1, QT_Q4_1, NB_PRE)
SPEX_KERNEL(dot_q5_1, QT_Q5_1, NB_PRE)
SPEX_KERNEL(dot_f32, FT_F32, NO_PRE)
SPEX_KERNEL(dot_f16, FT_F16, NO_PRE)
SPEX_KERNEL(dot_bf16, FT_BF16, NO_PRE)

/* ---- activation quantizers: the same bytes as spex_quantize_row_q8_{0,1}_ref ---------- */

/* roundf (half away from zero) of v clamped to [-127, 127]; NaN lanes give 0. Exact:
 * v - trunc(v) has no rounding error for |v| < 2^23. */
AI __m256i round_q8(__m256 v) {
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 f = _mm256_sub_ps(v, t);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 one = _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.0f));
    const __m256 up = _mm256_cmp_ps(_mm256_andnot_ps(sign, f), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    __m256 r = _mm256_add_ps(t, _mm256_and_ps(up, one));
    r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
    r = _mm256_and_ps(r, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
    return _mm256_cvttps_epi32(r);
}

AI int quant_block_q8(const float *x, spex_fp16 *dh, int8_t *qs, float *d_out) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4], m = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[k]));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    *dh = spex_f32_to_fp16(d);
    *d_out = d;
    __m256i q[4];
    for (int k = 0; k < 4; k++) q[k] = round_q8(_mm256_mul_ps(v[k], _mm256_set1_ps(id)));
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256((__m256i *)qs, _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    const __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 1));
    return _mm_cvtsi128_si32(s4);
}

/* A block holding a NaN or an infinity (x * 0 is then not 0; so is a pair of finite values
 * whose sum overflows, which costs nothing but the detour) is handed to the reference, whose
 * sequential max treats NaNs its own way; the rest quant_block_q8 gives the reference's
 * bytes for. */
static void act_q8_0(const float *x, void *dst, int64_t n) {
    block_q8_0 *y = (block_q8_0 *)dst;
    float d;
    for (int64_t b = 0; b < n / QK8_0; b++) {
        const float *xb = x + b * QK8_0;
        const __m256 v = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(xb), _mm256_loadu_ps(xb + 8)),
                                       _mm256_add_ps(_mm256_loadu_ps(xb + 16), _mm256_loadu_ps(xb + 24)));
        if (_mm256_movemask_ps(_mm256_cmp_ps(_mm256_mul_ps(v, _mm256_setzero_ps()), _mm256_setzero_ps(), _CMP_NEQ_UQ)))
            spex_quantize_row_q8_0_ref(xb, y + b, QK8_0);
        else
            (void)quant_block_q8(xb, &y[b].d, y[b].qs, &d);
    }
}

static void act_q8_1(const float *x, void *dst, int64_t n) {
    block_q8_1 *y = (block_q8_1 *)dst;
    for (int64_t b = 0; b < n / QK8_1; b++) {
        float d;
        const int sum = quant_block_q8(x + b * QK8_1, &y[b].d, y[b].qs, &d);
        y[b].s = spex_f32_to_fp16((float)sum * d);
    }
}

/* ---- streaming-read probe (spex bench kernels) ------------------------------------- */

uint64_t spex_stream_read_avx2(const void *buf, size_t bytes, int streams) {
    const size_t part = bytes / (size_t)streams / 256 * 256;
    __m256i acc[8];
    for (int s = 0; s < 8; s++) acc[s] = _mm256_setzero_si256();
    for (size_t i = 0; i < part; i += 256) {
        for (int s = 0; s < streams && s < 8; s++) {
            const uint8_t *p = (const uint8_t *)buf + (size_t)s * part + i;
            __m256i a = _mm256_loadu_si256((const __m256i *)p);
            for (int k = 1; k < 8; k++) a = _mm256_add_epi64(a, _mm256_loadu_si256((const __m256i *)(p + 32 * k)));
            acc[s] = _mm256_add_epi64(acc[s], a);
        }
    }
    for (int s = 1; s < 8; s++) acc[0] = _mm256_add_epi64(acc[0], acc[s]);
    uint64_t out[4];
    _mm256_storeu_si256((__m256i *)out, acc[0]);
    return out[0] + out[1] + out[2] + out[3];
}

void spex_matmul_register_avx2(spex_matmul_kernels *k) {
    k->dot[SPEX_TYPE_F32] = dot_f32;
    k->dot[SPEX_TYPE_F16] = dot_f16;
    k->dot[SPEX_TYPE_BF16] = dot_bf16;
    k->dot[SPEX_TYPE_Q8_0] = dot_q8_0;
    k->dot[SPEX_TYPE_Q4_0] = dot_q4_0;
    k->dot[SPEX_TYPE_Q5_0] = dot_q5_0;
    k->dot[SPEX_TYPE_Q4_1] = dot_q4_1;
    k->dot[SPEX_TYPE_Q5_1] = dot_q5_1;
    k->act_quant[SPEX_TYPE_Q8_0] = act_q8_0;
    k->act_quant[SPEX_TYPE_Q8_1] = act_q8_1;
}
