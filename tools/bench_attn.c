/*
 * bench_attn.c — `spex bench attn`: the attention of one layer (spex_attention, src/cpu/ops.c)
 * for a block of new query rows over a KV cache, the decode / verify / draft regime.
 *
 * What it is: a tool, not a test (it asserts nothing). One thread runs spex_attention over
 * every work unit of a layer with the heads of the Qwen3-0.6B shape (16 query heads, 8 kv
 * heads of 128; --heads, --hd change them), causal, the n_q queries at the end of an n_kv-row
 * cache (the verify case: query i sees n_kv - n_q + i + 1 rows), for each n_q of --nq and
 * n_kv of --nkv, best of --reps calls. It prints µs per call, GFLOP/s (2 flops per
 * multiply-add of the scores and of the value sums) and GB/s of K and V rows read once per
 * kv head. The cache is laid out as a context's (head-major: each kv head's rows one stream;
 * --layout rows: the heads side by side in each row), in F16, F32 or Q8_0 (--kv). A cache of
 * a few MiB stays in the last-level cache between calls, as one layer's does not in a model
 * (a large --nkv reads from DRAM); `spex bench model` (--depth) and `spex bench spec` time the
 * real thing.
 */
#include "spex.h"
#include "cpu/api.h"
#include "cli.h"
#include "genset.h"
#include "cpu/ops.h"
#include "core/mem.h"
#include "spec/api.h"
#include "tensor/api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BA_MAX_LIST 16

static void ba_usage(void) {
    fprintf(stderr,
            "usage: spex bench attn [--nq 1,2,4,8,16] [--nkv 128,512,2048] [--heads 16/8] [--hd 128]\n"
            "                       [--kv f16|f32|q8_0] [--layout heads|rows] [--reps R]\n"
            "  one layer's causal attention on one thread: n_q new query rows at the end of an\n"
            "  n_kv-row cache, best of R calls (default 50); µs, GFLOP/s, GB/s of K/V rows\n");
}

int bench_attn(int argc, char **argv) {
    long nq[BA_MAX_LIST] = {1, 2, 4, 8, 16}, nkv[BA_MAX_LIST] = {128, 512, 2048};
    int n_nq = 5, n_nkv = 3, H = 16, HKV = 8, D = 128, reps = 50;
    spex_type kvt = SPEX_TYPE_F16;
    bool head_major = true;
    for (int i = 1; i < argc; i += 2) { /* every flag but --help takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = v != NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            ba_usage();
            return 0;
        } else if (!strcmp(a, "--nq") && v) ok = cli_parse_int_list(a, v, 1, 256, nq, BA_MAX_LIST, &n_nq);
        else if (!strcmp(a, "--nkv") && v) ok = cli_parse_int_list(a, v, 1, 1 << 20, nkv, BA_MAX_LIST, &n_nkv);
        else if (!strcmp(a, "--heads") && v) ok = sscanf(v, "%d/%d", &H, &HKV) == 2 && HKV > 0 && H > 0 && H % HKV == 0;
        else if (!strcmp(a, "--hd") && v) ok = (D = atoi(v)) > 0 && D <= 1024;
        else if (!strcmp(a, "--reps") && v) ok = (reps = atoi(v)) > 0;
        else if (!strcmp(a, "--kv") && v) ok = cli_parse_kv_type(a, v, &kvt);
        else if (!strcmp(a, "--layout") && v) {
            ok = !strcmp(v, "heads") || !strcmp(v, "rows");
            head_major = !strcmp(v, "heads");
        } else ok = false;
        if (!ok) {
            fprintf(stderr, "error: bad or incomplete argument '%s'\n", a);
            ba_usage();
            return 2;
        }
    }
    if (kvt == SPEX_TYPE_Q8_0 && D % 32) {
        fprintf(stderr, "error: --kv q8_0 needs --hd to be a multiple of 32 (got %d)\n", D);
        return 2;
    }
    int max_q = 0, max_kv = 0;
    for (int i = 0; i < n_nq; i++) max_q = nq[i] > max_q ? (int)nq[i] : max_q;
    for (int i = 0; i < n_nkv; i++) max_kv = nkv[i] > max_kv ? (int)nkv[i] : max_kv;
    /* hrow: bytes of one kv head's slice of a row; the cache is [HKV][max_kv] slices
     * (head-major) or [max_kv][HKV] (rows) */
    const size_t hrow = spex_type_row_size(kvt, D), kvrow = (size_t)HKV * hrow;
    float *q = malloc(sizeof(float) * (size_t)max_q * H * D), *out = malloc(sizeof(float) * (size_t)max_q * H * D);
    /* on huge pages where granted, as a context's cache is (core/mem.h), so that a cache
     * past the TLB's reach costs what it costs in a model */
    uint8_t *k = spex_alloc_large(kvrow * (size_t)max_kv), *v = spex_alloc_large(kvrow * (size_t)max_kv);
    int32_t *qpos = malloc(sizeof(int32_t) * (size_t)max_q);
    spex_attn_args big = {.n_q = max_q, .n_head = H, .n_head_kv = HKV, .head_dim = D};
    float *scratch = malloc(sizeof(float) * spex_attn_scratch_floats(&big));
    if (!q || !out || !k || !v || !qpos || !scratch) {
        fprintf(stderr, "error: out of memory\n");
        free(q), free(out), free(k), free(v), free(qpos), free(scratch);
        return 1;
    }
    uint32_t s = 12345u;
#define BA_RND() ((s = s * 1664525u + 1013904223u), (float)(s >> 8) / 16777216.0f - 0.5f)
    for (size_t i = 0; i < (size_t)max_q * H * D; i++) q[i] = BA_RND();
    float *ft = malloc(sizeof(float) * 2 * (size_t)D);
    if (!ft) {
        fprintf(stderr, "error: out of memory\n");
        free(q), free(out), free(k), free(v), free(qpos), free(scratch);
        return 1;
    }
    for (int t = 0; t < max_kv; t++)
        for (int h = 0; h < HKV; h++) {
            for (int i = 0; i < 2 * D; i++) ft[i] = BA_RND();
            const size_t off =
                head_major ? ((size_t)h * (size_t)max_kv + (size_t)t) * hrow : (size_t)t * kvrow + (size_t)h * hrow;
            (void)spex_quantize_row_ref(kvt, ft, k + off, D); /* f32, f16, q8_0 with D % 32 == 0: cannot fail */
            (void)spex_quantize_row_ref(kvt, ft + D, v + off, D);
        }
    free(ft);
#undef BA_RND
    const spex_ops_kernels *ops = spex_ops_get();
    printf("spex bench attn: isa %s, %d/%d heads of %d, %s cache (%s), causal, 1 thread, best of %d\n\n",
           spex_isa_name(spex_cpu_isa()), H, HKV, D, spex_type_get_info(kvt)->name,
           head_major ? "head-major" : "heads side by side", reps);
    printf("| n_q | n_kv | µs | GFLOP/s | K/V GB/s |\n|---|---|---|---|---|\n");
    for (int a = 0; a < n_nkv; a++)
        for (int b = 0; b < n_nq; b++) {
            const int n_q = (int)nq[b], n_kv = (int)nkv[a];
            if (n_q > n_kv) continue;
            for (int i = 0; i < n_q; i++) qpos[i] = n_kv - n_q + i;
            spex_attn_args args = {.n_q = n_q, .n_head = H, .n_head_kv = HKV, .head_dim = D, .q = q,
                                   .q_stride = (int64_t)H * D, .q_pos = qpos, .kv_type = kvt, .n_kv = n_kv,
                                   .k = k, .v = v, .k_stride = head_major ? hrow : kvrow,
                                   .v_stride = head_major ? hrow : kvrow, .causal = true, .out = out,
                                   .out_stride = (int64_t)H * D};
            if (head_major) args.k_head_stride = args.v_head_stride = (size_t)max_kv * hrow;
            double best = 1e30;
            for (int r = 0; r <= reps; r++) {
                const double t0 = genset_now_s();
                spex_attention(ops, &args, 0, 1, scratch);
                const double dt = genset_now_s() - t0;
                if (r > 0 && dt < best) best = dt;
            }
            double seen = 0;
            for (int i = 0; i < n_q; i++) seen += qpos[i] + 1;
            const double flops = 4.0 * seen * H * D;
            printf("| %d | %d | %.1f | %.1f | %.1f |\n", n_q, n_kv, best * 1e6, flops / best * 1e-9,
                   2.0 * (double)kvrow * n_kv / best * 1e-9);
        }
    free(q), free(out), free(k), free(v), free(qpos), free(scratch);
    return 0;
}
