/*
 * matmul.c — the matmul kernel tables (one per ISA) and the driver that runs a weight ×
 * activation multiplication on the thread pool in the three regimes.
 *
 * What it is: the implementation of the table and driver halves of src/cpu/matmul.h.
 * What it is not: the kernels (ref/dot_ref.c, arch/x86/avx2/dot_avx2.c,
 * arch/x86/avx512/dot_avx512.c, and matmul_kquants.c for the K-quants).
 *
 * Dimension legend: n inner dimension, n_out weight rows (outputs), n_rows activation rows;
 * W [n_out][n] weight type, X [n_rows][ldx] f32, Y [n_rows][ldy] f32, Y = X · Wᵀ.
 *
 * Tables. Every table starts as a copy of the scalar one; the ISA's registration then
 * overwrites what it implements, so an entry is never NULL where the scalar table has it.
 * All tables are built once (pthread_once) on first use, after CPU detection.
 *
 * Driver (spex_matmul_task). Phase 1 converts each activation row to the weight type's
 * activation type (ggml's scheme: Q8_0 / Q8_1 / Q8_K; float weights read X in place), the
 * rows split statically over threads, then a barrier. Phase 2 splits the work into chunks
 * of (activation-row tile) × (output rows), handed out by the pool's atomic counter:
 *  - decode and small batches (n_rows <= 16): one tile holds every activation row, so each
 *    chunk streams its weight rows from memory once and the kernel applies every weight
 *    block to all rows while it is in registers (the regime that decides spex's speed:
 *    speculative verify and drafting);
 *  - prompt batches: activation rows are tiled so one tile's converted activations
 *    (TILE_BYTES) stay in L2 while all threads sweep the weights; tiles are the outer
 *    index, so threads work on the same tile at the same time.
 * Chunks hold a multiple of 16 output rows (the kernels' register tiles) and about
 * CHUNK_BYTES of weights, fewer when that would leave fewer than 4 chunks per thread; with
 * several threads the last ~nth chunks' rows of a tile come in quarter-size chunks, so the
 * threads reach the end of a matrix within a small chunk of each other (the one that is
 * done first waits for the other at the phase's end).
 * Optionally (spex_matmul_args slice_align, conv_cols: small batches only) the threads' ranges
 * follow per-thread column slices of the outputs, and the conversion splits columns instead of
 * rows, so an elementwise consumer between two matmuls (SwiGLU) runs on the core that holds its
 * inputs; the other core only reads the converted activations.
 * The kernels compute every output with the same instruction sequence whatever the tile
 * shape, so results do not depend on the number of threads (tests check bit equality).
 */
#include "cpu/api.h"
#include "cpu/matmul.h"
#include "cpu/isa.h"
#include "cpu/kquants_internal.h" /* spex_matmul_register_kquants_variant: VNNI on/off */
#include "tensor/blocks.h"
#include "tensor/api.h"

#include <pthread.h>
#include <string.h>

/* ======================================================================== */
/* Tables                                                                    */
/* ======================================================================== */

spex_type spex_matmul_act_type(spex_type wtype) {
    switch (wtype) {
    case SPEX_TYPE_F32:
    case SPEX_TYPE_F16:
    case SPEX_TYPE_BF16: return SPEX_TYPE_F32;
    case SPEX_TYPE_Q8_0:
    case SPEX_TYPE_Q4_0:
    case SPEX_TYPE_Q5_0: return SPEX_TYPE_Q8_0;
    case SPEX_TYPE_Q4_1:
    case SPEX_TYPE_Q5_1: return SPEX_TYPE_Q8_1;
    case SPEX_TYPE_Q4_K:
    case SPEX_TYPE_Q5_K:
    case SPEX_TYPE_Q6_K: return SPEX_TYPE_Q8_K;
    default: return SPEX_TYPE_COUNT;
    }
}

#define N_ISA 4 /* scalar, avx2, avx512, neon */

static spex_matmul_kernels g_tables[N_ISA];
static bool g_have[N_ISA];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

bool spex_matmul_kernels_build(spex_matmul_kernels *k, spex_isa isa, unsigned feat) {
    if ((unsigned)isa >= N_ISA || !spex_cpu_isa_available(isa)) return false;
    /* VNNI: AVX512_VNNI for the AVX-512 table, AVX-VNNI for the AVX2 one */
    if ((feat & SPEX_MATMUL_FEAT_VNNI) &&
        !(isa == SPEX_ISA_AVX2 ? spex_cpu_get_features()->avxvnni : spex_cpu_get_features()->avx512vnni))
        return false;
    if ((feat & SPEX_MATMUL_FEAT_AMX) && !((feat & SPEX_MATMUL_FEAT_VNNI) && spex_cpu_get_features()->amx_int8))
        return false;
    spex_matmul_kernels t;
    memset(&t, 0, sizeof t);
    spex_matmul_register_scalar(&t);
    spex_matmul_register_kquants_variant(&t, SPEX_ISA_SCALAR, false);
    t.isa = isa;
    switch (isa) {
#if SPEX_HAVE_X86
    case SPEX_ISA_AVX2:
        spex_matmul_register_avx2(&t);
        spex_matmul_register_kquants_variant(&t, isa, (feat & SPEX_MATMUL_FEAT_VNNI) != 0);
        break;
    case SPEX_ISA_AVX512:
        /* AVX-512 without its own kernel for a type inherits the AVX2 one. */
        spex_matmul_register_avx2(&t);
        spex_matmul_register_kquants_variant(&t, SPEX_ISA_AVX2, false);
        spex_matmul_register_avx512(&t, feat);
        spex_matmul_register_kquants_variant(&t, isa, (feat & SPEX_MATMUL_FEAT_VNNI) != 0);
        if (feat & SPEX_MATMUL_FEAT_AMX) spex_matmul_register_kquants_amx(&t);
        break;
#endif
    case SPEX_ISA_NEON: spex_matmul_register_kquants_variant(&t, isa, false); break;
    default: break;
    }
    *k = t;
    return true;
}

static void build_tables(void) {
    const spex_cpu_features *f = spex_cpu_get_features();
    unsigned feat = f->avx512vnni ? SPEX_MATMUL_FEAT_VNNI : 0u;
    if (f->amx_int8) feat |= SPEX_MATMUL_FEAT_AMX; /* amx_int8 implies VNNI (isa.c) */
    for (int i = 0; i < N_ISA; i++)
        g_have[i] = spex_matmul_kernels_build(&g_tables[i], (spex_isa)i,
                                              i == SPEX_ISA_AVX512 ? feat
                                              : i == SPEX_ISA_AVX2 && f->avxvnni ? SPEX_MATMUL_FEAT_VNNI
                                                                                  : 0u);
}

const spex_matmul_kernels *spex_matmul_kernels_for(spex_isa isa) {
    pthread_once(&g_once, build_tables);
    if ((unsigned)isa >= N_ISA || !g_have[isa]) return NULL;
    return &g_tables[isa];
}

const spex_matmul_kernels *spex_matmul_kernels_get(void) {
    const spex_matmul_kernels *k = spex_matmul_kernels_for(spex_cpu_isa());
    return k ? k : spex_matmul_kernels_for(SPEX_ISA_SCALAR);
}

uint64_t spex_matmul_stream_probe(const void *buf, size_t bytes) { return spex_matmul_stream_probe_n(buf, bytes, 1); }

uint64_t spex_matmul_stream_probe_n(const void *buf, size_t bytes, int streams) {
    if (streams < 1) streams = 1;
    if (streams > 8) streams = 8;
#if SPEX_HAVE_X86
    if (spex_cpu_isa() == SPEX_ISA_AVX512) return spex_stream_read_avx512(buf, bytes, streams);
    if (spex_cpu_isa() == SPEX_ISA_AVX2) return spex_stream_read_avx2(buf, bytes, streams);
#endif
    const size_t part = bytes / (size_t)streams / 256 * 256;
    uint64_t acc[8] = {0};
    for (size_t i = 0; i < part; i += 256)
        for (int s = 0; s < streams; s++) {
            const uint64_t *p = (const uint64_t *)((const uint8_t *)buf + (size_t)s * part + i);
            for (int k = 0; k < 32; k++) acc[s] += p[k];
        }
    return acc[0] + acc[1] + acc[2] + acc[3] + acc[4] + acc[5] + acc[6] + acc[7];
}

uint64_t spex_matmul_dot_peak(uint64_t steps, int bcast, uint64_t *macs) {
    *macs = 0;
#if SPEX_HAVE_X86
    if (spex_cpu_isa() == SPEX_ISA_AVX512 && spex_cpu_get_features()->avx512vnni)
        return spex_dot_peak_avx512_vnni(steps, bcast, 0x9e3779b97f4a7c15u, macs); /* any bits: asm can't fold */
#endif
    (void)steps;
    (void)bcast;
    return 0;
}

/* ======================================================================== */
/* Driver                                                                    */
/* ======================================================================== */

#define WS_ALIGN 64                  /* converted activation rows start on cache lines   */
#define TILE_BYTES (384u * 1024u)    /* converted activations of one prompt tile (< L2)  */
#define SMALL_BATCH 16               /* up to this many rows: one tile holds them all    */
#ifndef CHUNK_ROWS_MAX
#define CHUNK_ROWS_MAX 256           /* output rows per chunk at most                    */
#endif
#define CHUNK_BYTES (256u * 1024u)   /* weight bytes per chunk: the kernels prepare the
                                      * activations once per call and read far-apart
                                      * rows of a call side by side, so calls are long   */
#define ROW_QUANTUM 16               /* output rows per chunk: a multiple of this (the
                                      * kernels' register tiles are 4, 8 or 16 rows: the
                                      * AVX-512 Q4_K kernel puts 16 rows in the lanes;
                                      * R16 weights come in groups of 16 rows)           */

static size_t round_up(size_t v, size_t m) { return (v + m - 1) / m * m; }

/* Bytes between converted activation rows in the workspace. */
static size_t act_stride(spex_type act, int64_t n) {
    return round_up(spex_type_row_size(act, n), WS_ALIGN);
}

size_t spex_matmul_ws_size(spex_type wtype, int64_t n, int64_t n_rows) {
    spex_type act = spex_matmul_act_type(wtype);
    if (act == SPEX_TYPE_COUNT || act == SPEX_TYPE_F32 || n <= 0 || n_rows <= 0) return 0;
    size_t rs = spex_type_row_size(act, n);
    if (rs == 0) return 0;
    return (size_t)n_rows * round_up(rs, WS_ALIGN) + WS_ALIGN;
}

static uint8_t *ws_base(void *ws) {
    uintptr_t p = (uintptr_t)ws;
    return (uint8_t *)((p + WS_ALIGN - 1) & ~(uintptr_t)(WS_ALIGN - 1));
}

/* How phase 2 is cut: tiles of `tile` activation rows × chunks of output rows: n_body chunks
 * of `crows`, then the rest (about nth chunks' worth) in chunks of `tcrows`, so the threads
 * finish a matrix within a small chunk of each other instead of a large one. */
typedef struct {
    int64_t tile, n_tiles, crows, n_wchunks, n_body, tcrows;
} mm_plan;

/* Output rows [*o0, *o0 + *no) of weight chunk wc under plan p. */
static inline void plan_chunk(const mm_plan *p, int64_t n_out, int64_t wc, int64_t *o0, int64_t *no) {
    if (wc < p->n_body) *o0 = wc * p->crows;
    else *o0 = p->n_body * p->crows + (wc - p->n_body) * p->tcrows;
    const int64_t sz = wc < p->n_body ? p->crows : p->tcrows;
    *no = n_out - *o0 < sz ? n_out - *o0 : sz;
}

static mm_plan make_plan(const spex_matmul_args *a, size_t wrow, size_t xs, int nth) {
    mm_plan p;
    if (a->n_rows <= SMALL_BATCH) {
        p.tile = a->n_rows;
    } else {
        int64_t t = (int64_t)(TILE_BYTES / (xs ? xs : 1));
        t = t / 8 * 8;
        if (t < 8) t = 8;
        p.tile = t < a->n_rows ? t : a->n_rows;
    }
    p.n_tiles = (a->n_rows + p.tile - 1) / p.tile;
    int64_t cr = (int64_t)round_up(CHUNK_BYTES / (wrow ? wrow : 1) + 1, ROW_QUANTUM);
    if (cr > CHUNK_ROWS_MAX) cr = CHUNK_ROWS_MAX;
    /* load balance: at least 4 chunks per thread when the matrix allows it */
    while (cr > ROW_QUANTUM && p.n_tiles * ((a->n_out + cr - 1) / cr) < 4 * (int64_t)nth) cr -= ROW_QUANTUM;
    p.crows = cr;
    /* the tail: the last nth chunks' rows (at most half the matrix) in quarter-size chunks */
    int64_t tc = (int64_t)round_up((size_t)(cr / 4), ROW_QUANTUM);
    if (tc < ROW_QUANTUM) tc = ROW_QUANTUM;
    int64_t tail = (int64_t)nth * cr;
    if (tail > a->n_out / 2) tail = a->n_out / 2;
    p.n_body = nth > 1 && tc < cr ? (a->n_out - tail) / cr : (a->n_out + cr - 1) / cr;
    p.tcrows = tc;
    const int64_t rest = a->n_out - p.n_body * cr;
    p.n_wchunks = p.n_body + (rest > 0 ? (rest + tc - 1) / tc : 0);
    return p;
}

/* Ranged claiming (spex_pool_next_chunk_ranged) for runs of up to RANGED_MAX_ROWS activation
 * rows (one activation tile: ranged_bounds numbers weight chunks only), on up to
 * RANGED_MAX_THREADS threads (the bounds live on the stack). Decodes and verifies: 2-4 rows
 * 12-15 % faster than dynamic chunks, verify(8) 3-4 % faster at usual memory speed and 13 % in
 * fast-memory moments, verify(16) 3-13 % (docs/performance.md, "The thread pool and
 * per-step overhead"). Prompt tiles take chunks dynamically. */
#ifndef RANGED_MAX_ROWS
#define RANGED_MAX_ROWS SMALL_BATCH
#endif
#define RANGED_MAX_THREADS 64
/* Ranged chunks are the plan's quarter-size tail chunks throughout (ranged_fine), and a thread
 * claims RANGED_FRONT_CHUNKS of them at once from the front of its own range: one claim and one
 * kernel call per full-size chunk's rows, while a thread that has finished its range takes the
 * others' last chunks a quarter at a time, so the phase's end waits for at most a quarter
 * chunk (a full one is ~14 us of an 8-row Q4_K chunk). In-process A/B: verify(8) 2.4-4.5 %
 * faster, decode within +-1.5 % (docs/performance.md, "The thread pool and per-step
 * overhead"). */
#ifndef RANGED_FRONT_CHUNKS
#define RANGED_FRONT_CHUNKS 4
#endif

/* The plan of a ranged run: every chunk of the tail chunks' size. */
static void ranged_fine(mm_plan *p, int64_t n_out) {
    p->crows = p->tcrows;
    p->n_body = (n_out + p->crows - 1) / p->crows;
    p->n_wchunks = p->n_body;
}

/* bounds[0..nth]: the chunks of the n_mm matrices (numbered one matrix after the other, from
 * first[]) cut into nth contiguous ranges of about equal weight bytes: a chunk starts range t
 * when its middle lies past t / nth of the bytes. Every thread computes the same cut. */
static void ranged_bounds(const spex_matmul_args *a, const mm_plan *p, const size_t *wrow, const int64_t *first,
                          int n_mm, int nth, int64_t *bounds) {
    double total = 0.0, cum = 0.0;
    for (int i = 0; i < n_mm; i++) total += (double)a[i].n_out * (double)wrow[i];
    int t = 1;
    bounds[0] = 0;
    for (int i = 0; i < n_mm && t < nth; i++) {
        for (int64_t wc = 0; wc < p[i].n_wchunks && t < nth; wc++) {
            int64_t o0, no;
            plan_chunk(&p[i], a[i].n_out, wc, &o0, &no);
            const double b = (double)no * (double)wrow[i];
            while (t < nth && (cum + 0.5 * b) * nth > total * t) bounds[t++] = first[i] + wc;
            cum += b;
        }
    }
    while (t <= nth) bounds[t++] = first[n_mm];
}

bool spex_matmul_can_share(const spex_matmul_args *a, const spex_matmul_args *b) {
    return a->X == b->X && a->ldx == b->ldx && a->n == b->n && a->n_rows == b->n_rows && a->pool == b->pool &&
           spex_matmul_act_type(a->wtype) == spex_matmul_act_type(b->wtype);
}

bool spex_matmul_converts_own_rows(const spex_matmul_args *a) {
    return a->pool && spex_matmul_act_type(a->wtype) != SPEX_TYPE_F32;
}

void spex_matmul_col_split(int64_t n, int64_t align, int ith, int nth, int64_t *c0, int64_t *c1) {
    if (align < 1) align = 1;
    const int64_t units = n / align;
    *c0 = units * ith / nth * align;
    *c1 = ith + 1 == nth ? n : units * (ith + 1) / nth * align;
}

int64_t spex_matmul_col_align(spex_type wtype) {
    const spex_type_info *ai = spex_type_get_info((int)spex_matmul_act_type(wtype));
    const int64_t b = ai ? ai->block_size : 1;
    return b > ROW_QUANTUM ? b : ROW_QUANTUM;
}

bool spex_matmul_ranged_regime(int64_t n_rows, int nth) {
    return nth > 1 && nth <= RANGED_MAX_THREADS && n_rows <= RANGED_MAX_ROWS;
}

bool spex_matmul_own_cols(const spex_matmul_args *a, int ith, int nth, int64_t *c0, int64_t *c1) {
    if (!a->conv_cols || !a->pool || a->on_chunk || !spex_matmul_ranged_regime(a->n_rows, nth)) return false;
    if (c0 && c1) spex_matmul_col_split(a->n, spex_matmul_col_align(a->wtype), ith, nth, c0, c1);
    return true;
}

bool spex_matmul_converts_own_cols(const spex_matmul_args *a, int nth) {
    return spex_matmul_own_cols(a, 0, nth, NULL, NULL) && spex_matmul_act_type(a->wtype) != SPEX_TYPE_F32;
}

/* The sliced numbering of a ranged run (a[0].slice_align): thread t's range [base[t],
 * base[t + 1]) holds slice t's quarter-size chunks of matrix 0, then of matrix 1, ...; slice t
 * is the output rows [c0[t], c0[t + 1]), m[t] chunks of `tc` rows per matrix. */
typedef struct {
    int64_t c0[RANGED_MAX_THREADS + 1], m[RANGED_MAX_THREADS], base[RANGED_MAX_THREADS + 1], tc;
} mm_slices;

static void make_slices(mm_slices *s, int64_t n_out, int64_t align, int64_t tc, int n_mm, int nth) {
    s->tc = tc;
    s->base[0] = 0;
    for (int t = 0; t < nth; t++) {
        int64_t c1;
        spex_matmul_col_split(n_out, align, t, nth, &s->c0[t], &c1);
        s->m[t] = (c1 - s->c0[t] + tc - 1) / tc;
        s->base[t + 1] = s->base[t] + s->m[t] * n_mm;
    }
    s->c0[nth] = n_out;
}

/* Chunks [c, c + *run) of the sliced numbering, run <= n and within one matrix's slice:
 * matrix *i, output rows [*o0, *o0 + *no). */
static void slice_chunks(const mm_slices *s, int nth, int64_t c, int64_t n, int *i, int64_t *o0, int64_t *no,
                         int64_t *run) {
    int t = 0;
    while (t < nth - 1 && c >= s->base[t + 1]) t++;
    const int64_t k = c - s->base[t], j = k % s->m[t];
    *i = (int)(k / s->m[t]);
    *run = s->m[t] - j < n ? s->m[t] - j : n;
    *o0 = s->c0[t] + j * s->tc;
    *no = s->c0[t + 1] - *o0 < *run * s->tc ? s->c0[t + 1] - *o0 : *run * s->tc;
}

void spex_matmul_task(const spex_matmul_args *a, int ith, int nth) { spex_matmul_task_multi(a, 1, ith, nth); }

void spex_matmul_task_multi(const spex_matmul_args *a, int n_mm, int ith, int nth) {
    const spex_matmul_kernels *k = spex_matmul_kernels_get();
    const spex_type act = spex_matmul_act_type(a[0].wtype);
    const uint8_t *xq;
    size_t xs;

    /* phase 1: convert activation rows once for all the matrices (none for float weights:
     * X is read in place) */
    if (act == SPEX_TYPE_F32) {
        xq = (const uint8_t *)a[0].X;
        xs = (size_t)a[0].ldx * sizeof(float);
    } else {
        uint8_t *base = ws_base(a[0].ws);
        xs = act_stride(act, a[0].n);
        int64_t c0, c1;
        if (spex_matmul_own_cols(&a[0], ith, nth, &c0, &c1)) {
            /* spex_matmul_converts_own_cols's contract: this thread's columns of every row */
            const size_t off = spex_type_row_size(act, c0);
            for (int64_t r = 0; r < a[0].n_rows && c1 > c0; r++)
                k->act_quant[act](a[0].X + r * a[0].ldx + c0, base + (size_t)r * xs + off, c1 - c0);
        } else {
            /* this split is spex_matmul_converts_own_rows's contract */
            const int64_t r0 = a[0].n_rows * ith / nth, r1 = a[0].n_rows * (ith + 1) / nth;
            for (int64_t r = r0; r < r1; r++) k->act_quant[act](a[0].X + r * a[0].ldx, base + (size_t)r * xs, a[0].n);
        }
        if (a[0].pool && nth > 1) spex_pool_barrier(a[0].pool);
        xq = base;
    }

    /* phase 2: (activation tile × output rows) chunks, the matrices' chunks numbered one
     * after the other. With one activation tile (decode, verify blocks: up to RANGED_MAX_ROWS
     * rows) each thread takes a contiguous range of chunks, so it reads its weights as one
     * stream (at ~50 GB/s an LM-head-sized matrix in dynamically alternating 256-row chunks
     * streamed 14 % slower than in one stretch per thread; docs/performance.md, "Decode
     * against the streaming-read probe"),
     * then helps with what is left of the others'. Not with on_chunk, whose consumer needs a thread's chunks in increasing
     * order. */
    bool ranged = a[0].pool && nth > 1 && nth <= RANGED_MAX_THREADS;
    for (int j = 0; j < n_mm; j++)
        if (a[j].n_rows > RANGED_MAX_ROWS || a[j].on_chunk) ranged = false;
    mm_plan p[SPEX_MATMUL_MULTI_MAX];
    size_t wrow[SPEX_MATMUL_MULTI_MAX];
    int64_t first[SPEX_MATMUL_MULTI_MAX + 1];
    first[0] = 0;
    for (int i = 0; i < n_mm; i++) {
        wrow[i] = spex_type_row_size(a[i].wtype, a[i].n);
        p[i] = make_plan(&a[i], wrow[i], xs, nth);
        if (ranged) ranged_fine(&p[i], a[i].n_out);
        first[i + 1] = first[i] + p[i].n_tiles * p[i].n_wchunks;
    }
    int64_t bounds[RANGED_MAX_THREADS + 1];
    bool sliced = ranged && a[0].slice_align > 0;
    for (int j = 1; j < n_mm; j++)
        if (a[j].n_out != a[0].n_out) sliced = false;
    mm_slices sl;
    sl.tc = 1; /* set by make_slices when sliced; read only then */
    if (sliced) {
        make_slices(&sl, a[0].n_out, a[0].slice_align, p[0].tcrows, n_mm, nth);
        for (int t = 0; t <= nth; t++) bounds[t] = sl.base[t];
        first[n_mm] = sl.base[nth];
    } else if (ranged) {
        ranged_bounds(a, p, wrow, first, n_mm, nth, bounds);
    }
    int i = 0, got = 1;
    int64_t c = ranged ? spex_pool_next_chunks_ranged(a[0].pool, ith, bounds, RANGED_FRONT_CHUNKS, &got)
                : a[0].pool ? spex_pool_next_chunk(a[0].pool) : ith;
    while (c >= 0 && c < first[n_mm]) {
        /* chunks [c, c + got): one kernel call per run of them inside one matrix and tile */
        const int64_t c0 = c;
        for (const int64_t end = c + got; c < end;) {
            int64_t o0, no, run, r0 = 0;
            if (sliced) {
                slice_chunks(&sl, nth, c, end - c, &i, &o0, &no, &run);
            } else {
                if (c < first[i]) i = 0; /* a chunk taken from another range can lie behind */
                while (i < n_mm - 1 && c >= first[i + 1]) i++;
                const int64_t lc = c - first[i];
                const int64_t t = lc / p[i].n_wchunks, wc = lc % p[i].n_wchunks;
                run = end - c < p[i].n_wchunks - wc ? end - c : p[i].n_wchunks - wc;
                r0 = t * p[i].tile;
                plan_chunk(&p[i], a[i].n_out, wc, &o0, &no);
                if (run > 1) {
                    int64_t ol, nl;
                    plan_chunk(&p[i], a[i].n_out, wc + run - 1, &ol, &nl);
                    no = ol + nl - o0;
                }
            }
            const spex_matmul_args *m = &a[i];
            const int64_t nr = m->n_rows - r0 < p[i].tile ? m->n_rows - r0 : p[i].tile;
            const spex_dot_fn dot = m->w_r16 ? k->dot_r16[m->wtype] : k->dot[m->wtype];
            dot(m->n, (const uint8_t *)m->W + (size_t)o0 * wrow[i], wrow[i], (int)no, xq + (size_t)r0 * xs, xs,
                (int)nr, m->Y + r0 * m->ldy + o0, (size_t)m->ldy);
            if (m->on_chunk) m->on_chunk(m->chunk_ctx, ith, r0, nr, o0, no);
            c += run;
        }
        c = ranged ? spex_pool_next_chunks_ranged(a[0].pool, ith, bounds, RANGED_FRONT_CHUNKS, &got)
            : a[0].pool ? spex_pool_next_chunk(a[0].pool) : c0 + nth;
    }
}

spex_status spex_matmul_check(const spex_matmul_args *a) {
    if (!a) return SPEX_ERR_INVALID_ARG;
    const spex_type_info *wi = spex_type_get_info((int)a->wtype);
    const spex_type act = spex_matmul_act_type(a->wtype);
    const spex_matmul_kernels *k = spex_matmul_kernels_get();
    if (!wi || act == SPEX_TYPE_COUNT || !k->dot[a->wtype] || !k->act_quant[act]) return SPEX_ERR_UNSUPPORTED;
    const spex_type_info *ai = spex_type_get_info((int)act);
    if (a->n <= 0 || a->n_out <= 0 || a->n_rows <= 0) return SPEX_ERR_INVALID_ARG;
    if (a->n % wi->block_size != 0 || a->n % ai->block_size != 0) return SPEX_ERR_INVALID_ARG;
    if (a->n_out > INT32_MAX || a->n_rows > INT32_MAX) return SPEX_ERR_INVALID_ARG;
    if (a->ldx < a->n || a->ldy < a->n_out) return SPEX_ERR_INVALID_ARG;
    if (!a->W || !a->X || !a->Y) return SPEX_ERR_INVALID_ARG;
    if (spex_matmul_ws_size(a->wtype, a->n, a->n_rows) > 0 && !a->ws) return SPEX_ERR_INVALID_ARG;
    /* R16: the kernel reads whole 16-row groups, and chunks start on them (ROW_QUANTUM) */
    if (a->w_r16 && (!k->dot_r16[a->wtype] || a->n_out % 16 != 0)) return SPEX_ERR_INVALID_ARG;
    return SPEX_OK;
}

static void matmul_pool_task(void *ctx, int ith, int nth) {
    spex_matmul_task((const spex_matmul_args *)ctx, ith, nth);
}

spex_status spex_matmul(spex_pool *pool, const spex_matmul_args *a) {
    spex_status st = spex_matmul_check(a);
    if (st != SPEX_OK) return st;
    spex_matmul_args args = *a;
    args.pool = pool;
    if (pool) spex_pool_run(pool, matmul_pool_task, &args);
    else spex_matmul_task(&args, 0, 1);
    return SPEX_OK;
}
