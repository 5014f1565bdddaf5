/*
 * kq_prefetch.h — the weight read-ahead shared by the AVX2 and AVX-512 K-quant tile kernels.
 *
 * Only SSE prefetch hints (baseline x86-64), so both ISA files include it unchanged. The
 * why and the measurements behind the distance are in the comments below and in
 * docs/performance.md.
 */
#ifndef SPEX_CPU_X86_KQ_PREFETCH_H
#define SPEX_CPU_X86_KQ_PREFETCH_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu/isa.h"
#include "cpu/kquants_internal.h"

#define KQ_INLINE static inline __attribute__((always_inline))

/* Prefetches the bytes [p, p + size) (p == 0: nothing; prefetches never fault). Used on
 * the weight chunk the tile loop visits KQ_PF_AHEAD visits later. When a span covers only
 * part of each row the loop walks weight rows chunk by chunk (1 KiB pieces from rows
 * w_stride apart), which the hardware prefetchers follow poorly: 8 rows from memory took
 * 2.5x their in-cache time without, 1.25x with (Zen 4). With 3+ activation rows the slots
 * fill much of L1 and whole-row streams also stall without it (4 rows: 2.1x -> 1.5x).
 * The hint: into L2 (t1; 10 % better than t0 on Zen 4: weight lines are read once, and L1
 * is needed for the activation slots), or non-temporal where spex_cpu_prefetch_nta says so
 * (AMD): on Zen 5 the R16 K-quant kernels ran decode(1) 8-12 % and verify(8) 2-3 % faster
 * with it than with t1, also at 64 super-blocks (147 KiB) of read-ahead distance
 * (docs/performance.md, "Decode against the streaming-read probe"). On Intel, where nta
 * lines skip L2 and the distance can exceed L1, t1 stays (not measured). */
KQ_INLINE void kq_prefetch(uintptr_t p, size_t size) {
    if (!p) return;
    const uintptr_t a0 = p & ~(uintptr_t)63;
    if (spex_cpu_prefetch_nta)
        for (uintptr_t a = a0; a < p + size; a += 64) _mm_prefetch((const char *)a, _MM_HINT_NTA);
    else
        for (uintptr_t a = a0; a < p + size; a += 64) _mm_prefetch((const char *)a, _MM_HINT_T1);
}

/* Prefetch distance, in chunk visits. */
#define KQ_PF_AHEAD 2

/* Address of the weight chunk the tile loop visits KQ_PF_AHEAD visits after (row i of
 * nw, chunk at c0 of a span of nbs super-blocks; wr = row i at the span start), or 0
 * past the tile. Visits go chunk by chunk along a row's span, then to the next row. */
KQ_INLINE uintptr_t kq_visit_ahead(uintptr_t wr, size_t w_stride, int i, int nw, int c0, int nbs,
                                   size_t bsize) {
    for (int v = 0; v < KQ_PF_AHEAD; v++) {
        c0 += SPEX_KQ_CHUNK;
        if (c0 >= nbs) {
            c0 = 0;
            if (++i >= nw) return 0;
            wr += w_stride;
        }
    }
    return wr + (uintptr_t)c0 * bsize;
}

#endif
