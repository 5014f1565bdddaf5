/*
 * run_spec.c — `spex run`'s generation: a session (the target alone, or with a DFlash drafter,
 * the target's MTP block, prompt lookup, a draft model or the hybrid; spex_session_create
 * resolves the drafter, contexts and every size) and the library's generation loop
 * (spex_session_generate), printing each token's text as it comes and the statistics on
 * stderr. What it is not: flag parsing or prompt rendering (run.c).
 *
 * Speculative output equals target-only output token for token at --temp 0
 * (docs/speculative.md says why); the stderr block then adds the llama.cpp-style line
 * "draft acceptance rate = 0.xxxxx ( A accepted / G generated)" and the mean acceptance length.
 */
#include "spex.h"
#include "cli.h"
#include "run.h"
#include "spec/api.h"
#include "tensor/api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool print_piece(void *user, int32_t token, spex_str text) {
    (void)user, (void)token;
    run_write_str(text);
    fflush(stdout);
    return true;
}

static void print_spec_stats(const run_opts *o, const spex_session_info *info, const spex_spec *spec,
                             const spex_gen_result *res) {
    const spex_spec_stats *st = &res->stats;
    fprintf(stderr, "speculative: %s, path %s, n_max %d, p_min %.3g, draft cut %s (%llu tokens cut), %llu verify steps\n",
            info->variant, spex_spec_path_name(res->path), info->n_max, (double)o->p_draft_min,
            res->draft_cut ? "on" : "off", (unsigned long long)st->n_cut, (unsigned long long)st->n_steps);
    const spex_spec_stats *tot = spex_spec_total_stats(spec);
    fprintf(stderr, "guard:     %s, %llu of %llu steps kept plain\n", res->guard ? "on" : "off",
            (unsigned long long)tot->n_guard_plain, (unsigned long long)tot->n_steps);
    fprintf(stderr, "draft acceptance rate = %.5f (%llu accepted / %llu generated)\n", spex_spec_stats_acceptance(st),
            (unsigned long long)st->n_accepted, (unsigned long long)st->n_drafted);
    fprintf(stderr, "mean acceptance length = %.3f\n", spex_spec_stats_mean_len(st));
    fprintf(stderr, "acceptance per position:");
    for (int p = 0; p < SPEX_DRAFT_MAX_N && st->drafted_at[p]; p++)
        fprintf(stderr, " %d:%.3f", p + 1, (double)st->accepted_at[p] / (double)st->drafted_at[p]);
    fprintf(stderr, "\ntime:      draft %.2f ms, verify %.2f ms, other %.2f ms\n", st->t_draft * 1e3,
            st->t_verify * 1e3, st->t_other * 1e3);
}

int run_session(const run_opts *o, const spex_model *m, const spex_tokenizer *tok, const int32_t *ids,
                    int n_prompt) {
    int rc = 1;
    spex_error err = {0};
    spex_session *ses = NULL;
    spex_sampler *smp = NULL;
    const spex_model_hparams *hp = spex_model_get_hparams(m);

    spex_session_params pp = spex_session_default_params();
    if (o->spec_type && !spex_spec_type_parse(o->spec_type, &pp.type)) {
        fprintf(stderr, "error: unknown --spec-type '%s'\n", o->spec_type);
        return 1;
    }
    pp.draft_path = o->draft;
    if (pp.type == SPEX_SPEC_MTP && o->draft) {
        fprintf(stderr, "warning: --spec-type mtp drafts with the target's MTP block: -md is ignored\n");
        pp.draft_path = NULL;
    }
    pp.draft_overrides = o->overrides;
    pp.n_draft_overrides = o->n_overrides;
    pp.no_repack = o->no_repack;
    pp.no_mmap = o->no_mmap;
    pp.n_ctx_per_seq = (int32_t)o->n_ctx;
    pp.n_batch = (int32_t)o->n_batch;
    pp.n_threads = (int32_t)o->n_threads;
    pp.kv_type = o->kv_type;
    pp.draft_kv_type = o->ctk_draft;
    pp.n_draft_max = o->n_draft_max > 0 ? (int32_t)o->n_draft_max : 0;
    pp.n_draft_min = (int32_t)o->n_draft_min;
    pp.p_min = o->p_draft_min;
    pp.draft_greedy = o->draft_greedy;
    pp.draft_cut = o->draft_cut != 0; /* auto: on, unless the path below keeps it off */
    pp.guard = o->guard != 0;         /* the same */
    pp.ngram = o->ngram;
    pp.verbose = true;
    pp.log = run_log_stderr;
    if (spex_session_create(m, &pp, &ses, &err) != SPEX_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        goto done;
    }
    const spex_session_info *info = spex_session_get_info(ses);
    if (info->type == SPEX_SPEC_DFLASH && o->ctk_draft != SPEX_TYPE_F16 && o->ctk_draft != SPEX_TYPE_F32)
        fprintf(stderr, "warning: quantized draft KV (%s) is known to destroy acceptance (dflash2.md §21 item 10)\n",
                spex_type_get_info(o->ctk_draft)->name);
    run_print_recurrent(m, spex_session_context(ses));
    const int32_t n_ctx = info->n_ctx_per_seq;
    if (n_prompt > n_ctx) {
        fprintf(stderr, "error: the prompt is %d tokens, longer than the context of %d (raise -c)\n", n_prompt,
                n_ctx);
        goto done;
    }

    spex_sampler_params sp = o->sp;
    if (sp.repeat_last_n < 0) sp.repeat_last_n = n_ctx;
    if (spex_sampler_init(&sp, hp->n_vocab, &smp, &err) != SPEX_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        goto done;
    }
    if (o->verbose) fprintf(stderr, "seed: %s\n", sp.seed == SPEX_SEED_RANDOM ? "random" : "fixed");
    spex_gen_params gp = spex_gen_default_params();
    gp.n_predict = (int32_t)(o->n_predict < 0 ? -1 : o->n_predict > INT32_MAX ? INT32_MAX : o->n_predict);
    gp.sampler = smp;
    gp.detok_flags = SPEX_DETOK_STRIP_SPACE | (o->special ? SPEX_DETOK_SPECIAL : 0u);
    gp.draft_cut = (int8_t)o->draft_cut; /* auto (-1): the library's rule for a fixed seed */
    gp.guard = (int8_t)o->guard;
    gp.on_token = print_piece;
    spex_gen_result res;
    if (spex_session_generate(ses, tok, ids, n_prompt, &gp, &res, &err) != SPEX_OK) {
        fflush(stdout);
        fprintf(stderr, "\nerror: %s\n", err.msg);
        goto done;
    }
    fflush(stdout);
    fprintf(stderr, "\nprompt:    %d tokens, %.2f ms, %.2f t/s\n", n_prompt, res.t_prompt * 1e3,
            run_rate(n_prompt, res.t_prompt));
    fprintf(stderr, "generated: %d tokens, %.2f ms, %.2f t/s\n", res.n_gen, res.t_gen * 1e3,
            run_rate(res.n_gen, res.t_gen));
    fprintf(stderr, "stop:      %s\n", spex_stop_name(res.stop));
    if (info->type != SPEX_SPEC_NONE) print_spec_stats(o, info, spex_session_spec(ses), &res);
    rc = 0;
done:
    spex_sampler_free(smp);
    spex_session_free(ses);
    return rc;
}
