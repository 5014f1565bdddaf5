/*
 * bench.c — `spex bench kernels`: matmul throughput of every weight type, as GB/s of weights
 * read, next to a streaming-read bandwidth probe measured in the same run.
 *
 * What it is: a tool, not a test (it asserts nothing). For each weight type it builds a
 * weight matrix of n = 4096 columns (--n) and --size MiB (default: 4 × the last-level cache, at
 * least 128 MiB, so every pass streams from DRAM), and times spex_matmul with 1 activation
 * row (decode: matrix-vector) and 8 rows (speculative verify; --rows R for another block, such
 * as the 4-6 rows a draft cut often leaves) on pools of 1 and N threads.
 * The probe reads the same buffer with the kernels' load width (spex_matmul_stream_probe_n,
 * best of 1, 2 and 4 streams per thread) on the same pool just before, so "% probe"
 * compares like with like. Each number is the best of --passes × --reps runs, the passes
 * sweeping all types in turn (other processes only ever make a run slower, and on a shared
 * machine they come in bursts). --cached uses a 512 KiB matrix instead, for the kernels'
 * compute ceilings. What it is not: a model benchmark — it times one matrix at a time,
 * activations and outputs in cache.
 *
 * The targets: Q4_K and Q8_0 matrix-vector >= 85% of the probe with 2 threads,
 * and the 8-row case at most 2× the 1-row time. Results are recorded in docs/performance.md.
 */
#include "spex.h"
#include "cpu/api.h"
#include "cli.h"
#include "genset.h"
#include "cpu/matmul.h"
#include "spec/api.h"
#include "tensor/api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_N 4096 /* columns unless --n says otherwise */
#define MAX_TYPES 24

/* Size of the largest (last-level) CPU cache from sysfs, 0 if unknown. */
static size_t llc_bytes(void) {
    size_t best = 0;
    int best_level = 0;
    for (int i = 0; i < 16; i++) {
        char path[128], buf[64];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (!f) break;
        int level = 0;
        if (fgets(buf, sizeof buf, f)) level = atoi(buf);
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        f = fopen(path, "r");
        if (!f) continue;
        size_t sz = 0;
        if (fgets(buf, sizeof buf, f)) {
            char *end;
            sz = strtoul(buf, &end, 10);
            if (*end == 'K') sz <<= 10;
            else if (*end == 'M') sz <<= 20;
        }
        fclose(f);
        if (level > best_level || (level == best_level && sz > best)) best = sz, best_level = level;
    }
    return best;
}

/* ---- the probe, run as a pool task ------------------------------------------------- */

typedef struct {
    const uint8_t *buf;
    size_t bytes;
    int streams;
    uint64_t sink[64];
} probe_ctx;

static void probe_task(void *ctx, int ith, int nth) {
    probe_ctx *p = ctx;
    size_t part = p->bytes / (size_t)nth / 256 * 256;
    uint64_t s = spex_matmul_stream_probe_n(p->buf + part * (size_t)ith, part, p->streams);
    if (ith < 64) p->sink[ith] = s;
}

/* ---- the int8 multiply-add ceiling (--cached), run as a pool task ------------------- */

typedef struct {
    int bcast;
    uint64_t steps;
    uint64_t sink[64], macs[64];
} peak_ctx;

static void peak_task(void *ctx, int ith, int nth) {
    peak_ctx *p = ctx;
    (void)nth;
    uint64_t m = 0;
    const uint64_t s = spex_matmul_dot_peak(p->steps, p->bcast, &m);
    if (ith < 64) p->sink[ith] = s, p->macs[ith] = m;
}

/* Best G multiply-adds/s of all threads together over reps runs; 0 when the ISA in use has
 * no probe (spex_matmul_dot_peak). */
static double time_peak(spex_pool *pool, int bcast, int reps) {
    peak_ctx p = {.bcast = bcast, .steps = 50000};
    double best = 0;
    for (int r = 0; r <= reps; r++) {
        const double t0 = genset_now_s();
        spex_pool_run(pool, peak_task, &p);
        const double dt = genset_now_s() - t0;
        double macs = 0;
        for (int t = 0; t < spex_pool_n_threads(pool) && t < 64; t++) macs += (double)p.macs[t];
        if (r > 0 && macs / dt / 1e9 > best) best = macs / dt / 1e9;
    }
    return best;
}

/* ---- one type ------------------------------------------------------------------------ */

typedef struct {
    double probe, mv, mmr; /* GB/s: probe, 1 row, the multi-row column (--rows, 8 by default) */
    double wbytes;         /* the matrix's weight bytes (the rates' numerator) */
} result;

/* Fills buf with rows of type t: 16 distinct rows quantized by the reference, repeated (the
 * bytes do not matter for speed as long as the scales are ordinary numbers). */
static bool fill_weights(spex_type t, uint8_t *buf, int64_t n_out, int64_t n, size_t wrow) {
    const int distinct = 16;
    float *row = malloc(n * sizeof(float));
    uint8_t *q = malloc(wrow * (size_t)distinct);
    bool ok = row && q;
    uint32_t s = 12345;
    for (int r = 0; r < distinct && ok; r++) {
        for (int k = 0; k < n; k++) {
            s = s * 1664525u + 1013904223u;
            row[k] = (float)((int)(s >> 9) - (1 << 22)) / (float)(1 << 22);
        }
        if (t == SPEX_TYPE_F32) memcpy(q + wrow * (size_t)r, row, wrow);
        else ok = spex_quantize_row_ref(t, row, q + wrow * (size_t)r, n) == SPEX_OK;
    }
    for (int64_t i = 0; i < n_out && ok; i++) memcpy(buf + (size_t)i * wrow, q + wrow * (size_t)(i % distinct), wrow);
    free(row);
    free(q);
    return ok;
}

/* Best time of one call over reps timed runs (after a warm-up); each run repeats the call
 * `inner` times (more than once only for a cache-resident matrix). */
static double time_matmul(spex_pool *pool, const spex_matmul_args *a, int reps, int inner) {
    double best = 1e30;
    for (int r = 0; r <= reps; r++) {
        double t0 = genset_now_s();
        for (int k = 0; k < inner; k++) spex_matmul(pool, a);
        double dt = (genset_now_s() - t0) / inner;
        if (r > 0 && dt < best) best = dt;
    }
    return best;
}

/* Best time, on the calling thread, of quantizing `rows` activation rows of n for weight
 * type t as one spex_matmul call does (its act_quant entry, into dst), over reps runs of
 * `inner` repeats: the part of an 8-row call that is not the tile kernels. */
static double time_act_quant(const spex_matmul_kernels *k, spex_type t, const float *X, int64_t n, int rows,
                             uint8_t *dst, int reps, int inner) {
    const spex_type act = spex_matmul_act_type(t);
    const size_t rs = spex_type_row_size(act, n);
    double best = 1e30;
    for (int r = 0; r <= reps; r++) {
        const double t0 = genset_now_s();
        for (int i = 0; i < inner; i++)
            for (int j = 0; j < rows; j++) k->act_quant[act](X + (size_t)j * n, dst + (size_t)j * rs, n);
        const double dt = (genset_now_s() - t0) / inner;
        if (r > 0 && dt < best) best = dt;
    }
    return best;
}

/* The probe: the best over 1, 2 and 4 lockstep streams per thread (how many the memory
 * system rewards varies by machine: on the development machine one thread reads 16 GB/s
 * from one stream and 22 GB/s from four), so "% probe" compares against the best plain
 * streaming read found, not a weak one. */
static double time_probe(spex_pool *pool, const uint8_t *buf, size_t bytes, int reps, int inner) {
    probe_ctx p = {.buf = buf, .bytes = bytes};
    double best = 1e30;
    for (int streams = 1; streams <= 4; streams *= 2) {
        p.streams = streams;
        for (int r = 0; r <= reps; r++) {
            double t0 = genset_now_s();
            for (int k = 0; k < inner; k++) spex_pool_run(pool, probe_task, &p);
            double dt = (genset_now_s() - t0) / inner;
            if (r > 0 && dt < best) best = dt;
        }
    }
    return best;
}

static int bench_kernels(int argc, char **argv) {
    long max_threads = 2, size_mb = 0, reps = 5, passes = 3, n_cols = BENCH_N, mrows = 8;
    bool cached = false;
    const char *types_arg = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!cli_parse_int(a, i + 1 < argc ? argv[++i] : NULL, 1, 1024, &max_threads)) return 2;
        } else if (!strcmp(a, "--size")) {
            if (!cli_parse_int(a, i + 1 < argc ? argv[++i] : NULL, 1, 1 << 20, &size_mb)) return 2;
        } else if (!strcmp(a, "--reps")) {
            if (!cli_parse_int(a, i + 1 < argc ? argv[++i] : NULL, 1, 1000, &reps)) return 2;
        } else if (!strcmp(a, "--passes")) {
            if (!cli_parse_int(a, i + 1 < argc ? argv[++i] : NULL, 1, 100, &passes)) return 2;
        } else if (!strcmp(a, "--n")) {
            if (!cli_parse_int(a, i + 1 < argc ? argv[++i] : NULL, 256, 65536, &n_cols)) return 2;
            if (n_cols % 256) {
                fprintf(stderr, "error: --n must be a multiple of 256 (one K-quant super-block), got %ld\n", n_cols);
                return 2;
            }
        } else if (!strcmp(a, "--rows")) {
            if (!cli_parse_int(a, i + 1 < argc ? argv[++i] : NULL, 2, 16, &mrows)) return 2;
        } else if (!strcmp(a, "--cached")) {
            cached = true;
        } else if (!strcmp(a, "--types")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "error: --types needs a comma-separated list\n");
                return 2;
            }
            types_arg = argv[++i];
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: spex bench kernels [-t N] [--types q8_0,q4_K,...] [--size MiB] [--reps R] [--passes P]\n"
                   "                          [--n COLS] [--rows R] [--cached]\n"
                   "  matmul GB/s of weights read (1 and 8 activation rows, 1 and N threads) on a\n"
                   "  matrix larger than the last-level cache, next to a streaming-read probe.\n"
                   "  -t N       threads of the second column set (default 2)\n"
                   "  --types    weight types (default: every type with a kernel)\n"
                   "  --size     MiB of weights per type (default: 4 x LLC, at least 128)\n"
                   "  --reps     timed runs per measurement (default 5)\n"
                   "  --passes   sweeps over all types; each number is the best of passes x reps\n"
                   "             runs, spread over the whole run (default 3)\n"
                   "  --n        columns of the matrix, a multiple of 256 (default 4096; the\n"
                   "             Qwen3-0.6B shape's matrices have 1024, its down projection 3072)\n"
                   "  --rows R   activation rows of the second column (2-16, default 8: verify's\n"
                   "             block; 4-6 is what a draft cut often leaves)\n"
                   "  --cached   a 512 KiB matrix instead (stays in L2): the kernels' compute\n"
                   "             ceiling, where the default measures them against DRAM; with\n"
                   "             AVX-512 VNNI also the int8 multiply-add ceiling of the threads and\n"
                   "             the integer types' multi-row rate as a share of it, with and\n"
                   "             (1 thread) without the call's activation quantization\n");
            return 0;
        } else {
            fprintf(stderr, "error: unknown flag '%s' (see spex bench kernels --help)\n", a);
            return 2;
        }
    }

    const int64_t N = n_cols;
    const spex_matmul_kernels *k = spex_matmul_kernels_get();
    static const spex_type all[] = {SPEX_TYPE_F32,  SPEX_TYPE_F16,  SPEX_TYPE_BF16, SPEX_TYPE_Q8_0,
                                    SPEX_TYPE_Q4_0, SPEX_TYPE_Q4_1, SPEX_TYPE_Q5_0, SPEX_TYPE_Q5_1,
                                    SPEX_TYPE_Q4_K, SPEX_TYPE_Q5_K, SPEX_TYPE_Q6_K};
    spex_type types[MAX_TYPES];
    int n_types = 0;
    if (types_arg) {
        char list[256];
        snprintf(list, sizeof list, "%s", types_arg);
        for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
            spex_type t;
            if (!spex_type_from_name(tok, &t) || spex_matmul_act_type(t) == SPEX_TYPE_COUNT) {
                fprintf(stderr, "error: --types: '%s' is not a weight type with a matmul\n", tok);
                return 2;
            }
            if (n_types < MAX_TYPES) types[n_types++] = t;
        }
    } else {
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) types[n_types++] = all[i];
    }
    /* A type the loader repacks into the R16 layout (cpu/matmul.h) gets a second row, "/r16",
     * measured on the repacked copy of the same matrix: what a loaded model runs. */
    bool is_r16[MAX_TYPES] = {false};
    for (int it = n_types - 1; it >= 0; it--) {
        if (!k->r16_fast[types[it]] || n_types == MAX_TYPES) continue;
        memmove(&types[it + 2], &types[it + 1], sizeof types[0] * (size_t)(n_types - it - 1));
        memmove(&is_r16[it + 2], &is_r16[it + 1], sizeof is_r16[0] * (size_t)(n_types - it - 1));
        types[it + 1] = types[it];
        is_r16[it + 1] = true;
        n_types++;
    }

    const size_t llc = llc_bytes();
    size_t bytes = size_mb ? (size_t)size_mb << 20 : 4 * llc;
    if (!size_mb && bytes < ((size_t)128 << 20)) bytes = (size_t)128 << 20;
    if (cached) bytes = (size_t)512 << 10;
    const int inner = cached ? 64 : 1; /* cached runs are short: repeat them */
    for (int it = 0; it < n_types; it++)
        if (bytes / spex_type_row_size(types[it], N) < 16) { /* one block of 16 rows at least */
            fprintf(stderr, "error: --n %lld: 16 rows of %s take more than the %zu KiB matrix (lower --n or raise --size)\n",
                    (long long)N, spex_type_get_info((int)types[it])->name, bytes >> 10);
            return 2;
        }
    uint8_t *buf = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    uint8_t *buf16 = NULL; /* the R16 copy, for the /r16 rows */
    for (int it = 0; it < n_types; it++)
        if (is_r16[it] && !buf16) buf16 = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    float *X = malloc((size_t)mrows * N * sizeof(float));
    size_t ws_bytes = 1, max_out = 1;
    for (int it = 0; it < n_types; it++) {
        size_t s = spex_matmul_ws_size(types[it], N, mrows);
        if (s > ws_bytes) ws_bytes = s;
        if (bytes / spex_type_row_size(types[it], N) > max_out) max_out = bytes / spex_type_row_size(types[it], N);
    }
    float *Y = malloc((size_t)mrows * max_out * sizeof(float));
    void *ws = malloc(ws_bytes);
    bool need16 = false;
    for (int it = 0; it < n_types; it++) need16 |= is_r16[it];
    if (!buf || !X || !Y || !ws || (need16 && !buf16)) {
        fprintf(stderr, "error: cannot allocate %zu MiB for the weight matrix\n", bytes >> 20);
        return 1;
    }
    for (int64_t i = 0; i < mrows * N; i++) X[i] = (float)((i * 7919) % 2001 - 1000) / 1000.0f;

    int thr[2] = {1, (int)max_threads};
    const int n_thr = max_threads > 1 ? 2 : 1;
    spex_pool *pools[2] = {NULL, NULL};
    for (int p = 0; p < n_thr; p++) {
        spex_error err = {0};
        if (spex_pool_create(thr[p], &pools[p], &err) != SPEX_OK) {
            fprintf(stderr, "error: %s\n", err.msg);
            return 1;
        }
    }

    const spex_cpu_features *f = spex_cpu_get_features();
    const spex_isa isa = spex_cpu_isa();
    /* the AMX tiles serve only calls of 9+ (Q6_K: 12+) rows: the second column with --rows 9 and more */
    printf("spex bench kernels: isa %s%s%s, LLC %zu MiB, %zu KiB of weights per type (n = %lld)%s, best of %ld x %ld runs\n",
           spex_isa_name(isa),
           isa == SPEX_ISA_AVX512 && f->avx512vnni ? " (vnni)" : isa == SPEX_ISA_AVX2 && f->avxvnni ? " (avx-vnni)" : "",
           cli_amx_on() ? " (amx-int8 tiles for 9+ rows)" : "", llc >> 20, bytes >> 10,
           (long long)N, cached ? ", cache-resident" : "", passes, reps);
    printf("GB/s = weight bytes / time; probe = streaming read of the same buffer, same threads, just before\n");
    printf("(best of 1, 2, 4 streams per thread); %ld-row/1-row = time of %ld rows / time of 1 row\n\n", mrows, mrows);
    char mcol[16], mratio[16];
    snprintf(mcol, sizeof mcol, "%ld-row GB/s", mrows);
    snprintf(mratio, sizeof mratio, "%ld-row/1-row", mrows);
    printf("%-6s %4s | %10s | %10s %7s | %10s %7s | %11s\n", "type", "thr", "probe GB/s", "1-row GB/s", "%probe", mcol,
           "%probe", mratio);
    printf("-------------+------------+--------------------+--------------------+------------\n");
    const double t_start = genset_now_s();
    /* Passes sweep all types in turn and each cell keeps its best: a burst of other load on
     * a shared machine then spoils one pass of a row, not the row. */
    static result res[MAX_TYPES][2];
    static int state[MAX_TYPES]; /* 0 not measured yet, 1 measured, 2 no kernel, 3 no quantizer */
    memset(res, 0, sizeof res);
    memset(state, 0, sizeof state);
    for (int pass = 0; pass < passes; pass++) {
        for (int it = 0; it < n_types; it++) {
            const spex_type t = types[it];
            if (state[it] >= 2) continue;
            if (!k->dot[t]) {
                state[it] = 2;
                continue;
            }
            const size_t wrow = spex_type_row_size(t, N);
            const int64_t n_out = (int64_t)(bytes / wrow) / 16 * 16;
            if (!fill_weights(t, buf, n_out, N, wrow)) {
                state[it] = 3;
                continue;
            }
            if (is_r16[it]) spex_r16_pack(t, buf, buf16, n_out, N);
            state[it] = 1;
            const double wbytes = (double)n_out * (double)wrow;
            for (int p = 0; p < n_thr; p++) {
                result *r = &res[it][p];
                r->wbytes = wbytes;
                double v = wbytes / time_probe(pools[p], buf, (size_t)wbytes, (int)reps, inner) / 1e9;
                if (v > r->probe) r->probe = v;
                spex_matmul_args a = {.wtype = t, .W = is_r16[it] ? buf16 : buf, .n_out = n_out, .n = N,
                                      .X = X, .ldx = N, .n_rows = 1, .Y = Y, .ldy = n_out, .ws = ws,
                                      .w_r16 = is_r16[it]};
                v = wbytes / time_matmul(pools[p], &a, (int)reps, inner) / 1e9;
                if (v > r->mv) r->mv = v;
                a.n_rows = mrows;
                v = wbytes / time_matmul(pools[p], &a, (int)reps, inner) / 1e9;
                if (v > r->mmr) r->mmr = v;
            }
        }
    }
    char names[MAX_TYPES][16];
    for (int it = 0; it < n_types; it++)
        snprintf(names[it], sizeof names[it], "%s%s", spex_type_get_info((int)types[it])->name, is_r16[it] ? "/r16" : "");
    for (int it = 0; it < n_types; it++) {
        const char *name = names[it];
        if (state[it] == 2) printf("%-6s  (no kernel in this build)\n", name);
        if (state[it] == 3) printf("%-6s  (no reference quantizer)\n", name);
        if (state[it] != 1) continue;
        for (int p = 0; p < n_thr; p++) {
            const result *r = &res[it][p];
            printf("%-8s %2d | %10.1f | %10.1f %6.1f%% | %10.1f %6.1f%% | %10.2fx\n", name, thr[p], r->probe, r->mv,
                   100 * r->mv / r->probe, r->mmr, 100 * r->mmr / r->probe, r->mv / r->mmr);
        }
    }
    /* --cached: the multi-row rows of the integer types against the int8 multiply-add ceiling
     * of the same threads, from registers and with the kernels' broadcast operand. */
    double peak[2][2] = {{0, 0}, {0, 0}};
    if (cached)
        for (int p = 0; p < n_thr; p++)
            for (int bc = 0; bc < 2; bc++)
                for (int pass = 0; pass < passes; pass++) {
                    const double v = time_peak(pools[p], bc, (int)reps);
                    if (v > peak[p][bc]) peak[p][bc] = v;
                }
    if (peak[0][0] > 0) {
        printf("\nint8 multiply-add ceiling (vpdpbusd on 512 bits, independent sums), G/s: ");
        for (int p = 0; p < n_thr; p++)
            printf("%s%d thread(s) %.1f from registers, %.1f with a broadcast operand", p ? "; " : "", thr[p], peak[p][0],
                   peak[p][1]);
        printf("\n%ld-row G multiply-adds/s (%% of the register ceiling, of the broadcast one); each call also\n"
               "quantizes its %ld activation rows, so the last column is the 1-thread rate without that time\n"
               "(measured alone, on one thread; it grows with n while the matrix stays 512 KiB):\n",
               mrows, mrows);
        size_t aq_row = 0; /* the largest activation row any listed type quantizes into */
        for (int it = 0; it < n_types; it++) {
            const size_t rs = spex_type_row_size(spex_matmul_act_type(types[it]), N);
            aq_row = rs > aq_row ? rs : aq_row;
        }
        uint8_t *aq = malloc((size_t)mrows * aq_row);
        for (int it = 0; it < n_types && aq; it++) {
            if (state[it] != 1 || spex_matmul_act_type(types[it]) == SPEX_TYPE_F32) continue;
            printf("  %-8s", names[it]);
            const double wrow = (double)spex_type_row_size(types[it], N);
            for (int p = 0; p < n_thr; p++) {
                const double g = res[it][p].mmr * (double)mrows * N / wrow;
                printf("  %d thr %7.1f (%4.1f%%, %4.1f%%)", thr[p], g, 100 * g / peak[p][0], 100 * g / peak[p][1]);
            }
            const double t_call = res[it][0].wbytes / (res[it][0].mmr * 1e9); /* one multi-row call, 1 thread */
            const double t_aq = time_act_quant(k, types[it], X, N, (int)mrows, aq, (int)reps, inner);
            if (t_aq < t_call) {
                const double g = res[it][0].mmr * (double)mrows * N / wrow * t_call / (t_call - t_aq);
                printf("  | quantize %.1f us (%.0f%%), tiles %7.1f (%4.1f%%, %4.1f%%)", t_aq * 1e6, 100 * t_aq / t_call, g,
                       100 * g / peak[0][0], 100 * g / peak[0][1]);
            }
            printf("\n");
        }
        free(aq);
    }
    /* The targets, also against the best probe of the whole run (per-row probes
     * drift with other load; the run's best is the conservative reference). */
    double best_probe[2] = {0, 0};
    for (int it = 0; it < n_types; it++)
        for (int p = 0; p < n_thr; p++)
            if (state[it] == 1 && res[it][p].probe > best_probe[p]) best_probe[p] = res[it][p].probe;
    const int tp = n_thr - 1; /* the N-thread column */
    printf("\ntargets with %d thread(s); best probe of the run: %.1f GB/s\n", thr[tp], best_probe[tp]);
    for (int it = 0; it < n_types; it++) {
        if (state[it] != 1 || (types[it] != SPEX_TYPE_Q8_0 && types[it] != SPEX_TYPE_Q4_K)) continue;
        const result *r = &res[it][tp];
        printf("  %-8s 1-row >= 85%% of probe: %.1f%% of its row's probe, %.1f%% of the run's best\n", names[it],
               100 * r->mv / r->probe, 100 * r->mv / best_probe[tp]);
    }
    if (mrows == 8) { /* the second target is about 8 rows */
        printf("  8-row <= 2x 1-row time: met by");
        int missed = 0;
        for (int it = 0; it < n_types; it++)
            if (state[it] == 1 && res[it][tp].mv / res[it][tp].mmr <= 2.0) printf(" %s", names[it]);
        for (int it = 0; it < n_types; it++) missed += state[it] == 1 && res[it][tp].mv / res[it][tp].mmr > 2.0;
        if (missed) {
            printf("; not by");
            for (int it = 0; it < n_types; it++)
                if (state[it] == 1 && res[it][tp].mv / res[it][tp].mmr > 2.0) printf(" %s", names[it]);
        }
        printf("\n");
    }
    printf("\n(%.1f s)\n", genset_now_s() - t_start);
    for (int p = 0; p < n_thr; p++) spex_pool_free(pools[p]);
    free(buf);
    free(buf16);
    free(X);
    free(Y);
    free(ws);
    return 0;
}

int cmd_bench(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "kernels")) return bench_kernels(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "model")) return bench_model(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "spec")) return bench_spec(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "attn")) return bench_attn(argc - 1, argv + 1);
    fprintf(stderr, "usage: spex bench kernels [-t N] [--types list] [--size MiB] [--reps R] [--passes P] [--n COLS] [--cached]\n"
                    "       spex bench model -m FILE [-t N] [--pp 64,512] [--tg 32] [--reps R]\n"
                    "       spex bench spec [-m TARGET] [-md DRAFTER ...] [--mtp] [--prompts FILE] [-n N] [-t N] ...\n"
                    "       spex bench attn [--nq 1,2,4,8,16] [--nkv 128,512,2048] [--heads 16/8] [--hd 128] ...\n");
    return 2;
}
