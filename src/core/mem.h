/*
 * mem.h — large, long-lived buffers (repacked weights, the KV cache) on transparent huge
 * pages where the system offers them.
 *
 * Why: a decode step streams every weight byte once and reads the KV cache rows of each
 * layer a few lines per 2-4 KiB row apart; with 4 KiB pages that is a TLB miss per page of
 * weights and nearly per cache row, which costs bandwidth the memory could give. Buffers of
 * at least SPEX_HUGE_MIN bytes are 2 MiB aligned and advised MADV_HUGEPAGE (Linux, where
 * THP is "madvise" or "always"); elsewhere, or when the advice fails, they are ordinary.
 * What it is not: an allocator. Free with free().
 */
#ifndef SPEX_CORE_MEM_H
#define SPEX_CORE_MEM_H

#include <stddef.h>

#define SPEX_HUGE_MIN ((size_t)2 << 20)

/* bytes (> 0) of memory aligned to 64 (2 MiB from SPEX_HUGE_MIN on), contents undefined;
 * NULL when out of memory. */
void *spex_alloc_large(size_t bytes);
/* Bytes spex_alloc_large(bytes) actually takes (the size rounded to its alignment). */
size_t spex_alloc_large_size(size_t bytes);

/* bytes (> 0) of zeroed memory, committed page by page as it is first touched (where huge
 * pages are granted, a page is 2 MiB), 2 MiB aligned and advised for huge pages from
 * SPEX_HUGE_MIN on; NULL when out of memory. Free with spex_free_zeroed(p, bytes),
 * the same bytes. */
void *spex_alloc_zeroed(size_t bytes);
void spex_free_zeroed(void *p, size_t bytes);

extern int spex_mem_thp; /* 0: no huge-page advice (measurement switch) */

#endif
