/*
 * mem.c — large buffers on transparent huge pages (see mem.h for why).
 */
#include "core/mem.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#ifdef __linux__
#include <sys/mman.h>
#endif

int spex_mem_thp = 1;

static bool huge(size_t bytes) { return bytes >= SPEX_HUGE_MIN && spex_mem_thp; }

size_t spex_alloc_large_size(size_t bytes) {
    const size_t a = huge(bytes) ? SPEX_HUGE_MIN : 64;
    const size_t r = (bytes + a - 1) / a * a;
    return r < bytes ? 0 : r; /* 0: too large */
}

void *spex_alloc_large(size_t bytes) {
    if (bytes == 0) return NULL;
    const size_t r = spex_alloc_large_size(bytes);
    if (r == 0) return NULL;
    if (!huge(bytes)) return aligned_alloc(64, r);
    void *p = aligned_alloc(SPEX_HUGE_MIN, r);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (p) (void)madvise(p, r, MADV_HUGEPAGE); /* advice only: without it the pages are small */
#endif
    return p;
}
