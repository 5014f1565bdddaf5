/*
 * isa.h — internal helpers around ISA dispatch (see isa.c).
 *
 * Kernel tables are chosen by calling spex_cpu_isa() at the moment a table is fetched,
 * so tests may switch ISA with spex_cpu_set_isa() between runs (never during one).
 */
#ifndef SPEX_CPU_ISA_H
#define SPEX_CPU_ISA_H

#include <stdbool.h>

#if defined(__x86_64__) || defined(__i386__)
#define SPEX_HAVE_X86 1
#else
#define SPEX_HAVE_X86 0
#endif

/* spex_cpu_features.prefetch_nta, for the x86 kernels' read-ahead (cpu/arch/x86/kq_prefetch.h):
 * written once with the ISA choice, before any thread pool exists, then only read. */
extern bool spex_cpu_prefetch_nta;

#endif
