/*
 * probe.c — the benches' streaming-read probe and decode weight bytes (tools/probe.h).
 */
#include "gguf/api.h"
#include "cpu/api.h"
#include "probe.h"
#include "model/api.h"
#include "spec/api.h"

#include "cpu/matmul.h"
#include "genset.h"

#include <stdio.h>
#include <stdlib.h>

static void probe_task(void *ctx, int ith, int nth) {
    probe_buf *p = ctx;
    const size_t part = p->bytes / (size_t)nth / 256 * 256;
    uint64_t s = 0;
    for (int k = 0; k < p->passes; k++) s += spex_matmul_stream_probe(p->buf + part * (size_t)ith, part);
    if (ith < 64) p->sink[ith] = s;
}

bool probe_init(probe_buf *p, spex_pool *pool, size_t bytes, spex_error *e) {
    *p = (probe_buf){.bytes = bytes, .pool = pool, .passes = 1};
    p->buf = malloc(bytes);
    if (!p->buf) {
        spex_error_set(e, SPEX_ERR_NOMEM, "probe: out of memory for a %zu MiB buffer", bytes >> 20);
        return false;
    }
    /* Not zeros (malloc + memset 0 may become calloc, whose untouched pages all map the one
     * zero page and read from cache); small words, so the probe's 64-bit sums cannot overflow. */
    for (size_t i = 0; i < bytes / sizeof(uint64_t); i++) ((uint64_t *)(void *)p->buf)[i] = i & 0xff;
    return true;
}

double probe_run(probe_buf *p, int passes) {
    p->passes = passes < 1 ? 1 : passes;
    const double t0 = genset_now_s();
    spex_pool_run(p->pool, probe_task, p);
    return (genset_now_s() - t0) / p->passes;
}

double probe_gbs(const probe_buf *p, double sec) { return sec > 0 ? (double)p->bytes / sec * 1e-9 : 0; }

void probe_free(probe_buf *p) {
    free(p->buf);
    p->buf = NULL;
}

uint64_t probe_decode_bytes(const spex_model *m) {
    const spex_gguf *g = spex_model_gguf(m);
    const spex_tensor_info *embd = spex_model_token_embd(m), *head = spex_model_lm_head(m);
    const int32_t n_layer = spex_model_get_hparams(m)->n_layer;
    uint64_t sum = 0;
    for (int64_t i = 0; i < spex_gguf_n_tensors(g); i++) {
        const spex_tensor_info *t = spex_gguf_tensor(g, i);
        int blk = -1;
        if (sscanf(t->name, "blk.%d.", &blk) == 1 && blk >= n_layer) continue;
        sum += t->nbytes;
    }
    if (head != embd) sum -= embd->nbytes - embd->nbytes / (uint64_t)embd->ne[1];
    return sum;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double probe_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double probe_paired_share(const probe_buf *p, double gbs, double before, double after, bool *steady) {
    const double hi = before > after ? before : after, lo = before > after ? after : before;
    *steady = hi - lo <= 0.1 * hi;
    return gbs / probe_gbs(p, 0.5 * (before + after));
}

double probe_steady_median(const double *share, const bool *steady, int n, double *scratch, int *n_used,
                           bool *all_used) {
    int k = 0;
    for (int i = 0; i < n; i++)
        if (steady[i]) scratch[k++] = share[i];
    *all_used = k == 0;
    if (k == 0)
        for (int i = 0; i < n; i++) scratch[k++] = share[i];
    *n_used = k;
    return probe_median(scratch, k);
}
