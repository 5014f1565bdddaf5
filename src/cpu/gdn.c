/*
 * gdn.c — the Gated DeltaNet recurrence of one value head (contract: src/cpu/gdn.h; spec:
 * ../shared/docs/targets.md §7.1 step 7 and §7.2): the scalar variant and the dispatch.
 *
 * What it is: (1) the plain C body of gdn_impl.h compiled with the baseline flags — the
 * scalar twin and the specification of the SIMD variants (arch/x86/avx2/gdn_avx2.c,
 * arch/x86/avx512/gdn_avx512.c); (2) the variant table, built once (pthread_once, after CPU
 * detection) like the ops and matmul tables, and the public entry points, which look the
 * table up for spex_cpu_isa() on each call (two loads) so that SPEX_ISA and
 * spex_cpu_set_isa choose the variant. What it is not: the algorithm's description (see
 * gdn_impl.h) nor any intrinsics.
 */
#define GDN_VARIANT scalar
#include "cpu/api.h"
#include "cpu/gdn_impl.h"
#include "cpu/isa.h"

#include <pthread.h>

/* ======================================================================== */
/* Dispatch                                                                  */
/* ======================================================================== */

#define N_ISA 4 /* scalar, avx2, avx512, neon */

static spex_gdn_kernels g_tables[N_ISA];
static bool g_have[N_ISA];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void build_tables(void) {
    const spex_cpu_features *f = spex_cpu_get_features();
    const spex_gdn_kernels scalar = {SPEX_ISA_SCALAR, "scalar", spex_gdn_recurrent_scalar, spex_gdn_chunked_scalar};
    g_tables[SPEX_ISA_SCALAR] = scalar;
    g_have[SPEX_ISA_SCALAR] = true;
#if SPEX_HAVE_X86
    /* isa.c's availability rules: AVX2 = AVX2+FMA+F16C; AVX-512 = F/BW/VL/DQ on top. */
    const bool avx2 = f->avx2 && f->fma && f->f16c;
    if (avx2) {
        g_tables[SPEX_ISA_AVX2] =
            (spex_gdn_kernels){SPEX_ISA_AVX2, "avx2", spex_gdn_recurrent_avx2, spex_gdn_chunked_avx2};
        g_have[SPEX_ISA_AVX2] = true;
    }
    if (avx2 && f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq) {
        g_tables[SPEX_ISA_AVX512] =
            (spex_gdn_kernels){SPEX_ISA_AVX512, "avx512", spex_gdn_recurrent_avx512, spex_gdn_chunked_avx512};
        g_have[SPEX_ISA_AVX512] = true;
    }
#elif defined(__aarch64__)
    /* No NEON-specific GDN code: the C body, which the compiler vectorises for NEON. */
    if (f->neon) {
        g_tables[SPEX_ISA_NEON] = scalar;
        g_tables[SPEX_ISA_NEON].isa = SPEX_ISA_NEON;
        g_have[SPEX_ISA_NEON] = true;
    }
#else
    (void)f;
#endif
}

const spex_gdn_kernels *spex_gdn_for(spex_isa isa) {
    pthread_once(&g_once, build_tables);
    if ((unsigned)isa >= N_ISA || !g_have[isa]) return NULL;
    return &g_tables[isa];
}

static const spex_gdn_kernels *gdn_get(void) {
    const spex_gdn_kernels *k = spex_gdn_for(spex_cpu_isa());
    return k ? k : spex_gdn_for(SPEX_ISA_SCALAR);
}

void spex_gdn_recurrent(const spex_gdn_args *a, float *const *S_after) { gdn_get()->recurrent(a, S_after); }

void spex_gdn_chunked(const spex_gdn_args *a, int chunk, float *S_out, float *scratch) {
    gdn_get()->chunked(a, chunk, S_out, scratch);
}

size_t spex_gdn_chunked_scratch_floats(int Dk, int Dv, int chunk) {
    if (Dk <= 0 || Dv <= 0) return 0;
    return spex_gdn_carve_(NULL, NULL, Dk, Dv, spex_gdn_clamp_chunk_(chunk));
}
