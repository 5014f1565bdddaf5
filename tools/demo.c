/*
 * demo.c — `spex demo`: the README's main job on the default models (models/).
 *
 * What it is: runs a set of chat problems (JSON lines with "user" and optional "system") with
 * the target alone and with the DFlash drafter, at T = 0 and at T = 1 / top-p 0.95 / top-k 20
 * (min-p off), and prints one table row per (method, temperature): decode tokens per second,
 * the speedup over the target alone at the same temperature, the mean acceptance length, and
 * how many generations ended on an end-of-generation token ("normal stops") rather than on
 * the token cap. At T = 0 it also checks that the speculative texts equal the target-only
 * texts token for token and says so. What it is not: a benchmark with repetitions and error
 * bars (that is `spex bench`); each row is one run, and the numbers are those of this machine
 * at this moment.
 *
 * Both methods run through spex_spec (the target alone is spex_spec without a draft context:
 * one verify row per step, i.e. plain decoding), so they share every per-step cost except the
 * drafting itself. Decode time excludes the prompt (prefill) of each problem. The prompt
 * format and the generation loop live in tools/genset.c (shared with `spex bench spec`).
 */
#include "spex.h"
#include "cli.h"
#include "genset.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEMO_MAX_PROBLEMS 64
#define DEMO_MAX_GEN 512

typedef struct demo_env {
    const spex_tokenizer *tok;
    spex_spec *spec;
    spex_chat_template tmpl;
    int n_predict;
} demo_env;

/* One generation (prompt rendering and the loop: tools/genset.c); out gets the tokens (at
 * most n_predict), returns the count or -1. */
static int generate(demo_env *env, const genset_prompt *p, spex_sampler *smp, int32_t *out, genset_row *row) {
    int32_t ids[2048];
    int np = genset_prompt_ids(env->tok, env->tmpl, p, ids, 2048);
    if (np <= 0) return -1;
    return genset_generate(env->spec, env->tok, ids, np, env->n_predict, smp, out, row, NULL);
}

static void usage(FILE *f) {
    fprintf(f, "usage: spex demo [-m TARGET] [-md DRAFTER] [-f PROBLEMS.jsonl] [-n N] [-t N]\n"
               "\n"
               "Runs the problems (JSON lines with \"user\" and optional \"system\") with the target alone\n"
               "and with the drafter, at T = 0 and at T = 1 / top-p 0.95 / top-k 20, and prints the table.\n"
               "Defaults: models/target.gguf, models/drafter.gguf, models/demo.jsonl, -n 256, every CPU.\n");
}

int cmd_demo(int argc, char **argv) {
    const char *tpath = "models/target.gguf", *dpath = "models/drafter.gguf", *ppath = "models/demo.jsonl";
    long n_predict = 256, n_threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "-md") || !strcmp(a, "-f")) && v) {
            if (!strcmp(a, "-m")) tpath = v;
            else if (!strcmp(a, "-md")) dpath = v;
            else ppath = v;
            i++;
        } else if (!strcmp(a, "-n")) {
            if (!cli_parse_int(a, v, 1, DEMO_MAX_GEN, &n_predict)) return 2;
            i++;
        } else if (!strcmp(a, "-t")) {
            if (!cli_parse_int(a, v, 0, 1024, &n_threads)) return 2;
            i++;
        } else {
            fprintf(stderr, "error: unknown or incomplete flag '%s' (see 'spex demo --help')\n", a);
            return 2;
        }
    }
    if (n_threads == 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = c > 0 ? c : 1;
    }
    genset_prompt probs[DEMO_MAX_PROBLEMS] = {0};
    int n_probs = genset_load(ppath, probs, DEMO_MAX_PROBLEMS);
    if (n_probs < 0) return 1;

    int rc = 1;
    spex_error e = {0};
    spex_model *m = NULL;
    spex_tokenizer *tok = NULL;
    spex_drafter *d = NULL;
    spex_context *ctx = NULL, *ctx_plain = NULL;
    spex_draft_context *dc = NULL;
    spex_spec *spec = NULL, *plain = NULL;
    spex_sampler *smp[2] = {NULL, NULL};
    static int32_t ref[DEMO_MAX_PROBLEMS][DEMO_MAX_GEN], got[DEMO_MAX_GEN];
    int ref_n[DEMO_MAX_PROBLEMS];

    if (spex_model_load(tpath, NULL, &m, &e) || spex_tokenizer_load_gguf(spex_model_gguf(m), &tok, &e) ||
        spex_drafter_load(dpath, m, NULL, &d, &e)) {
        fprintf(stderr, "error: %s\n", e.msg);
        goto done;
    }
    const spex_drafter_hparams *dh = spex_drafter_get_hparams(d);
    spex_chat_template tmpl = genset_template(m, tok);

    spex_context_params cp = spex_context_default_params();
    cp.n_ctx_per_seq = 2048 + DEMO_MAX_GEN + 64;
    cp.n_batch_max = 512;
    cp.n_outputs_max = dh->block_size;
    cp.n_threads = (int32_t)n_threads;
    cp.tap_layers = dh->target_layers;
    cp.n_taps = dh->n_taps;
    if (spex_context_init(m, &cp, &ctx, &e)) goto fail;
    spex_context_params cp0 = cp;
    cp0.tap_layers = NULL;
    cp0.n_taps = 0;
    cp0.pool = spex_context_pool(ctx);
    if (spex_context_init(m, &cp0, &ctx_plain, &e)) goto fail;
    spex_draft_context_params dcp = spex_draft_context_default_params();
    dcp.n_ctx_per_seq = cp.n_ctx_per_seq;
    dcp.pool = spex_context_pool(ctx);
    if (spex_draft_context_init(d, &dcp, &dc, &e)) goto fail;
    spex_spec_params spp = spex_spec_default_params();
    spp.draft_cut = true; /* as spex run and spex serve decode by default */
    spp.log = genset_quiet;
    if (spex_spec_init(ctx, dc, &spp, &spec, &e) || spex_spec_init(ctx_plain, NULL, &spp, &plain, &e)) goto fail;

    spex_sampler_params sp0 = spex_sampler_default_params();
    sp0.temp = 0.0f;
    spex_sampler_params sp1 = spex_sampler_default_params();
    sp1.temp = 1.0f;
    sp1.top_p = 0.95f;
    sp1.top_k = 20;
    sp1.min_p = 0.0f;
    sp1.seed = 42;
    int32_t V = spex_model_get_hparams(m)->n_vocab;
    if (spex_sampler_init(&sp0, V, &smp[0], &e) || spex_sampler_init(&sp1, V, &smp[1], &e)) goto fail;

    const char *dq = "?";
    const spex_gguf *dg = spex_drafter_gguf(d);
    for (int64_t i = 0; i < spex_gguf_n_tensors(dg); i++) {
        const spex_tensor_info *ti = spex_gguf_tensor(dg, i);
        if (ti->n_dims == 2) {
            dq = spex_type_get_info(ti->type)->name;
            break;
        }
    }

    printf("spex demo: %d problems, up to %ld tokens each, %ld threads\n", n_probs, n_predict, n_threads);
    printf("target  %s\ndrafter %s (%s, block %d, %d layers)\n\n", tpath, dpath,
           dh->variant == SPEX_DFLASH2 ? "DFlash2" : "DFlash v1", dh->block_size, dh->n_layer);
    genset_row rows[4] = {0};
    demo_env env = {.tok = tok, .tmpl = tmpl, .n_predict = (int)n_predict};
    int identical = 0;
    /* Warm-up, not counted: the first passes over the mapped weights fault pages in. */
    for (int meth = 0; meth < 2; meth++) {
        genset_row scratch = {0};
        env.spec = meth ? spec : plain;
        if (generate(&env, &probs[0], smp[0], got, &scratch) < 0) goto done;
    }
    for (int ti = 0; ti < 2; ti++) {
        for (int meth = 0; meth < 2; meth++) {
            env.spec = meth ? spec : plain;
            for (int i = 0; i < n_probs; i++) {
                /* The same seed per problem for both methods. */
                sp1.seed = 1000 + (uint64_t)i;
                if (ti == 1) {
                    spex_sampler_free(smp[1]);
                    smp[1] = NULL;
                    if (spex_sampler_init(&sp1, V, &smp[1], &e)) goto fail;
                }
                int n = generate(&env, &probs[i], smp[ti], meth ? got : ref[i], &rows[ti * 2 + meth]);
                if (n < 0) goto done;
                if (!meth) ref_n[i] = n;
                else if (ti == 0 && n == ref_n[i] && !memcmp(got, ref[i], sizeof(int32_t) * (size_t)n)) identical++;
            }
        }
    }
    printf("| Method | Draft quant | Block | Temp | Decode TPS | Decode speedup | Acceptance (mean length) | Normal "
           "stops |\n");
    printf("| --- | --- | --- | --- | ---: | ---: | ---: | ---: |\n");
    for (int r = 0; r < 4; r++) {
        const genset_row *w = &rows[r];
        const genset_row *base = &rows[r & ~1];
        double tps = w->t_decode > 0 ? (double)w->n_gen / w->t_decode : 0;
        double tps0 = base->t_decode > 0 ? (double)base->n_gen / base->t_decode : 0;
        bool spec_row = r & 1;
        char block[16], acc[32];
        snprintf(block, sizeof block, spec_row ? "%d" : "-", dh->block_size);
        if (spec_row && w->steps)
            snprintf(acc, sizeof acc, "%.2f", 1.0 + (double)w->accepted / (double)w->steps);
        else snprintf(acc, sizeof acc, "-");
        printf("| %s | %s | %s | %s | %.1f | %.2fx | %s | %d/%d |\n", spec_row ? "DFlash2" : "target only",
               spec_row ? dq : "-", block, r < 2 ? "0" : "1", tps, tps0 > 0 ? tps / tps0 : 0, acc, w->normal_stops,
               n_probs);
    }
    printf("\ngreedy (T = 0) texts identical with and without the drafter: %d/%d\n", identical, n_probs);
    rc = identical == n_probs ? 0 : 1;
    goto done;
fail:
    fprintf(stderr, "error: %s\n", e.msg);
done:
    spex_sampler_free(smp[0]);
    spex_sampler_free(smp[1]);
    spex_spec_free(spec);
    spex_spec_free(plain);
    spex_draft_context_free(dc);
    spex_context_free(ctx_plain);
    spex_context_free(ctx);
    spex_drafter_free(d);
    spex_tokenizer_free(tok);
    spex_model_free(m);
    genset_free(probs, n_probs > 0 ? n_probs : 0);
    return rc;
}
