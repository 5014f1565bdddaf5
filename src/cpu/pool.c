/*
 * pool.c — the persistent thread pool behind spex_pool_* (include/spex.h, "CPU: ISA
 * dispatch and the thread pool").
 *
 * What it is: n_threads - 1 worker threads created once; spex_pool_run hands one task to
 * every thread (the caller is thread 0) and returns when all have finished; inside a task,
 * spex_pool_barrier synchronises all nth threads and spex_pool_next_chunk hands out work
 * dynamically. What it is not: a general task queue (no futures, no nesting: a task must not
 * call spex_pool_run, and only one thread at a time may call spex_pool_run on a pool).
 *
 * Waking and waiting. A decode step issues hundreds of pool runs and barriers a few
 * microseconds apart, so a futex round-trip per wait would dominate small kernels; an idle
 * pool, on the other hand, must not burn cores, and on a shared machine a spinning waiter
 * keeps the core that the thread it waits for needs. Every wait (a worker's for the next
 * run, the caller's for the workers, the barrier) therefore spins for an adaptive budget
 * (tl_spin_ns, checking the clock every few hundred pauses; at most SPIN_NS for a worker
 * between runs, BAR_SPIN_NS inside a run) and then blocks on a futex (a mutex/condvar pair
 * off Linux); docs/performance.md "The thread pool and per-step overhead" has the measurements.
 * The system call to wake sleepers is made only when a sleeper has announced itself:
 *
 *   waker:   store(word)         ; if load(n_sleepers) > 0: wake(word)
 *   sleeper: n_sleepers++        ; if load(word) == old: wait(word, old) ; n_sleepers--
 *
 * With sequentially consistent atomics on both sides (a Dekker pattern) either the waker
 * sees the sleeper or the sleeper sees the new word, so no wake-up is lost. Pools with more
 * threads than online CPUs do not spin at all (a spinning thread would steal the core of the
 * one doing the work).
 *
 * The chunk counter protocol (spex_pool_next_chunk): purely dynamic. spex_pool_run sets the
 * counter to 0 before any thread starts; every call, from any thread, atomically returns the
 * next index 0, 1, 2, ... Each index is returned exactly once per run, so a chunked loop is
 *
 *     for (int64_t c = spex_pool_next_chunk(pool); c < n_chunks; c = spex_pool_next_chunk(pool))
 *         do_chunk(c);
 *
 * and every thread, thread 0 included, takes part. There is one counter per run: a task that
 * needs two chunked phases may continue numbering after a barrier — when every thread stops at
 * its first index >= n1, the counter stands at exactly n1 + nth after the barrier, so the
 * second phase's chunk c is index - (n1 + nth). Simpler: spex_pool_chunk_reset puts the counter
 * back to 0. Exactly one thread calls it, between two barriers — after the barrier that ends
 * every thread's last chunked loop, before the barrier after which the next loop starts — so
 * no thread can be inside a chunked loop while the counter moves. That lets one run hold any
 * number of chunked phases (the forward pass runs a whole token step in one run).
 *
 * The ranged protocol (spex_pool_next_chunk_ranged): the caller's bounds give thread t the
 * chunks [bounds[t], bounds[t + 1]), which it takes front to back; a thread whose range is
 * empty takes the other ranges' chunks from their back ends. One word per thread holds how
 * many chunks of its range were taken from the front (low 32 bits) and from the back (high
 * 32): a claim is a compare-and-swap that succeeds while front + back < the range's size, so
 * each chunk is handed out once. Why: a weight matrix is read once per decode step, and each
 * thread reading one contiguous stretch keeps the hardware prefetchers' streams running from
 * chunk to chunk, where dynamic chunks alternate between threads and every chunk starts a
 * new stream (docs/performance.md, "Decode against the streaming-read probe"). The words are
 * reset with the counter. spex_pool_next_chunks_ranged lets the owner take several chunks per
 * claim (one CAS adding k to the front count) while helpers still take one from the back, so
 * the chunks can be small at the ends where threads meet without more claims along the way
 * (verify(8) 2.4-4.5 % faster: docs/performance.md, "The thread pool and per-step overhead").
 *
 * Wait accounting (spex_pool_set_wait_accounting): each thread adds the time it waits to its own
 * counter, so a benchmark can say how much of a step the threads spend waiting for each other
 * without a profiler. A thread marks a wait open (its start time) and closes it (adds the
 * elapsed time, clears the mark); a reader adds an open wait's time so far. Workers between
 * runs sit in an open wait that only the next run closes, so counters read by the driving
 * thread between runs are stable; switching accounting on opens the workers' current waits
 * at that moment. Off, a wait costs one relaxed load more. Each closed wait is also added, with a
 * count, under the site of its run (spex_pool_run_site: which part of a forward the run is) and
 * its kind (a run boundary or a barrier), so a benchmark can say where the waits are; a worker's
 * wait for the next run goes under that next run's site.
 *
 * The barrier is sense-reversing in its generation-counter form: each thread reads the
 * barrier generation, then increments the arrival count; the last to arrive resets the count
 * and advances the generation, which releases the others (they spin, then sleep). A
 * generation counter needs no per-thread sense flag, which lets the barrier take only the
 * pool as argument.
 */
#include "spex.h"
#include "cpu/api.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#define SPEX_POOL_MAX_THREADS 1024
/* The most a thread spins before it blocks. Long enough to cover the serial glue between two
 * runs of one token step; short enough that an idle pool goes quiet almost at once. */
#define SPIN_NS 200000LL
#define CACHE_LINE 64
/* How long a thread spins at a barrier before it blocks: barrier waits of an unloaded machine
 * (the imbalance of dynamically chunked work) are a few microseconds. */
#define BAR_SPIN_NS 50000LL

/* Thread t's range state (header comment): front count in the low 32 bits, back in the high. */
typedef struct pool_claim {
    _Alignas(CACHE_LINE) _Atomic uint64_t w;
} pool_claim;

/* Thread t's waits (header comment): closed nanoseconds, the start of an open wait or 0, and
 * the closed waits by site (spex_pool_run_site) and kind (0: run boundary, 1: barrier). */
typedef struct pool_acct {
    _Alignas(CACHE_LINE) _Atomic int64_t wait_ns;
    _Atomic int64_t open_ns;
    _Atomic int64_t site_ns[SPEX_SITE_COUNT][2];
    _Atomic int64_t site_n[SPEX_SITE_COUNT][2];
} pool_acct;

typedef struct pool_worker {
    struct spex_pool *pool;
    int ith;
    pthread_t tid;
} pool_worker;

struct spex_pool {
    int nth;
    long long spin_ns;            /* 0: block at once (more threads than cores) */
    pool_worker *workers;         /* [nth - 1]: thread ith is workers[ith - 1]   */
    struct pool_claim *claims;    /* [nth]: the ranged protocol's words          */
    struct pool_acct *acct;       /* [nth]: wait accounting                      */
    _Atomic int acct_on;
    int n_started;

    /* Written by the caller before a run; read by workers after they see the new gen. */
    spex_pool_task task;
    void *ctx;
    int site;                     /* the run's spex_pool_site (wait accounting)  */
    _Atomic int stop;

    /* Each hot word on its own cache line: workers poll gen, the caller polls pending,
     * everyone hammers chunk and the barrier words. */
    _Alignas(CACHE_LINE) _Atomic uint32_t gen;         /* run generation (futex word)   */
    _Atomic uint32_t gen_sleepers;                     /* workers blocked on gen        */
    _Alignas(CACHE_LINE) _Atomic uint32_t pending;     /* workers still in the run      */
    _Atomic uint32_t caller_sleeping;                  /* caller blocked on pending     */
    _Alignas(CACHE_LINE) _Atomic int64_t chunk;        /* next chunk index              */
    _Alignas(CACHE_LINE) _Atomic uint32_t bar_count;   /* arrivals at the barrier       */
    _Alignas(CACHE_LINE) _Atomic uint32_t bar_gen;     /* barrier generation (futex word) */
    _Atomic uint32_t bar_sleepers;                     /* threads blocked on bar_gen      */

#if !defined(__linux__)
    pthread_mutex_t mu;
    pthread_cond_t cv;
#endif
};

/* ---- spinning and blocking ---------------------------------------------------------- */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __asm__ volatile("pause" ::: "memory");
#elif defined(__aarch64__)
    __asm__ volatile("yield" ::: "memory");
#else
    atomic_signal_fence(memory_order_seq_cst);
#endif
}

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Wait accounting (header comment): open a wait when accounting is on, close an open one. */
static inline void acct_open(spex_pool *pool, int ith) {
    if (atomic_load_explicit(&pool->acct_on, memory_order_relaxed))
        atomic_store_explicit(&pool->acct[ith].open_ns, now_ns(), memory_order_relaxed);
}
/* Adds v to a counter only its own thread writes (readers may see the old or the new value). */
static inline void acct_add(_Atomic int64_t *c, int64_t v) {
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + v, memory_order_relaxed);
}
static inline void acct_close(spex_pool *pool, int ith, int kind) {
    pool_acct *a = &pool->acct[ith];
    const int64_t o = atomic_load_explicit(&a->open_ns, memory_order_relaxed);
    if (!o) return;
    const int64_t dt = now_ns() - o;
    acct_add(&a->wait_ns, dt);
    acct_add(&a->site_ns[pool->site][kind], dt);
    acct_add(&a->site_n[pool->site][kind], 1);
    atomic_store_explicit(&a->open_ns, 0, memory_order_relaxed);
}

/* Spins until *word != old or spin_ns elapse. Returns the last value seen. */
static uint32_t spin_while_equal(_Atomic uint32_t *word, uint32_t old, long long spin_ns) {
    uint32_t v = atomic_load_explicit(word, memory_order_acquire);
    if (v != old || spin_ns <= 0) return v;
    long long deadline = now_ns() + spin_ns;
    for (;;) {
        for (int i = 0; i < 128; i++) {
            cpu_relax();
            v = atomic_load_explicit(word, memory_order_acquire);
            if (v != old) return v;
        }
        if (now_ns() >= deadline) return v;
    }
}

#if defined(__linux__)
static void word_wait(spex_pool *pool, _Atomic uint32_t *word, uint32_t old) {
    (void)pool;
    /* Returns at once (EAGAIN) if *word already differs; spurious returns are fine, every
     * caller re-checks in a loop. */
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, old, NULL, NULL, 0);
}
static void word_wake(spex_pool *pool, _Atomic uint32_t *word) {
    (void)pool;
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}
#else
static void word_wait(spex_pool *pool, _Atomic uint32_t *word, uint32_t old) {
    pthread_mutex_lock(&pool->mu);
    while (atomic_load(word) == old) pthread_cond_wait(&pool->cv, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
}
static void word_wake(spex_pool *pool, _Atomic uint32_t *word) {
    (void)word;
    /* Taking the mutex orders this wake after a waiter's check-then-wait. */
    pthread_mutex_lock(&pool->mu);
    pthread_mutex_unlock(&pool->mu);
    pthread_cond_broadcast(&pool->cv);
}
#endif

/* This thread's current spin budget (ns), adapted per wait: a wait that ended while
 * spinning doubles it (up to the caller's limit), a wait that had to sleep divides it by 8
 * (down to SPIN_MIN_NS). On an idle machine waits end within the spin and the budget stays
 * at its limit; on a shared one, where the thread being waited for is often descheduled for
 * milliseconds, every wait would otherwise burn its whole budget before sleeping (hundreds
 * of barriers per token: 50 µs each is 8 ms a token). */
static _Thread_local long long tl_spin_ns = -1;
/* This thread's index in the pool it works for: a worker's ith, 0 for any driving thread (a
 * worker never drives a pool: tasks must not call spex_pool_run). */
static _Thread_local int tl_ith = 0;
#define SPIN_MIN_NS 1000LL

/* The budget after a wait: doubled (up to cap) when it ended while spinning, else / 8. */
static void spin_budget_update(bool ended_spinning, long long cap) {
    if (cap <= 0) return;
    if (ended_spinning) tl_spin_ns = tl_spin_ns * 2 < cap ? tl_spin_ns * 2 : cap;
    else tl_spin_ns = tl_spin_ns / 8 > SPIN_MIN_NS ? tl_spin_ns / 8 : SPIN_MIN_NS;
}

/* Blocks until *word != old: spin (adaptive budget, at most spin_ns) first, then announce
 * in *sleepers and sleep. */
static uint32_t wait_while_equal_ns(spex_pool *pool, _Atomic uint32_t *word, uint32_t old,
                                    _Atomic uint32_t *sleepers, long long spin_ns) {
    if (tl_spin_ns < 0 || tl_spin_ns > spin_ns) tl_spin_ns = spin_ns;
    uint32_t v = spin_while_equal(word, old, tl_spin_ns);
    spin_budget_update(v != old, spin_ns);
    if (v != old) return v;
    atomic_fetch_add(sleepers, 1);
    while ((v = atomic_load(word)) == old) word_wait(pool, word, old);
    atomic_fetch_sub(sleepers, 1);
    return v;
}

static uint32_t wait_while_equal(spex_pool *pool, _Atomic uint32_t *word, uint32_t old,
                                 _Atomic uint32_t *sleepers) {
    return wait_while_equal_ns(pool, word, old, sleepers, pool->spin_ns);
}

/* ---- workers -------------------------------------------------------------------------- */

static void *worker_main(void *arg) {
    pool_worker *w = arg;
    spex_pool *pool = w->pool;
    /* Not a load of gen: the first run may already have been posted before this thread
     * got scheduled, and it must not be mistaken for the starting state. */
    uint32_t seen = 0;
    tl_ith = w->ith;
    for (;;) {
        acct_open(pool, w->ith);
        seen = wait_while_equal(pool, &pool->gen, seen, &pool->gen_sleepers);
        acct_close(pool, w->ith, 0); /* under the site of the run that ends the wait */
        if (atomic_load_explicit(&pool->stop, memory_order_acquire)) break;
        pool->task(pool->ctx, w->ith, pool->nth);
        /* The last worker to finish wakes the caller if (and only if) it went to sleep. */
        if (atomic_fetch_sub(&pool->pending, 1) == 1 && atomic_load(&pool->caller_sleeping))
            word_wake(pool, &pool->pending);
    }
    return NULL;
}

/* ---- public API ----------------------------------------------------------------------- */

static int online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (n > SPEX_POOL_MAX_THREADS ? SPEX_POOL_MAX_THREADS : (int)n);
}

static void pool_stop_workers(spex_pool *pool) {
    atomic_store_explicit(&pool->stop, 1, memory_order_release);
    atomic_fetch_add(&pool->gen, 1);
    word_wake(pool, &pool->gen); /* unconditional: cheap, and free is not hot */
    for (int i = 0; i < pool->n_started; i++) pthread_join(pool->workers[i].tid, NULL);
    pool->n_started = 0;
}

/* Frees the pool's memory (any part may still be NULL); the workers must be stopped. */
static void pool_release(spex_pool *pool) {
    free(pool->workers);
    free(pool->acct);
    free(pool->claims);
    free(pool);
}

spex_status spex_pool_create(int n_threads, spex_pool **out, spex_error *err) {
    if (!out) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spex_pool_create: out is NULL");
    *out = NULL;
    int ncpu = online_cpus();
    if (n_threads <= 0) n_threads = ncpu;
    if (n_threads > SPEX_POOL_MAX_THREADS)
        return spex_error_set(err, SPEX_ERR_RANGE, "spex_pool_create: %d threads requested, at most %d",
                              n_threads, SPEX_POOL_MAX_THREADS);
    spex_pool *pool = aligned_alloc(CACHE_LINE, (sizeof *pool + CACHE_LINE - 1) / CACHE_LINE * CACHE_LINE);
    if (!pool) return spex_error_set(err, SPEX_ERR_NOMEM, "spex_pool_create: out of memory");
    memset(pool, 0, sizeof *pool);
    pool->nth = n_threads;
    pool->claims = aligned_alloc(CACHE_LINE, sizeof(pool_claim) * (size_t)n_threads);
    pool->acct = aligned_alloc(CACHE_LINE, sizeof(pool_acct) * (size_t)n_threads);
    if (!pool->claims || !pool->acct) {
        pool_release(pool);
        return spex_error_set(err, SPEX_ERR_NOMEM, "spex_pool_create: out of memory");
    }
    for (int t = 0; t < n_threads; t++) {
        atomic_init(&pool->claims[t].w, 0);
        atomic_init(&pool->acct[t].wait_ns, 0);
        atomic_init(&pool->acct[t].open_ns, 0);
        for (int st = 0; st < SPEX_SITE_COUNT; st++)
            for (int k = 0; k < 2; k++) {
                atomic_init(&pool->acct[t].site_ns[st][k], 0);
                atomic_init(&pool->acct[t].site_n[st][k], 0);
            }
    }
    atomic_init(&pool->acct_on, 0);
    pool->spin_ns = n_threads <= ncpu ? SPIN_NS : 0;
    atomic_init(&pool->stop, 0);
    atomic_init(&pool->gen, 0);
    atomic_init(&pool->gen_sleepers, 0);
    atomic_init(&pool->pending, 0);
    atomic_init(&pool->caller_sleeping, 0);
    atomic_init(&pool->chunk, 0);
    atomic_init(&pool->bar_count, 0);
    atomic_init(&pool->bar_gen, 0);
    atomic_init(&pool->bar_sleepers, 0);
#if !defined(__linux__)
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv, NULL);
#endif
    if (n_threads > 1) {
        pool->workers = calloc((size_t)n_threads - 1, sizeof *pool->workers);
        if (!pool->workers) {
            pool_release(pool);
            return spex_error_set(err, SPEX_ERR_NOMEM, "spex_pool_create: out of memory");
        }
        for (int i = 0; i < n_threads - 1; i++) {
            pool->workers[i].pool = pool;
            pool->workers[i].ith = i + 1;
            int rc = pthread_create(&pool->workers[i].tid, NULL, worker_main, &pool->workers[i]);
            if (rc != 0) {
                pool_stop_workers(pool);
                pool_release(pool);
                return spex_error_set(err, SPEX_ERR_NOMEM, "spex_pool_create: thread %d of %d: %s",
                                      i + 1, n_threads, strerror(rc));
            }
            pool->n_started++;
        }
    }
    *out = pool;
    return SPEX_OK;
}

void spex_pool_free(spex_pool *pool) {
    if (!pool) return;
    pool_stop_workers(pool);
#if !defined(__linux__)
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->cv);
#endif
    pool_release(pool);
}

int spex_pool_n_threads(const spex_pool *pool) { return pool ? pool->nth : 1; }

static void claims_reset(spex_pool *pool, memory_order mo) {
    for (int t = 0; t < pool->nth; t++) atomic_store_explicit(&pool->claims[t].w, 0, mo);
}

void spex_pool_run(spex_pool *pool, spex_pool_task task, void *ctx) {
    spex_pool_run_site(pool, task, ctx, SPEX_SITE_OTHER);
}

void spex_pool_run_site(spex_pool *pool, spex_pool_task task, void *ctx, int site) {
    pool->site = site >= 0 && site < SPEX_SITE_COUNT ? site : SPEX_SITE_OTHER;
    atomic_store_explicit(&pool->chunk, 0, memory_order_relaxed);
    claims_reset(pool, memory_order_relaxed);
    if (pool->nth == 1) {
        task(ctx, 0, 1);
        return;
    }
    pool->task = task;
    pool->ctx = ctx;
    atomic_store_explicit(&pool->pending, (uint32_t)(pool->nth - 1), memory_order_relaxed);
    /* seq_cst: publishes task/ctx/chunk/pending, and orders against gen_sleepers below. */
    atomic_fetch_add(&pool->gen, 1);
    if (atomic_load(&pool->gen_sleepers) > 0) word_wake(pool, &pool->gen);

    task(ctx, 0, pool->nth);

    acct_open(pool, 0);
    /* Wait for the workers: spin while they are likely to finish soon (the adaptive budget
     * of wait_while_equal_ns), then sleep. */
    uint32_t v = atomic_load_explicit(&pool->pending, memory_order_acquire);
    if (v != 0 && pool->spin_ns > 0) {
        if (tl_spin_ns < 0 || tl_spin_ns > BAR_SPIN_NS) tl_spin_ns = BAR_SPIN_NS;
        long long deadline = now_ns() + tl_spin_ns;
        for (;;) {
            for (int i = 0; i < 128 && v != 0; i++) {
                cpu_relax();
                v = atomic_load_explicit(&pool->pending, memory_order_acquire);
            }
            if (v == 0 || now_ns() >= deadline) break;
        }
        spin_budget_update(v == 0, BAR_SPIN_NS);
    }
    if (v != 0) {
        atomic_store(&pool->caller_sleeping, 1);
        while ((v = atomic_load(&pool->pending)) != 0) word_wait(pool, &pool->pending, v);
        atomic_store(&pool->caller_sleeping, 0);
    }
    atomic_thread_fence(memory_order_acquire); /* the workers' writes are visible now */
    acct_close(pool, 0, 0);
}

void spex_pool_barrier(spex_pool *pool) {
    if (pool->nth == 1) return;
    uint32_t g = atomic_load_explicit(&pool->bar_gen, memory_order_acquire);
    if (atomic_fetch_add_explicit(&pool->bar_count, 1, memory_order_acq_rel) == (uint32_t)pool->nth - 1) {
        /* Last to arrive: nobody touches bar_count again until bar_gen moves. seq_cst on
         * bar_gen and bar_sleepers: the Dekker pattern of the header comment. */
        atomic_store_explicit(&pool->bar_count, 0, memory_order_relaxed);
        atomic_fetch_add(&pool->bar_gen, 1);
        if (atomic_load(&pool->bar_sleepers) > 0) word_wake(pool, &pool->bar_gen);
        return;
    }
    /* Spin briefly, then sleep. Sleeping matters when the machine is shared: a thread that
     * spins (or sched_yields, which returns at once when it is alone on its core) keeps its
     * core busy, so the thread everybody waits for stays queued behind another process on
     * the other core; a blocked thread leaves its core idle and the scheduler pulls the late
     * thread onto it (2.1x the decode rate at -t 2 with one core busy elsewhere). */
    acct_open(pool, tl_ith);
    wait_while_equal_ns(pool, &pool->bar_gen, g, &pool->bar_sleepers, pool->spin_ns > 0 ? BAR_SPIN_NS : 0);
    acct_close(pool, tl_ith, 1);
}

void spex_pool_set_wait_accounting(spex_pool *pool, bool on) {
    if (!pool) return;
    if (on) {
        const int64_t t = now_ns();
        for (int i = 0; i < pool->nth; i++) {
            atomic_store_explicit(&pool->acct[i].wait_ns, 0, memory_order_relaxed);
            for (int st = 0; st < SPEX_SITE_COUNT; st++)
                for (int k = 0; k < 2; k++) {
                    atomic_store_explicit(&pool->acct[i].site_ns[st][k], 0, memory_order_relaxed);
                    atomic_store_explicit(&pool->acct[i].site_n[st][k], 0, memory_order_relaxed);
                }
            /* the workers are in their wait for the next run: it counts from now */
            atomic_store_explicit(&pool->acct[i].open_ns, i > 0 ? t : 0, memory_order_relaxed);
        }
    }
    atomic_store_explicit(&pool->acct_on, on ? 1 : 0, memory_order_seq_cst);
}

void spex_pool_wait_split(spex_pool *pool) {
    if (!pool || !atomic_load_explicit(&pool->acct_on, memory_order_relaxed)) return;
    const int64_t t = now_ns();
    for (int i = 0; i < pool->nth; i++) {
        pool_acct *a = &pool->acct[i];
        int64_t o = atomic_load_explicit(&a->open_ns, memory_order_relaxed);
        /* between runs a worker's counters are not written by the worker (its wait closes only
         * when the next run, posted after this, starts), so the plain adds are safe; the
         * exchange keeps a wait that a late worker is just opening from being split twice */
        if (!o || o > t || !atomic_compare_exchange_strong(&a->open_ns, &o, t)) continue;
        acct_add(&a->wait_ns, t - o);
        acct_add(&a->site_ns[SPEX_SITE_OTHER][0], t - o);
        acct_add(&a->site_n[SPEX_SITE_OTHER][0], 1);
    }
}

double spex_pool_wait_s(const spex_pool *pool, int ith) {
    if (!pool || ith < 0 || ith >= pool->nth) return 0.0;
    int64_t w = atomic_load_explicit(&pool->acct[ith].wait_ns, memory_order_relaxed);
    const int64_t o = atomic_load_explicit(&pool->acct[ith].open_ns, memory_order_relaxed);
    if (o) w += now_ns() - o;
    return (double)w * 1e-9;
}

void spex_pool_wait_site(const spex_pool *pool, int ith, int site, bool barrier, double *seconds, int64_t *count) {
    const bool ok = pool && ith >= 0 && ith < pool->nth && site >= 0 && site < SPEX_SITE_COUNT;
    const int k = barrier ? 1 : 0;
    if (seconds)
        *seconds = ok ? (double)atomic_load_explicit(&pool->acct[ith].site_ns[site][k], memory_order_relaxed) * 1e-9 : 0.0;
    if (count) *count = ok ? atomic_load_explicit(&pool->acct[ith].site_n[site][k], memory_order_relaxed) : 0;
}

int64_t spex_pool_next_chunk(spex_pool *pool) {
    return atomic_fetch_add_explicit(&pool->chunk, 1, memory_order_relaxed);
}

/* Release store: the barrier that follows (acq_rel on bar_count / bar_gen) carries it to the
 * other threads before any of them takes its next chunk. */
void spex_pool_chunk_reset(spex_pool *pool) {
    atomic_store_explicit(&pool->chunk, 0, memory_order_release);
    claims_reset(pool, memory_order_release);
}

/* Under claim word c: up to n chunks of [lo, hi) from the front (the owner) or one from the
 * back (a helper); the first chunk's index and *got, or -1 when none is left. */
static int64_t claim(pool_claim *c, int64_t lo, int64_t hi, int front, int n, int *got) {
    uint64_t w = atomic_load_explicit(&c->w, memory_order_relaxed);
    for (;;) {
        const int64_t f = (int64_t)(w & 0xffffffffu), b = (int64_t)(w >> 32), left = hi - b - (lo + f);
        if (left <= 0) return -1;
        const int k = front ? (int)(left < n ? left : n) : 1;
        const uint64_t nw = front ? w + (uint64_t)k : w + ((uint64_t)1 << 32);
        if (atomic_compare_exchange_weak_explicit(&c->w, &w, nw, memory_order_relaxed, memory_order_relaxed)) {
            *got = k;
            return front ? lo + f : hi - 1 - b;
        }
    }
}

int64_t spex_pool_next_chunks_ranged(spex_pool *pool, int ith, const int64_t *bounds, int n_front, int *n_got) {
    const int nth = pool->nth;
    int got = 0;
    int64_t c = claim(&pool->claims[ith], bounds[ith], bounds[ith + 1], 1, n_front < 1 ? 1 : n_front, &got);
    /* own range done: the others' remaining chunks from their back ends, nearest thread first */
    for (int k = 1; c < 0 && k < nth; k++) {
        const int v = (ith + k) % nth;
        c = claim(&pool->claims[v], bounds[v], bounds[v + 1], 0, 1, &got);
    }
    if (n_got) *n_got = c < 0 ? 0 : got;
    return c;
}

int64_t spex_pool_next_chunk_ranged(spex_pool *pool, int ith, const int64_t *bounds) {
    return spex_pool_next_chunks_ranged(pool, ith, bounds, 1, NULL);
}
