/*
 * mem.c — large buffers on transparent huge pages (see mem.h for why).
 */
#include "core/mem.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#define SPEX_HAVE_MMAP 1
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

/* An anonymous mapping is zeroed and lazily committed by the kernel, which calloc promises
 * only when it happens to map; the mapping is cut to a 2 MiB-aligned start so that huge
 * pages can back it. Whether a buffer is mapped depends on its size only, so the free
 * matches the allocation whatever spex_mem_thp says meanwhile. */
static size_t mapped_size(size_t bytes) {
    const size_t r = (bytes + SPEX_HUGE_MIN - 1) / SPEX_HUGE_MIN * SPEX_HUGE_MIN;
    return r < bytes || r > SIZE_MAX - SPEX_HUGE_MIN ? 0 : r;
}

void *spex_alloc_zeroed(size_t bytes) {
    if (bytes == 0) return NULL;
#ifdef SPEX_HAVE_MMAP
    if (bytes >= SPEX_HUGE_MIN) {
        const size_t r = mapped_size(bytes);
        if (r == 0) return NULL;
        uint8_t *m = mmap(NULL, r + SPEX_HUGE_MIN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return NULL;
        uint8_t *p = (uint8_t *)(((uintptr_t)m + SPEX_HUGE_MIN - 1) & ~(uintptr_t)(SPEX_HUGE_MIN - 1));
        /* the slack before p and after p + r (p < m + SPEX_HUGE_MIN, so there is always some after) */
        if (p > m) (void)munmap(m, (size_t)(p - m));
        (void)munmap(p + r, (size_t)(m + SPEX_HUGE_MIN - p));
#if defined(__linux__) && defined(MADV_HUGEPAGE)
        if (spex_mem_thp) (void)madvise(p, r, MADV_HUGEPAGE);
#endif
        return p;
    }
#endif
    return calloc(1, bytes);
}

void spex_free_zeroed(void *p, size_t bytes) {
    if (!p) return;
#ifdef SPEX_HAVE_MMAP
    if (bytes >= SPEX_HUGE_MIN) {
        (void)munmap(p, mapped_size(bytes));
        return;
    }
#endif
    free(p);
}
