/*
 * bench_model.c — `spex bench model`: prefill and decode throughput of a whole model, with
 * decode also as GB/s of weights read per token next to a streaming-read probe measured in
 * the same run on the same pool.
 *
 * What it is: a tool, not a test (it asserts nothing). Prefill ppN is one spex_forward of N
 * tokens of one sequence, logits for the last token only (as a prompt is processed); decode
 * tgN is N single-token forwards. Both start from an empty cache, or with --depth D after a
 * D-token context (prefilled once; each run truncates back to it, which moves no data), as
 * llama-bench's -d does: attention then also reads D rows of K and V per layer and token.
 * Each number is the best of --reps runs, after one warm-up run: other processes on a
 * shared machine only ever make a run slower. "Weights per token" counts every matrix the
 * decode step streams (all layer matrices and the LM head; of an untied embedding table only
 * the one row it reads).
 * The probe reads a 512 MiB buffer (larger than any last-level cache) with the kernels' load
 * width (spex_matmul_stream_probe), split over the same threads. Two readings: one pass (~15
 * ms) before every timed run, best of all ("probe, one pass": what the memory gives in a
 * short burst), and, before every decode run, as many passes as the run streams weight bytes
 * ("probe, sustained": the same bytes over the same time as a decode run). The decode is
 * compared with the sustained one, its own kind of load: on a shared host the best 15 ms
 * window read up to 60 % more than a stream of a few hundred ms (docs/performance.md,
 * "Machines and method"). Those are bests over the run, which on a host whose memory swings
 * between ~30 and ~60 GB/s within seconds may pair a decode of one moment with a probe of
 * another; so every decode run is also bracketed by a sustained probe just before and one just after
 * it, and the line under the table gives each run's GB/s against the mean of its own two
 * probes, and their median over the runs whose two probes agree within 10 % (the memory did
 * not move during them; over all runs when none did).
 * What it is not: a kernel benchmark (`spex bench kernels`) nor an end-to-end generation
 * benchmark (no sampling, no tokenizer).
 *
 * Targets: decode >= 85% of the probe; pp64 throughput >= 4x decode throughput
 * (the speculative verify regime). Results and commands: docs/performance.md.
 */
#include "spex.h"
#include "cpu/api.h"
#include "model/api.h"
#include "cli.h"
#include "genset.h"
#include "probe.h"
#include "spec/api.h"
#include "tensor/api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BM_MAX_PP 8
#define BM_PROBE_BYTES (512ull << 20)
#define BM_MAX_REPS 1000 /* --reps cap: the paired ratios are kept per run */

/* The depth-token context: tokens 0 .. depth-1 in forwards of at most nb. 0 or -1 on error. */
static int fill_depth(spex_context *ctx, spex_batch_token *toks, int nb, int depth, int32_t n_vocab) {
    spex_error err = {0};
    spex_kv_seq_clear(ctx, -1, NULL);
    for (int p0 = 0; p0 < depth; p0 += nb) {
        const int n = depth - p0 < nb ? depth - p0 : nb;
        for (int i = 0; i < n; i++)
            toks[i] = (spex_batch_token){.token = (int32_t)(((p0 + i) * 104729 + 7) % n_vocab), .pos = p0 + i,
                                         .seq = 0, .logits = i == n - 1};
        spex_batch b = {toks, n};
        if (spex_forward(ctx, &b, &err) != SPEX_OK) {
            fprintf(stderr, "error: %s\n", err.msg);
            return -1;
        }
    }
    return 0;
}

/* One ppN run: back to the depth, one forward of n tokens. Seconds, or < 0 on error. */
static double run_pp(spex_context *ctx, spex_batch_token *toks, int n, int depth, int32_t n_vocab) {
    spex_error err = {0};
    spex_kv_seq_truncate(ctx, 0, depth, NULL);
    for (int i = 0; i < n; i++)
        toks[i] = (spex_batch_token){.token = (int32_t)((i * 7919 + 13) % n_vocab), .pos = depth + i, .seq = 0,
                                     .logits = i == n - 1};
    spex_batch b = {toks, n};
    double t0 = genset_now_s();
    if (spex_forward(ctx, &b, &err) != SPEX_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        return -1;
    }
    return genset_now_s() - t0;
}

static double run_tg(spex_context *ctx, int n, int depth, int32_t n_vocab) {
    spex_error err = {0};
    spex_kv_seq_truncate(ctx, 0, depth, NULL);
    double t0 = genset_now_s();
    for (int i = 0; i < n; i++) {
        spex_batch_token t = {.token = (int32_t)((i * 7919 + 13) % n_vocab), .pos = depth + i, .seq = 0,
                              .logits = true};
        spex_batch b = {&t, 1};
        if (spex_forward(ctx, &b, &err) != SPEX_OK) {
            fprintf(stderr, "error: %s\n", err.msg);
            return -1;
        }
    }
    return genset_now_s() - t0;
}

static void bm_usage(FILE *f) {
    fprintf(f, "usage: spex bench model -m FILE [-t N] [--pp 64,512] [--tg 32] [--depth D] [-ctk T] [--reps R]\n"
               "                        [--no-repack]\n"
               "  prefill ppN (one forward of N tokens) and decode tgN (N one-token forwards), best of R;\n"
               "  --depth D: both after a D-token context (default 0: from an empty cache);\n"
               "  -ctk/-ctv T: the KV cache type, f16 (default), f32 or q8_0;\n"
               "  decode also as GB/s of weights per token next to a streaming-read probe on the same threads\n"
               "  (sustained: as many passes as a decode run streams weight bytes; and the best single pass),\n"
               "  and each decode run against sustained probes just before and after it (the median line);\n"
               "  --no-repack keeps every weight in the file's layout (no R16 copies at load)\n");
}

int bench_model(int argc, char **argv) {
    const char *path = NULL;
    long threads = 2, tg = 32, reps = 3, depth = 0, pp[BM_MAX_PP] = {64, 512};
    int n_pp = 2;
    spex_type kt = SPEX_TYPE_F16, vt = SPEX_TYPE_F16, kv = SPEX_TYPE_F16;
    bool has_kt = false, has_vt = false;
    spex_model_params mparams = spex_model_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bm_usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") && val) {
            path = argv[++i];
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!cli_parse_int(a, val, 1, 1024, &threads)) return 2;
            i++;
        } else if (!strcmp(a, "--tg")) {
            if (!cli_parse_int(a, val, 0, 1 << 16, &tg)) return 2;
            i++;
        } else if (!strcmp(a, "--depth") || !strcmp(a, "-d")) {
            if (!cli_parse_int(a, val, 0, 1 << 20, &depth)) return 2;
            i++;
        } else if (!strcmp(a, "-ctk") || !strcmp(a, "--cache-type-k")) {
            if (!cli_parse_kv_type(a, val, &kt)) return 2;
            has_kt = true, i++;
        } else if (!strcmp(a, "-ctv") || !strcmp(a, "--cache-type-v")) {
            if (!cli_parse_kv_type(a, val, &vt)) return 2;
            has_vt = true, i++;
        } else if (!strcmp(a, "--reps")) {
            if (!cli_parse_int(a, val, 1, BM_MAX_REPS, &reps)) return 2;
            i++;
        } else if (!strcmp(a, "--no-repack")) {
            mparams.no_repack = true;
        } else if (!strcmp(a, "--pp") && val) {
            if (!cli_parse_int_list("--pp", argv[++i], 1, 1 << 16, pp, BM_MAX_PP, &n_pp)) {
                fprintf(stderr, "error: --pp expects a list like 64,512\n");
                return 2;
            }
        } else {
            fprintf(stderr, "error: bench model: unknown or incomplete argument '%s'\n", a);
            bm_usage(stderr);
            return 2;
        }
    }
    if (!cli_kv_pair("bench model", has_kt, kt, has_vt, vt, &kv)) return 2;
    if (!path) {
        fprintf(stderr, "error: bench model needs a model (-m FILE)\n");
        bm_usage(stderr);
        return 2;
    }
    long max_pp = 1;
    for (int i = 0; i < n_pp; i++)
        if (pp[i] > max_pp) max_pp = pp[i];

    spex_error err = {0};
    spex_model *m = NULL;
    spex_pool *pool = NULL;
    spex_context *ctx = NULL;
    probe_buf probe = {0};
    double *paired = NULL; /* per decode run: its GB/s over its own probes' */
    bool *steady = NULL;   /* per decode run: its two probes agree within 10 % */
    spex_batch_token *toks = NULL;
    int rc = 1;
    if (spex_model_load(path, &mparams, &m, &err) != SPEX_OK) goto fail;
    if (spex_pool_create((int)threads, &pool, &err) != SPEX_OK) goto fail;
    spex_context_params cp = spex_context_default_params();
    long nb = depth < 512 ? depth : 512; /* the context is prefilled in forwards of up to 512 */
    if (nb < max_pp) nb = max_pp;
    cp.n_batch_max = (int32_t)nb;
    cp.n_outputs_max = 1;
    cp.kv_type = kv;
    cp.n_ctx_per_seq = (int32_t)(depth + (max_pp > tg ? max_pp : tg) + 1);
    cp.pool = pool;
    if (spex_context_init(m, &cp, &ctx, &err) != SPEX_OK) goto fail;
    if (!probe_init(&probe, pool, BM_PROBE_BYTES, &err)) goto fail;
    toks = malloc((size_t)nb * sizeof *toks);
    paired = malloc((size_t)reps * sizeof *paired);
    steady = malloc((size_t)reps * sizeof *steady);
    if (!toks || !paired || !steady) {
        spex_error_set(&err, SPEX_ERR_NOMEM, "bench model: out of memory");
        goto fail;
    }

    const spex_model_hparams *hp = spex_model_get_hparams(m);
    const uint64_t wbytes = probe_decode_bytes(m);
    printf("model: %s (%s, %d layers, E %d, V %d), %.1f MiB of weights per decode step\n", path,
           spex_arch_name(hp->arch), hp->n_layer, hp->n_embd, hp->n_vocab, (double)wbytes / 1048576.0);
    printf("threads: %ld, isa: %s%s, best of %ld reps (after one warm-up)\n", threads, spex_isa_name(spex_cpu_isa()),
           cli_amx_on() ? " + amx-int8" : "", reps);
    if (depth > 0) {
        const spex_memory_usage mu = spex_context_memory(ctx);
        const double kv_tok = (double)mu.kv / (double)cp.n_ctx_per_seq; /* K and V bytes per position */
        printf("depth: %ld tokens of context before each test (decode also reads %.1f MiB of %s K/V per token there)\n",
               depth, kv_tok * (double)depth / 1048576.0, spex_type_get_info(kv)->name);
        if (fill_depth(ctx, toks, (int)nb, (int)depth, hp->n_vocab) != 0) goto fail_quiet;
    }
    printf("\n");

    /* The probe runs once before every timed run (prefill and decode alike) and the best of
     * all is kept, so a busy moment cannot make it look slow next to a lucky decode run. */
    double probe_best = 1e30;
#define PROBE()                                \
    do {                                       \
        const double dt_ = probe_run(&probe, 1); \
        if (dt_ < probe_best) probe_best = dt_;  \
    } while (0)
    PROBE(); /* warm-up: pages of the buffer, workers */
    probe_best = 1e30;

    printf("| test | tokens | best ms | t/s | weights GB/s | %% probe (sustained) | %% probe (one pass) |\n");
    printf("|---|---|---|---|---|---|---|\n");
    double pp64_tps = 0, tg_tps = 0;
    for (int i = 0; i < n_pp; i++) {
        double best = 1e30;
        for (long r = 0; r <= reps; r++) {
            PROBE();
            double dt = run_pp(ctx, toks, (int)pp[i], (int)depth, hp->n_vocab);
            if (dt < 0) goto fail_quiet;
            if (r > 0 && dt < best) best = dt;
        }
        double tps = (double)pp[i] / best;
        if (pp[i] == 64) pp64_tps = tps;
        printf("| pp%ld | %ld | %.1f | %.1f | — | — | — |\n", pp[i], pp[i], best * 1e3, tps);
        fflush(stdout);
    }
    if (tg > 0) {
        double best = 1e30, sus_best = 1e30; /* sus_best: seconds per pass of the sustained probe */
        int sus_passes = (int)(((double)wbytes * (double)tg + BM_PROBE_BYTES / 2) / BM_PROBE_BYTES);
        if (sus_passes < 1) sus_passes = 1;
        double after = 0; /* seconds per pass of the previous run's closing probe */
        for (long r = 0; r <= reps; r++) {
            PROBE();
            /* the sustained probe before this run: the previous run's closing one when it
             * was just taken (nothing ran in between but the one-pass probe) */
            const double before = r > 0 && after > 0 ? after : probe_run(&probe, sus_passes);
            if (r > 0 && before < sus_best) sus_best = before;
            double dt = run_tg(ctx, (int)tg, (int)depth, hp->n_vocab);
            if (dt < 0) goto fail_quiet;
            if (r > 0 && dt < best) best = dt;
            after = probe_run(&probe, sus_passes);
            if (r > 0) /* this run's GB/s against the mean rate of its own two probes */
                paired[r - 1] = probe_paired_share(&probe, (double)wbytes * (double)tg / dt * 1e-9, before, after,
                                                   &steady[r - 1]);
        }
        tg_tps = (double)tg / best;
        const double sus_gbs = probe_gbs(&probe, sus_best);
        double gbs = (double)wbytes * tg_tps * 1e-9;
        printf("| tg%ld | %ld | %.1f | %.2f | %.2f | %.0f%% | %.0f%% |\n", tg, tg, best * 1e3, tg_tps, gbs,
               100.0 * gbs / sus_gbs, 100.0 * gbs / probe_gbs(&probe, probe_best));
        printf("| probe, sustained (%d passes) | — | %.1f | — | %.2f | 100%% | — |\n", sus_passes,
               sus_best * sus_passes * 1e3, sus_gbs);
    }
    printf("| probe, one pass | — | %.1f | — | %.2f | — | 100%% |\n", probe_best * 1e3, probe_gbs(&probe, probe_best));
    if (tg > 0) {
        double sel[BM_MAX_REPS];
        int n_sel;
        bool all;
        const double med = probe_steady_median(paired, steady, (int)reps, sel, &n_sel, &all);
        printf("\ndecode paired with its own probes (each run against the mean of the sustained probes just before "
               "and after it; *: they differ by > 10 %%):");
        for (long r = 0; r < reps; r++) printf(" %.0f%%%s", 100.0 * paired[r], steady[r] ? "" : "*");
        printf("; median %.0f%% over %s%d run%s (target >= 85%%)\n", 100.0 * med, all ? "all " : "the steady ", n_sel,
               n_sel == 1 ? "" : "s");
    }
    if (pp64_tps > 0 && tg_tps > 0) printf("\npp64 / decode throughput: %.2fx (target >= 4x)\n", pp64_tps / tg_tps);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "error: %s\n", err.msg);
fail_quiet:
    rc = 1;
done:
    free(toks);
    probe_free(&probe);
    free(paired);
    free(steady);
    spex_context_free(ctx);
    spex_pool_free(pool);
    spex_model_free(m);
    return rc;
}
