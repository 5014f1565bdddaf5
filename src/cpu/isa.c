/*
 * isa.c — CPU feature detection and the one-time choice of kernel ISA.
 *
 * The release binary is built for baseline x86-64; kernels for AVX2 and AVX-512 live in
 * arch/x86/ files compiled with their own flags, and this file picks one at start-up from
 * CPUID (checking with XGETBV that the OS saves the wider registers). SPEX_ISA narrows the
 * choice (tests run every ISA against the scalar reference); it can never widen it.
 */
#include "spex.h"
#include "cpu/api.h"
#include "cpu/isa.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* Linux keeps the 8 KiB AMX tile state off until a process asks for it (the kernel then
 * saves it on context switches); the grant covers every thread of the process. */
static bool amx_permitted(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    enum { ARCH_GET_XCOMP_PERM = 0x1022, ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    unsigned long bits = 0;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) return false;
    if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &bits) != 0) return false;
    return (bits >> XFEATURE_XTILEDATA) & 1;
#else
    return false;
#endif
}
static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
static void detect(spex_cpu_features *f) {
    unsigned a, b, c, d;
    /* vendor "AuthenticAMD" (ebx, edx, ecx of leaf 0): see spex_cpu_features.prefetch_nta */
    if (__get_cpuid(0, &a, &b, &c, &d)) f->prefetch_nta = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    bool osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
    f->fma = (c >> 12) & 1;
    f->f16c = (c >> 29) & 1;
    uint64_t xcr0 = osxsave ? read_xcr0() : 0;
    bool os_ymm = (xcr0 & 0x6) == 0x6;
    bool os_zmm = (xcr0 & 0xe6) == 0xe6;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
    f->avx2 = avx && os_ymm && ((b >> 5) & 1);
    f->fma = f->fma && os_ymm;
    f->f16c = f->f16c && os_ymm;
    f->avx512f = os_zmm && ((b >> 16) & 1);
    f->avx512dq = f->avx512f && ((b >> 17) & 1);
    f->avx512bw = f->avx512f && ((b >> 30) & 1);
    f->avx512vl = f->avx512f && ((b >> 31) & 1);
    f->avx512vnni = f->avx512f && ((c >> 11) & 1);
    unsigned a1, b1, c1, d1;
    if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) {
        f->avx512bf16 = f->avx512f && ((a1 >> 5) & 1);
        f->avxvnni = f->avx2 && ((a1 >> 4) & 1);
    }
    /* AMX-TILE (edx bit 24) and AMX-INT8 (bit 25), with XCR0's tile config and data bits */
    const bool amx = ((d >> 24) & 1) && ((d >> 25) & 1) && (xcr0 & 0x60000) == 0x60000;
    const char *env = getenv("SPEX_AMX");
    if (amx && f->avx512vnni && !(env && !strcmp(env, "0"))) f->amx_int8 = amx_permitted();
}
#else
static void detect(spex_cpu_features *f) {
#if defined(__aarch64__)
    f->neon = true;
#else
    (void)f;
#endif
}
#endif

static spex_cpu_features g_features;
static spex_isa g_isa;
bool spex_cpu_prefetch_nta;
static int g_ready; /* set once; the first call happens before any thread pool exists */

/* The availability rule (AVX2 = AVX2+FMA+F16C; AVX-512 = F/BW/VL/DQ on top of AVX2; NEON only
 * where compiled for aarch64) on the detected features; the kernel tables use it too. */
static bool isa_available(spex_isa isa) {
    const spex_cpu_features *f = &g_features;
    switch (isa) {
    case SPEX_ISA_SCALAR: return true;
    case SPEX_ISA_AVX2: return SPEX_HAVE_X86 && f->avx2 && f->fma && f->f16c;
    case SPEX_ISA_AVX512:
        return SPEX_HAVE_X86 && isa_available(SPEX_ISA_AVX2) && f->avx512f && f->avx512bw &&
               f->avx512vl && f->avx512dq;
    case SPEX_ISA_NEON: return f->neon;
    }
    return false;
}

static void init_once(void) {
    if (g_ready) return;
    detect(&g_features);
    spex_isa best = SPEX_ISA_SCALAR;
    if (isa_available(SPEX_ISA_AVX512)) best = SPEX_ISA_AVX512;
    else if (isa_available(SPEX_ISA_AVX2)) best = SPEX_ISA_AVX2;
    else if (isa_available(SPEX_ISA_NEON)) best = SPEX_ISA_NEON;
    const char *env = getenv("SPEX_ISA");
    if (env && *env) {
        spex_isa want = best;
        if (!strcmp(env, "scalar")) want = SPEX_ISA_SCALAR;
        else if (!strcmp(env, "avx2")) want = SPEX_ISA_AVX2;
        else if (!strcmp(env, "avx512")) want = SPEX_ISA_AVX512;
        else if (!strcmp(env, "neon")) want = SPEX_ISA_NEON;
        else fprintf(stderr, "spex: warning: SPEX_ISA=%s unknown (scalar|avx2|avx512|neon); using %s\n", env, spex_isa_name(best));
        if (want != best) {
            if (isa_available(want)) best = want;
            else fprintf(stderr, "spex: warning: SPEX_ISA=%s not available on this CPU; using %s\n", env, spex_isa_name(best));
        }
    }
    const char *pf = getenv("SPEX_PREFETCH");
    if (pf && *pf) {
        if (!strcmp(pf, "nta")) g_features.prefetch_nta = true;
        else if (!strcmp(pf, "l2")) g_features.prefetch_nta = false;
        else fprintf(stderr, "spex: warning: SPEX_PREFETCH=%s unknown (l2|nta); using %s\n", pf, g_features.prefetch_nta ? "nta" : "l2");
    }
    g_features.prefetch_nta = g_features.prefetch_nta && SPEX_HAVE_X86;
    spex_cpu_prefetch_nta = g_features.prefetch_nta;
    g_isa = best;
    g_ready = 1;
}

const spex_cpu_features *spex_cpu_get_features(void) {
    init_once();
    return &g_features;
}

spex_isa spex_cpu_isa(void) {
    init_once();
    return g_isa;
}

const char *spex_isa_name(spex_isa isa) {
    switch (isa) {
    case SPEX_ISA_SCALAR: return "scalar";
    case SPEX_ISA_AVX2: return "avx2";
    case SPEX_ISA_AVX512: return "avx512";
    case SPEX_ISA_NEON: return "neon";
    }
    return "?";
}

bool spex_cpu_isa_available(spex_isa isa) {
    init_once();
    return isa_available(isa);
}

spex_status spex_cpu_set_isa(spex_isa isa) {
    init_once();
    if (!isa_available(isa)) return SPEX_ERR_UNSUPPORTED;
    g_isa = isa;
    return SPEX_OK;
}
