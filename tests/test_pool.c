/*
 * test_pool.c — the persistent thread pool (src/cpu/pool.c): runs, chunk counter, barrier.
 *
 * Checks that every thread runs every task exactly once, that dynamic chunks are each taken
 * exactly once, that barrier phases see the previous phase of the other threads, that 10k
 * consecutive runs neither lose nor duplicate work, and the 1-thread and oversubscribed
 * pools, and that the ranged protocol hands each chunk out once, a thread's own range front
 * to back before anything stolen. Prints (does not assert) the per-run overhead in
 * microseconds.
 */
#include "spex.h"
#include "cpu/api.h"
#include "test.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int n_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

/* ---- chunked sum ------------------------------------------------------------------------ */

#define SUM_N 1000003     /* not a multiple of the chunk size */
#define SUM_CHUNK 1000
#define MAX_TH 64

typedef struct {
    spex_pool *pool;
    const uint32_t *data;
    int64_t n, chunk;
    _Atomic int *taken;          /* [n_chunks] times each chunk was claimed */
    uint64_t partial[MAX_TH];
    int ran[MAX_TH];
} sum_ctx;

static void sum_task(void *p, int ith, int nth) {
    sum_ctx *c = p;
    (void)nth;
    int64_t n_chunks = (c->n + c->chunk - 1) / c->chunk;
    uint64_t s = 0;
    for (int64_t k = spex_pool_next_chunk(c->pool); k < n_chunks; k = spex_pool_next_chunk(c->pool)) {
        atomic_fetch_add(&c->taken[k], 1);
        int64_t lo = k * c->chunk, hi = lo + c->chunk < c->n ? lo + c->chunk : c->n;
        for (int64_t i = lo; i < hi; i++) s += c->data[i];
    }
    c->partial[ith] = s;
    c->ran[ith]++;
}

static void check_sum(int n_threads, int reps) {
    spex_pool *pool = NULL;
    CHECK_OK(spex_pool_create(n_threads, &pool, NULL));
    int nth = spex_pool_n_threads(pool);
    CHECK(nth >= 1 && nth <= MAX_TH);
    uint32_t *data = malloc(SUM_N * sizeof *data);
    int64_t n_chunks = (SUM_N + SUM_CHUNK - 1) / SUM_CHUNK;
    _Atomic int *taken = calloc((size_t)n_chunks, sizeof *taken);
    CHECK(data && taken);
    uint64_t want = 0;
    for (int64_t i = 0; i < SUM_N; i++) {
        data[i] = (uint32_t)(i * 2654435761u) >> 8;
        want += data[i];
    }
    sum_ctx c = {.pool = pool, .data = data, .n = SUM_N, .chunk = SUM_CHUNK, .taken = taken};
    int bad = 0;
    for (int r = 0; r < reps && !bad; r++) {
        for (int64_t k = 0; k < n_chunks; k++) atomic_store(&taken[k], 0);
        spex_pool_run(pool, sum_task, &c);
        uint64_t got = 0;
        for (int t = 0; t < nth; t++) got += c.partial[t];
        for (int64_t k = 0; k < n_chunks; k++) bad |= atomic_load(&taken[k]) != 1;
        bad |= got != want;
    }
    for (int t = 0; t < nth; t++) bad |= c.ran[t] != reps;
    free(data);
    free(taken);
    spex_pool_free(pool);
    CHECK_MSG(!bad, "chunked sum wrong with %d threads", nth);
}

TEST(pool_sum_chunks_2) { check_sum(2, 20); }
TEST(pool_sum_chunks_4) { check_sum(4, 20); }
TEST(pool_sum_chunks_1) { check_sum(1, 5); }

/* ---- barrier phases --------------------------------------------------------------------- */

#define PHASES 64

typedef struct {
    spex_pool *pool;
    int64_t v[PHASES + 1][MAX_TH];   /* v[p][t]: thread t's value after phase p */
} phase_ctx;

/* Phase p of thread t reads phase p-1 of its two neighbours: only correct if the barrier
 * made every thread's previous phase visible. */
static int64_t phase_fn(int64_t left, int64_t self, int64_t right, int p) {
    return (left * 3 + self * 5 + right * 7 + p) % 1000003;
}

static void phase_task(void *p, int ith, int nth) {
    phase_ctx *c = p;
    c->v[0][ith] = ith + 1;
    spex_pool_barrier(c->pool);
    for (int ph = 1; ph <= PHASES; ph++) {
        int64_t l = c->v[ph - 1][(ith + nth - 1) % nth], r = c->v[ph - 1][(ith + 1) % nth];
        c->v[ph][ith] = phase_fn(l, c->v[ph - 1][ith], r, ph);
        spex_pool_barrier(c->pool);
    }
}

static void check_phases(int n_threads, int reps) {
    spex_pool *pool = NULL;
    CHECK_OK(spex_pool_create(n_threads, &pool, NULL));
    int nth = spex_pool_n_threads(pool);
    CHECK(nth <= MAX_TH);
    int64_t want[PHASES + 1][MAX_TH];
    for (int t = 0; t < nth; t++) want[0][t] = t + 1;
    for (int ph = 1; ph <= PHASES; ph++)
        for (int t = 0; t < nth; t++)
            want[ph][t] = phase_fn(want[ph - 1][(t + nth - 1) % nth], want[ph - 1][t],
                                   want[ph - 1][(t + 1) % nth], ph);
    phase_ctx *c = calloc(1, sizeof *c);
    CHECK(c);
    c->pool = pool;
    int bad = 0;
    for (int r = 0; r < reps && !bad; r++) {
        memset(c->v, 0, sizeof c->v);
        spex_pool_run(pool, phase_task, c);
        for (int t = 0; t < nth; t++) bad |= c->v[PHASES][t] != want[PHASES][t];
    }
    free(c);
    spex_pool_free(pool);
    CHECK_MSG(!bad, "barrier phases wrong with %d threads", nth);
}

TEST(pool_barrier_phases_2) { check_phases(2, 20); }
TEST(pool_barrier_phases_3) { check_phases(3, 20); }
TEST(pool_barrier_phases_1) { check_phases(1, 3); }

/* ---- many runs -------------------------------------------------------------------------- */

typedef struct {
    _Atomic int64_t total;
    int64_t per_thread[MAX_TH];
} count_ctx;

static void count_task(void *p, int ith, int nth) {
    count_ctx *c = p;
    c->per_thread[ith]++;
    atomic_fetch_add_explicit(&c->total, nth, memory_order_relaxed);
}

TEST(pool_many_runs) {
    spex_pool *pool = NULL;
    CHECK_OK(spex_pool_create(2, &pool, NULL));
    count_ctx c = {0};
    for (int r = 0; r < 10000; r++) spex_pool_run(pool, count_task, &c);
    spex_pool_free(pool);
    CHECK_EQ_INT(atomic_load(&c.total), 10000 * 2 * 2);
    CHECK_EQ_INT(c.per_thread[0], 10000);
    CHECK_EQ_INT(c.per_thread[1], 10000);
}

/* Sleeps ms milliseconds (resumed after a signal). */
static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {}
}

/* Runs with gaps long enough that the workers stop spinning and sleep: exercises the futex
 * path for both the wake-up and the completion. */
TEST(pool_runs_after_sleep) {
    spex_pool *pool = NULL;
    CHECK_OK(spex_pool_create(3, &pool, NULL));
    count_ctx c = {0};
    for (int r = 0; r < 20; r++) {
        sleep_ms(2); /* > the spin time */
        spex_pool_run(pool, count_task, &c);
    }
    spex_pool_free(pool);
    CHECK_EQ_INT(c.per_thread[0], 20);
    CHECK_EQ_INT(c.per_thread[1], 20);
    CHECK_EQ_INT(c.per_thread[2], 20);
}

/* ---- wait accounting ------------------------------------------------------------------------ */

/* Thread 1 arrives 100 ms late at a barrier; after it, thread 0 works 50 ms more. (Long
 * enough that a busy machine delaying a thread by a few ms cannot upset the bounds below.) */
static void late_task(void *p, int ith, int nth) {
    spex_pool *pool = p;
    if (ith == 1) sleep_ms(100);
    spex_pool_barrier(pool);
    if (ith == 0) sleep_ms(50);
}

TEST(pool_wait_accounting) {
    spex_pool *pool = NULL;
    CHECK_OK(spex_pool_create(3, &pool, NULL));
    spex_pool_run(pool, late_task, pool); /* off: nothing is counted */
    for (int t = 0; t < 3; t++) CHECK(spex_pool_wait_s(pool, t) == 0.0);
    spex_pool_set_wait_accounting(pool, true);
    spex_pool_run(pool, late_task, pool);
    sleep_ms(100); /* between runs: the workers' wait for the next run is in progress */
    const double w0 = spex_pool_wait_s(pool, 0), w1 = spex_pool_wait_s(pool, 1), w2 = spex_pool_wait_s(pool, 2);
    /* 0: the barrier (~100 ms), hardly any wait at the end of the run; 1: none at the barrier,
     * then ~50 + 100 ms for the next run; 2: both (~250 ms) */
    CHECK_MSG(w0 >= 0.06 && w0 < 2.0, "thread 0 waited %.3f s", w0);
    CHECK_MSG(w1 >= 0.1 && w1 < w2, "thread 1 waited %.3f s, thread 2 %.3f s", w1, w2);
    CHECK_MSG(w2 - w1 >= 0.06, "thread 2 waited %.3f s, thread 1 %.3f s", w2, w1);
    CHECK(spex_pool_wait_s(pool, 3) == 0.0 && spex_pool_wait_s(pool, -1) == 0.0);
    /* switching on again starts from zero */
    spex_pool_set_wait_accounting(pool, false);
    spex_pool_set_wait_accounting(pool, true);
    CHECK(spex_pool_wait_s(pool, 0) == 0.0);
    CHECK(spex_pool_wait_s(pool, 1) < 0.05);
    spex_pool_free(pool);
    spex_pool_set_wait_accounting(NULL, true); /* no-ops */
    CHECK(spex_pool_wait_s(NULL, 0) == 0.0);
}

static void noop_task(void *p, int ith, int nth) { (void)p, (void)ith, (void)nth; }

/* By site: late_task posted as a Q/K/V run, then (30 ms later) an empty head run. A barrier
 * wait goes under its run's site, a worker's wait for a run under the site of that run. */
TEST(pool_wait_accounting_by_site) {
    spex_pool *pool = NULL;
    CHECK_OK(spex_pool_create(3, &pool, NULL));
    spex_pool_set_wait_accounting(pool, true);
    spex_pool_run_site(pool, late_task, pool, SPEX_SITE_QKV);
    sleep_ms(30);
    spex_pool_run_site(pool, noop_task, NULL, SPEX_SITE_HEAD);
    double s[3][SPEX_SITE_COUNT][2];
    int64_t n[3][SPEX_SITE_COUNT][2];
    for (int t = 0; t < 3; t++)
        for (int st = 0; st < SPEX_SITE_COUNT; st++)
            for (int k = 0; k < 2; k++) spex_pool_wait_site(pool, t, st, k == 1, &s[t][st][k], &n[t][st][k]);
    /* barriers: threads 0 and 2 waited ~100 ms for thread 1, which did not wait */
    CHECK_MSG(n[0][SPEX_SITE_QKV][1] == 1 && s[0][SPEX_SITE_QKV][1] >= 0.06, "thread 0 barrier: %lld, %.3f s",
              (long long)n[0][SPEX_SITE_QKV][1], s[0][SPEX_SITE_QKV][1]);
    CHECK(n[2][SPEX_SITE_QKV][1] == 1 && s[2][SPEX_SITE_QKV][1] >= 0.06);
    CHECK(n[1][SPEX_SITE_QKV][1] == 0 && s[1][SPEX_SITE_QKV][1] == 0.0);
    /* run boundaries: one per run and thread; the workers' ~80 ms between the runs go under the head run */
    for (int t = 0; t < 3; t++) {
        CHECK(n[t][SPEX_SITE_QKV][0] == 1 && n[t][SPEX_SITE_HEAD][0] == 1);
        CHECK(s[t][SPEX_SITE_QKV][0] < 0.05);
    }
    CHECK_MSG(s[1][SPEX_SITE_HEAD][0] >= 0.05 && s[2][SPEX_SITE_HEAD][0] >= 0.05, "workers' waits for the head run: "
              "%.3f, %.3f s", s[1][SPEX_SITE_HEAD][0], s[2][SPEX_SITE_HEAD][0]);
    /* nothing anywhere else; the sites add up to the totals (no wait in progress on the caller) */
    double sum0 = 0;
    for (int st = 0; st < SPEX_SITE_COUNT; st++) {
        sum0 += s[0][st][0] + s[0][st][1];
        if (st == SPEX_SITE_QKV || st == SPEX_SITE_HEAD) continue;
        for (int t = 0; t < 3; t++) CHECK(n[t][st][0] == 0 && n[t][st][1] == 0 && s[t][st][0] == 0.0);
    }
    CHECK(fabs(sum0 - spex_pool_wait_s(pool, 0)) < 1e-6);
    /* plain runs and out-of-range sites count as OTHER */
    spex_pool_run(pool, noop_task, NULL);
    spex_pool_run_site(pool, noop_task, NULL, 99);
    int64_t k = 0;
    spex_pool_wait_site(pool, 1, SPEX_SITE_OTHER, false, NULL, &k);
    CHECK(k == 2);
    spex_pool_free(pool);
}

/* spex_pool_wait_split: a worker's wait in progress is booked up to now under OTHER (one
 * count) and goes on from there, so the by-site counters then cover what spex_pool_wait_s
 * covers; with accounting off it does nothing. */
static double site_sum(const spex_pool *pool, int t) {
    double sum = 0.0;
    for (int st = 0; st < SPEX_SITE_COUNT; st++)
        for (int k = 0; k < 2; k++) {
            double x;
            spex_pool_wait_site(pool, t, st, k == 1, &x, NULL);
            sum += x;
        }
    return sum;
}

TEST(pool_wait_split_at_window_edges) {
    spex_pool *pool = NULL;
    CHECK_OK(spex_pool_create(2, &pool, NULL));
    spex_pool_wait_split(pool); /* accounting off: nothing */
    spex_pool_set_wait_accounting(pool, true);
    spex_pool_run_site(pool, noop_task, NULL, SPEX_SITE_QKV);
    sleep_ms(40); /* the worker waits for the next run */
    int64_t n0 = 0, n1 = 0;
    spex_pool_wait_site(pool, 1, SPEX_SITE_OTHER, false, NULL, &n0);
    const double before = site_sum(pool, 1); /* the open wait is not in it yet */
    spex_pool_wait_split(pool);
    const double after = site_sum(pool, 1), total = spex_pool_wait_s(pool, 1);
    spex_pool_wait_site(pool, 1, SPEX_SITE_OTHER, false, NULL, &n1);
    CHECK_MSG(after - before >= 0.03, "split booked %.4f s of a >= 40 ms wait", after - before);
    CHECK_EQ_INT(n1 - n0, 1);
    CHECK_MSG(total - after >= 0.0 && total - after < 0.01, "total %.4f s, by site %.4f s", total, after);
    /* the wait goes on from the split: the next run books only the time since */
    spex_pool_run_site(pool, noop_task, NULL, SPEX_SITE_HEAD);
    double head = 0.0;
    spex_pool_wait_site(pool, 1, SPEX_SITE_HEAD, false, &head, NULL);
    CHECK_MSG(head < 0.02, "head run booked %.4f s", head);
    spex_pool_wait_split(pool);
    CHECK(fabs(site_sum(pool, 1) - spex_pool_wait_s(pool, 1)) < 0.005);
    CHECK(fabs(site_sum(pool, 0) - spex_pool_wait_s(pool, 0)) < 1e-6); /* the caller: nothing open between runs */
    spex_pool_free(pool);
}

/* A one-thread pool never waits. */
TEST(pool_wait_accounting_1) {
    spex_pool *pool = NULL;
    CHECK_OK(spex_pool_create(1, &pool, NULL));
    spex_pool_set_wait_accounting(pool, true);
    spex_pool_run(pool, late_task, pool);
    CHECK(spex_pool_wait_s(pool, 0) == 0.0);
    spex_pool_free(pool);
}

/* ---- 1 thread, oversubscription, defaults ------------------------------------------------ */

typedef struct {
    pthread_t caller;
    int inline_ok, calls;
} inline_ctx;

static void inline_task(void *p, int ith, int nth) {
    inline_ctx *c = p;
    c->calls++;
    c->inline_ok = ith == 0 && nth == 1 && pthread_equal(pthread_self(), c->caller);
}

TEST(pool_one_thread_inline) {
    spex_pool *pool = NULL;
    CHECK_OK(spex_pool_create(1, &pool, NULL));
    CHECK_EQ_INT(spex_pool_n_threads(pool), 1);
    inline_ctx c = {.caller = pthread_self()};
    spex_pool_run(pool, inline_task, &c);
    spex_pool_barrier(pool); /* a no-op with one thread, even outside a task */
    spex_pool_free(pool);
    CHECK_EQ_INT(c.calls, 1);
    CHECK(c.inline_ok);
}

TEST(pool_more_threads_than_cores) {
    int n = 2 * n_cpus() + 3;
    if (n > MAX_TH) n = MAX_TH;
    check_sum(n, 5);
    if (test_failed_) return;
    check_phases(n, 3);
}

TEST(pool_default_threads) {
    spex_pool *pool = NULL;
    CHECK_OK(spex_pool_create(0, &pool, NULL));
    int nth = spex_pool_n_threads(pool);
    spex_pool_free(pool);
    CHECK_EQ_INT(nth, n_cpus() > 1024 ? 1024 : n_cpus());
    spex_error err = {0};
    CHECK(spex_pool_create(100000, &pool, &err) == SPEX_ERR_RANGE && pool == NULL);
    CHECK(err.msg[0] != 0);
}

TEST(pool_create_free_repeatedly) {
    for (int i = 0; i < 50; i++) {
        spex_pool *pool = NULL;
        CHECK_OK(spex_pool_create(1 + i % 4, &pool, NULL));
        count_ctx c = {0};
        if (i % 2) spex_pool_run(pool, count_task, &c);
        spex_pool_free(pool); /* joins the workers, whether they ran or not */
        CHECK_EQ_INT(c.per_thread[0], i % 2);
    }
}

/* ---- chunk numbering across two phases (the documented invariant) ---------------------- */

typedef struct {
    spex_pool *pool;
    _Atomic int hits1[100], hits2[37];
} two_phase_ctx;

static void two_phase_task(void *p, int ith, int nth) {
    two_phase_ctx *c = p;
    const int64_t n1 = 100, n2 = 37;
    (void)ith;
    for (int64_t k = spex_pool_next_chunk(c->pool); k < n1; k = spex_pool_next_chunk(c->pool))
        atomic_fetch_add(&c->hits1[k], 1);
    spex_pool_barrier(c->pool);
    const int64_t base = n1 + nth;
    for (int64_t k = spex_pool_next_chunk(c->pool) - base; k < n2; k = spex_pool_next_chunk(c->pool) - base) {
        if (k < 0) return; /* would mean the invariant is broken; hits2 then stays short */
        atomic_fetch_add(&c->hits2[k], 1);
    }
}

TEST(pool_chunks_two_phases) {
    spex_pool *pool = NULL;
    CHECK_OK(spex_pool_create(3, &pool, NULL));
    two_phase_ctx *c = calloc(1, sizeof *c);
    CHECK(c);
    c->pool = pool;
    for (int r = 0; r < 50; r++) spex_pool_run(pool, two_phase_task, c);
    spex_pool_free(pool);
    int bad = 0;
    for (int k = 0; k < 100; k++) bad |= atomic_load(&c->hits1[k]) != 50;
    for (int k = 0; k < 37; k++) bad |= atomic_load(&c->hits2[k]) != 50;
    free(c);
    CHECK(!bad);
}

/* ---- overhead (printed, not asserted) --------------------------------------------------- */

static void empty_task(void *p, int ith, int nth) { (void)p; (void)ith; (void)nth; }
static void barrier_task(void *p, int ith, int nth) { (void)ith; (void)nth; spex_pool_barrier(p); }

TEST(pool_overhead) {
    int ns[] = {1, 2, 4};
    for (int k = 0; k < 3; k++) {
        spex_pool *pool = NULL;
        CHECK_OK(spex_pool_create(ns[k], &pool, NULL));
        /* Batches of 200 runs: the best batch shows the pool's own cost, the mean includes
         * whatever else the (shared) machine was doing. */
        const int batches = 10, per = 200;
        double best[2] = {1e9, 1e9}, sum[2] = {0, 0};
        for (int r = 0; r < 100; r++) spex_pool_run(pool, empty_task, NULL);
        for (int b = 0; b < batches; b++) {
            for (int kind = 0; kind < 2; kind++) {
                double t0 = now_s();
                for (int r = 0; r < per; r++) spex_pool_run(pool, kind ? barrier_task : empty_task, pool);
                double us = (now_s() - t0) * 1e6 / per;
                sum[kind] += us;
                if (us < best[kind]) best[kind] = us;
            }
        }
        printf("  pool overhead, %d thread(s) on %d cpus: empty run %.2f us (best batch) %.2f us (mean);"
               " run with one barrier %.2f / %.2f us\n",
               ns[k], n_cpus(), best[0], sum[0] / batches, best[1], sum[1] / batches);
        spex_pool_free(pool);
    }
}

/* ---- several chunked phases in one run (spex_pool_chunk_reset) -------------------------- */

#define RESET_PHASES 12

typedef struct {
    spex_pool *pool;
    _Atomic int taken[RESET_PHASES][64];   /* times chunk c of phase p was claimed     */
    _Atomic int64_t beyond[RESET_PHASES];  /* largest index seen past the phase's end  */
} reset_ctx;

static int reset_chunks(int p) { return 1 + (p * 7) % 23; } /* 1..23 chunks, varying */

static void reset_task(void *arg, int ith, int nth) {
    reset_ctx *c = arg;
    for (int p = 0; p < RESET_PHASES; p++) {
        const int n = reset_chunks(p);
        int64_t k = spex_pool_next_chunk(c->pool);
        for (; k < n; k = spex_pool_next_chunk(c->pool)) atomic_fetch_add(&c->taken[p][k], 1);
        int64_t prev = atomic_load(&c->beyond[p]);
        while (k > prev && !atomic_compare_exchange_weak(&c->beyond[p], &prev, k)) {
        }
        spex_pool_barrier(c->pool);
        if (ith == (p % nth)) spex_pool_chunk_reset(c->pool); /* a different thread each time */
        spex_pool_barrier(c->pool);
    }
}

static void check_reset(int n_threads, int reps) {
    spex_pool *pool = NULL;
    CHECK_OK(spex_pool_create(n_threads, &pool, NULL));
    int nth = spex_pool_n_threads(pool);
    reset_ctx *c = calloc(1, sizeof *c);
    CHECK(c);
    c->pool = pool;
    int bad = 0;
    for (int r = 0; r < reps && !bad; r++) {
        for (int p = 0; p < RESET_PHASES; p++) {
            for (int k = 0; k < 64; k++) atomic_store(&c->taken[p][k], 0);
            atomic_store(&c->beyond[p], 0);
        }
        spex_pool_run(pool, reset_task, c);
        for (int p = 0; p < RESET_PHASES; p++) {
            for (int k = 0; k < 64; k++) bad |= atomic_load(&c->taken[p][k]) != (k < reset_chunks(p));
            /* each thread stops at its first index >= n: with a reset, the last one seen is
             * exactly n + nth - 1 (without it indices would keep climbing across phases) */
            bad |= atomic_load(&c->beyond[p]) != reset_chunks(p) + nth - 1;
        }
    }
    free(c);
    spex_pool_free(pool);
    CHECK_MSG(!bad, "chunk reset: a phase lost, duplicated or misnumbered chunks with %d threads", nth);
}

/* ---- the ranged protocol (spex_pool_next_chunk_ranged) ----------------------------------- */

#define RANGED_N 200

typedef struct {
    spex_pool *pool;
    int64_t bounds[MAX_TH + 1];
    int phases;                            /* 2: a second chunked phase after a reset   */
    _Atomic int taken[2][RANGED_N];        /* times chunk k of phase p was handed out   */
    int owner_order_bad[MAX_TH];           /* own chunks not front to back, or a chunk of
                                            * another range before the own range ran out */
    int slow_thread;                       /* this thread works slowly: the others steal */
    int n_front;                           /* > 0: spex_pool_next_chunks_ranged, claims of
                                            * up to n_front own chunks                   */
    int claim_bad[MAX_TH];                 /* an own claim of 0 or > n_front chunks, or a
                                            * stolen claim of more than one              */
    _Atomic int n_stolen;                  /* chunks taken outside the taker's range    */
    _Atomic int n_multi;                   /* own claims of more than one chunk         */
} ranged_ctx;

/* The next claim: the first chunk (or -1) and how many. */
static int64_t ranged_next(ranged_ctx *c, int ith, int *got) {
    if (c->n_front <= 0) {
        *got = 1;
        return spex_pool_next_chunk_ranged(c->pool, ith, c->bounds);
    }
    return spex_pool_next_chunks_ranged(c->pool, ith, c->bounds, c->n_front, got);
}

static void ranged_task(void *arg, int ith, int nth) {
    ranged_ctx *c = arg;
    for (int p = 0; p < c->phases; p++) {
        int64_t next_own = c->bounds[ith];
        int stolen = 0;
        int got = 0;
        for (int64_t k0 = ranged_next(c, ith, &got); k0 >= 0; k0 = ranged_next(c, ith, &got)) {
            const bool own = k0 >= c->bounds[ith] && k0 < c->bounds[ith + 1];
            if (got < 1 || (own && got > (c->n_front > 0 ? c->n_front : 1)) || (!own && got != 1))
                c->claim_bad[ith] = 1;
            if (own && got > 1) atomic_fetch_add(&c->n_multi, 1);
            for (int64_t k = k0; k < k0 + got; k++) {
                if (k >= RANGED_N) {
                    c->owner_order_bad[ith] = 1;
                    break;
                }
                atomic_fetch_add(&c->taken[p][k], 1);
                if (k >= c->bounds[ith] && k < c->bounds[ith + 1]) {
                    if (k != next_own || stolen) c->owner_order_bad[ith] = 1;
                    next_own++;
                } else {
                    stolen = 1;
                    atomic_fetch_add(&c->n_stolen, 1);
                }
            }
            if (ith == c->slow_thread) usleep(200);
        }
        if (p + 1 < c->phases) {
            spex_pool_barrier(c->pool);
            if (ith == 0) spex_pool_chunk_reset(c->pool);
            spex_pool_barrier(c->pool);
        }
    }
}

/* Every chunk handed out exactly once per phase, each thread's own chunks in order and
 * before any stolen one, with even, uneven and empty ranges and one slow thread; with
 * n_front > 0 (spex_pool_next_chunks_ranged) own claims take 1..n_front chunks (some more than
 * one) and stolen claims one. */
static void check_ranged(int n_threads, int reps, int n_front) {
    spex_pool *pool = NULL;
    CHECK_OK(spex_pool_create(n_threads, &pool, NULL));
    const int nth = spex_pool_n_threads(pool);
    CHECK(nth <= MAX_TH);
    ranged_ctx *c = calloc(1, sizeof *c);
    CHECK(c);
    c->pool = pool;
    c->n_front = n_front;
    int bad = 0;
    for (int r = 0; r < reps && !bad; r++) {
        const int shape = r % 3; /* 0: even, 1: uneven, 2: every range but the last empty */
        c->bounds[0] = 0;
        for (int t = 1; t < nth; t++)
            c->bounds[t] = shape == 0   ? (int64_t)RANGED_N * t / nth
                           : shape == 1 ? (int64_t)RANGED_N * t * t / (nth * nth)
                                        : 0;
        c->bounds[nth] = RANGED_N;
        c->phases = 1 + (r & 1);
        c->slow_thread = nth > 1 ? r % nth : -1;
        memset(c->owner_order_bad, 0, sizeof c->owner_order_bad);
        memset(c->claim_bad, 0, sizeof c->claim_bad);
        for (int p = 0; p < 2; p++)
            for (int k = 0; k < RANGED_N; k++) atomic_store(&c->taken[p][k], 0);
        spex_pool_run(pool, ranged_task, c);
        for (int p = 0; p < c->phases; p++)
            for (int k = 0; k < RANGED_N; k++) bad |= atomic_load(&c->taken[p][k]) != 1;
        for (int t = 0; t < nth; t++) bad |= c->owner_order_bad[t] | c->claim_bad[t];
    }
    const int stolen = atomic_load(&c->n_stolen); /* the slow threads' ranges were helped with */
    const int multi = atomic_load(&c->n_multi);
    free(c);
    spex_pool_free(pool);
    CHECK_MSG(!bad, "ranged chunks: a chunk lost, duplicated or out of order with %d threads", nth);
    CHECK_MSG(nth == 1 ? stolen == 0 : stolen > 0, "%d threads, %d chunks stolen", nth, stolen);
    CHECK_MSG(n_front > 1 ? multi > 0 : multi == 0, "n_front %d: %d own claims of several chunks", n_front, multi);
}

TEST(pool_ranged_1) { check_ranged(1, 3, 0); }
TEST(pool_ranged_2) { check_ranged(2, 30, 0); }
TEST(pool_ranged_4) { check_ranged(4, 30, 0); }
TEST(pool_ranged_claims_of_4_1) { check_ranged(1, 3, 4); }
TEST(pool_ranged_claims_of_4_2) { check_ranged(2, 30, 4); }
TEST(pool_ranged_claims_of_3_4) { check_ranged(4, 30, 3); }

TEST(pool_chunk_reset_1) { check_reset(1, 3); }
TEST(pool_chunk_reset_2) { check_reset(2, 50); }
TEST(pool_chunk_reset_3) { check_reset(3, 50); }

TEST_MAIN()
