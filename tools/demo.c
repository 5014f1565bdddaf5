/*
 * demo.c — `spex demo`: the README's main job on the default models (models/), at their own
 * size and at realistic compute.
 *
 * What it is: runs a set of chat problems (JSON lines with "user" and optional "system") with
 * the target alone and with the DFlash drafter, at T = 0 and at T = 1 / top-p 0.95 / top-k 20
 * (min-p off), and prints one table row per (method, temperature): decode tokens per second,
 * the speedup over the target alone at the same temperature, the mean acceptance length, and
 * how many generations ended on an end-of-generation token ("normal stops") rather than on
 * the token cap. At T = 0 it also checks that the speculative texts equal the target-only
 * texts token for token and says so. Under each table a line of context: the target's shape
 * and weights, the threads, the machine's streaming-read GB/s (a probe right before and after
 * the target-alone run) and the share of it that run's weight reads reached.
 *
 * The first table is the pair as given. When its target is smaller than the realistic shape
 * (Qwen3-0.6B's trunk, docs/inflate.md), a second table runs the same problems on the pair
 * inflated to that shape (tools/demo_real.c: inflated once, cached in the build folder by
 * content), which computes the same logits and drafts at ~40x the work per token: the tiny
 * pair's step is dominated by fixed costs, the inflated one by its weights, as a real model's.
 * `--compare-ar FILE` adds another engine's autoregressive figure beside it (tools/compare.h).
 *
 * What it is not: a benchmark with repetitions and error bars (that is `spex bench`); each row
 * is one run, and the numbers are those of this machine at this moment. Both methods run
 * through spex_spec (the target alone is spex_spec without a draft context: one verify row per
 * step), so they share every per-step cost except the drafting. Decode time excludes each
 * problem's prompt (prefill). The prompt format and the generation loop are tools/genset.c's.
 */
#include "spex.h"
#include "gguf/api.h"
#include "quant/api.h"
#include "model/api.h"
#include "cli.h"
#include "compare.h"
#include "demo_real.h"
#include "genset.h"
#include "probe.h"
#include "spec/api.h"
#include "tensor/api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEMO_MAX_PROBLEMS 64
#define DEMO_MAX_GEN 512
#define DEMO_PROBE_MIN (256u << 20) /* a probe buffer well past any last-level cache */

typedef struct demo_env {
    const spex_tokenizer *tok;
    spex_spec *spec;
    spex_chat_template tmpl;
    int n_predict;
} demo_env;

/* What one table measured. */
typedef struct demo_result {
    genset_row rows[4];      /* [temp][method]: target alone, DFlash */
    int identical, n_probs;
    double read_gbs;         /* the probe's streaming read, mean of before and after */
    double ar_gbs;           /* the target-alone T = 0 run's weight reads            */
} demo_result;

static double row_tps(const genset_row *w) { return w->t_decode > 0 ? (double)w->n_gen / w->t_decode : 0; }

static double row_acceptance(const genset_row *w) {
    return w->steps ? 1.0 + (double)w->accepted / (double)w->steps : 0;
}

/* One generation (prompt rendering and the loop: tools/genset.c); out gets the tokens (at
 * most n_predict), returns the count or -1. */
static int generate(demo_env *env, const genset_prompt *p, spex_sampler *smp, int32_t *out, genset_row *row) {
    int32_t ids[2048];
    int np = genset_prompt_ids(env->tok, env->tmpl, p, ids, 2048);
    if (np <= 0) return -1;
    return genset_generate(env->spec, env->tok, ids, np, env->n_predict, smp, out, row, NULL);
}

/* The type most of the 2-D weights' bytes are in: the file's quantization as a table names it. */
static const char *main_type(const spex_gguf *g) {
    uint64_t bytes[SPEX_TYPE_COUNT] = {0};
    for (int64_t i = 0; i < spex_gguf_n_tensors(g); i++) {
        const spex_tensor_info *ti = spex_gguf_tensor(g, i);
        if (ti->n_dims == 2 && (int)ti->type < SPEX_TYPE_COUNT) bytes[ti->type] += ti->nbytes;
    }
    int best = 0;
    for (int t = 1; t < SPEX_TYPE_COUNT; t++)
        if (bytes[t] > bytes[best]) best = t;
    const spex_type_info *ti = bytes[best] ? spex_type_get_info(best) : NULL;
    return ti ? ti->name : "?";
}

/* Progress on stderr: a line per problem on a terminal (overwritten), a line per run else. */
static void progress(const char *label, int ti, int meth, int i, int n, double t0) {
    static const char *what[2] = {"target alone", "with the drafter"};
    bool tty = isatty(2);
    if (tty && i < n) fprintf(stderr, "\r  %s: T = %d, %s: problem %d/%d ", label, ti, what[meth], i + 1, n);
    else if (i == n) fprintf(stderr, "%s  %s: T = %d, %s: %d problems in %.1f s\n", tty ? "\r" : "", label, ti, what[meth], n,
                             genset_now_s() - t0);
    fflush(stderr);
}

/* Loads the pair, runs every problem by both methods at both temperatures, prints the table
 * and its context lines. 0, or 1 after printing an error. */
static int run_table(const char *label, const char *tpath, const char *dpath, genset_prompt *probs, int n_probs,
                     long n_predict, long n_threads, bool draft_cut, demo_result *res) {
    int rc = 1;
    spex_error e = {0};
    spex_model *m = NULL;
    spex_tokenizer *tok = NULL;
    spex_drafter *d = NULL;
    spex_session *ses = NULL, *ses_plain = NULL;
    spex_sampler *smp[2] = {NULL, NULL};
    probe_buf probe = {0};
    static int32_t ref[DEMO_MAX_PROBLEMS][DEMO_MAX_GEN], got[DEMO_MAX_GEN];
    int ref_n[DEMO_MAX_PROBLEMS];
    memset(res, 0, sizeof *res);
    res->n_probs = n_probs;

    if (spex_model_load(tpath, NULL, &m, &e) || spex_tokenizer_load_gguf(spex_model_gguf(m), &tok, &e) ||
        spex_drafter_load(dpath, m, NULL, &d, &e))
        goto fail;
    const spex_drafter_hparams *dh = spex_drafter_get_hparams(d);
    const spex_model_hparams *hp = spex_model_get_hparams(m);
    spex_chat_template tmpl = genset_template(m, tok);

    spex_session_params pp = spex_session_default_params();
    pp.type = SPEX_SPEC_DFLASH;
    pp.drafter = d;
    pp.n_ctx_per_seq = 2048 + DEMO_MAX_GEN + 64;
    pp.n_threads = (int32_t)n_threads;
    pp.draft_cut = draft_cut; /* on by default, as spex run and spex serve decode */
    pp.log = genset_quiet;
    if (spex_session_create(m, &pp, &ses, &e)) goto fail;
    spex_session_params pp0 = pp;   /* the target alone, on the same pool */
    pp0.type = SPEX_SPEC_NONE;
    pp0.drafter = NULL;
    pp0.pool = spex_context_pool(spex_session_context(ses));
    if (spex_session_create(m, &pp0, &ses_plain, &e)) goto fail;
    spex_spec *spec = spex_session_spec(ses), *plain = spex_session_spec(ses_plain);
    spex_context *ctx = spex_session_context(ses);

    spex_sampler_params sp0 = spex_sampler_default_params();
    sp0.temp = 0.0f;
    spex_sampler_params sp1 = spex_sampler_default_params();
    sp1.temp = 1.0f;
    sp1.top_p = 0.95f;
    sp1.top_k = 20;
    sp1.min_p = 0.0f;
    sp1.seed = 42;
    int32_t V = hp->n_vocab;
    if (spex_sampler_init(&sp0, V, &smp[0], &e) || spex_sampler_init(&sp1, V, &smp[1], &e)) goto fail;
    const uint64_t wbytes = probe_decode_bytes(m);
    if (!probe_init(&probe, spex_context_pool(ctx), wbytes > DEMO_PROBE_MIN ? wbytes : DEMO_PROBE_MIN, &e)) goto fail;

    const char *dq = main_type(spex_drafter_gguf(d));
    printf("%s: %d problems, up to %ld tokens each, %ld threads\n", label, n_probs, n_predict, n_threads);
    printf("target  %s\ndrafter %s (%s, block %d, %d layers)\n", tpath, dpath,
           dh->variant == SPEX_DFLASH2 ? "DFlash2" : "DFlash v1", dh->block_size, dh->n_layer);
    fflush(stdout);
    demo_env env = {.tok = tok, .tmpl = tmpl, .n_predict = (int)n_predict};
    /* Warm-up, not counted: the first passes over the mapped weights fault pages in. */
    for (int meth = 0; meth < 2; meth++) {
        genset_row scratch = {0};
        env.spec = meth ? spec : plain;
        if (generate(&env, &probs[0], smp[0], got, &scratch) < 0) goto done;
    }
    double before = 0, after = 0;
    for (int ti = 0; ti < 2; ti++) {
        for (int meth = 0; meth < 2; meth++) {
            env.spec = meth ? spec : plain;
            if (ti == 0 && meth == 0) before = probe_run(&probe, 3);
            double t0 = genset_now_s();
            for (int i = 0; i < n_probs; i++) {
                progress(label, ti, meth, i, n_probs, t0);
                /* The same seed per problem for both methods. */
                sp1.seed = 1000 + (uint64_t)i;
                if (ti == 1) {
                    spex_sampler_free(smp[1]);
                    smp[1] = NULL;
                    if (spex_sampler_init(&sp1, V, &smp[1], &e)) goto fail;
                }
                int n = generate(&env, &probs[i], smp[ti], meth ? got : ref[i], &res->rows[ti * 2 + meth]);
                if (n < 0) goto done;
                if (!meth) ref_n[i] = n;
                else if (ti == 0 && n == ref_n[i] && !memcmp(got, ref[i], sizeof(int32_t) * (size_t)n)) res->identical++;
            }
            progress(label, ti, meth, n_probs, n_probs, t0);
            if (ti == 0 && meth == 0) after = probe_run(&probe, 3);
        }
    }
    printf("\n| Method | Draft quant | Block | Temp | Decode TPS | Decode speedup | Acceptance (mean length) | Normal "
           "stops |\n");
    printf("| --- | --- | --- | --- | ---: | ---: | ---: | ---: |\n");
    for (int r = 0; r < 4; r++) {
        const genset_row *w = &res->rows[r];
        double tps = row_tps(w), tps0 = row_tps(&res->rows[r & ~1]);
        bool spec_row = r & 1;
        char block[16], acc[32];
        snprintf(block, sizeof block, spec_row ? "%d" : "-", dh->block_size);
        if (spec_row && w->steps) snprintf(acc, sizeof acc, "%.2f", row_acceptance(w));
        else snprintf(acc, sizeof acc, "-");
        printf("| %s | %s | %s | %s | %.1f | %.2fx | %s | %d/%d |\n", spec_row ? "DFlash2" : "target only",
               spec_row ? dq : "-", block, r < 2 ? "0" : "1", tps, tps0 > 0 ? tps / tps0 : 0, acc, w->normal_stops,
               n_probs);
    }
    printf("\ngreedy (T = 0) texts identical with and without the drafter: %d/%d\n", res->identical, n_probs);
    res->read_gbs = 0.5 * (probe_gbs(&probe, before) + probe_gbs(&probe, after));
    res->ar_gbs = (double)wbytes * row_tps(&res->rows[0]) * 1e-9;
    double share = res->read_gbs > 0 ? res->ar_gbs / res->read_gbs : 0;
    printf("context: %s E %d, %d layers, %d/%d heads of %d, FFN %d, %s, %.1f MiB of weights; %ld threads; streaming "
           "read %.1f GB/s; target-alone decode at T = 0 read %.1f GB/s of weights, %.0f %% of it%s\n\n",
           spex_arch_name(hp->arch), hp->n_embd, hp->n_layer, hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_ff,
           main_type(spex_model_gguf(m)), (double)spex_context_memory(ctx).weights / 1048576.0, n_threads,
           res->read_gbs, res->ar_gbs, 100.0 * share,
           share > 1.0 ? " (more than memory gives: the weights stay in the CPU caches, so fixed per-step costs set the "
                         "pace)"
                       : "");
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "error: %s\n", e.msg);
done:
    fflush(stdout);
    probe_free(&probe);
    spex_sampler_free(smp[0]);
    spex_sampler_free(smp[1]);
    spex_session_free(ses_plain);
    spex_session_free(ses);
    spex_drafter_free(d);
    spex_tokenizer_free(tok);
    spex_model_free(m);
    return rc;
}

/* The side-by-side of --compare-ar: the other engine's autoregressive figure beside spex's. */
static void print_compare(const compare_ar *c, const char *path, const demo_result *r, const char *which) {
    double ar = row_tps(&r->rows[0]), sp = row_tps(&r->rows[1]);
    printf("side by side at T = 0 (%s; the other figure from %s):\n\n", which, path);
    printf("| Engine | Method | Decode TPS | vs %s |\n| --- | --- | ---: | ---: |\n", c->name);
    printf("| %s | autoregressive | %.1f | 1.00x |\n", c->name, c->tps);
    printf("| spex | target only | %.1f | %.2fx |\n", ar, ar / c->tps);
    printf("| spex | DFlash2 | %.1f | %.2fx |\n\n", sp, sp / c->tps);
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: spex demo [-m TARGET] [-md DRAFTER] [-f PROBLEMS.jsonl] [-n N] [-t N] [--problems N]\n"
            "                 [--realistic | --no-realistic] [--cache DIR] [--real-shape E,L,H,HKV,HD,FF]\n"
            "                 [--real-type T] [--compare-ar FILE]\n"
            "\n"
            "Runs the problems (JSON lines with \"user\" and optional \"system\") with the target alone\n"
            "and with the drafter, at T = 0 and at T = 1 / top-p 0.95 / top-k 20, and prints the table.\n"
            "Then, when the target is smaller than the realistic shape, the same on the pair inflated to\n"
            "it (docs/inflate.md): made once and cached in --cache (default: the folder of this binary).\n"
            "  --problems N     the first N problems (all)          --real-shape  1024,28,16,8,128,3072\n"
            "  --real-type T    the inflated pair's type (q8_0)     --no-realistic  the first table only\n"
            "  --compare-ar F   another engine's autoregressive t/s beside spex's: llama-bench -o json\n"
            "                   (or jsonl) output, or text whose first number is the figure\n"
            "Defaults: models/target.gguf, models/drafter.gguf, models/demo.jsonl, -n 256, every CPU.\n");
}

int cmd_demo(int argc, char **argv) {
    const char *tpath = "models/target.gguf", *dpath = "models/drafter.gguf", *ppath = "models/demo.jsonl";
    const char *cache = NULL, *compare_path = NULL;
    long n_predict = 256, n_threads = 0, n_probs_max = DEMO_MAX_PROBLEMS;
    int realistic = -1;   /* -1: when the target is smaller than the shape */
    bool draft_cut = true;
    demo_real_params rp = demo_real_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--realistic") || !strcmp(a, "--no-realistic")) {
            realistic = !strcmp(a, "--realistic");
            continue;
        } else if (!v) {
            fprintf(stderr, "error: unknown or incomplete flag '%s' (see 'spex demo --help')\n", a);
            return 2;
        } else if (!strcmp(a, "-m")) {
            tpath = v;
        } else if (!strcmp(a, "-md")) {
            dpath = v;
        } else if (!strcmp(a, "-f")) {
            ppath = v;
        } else if (!strcmp(a, "--cache")) {
            cache = v;
        } else if (!strcmp(a, "--draft-cut")) {
            if (strcmp(v, "on") && strcmp(v, "off")) {
                fprintf(stderr, "error: --draft-cut '%s': on or off\n", v);
                return 2;
            }
            draft_cut = !strcmp(v, "on");
        } else if (!strcmp(a, "--compare-ar")) {
            compare_path = v;
        } else if (!strcmp(a, "--real-type")) {
            spex_ftype ft;
            if (!spex_ftype_from_name(v, &ft)) {
                fprintf(stderr, "error: --real-type '%s' is not a type spex quantizes to\n", v);
                return 2;
            }
            rp.type = v;
        } else if (!strcmp(a, "--real-shape")) {
            if (!demo_real_parse_shape(v, &rp)) return 2;
        } else if (!strcmp(a, "-n")) {
            if (!cli_parse_int(a, v, 1, DEMO_MAX_GEN, &n_predict)) return 2;
        } else if (!strcmp(a, "-t")) {
            if (!cli_parse_int(a, v, 0, 1024, &n_threads)) return 2;
        } else if (!strcmp(a, "--problems")) {
            if (!cli_parse_int(a, v, 1, DEMO_MAX_PROBLEMS, &n_probs_max)) return 2;
        } else {
            fprintf(stderr, "error: unknown flag '%s' (see 'spex demo --help')\n", a);
            return 2;
        }
        i++;
    }
    if (n_threads == 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = c > 0 ? c : 1;
    }
    compare_ar other;
    char msg[512];
    if (compare_path && !compare_ar_load(compare_path, &other, msg, sizeof msg)) {
        fprintf(stderr, "error: --compare-ar %s\n", msg);
        return 2;
    }
    genset_prompt probs[DEMO_MAX_PROBLEMS] = {0};
    int n_probs = genset_load(ppath, probs, DEMO_MAX_PROBLEMS);
    if (n_probs < 0) return 1;
    if (n_probs > n_probs_max) {
        genset_free(probs + n_probs_max, n_probs - (int)n_probs_max);
        n_probs = (int)n_probs_max;
    }
    rp.n_threads = (int)n_threads;

    demo_result tiny, real = {0};
    int rc = run_table("spex demo", tpath, dpath, probs, n_probs, n_predict, n_threads, draft_cut, &tiny);
    if (rc == 0 && realistic != 0) {
        demo_real_pair pair;
        int st = demo_real_prepare(tpath, dpath, cache, &rp, realistic == 1, &pair);
        if (st == DEMO_REAL_SKIP) {
            printf("(the target is not smaller than the realistic shape: no second table)\n\n");
            if (compare_path) print_compare(&other, compare_path, &tiny, "the pair as given");
        } else if (st != DEMO_REAL_OK) {
            fprintf(stderr, "error: no realistic-compute table (the table above stands): %s\n", pair.msg);
            rc = 1;
        } else {
            rc = run_table("spex demo at realistic compute", pair.target, pair.drafter, probs, n_probs, n_predict,
                           n_threads, draft_cut, &real);
            if (rc == 0)
                printf("acceptance at T = 0: %.2f here, %.2f on the pair as given. The drafts are the same function "
                       "(docs/inflate.md)%s\n\n",
                       row_acceptance(&real.rows[1]), row_acceptance(&tiny.rows[1]),
                       draft_cut ? "; the draft cut, which sets from each pair's measured step costs how many of them "
                                   "to verify, makes any difference (--draft-cut off: equal)"
                                 : ": with the draft cut off, the same accepted lengths");
            if (rc == 0 && compare_path) print_compare(&other, compare_path, &real, "the realistic-compute pair");
        }
    } else if (rc == 0 && compare_path) {
        print_compare(&other, compare_path, &tiny, "the pair as given");
    }
    if (rc == 0 && tiny.identical != n_probs) rc = 1;
    if (rc == 0 && realistic != 0 && real.n_probs && real.identical != n_probs) rc = 1;
    genset_free(probs, n_probs);
    return rc;
}
