/*
 * probe.h — the streaming-read bandwidth probe that `spex bench model` and `spex bench spec`
 * put next to a decode step, and the weight bytes such a step streams.
 *
 * What it is: a buffer larger than the last-level cache read front to back with the matmul
 * kernels' load width (spex_matmul_stream_probe), split over the threads of the pool that runs
 * the model, so a decode's GB/s of weights can be read as a share of what the memory gives the
 * same threads. On a shared host that share moves within seconds (docs/performance.md,
 * "Machines and method"), so the benches time probes right before and after the decode they are
 * compared with. What it is not: a memory benchmark with its own thread pinning or patterns
 * (`spex bench kernels` has the 1/2/4-stream variant).
 */
#ifndef SPEX_TOOLS_PROBE_H
#define SPEX_TOOLS_PROBE_H

#include "spex.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct probe_buf {
    uint8_t *buf;
    size_t bytes;
    spex_pool *pool;
    int passes;        /* per probe_run                           */
    uint64_t sink[64]; /* per-thread sums, so no read is optimized out */
} probe_buf;

/* Allocates and fills `bytes` (rounded down to a multiple of 256 per thread); false with
 * *e set when out of memory. */
bool probe_init(probe_buf *p, spex_pool *pool, size_t bytes, spex_error *e);
/* Reads the buffer `passes` times on the pool; seconds per pass. */
double probe_run(probe_buf *p, int passes);
/* GB/s of one pass that took `sec` seconds. */
double probe_gbs(const probe_buf *p, double sec);
void probe_free(probe_buf *p);

/* Bytes of weights one decode step streams: every tensor but the embedding's unused rows and
 * the MTP blocks (blk.N.* with N >= the trunk's layer count: a plain decode step does not run
 * them). */
uint64_t probe_decode_bytes(const spex_model *m);

/* The median of v[0..n) (n >= 1; v is reordered). */
double probe_median(double *v, int n);

/* A run that read gbs GB/s between probes of `before` and `after` seconds per pass: its share
 * of their mean rate, and *steady when the two agree within 10 % (the memory did not move
 * during the run). */
double probe_paired_share(const probe_buf *p, double gbs, double before, double after, bool *steady);
/* The median of the steady entries of share[0..n) (n >= 1), or of all when none is steady
 * (*all_used then true); *n_used entries. scratch: n doubles. */
double probe_steady_median(const double *share, const bool *steady, int n, double *scratch, int *n_used,
                           bool *all_used);

#endif
