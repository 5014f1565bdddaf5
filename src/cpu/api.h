/*
 * cpu/api.h — the CPU module's interface: ISA dispatch, the thread pool and its scheduling.
 * Builds on include/spex.h (the embedding API: handles, status codes, the types every
 * module shares); tools and tests include it beside spex.h. Dependencies follow
 * core <- tensor <- gguf <- cpu <- model <- spec <- server (README).
 */
#ifndef SPEX_CPU_API_H
#define SPEX_CPU_API_H

#include "spex.h"
#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================== */
/* CPU: ISA dispatch and the thread pool                                     */
/* ======================================================================== */

typedef enum spex_isa {
    SPEX_ISA_SCALAR = 0,
    SPEX_ISA_AVX2 = 1,     /* AVX2 + FMA + F16C                               */
    SPEX_ISA_AVX512 = 2,   /* F, BW, VL, DQ; VNNI and BF16 used when present  */
    SPEX_ISA_NEON = 3,
} spex_isa;

typedef struct spex_cpu_features {
    bool avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16, neon;
    /* AVX-VNNI: the 256-bit VEX vpdpbusd (Alder Lake and later client cores, Zen 5). The
     * AVX2 table's Q4_K / Q5_K / Q6_K kernels use it when present (and the loader then
     * repacks those types to R16). */
    bool avxvnni;
    /* AMX-TILE + AMX-INT8 usable: the CPU has them, the OS granted this process the tile
     * state (Linux arch_prctl), and SPEX_AMX is not 0. Used with AVX-512 VNNI by the R16
     * Q4_K / Q5_K matmuls of 9+ activation rows (verify blocks, prompts). */
    bool amx_int8;
    /* The x86 matmul kernels' weight read-ahead uses the non-temporal hint (prefetchnta)
     * instead of the L2 one (prefetcht1): on AMD CPUs, where it measured faster (decode ~8-12 %,
     * verify blocks ~2-3 % on Zen 5; docs/performance.md, "Decode against the streaming-read
     * probe"). SPEX_PREFETCH=l2|nta overrides the choice. Results are the same either way. */
    bool prefetch_nta;
} spex_cpu_features;

const spex_cpu_features *spex_cpu_get_features(void);
/* The ISA in use: the best the CPU has, or what SPEX_ISA=scalar|avx2|avx512 asks for
 * (never more than the CPU has). Decided once, on first call. */
spex_isa spex_cpu_isa(void);
const char *spex_isa_name(spex_isa isa);
/* Whether this CPU (and build) can run isa's kernels. */
bool spex_cpu_isa_available(spex_isa isa);
/* Tests: force a narrower ISA. Returns SPEX_ERR_UNSUPPORTED if the CPU lacks it. */
spex_status spex_cpu_set_isa(spex_isa isa);

typedef struct spex_pool spex_pool;

/* A task runs on every thread: ith in [0, nth). */
typedef void (*spex_pool_task)(void *ctx, int ith, int nth);

/* Creates n_threads - 1 workers (the caller is thread 0). n_threads <= 0 means all cores. */
spex_status spex_pool_create(int n_threads, spex_pool **out, spex_error *err);
void spex_pool_free(spex_pool *pool);
int spex_pool_n_threads(const spex_pool *pool);
/* Runs task on all threads and returns when all are done. No allocation, no thread start. */
void spex_pool_run(spex_pool *pool, spex_pool_task task, void *ctx);
/* Inside a task: wait until every thread of the pool reaches the barrier. */
void spex_pool_barrier(spex_pool *pool);
/* Inside a task: dynamic work split. Reset by spex_pool_run; returns the next chunk index,
 * or >= n_chunks when none is left. Purely dynamic: the counter starts at 0 and every call,
 * from any thread (thread 0 included), returns the next index once, so the loop is
 *   for (int64_t c = spex_pool_next_chunk(p); c < n_chunks; c = spex_pool_next_chunk(p)) ...
 * One counter per run; for a second chunked phase after a barrier (every thread having
 * stopped at its first index >= n1), indices continue at n1 + nth.
 * A pool is driven by one thread at a time; a task must not call spex_pool_run. A pool of 1
 * thread runs tasks inline; n_threads <= 0 means the number of online CPUs. */
int64_t spex_pool_next_chunk(spex_pool *pool);
/* Inside a task: puts the chunk counter back to 0 for another chunked phase in the same run.
 * Contract: exactly one thread calls it, between two barriers — every thread has finished its
 * previous chunked loop (barrier), one thread resets, barrier — and after that second barrier
 * every thread's next spex_pool_next_chunk numbers from 0 again. */
void spex_pool_chunk_reset(spex_pool *pool);
/* Inside a task: a contiguous work split with stealing. bounds[0..nth] (non-decreasing, the
 * same array on every thread, each range under 2^31 chunks) gives thread t the chunks
 * [bounds[t], bounds[t + 1]); thread ith gets its own range front to back, then what is left
 * of the other ranges from their back ends; -1 once every chunk is handed out. Each chunk is
 * returned once. Reset with the chunk counter (spex_pool_run, spex_pool_chunk_reset); a
 * chunked phase uses this or spex_pool_next_chunk, not both. A thread reading its weights
 * as one stretch keeps the hardware prefetchers' streams going from chunk to chunk. */
int64_t spex_pool_next_chunk_ranged(spex_pool *pool, int ith, const int64_t *bounds);
/* The same with claims of several chunks from the front of a thread's own range: up to
 * n_front consecutive chunks [c, c + *n_got) at once, while chunks taken from another range's
 * back end still come one at a time. So the owner pays one claim per n_front chunks, and the
 * chunks can be small enough that the last ones, which a faster thread takes over, leave
 * little to wait for at the end. */
int64_t spex_pool_next_chunks_ranged(spex_pool *pool, int ith, const int64_t *bounds, int n_front, int *n_got);
/* Wait accounting, off by default: while on, each thread adds the time it spends waiting for
 * the others (a worker for the next run, the driving thread for the workers at a run's end,
 * any thread at a barrier) to its own counter, at two clock reads per wait. Switching it on
 * zeroes the counters. spex_pool_wait_s: thread ith's seconds since then, a wait in progress
 * included. Call both from the thread that drives the pool, between runs. */
void spex_pool_set_wait_accounting(spex_pool *pool, bool on);
double spex_pool_wait_s(const spex_pool *pool, int ith);
/* The part of a step a run belongs to, for wait accounting by site (spex_pool_run_site): a
 * dense layer's Q/K/V phase, its attention and W_o phase, gate/up, down, the output head, a
 * drafter forward's runs, anything else. */
typedef enum spex_pool_site {
    SPEX_SITE_OTHER,
    SPEX_SITE_QKV,
    SPEX_SITE_ATTN,
    SPEX_SITE_FFN_UP,
    SPEX_SITE_FFN_DOWN,
    SPEX_SITE_HEAD,
    SPEX_SITE_DRAFT,
    SPEX_SITE_COUNT
} spex_pool_site;
/* spex_pool_run, its waits (with accounting on) also counted under `site` (out of range:
 * SPEX_SITE_OTHER; spex_pool_run itself uses OTHER). */
void spex_pool_run_site(spex_pool *pool, spex_pool_task task, void *ctx, int site);
/* Thread ith's waits under `site` since accounting was switched on: at the runs' boundaries
 * (barrier false: a worker's wait for the run to start, the driving thread's for the others
 * at its end) or at barriers inside them (true). *seconds: their time; *count: how many
 * (every barrier but the last arrival's is one, every run boundary is one, however short:
 * the counts follow the runs and barriers posted, not the timing). A wait still in progress
 * is not in them (a worker's wait for the next run is counted under that run's site when
 * it starts). Either pointer may be NULL. */
void spex_pool_wait_site(const spex_pool *pool, int ith, int site, bool barrier, double *seconds, int64_t *count);
/* Splits every wait in progress at now: its time so far is counted as closed (under
 * SPEX_SITE_OTHER, at a run boundary, one count) and it goes on from now. For a benchmark that
 * reads the counters at both ends of a window: called before each reading, the by-site
 * counters then cover exactly what spex_pool_wait_s covers (otherwise a worker's wait that
 * began before the window is counted by site in full when it ends inside it, and one still
 * open at the end not at all). From the driving thread, between runs; nothing with
 * accounting off. */
void spex_pool_wait_split(spex_pool *pool);

#ifdef __cplusplus
}
#endif

#endif
