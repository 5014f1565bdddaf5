/*
 * run_spec.c — `spex run -md DRAFTER`: generation with DFlash speculative decoding (or the
 * target's MTP block, --spec-type mtp; prompt lookup, --spec-type ngram; a small draft model,
 * --spec-type draft-simple).
 *
 * What it is: a speculative session (spex_session_create: drafter, contexts and every size)
 * and spex_spec steps on sequence 0, printing the emitted tokens as run.c prints target-only
 * tokens (same stop rules: end of generation, BOS, -n, full context), then the speculative
 * statistics on stderr. What it is not: flag parsing or prompt rendering (run.c).
 *
 * Output equals target-only output token for token at --temp 0 (docs/speculative.md says
 * why); the stderr block adds the llama.cpp-style line
 * "draft acceptance rate = 0.xxxxx ( A accepted / G generated)" and the mean acceptance length.
 */
#include "spex.h"
#include "cli.h"
#include "run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int run_speculative(const run_opts *o, const spex_model *m, const spex_tokenizer *tok, const int32_t *ids,
                    int n_prompt) {
    int rc = 1;
    spex_error err = {0};
    spex_session *ses = NULL;
    spex_sampler *smp = NULL;
    spex_detok_stream *ds = NULL;
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
    spex_spec *spec = spex_session_spec(ses);
    run_print_recurrent(m, spex_session_context(ses));
    const int32_t n_ctx = info->n_ctx_per_seq;
    if (n_prompt >= n_ctx) {
        fprintf(stderr, "error: the prompt is %d tokens, too long for the context of %d (raise -c)\n", n_prompt,
                n_ctx);
        goto done;
    }

    spex_sampler_params sp = o->sp;
    if (sp.repeat_last_n < 0) sp.repeat_last_n = n_ctx;
    if (spex_sampler_init(&sp, hp->n_vocab, &smp, &err) != SPEX_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        goto done;
    }
    unsigned dflags = SPEX_DETOK_STRIP_SPACE | (o->special ? SPEX_DETOK_SPECIAL : 0u);
    if (spex_detok_stream_create(tok, dflags, &ds, &err) != SPEX_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        goto done;
    }
    if (!run_prime(hp->n_vocab, ds, smp, ids, n_prompt)) goto done;

    double t0 = run_now_s();
    int32_t first;
    if (spex_spec_seq_begin(spec, 0, ids, n_prompt, smp, &first, &err) != SPEX_OK) {
        fprintf(stderr, "error: prompt: %s\n", err.msg);
        goto done;
    }
    double t1 = run_now_s();
    /* --spec-draft-cut auto: off where a fixed seed meets the rejection path (the library's
     * choice for this sampler). The cut prices rows by the clock, so there the verified
     * lengths, and with them the sampled tokens, would change from run to run; greedy and
     * sample-and-match outputs equal the target alone's whatever is verified. */
    const bool fixed_rejection =
        o->sp.seed != SPEX_SEED_RANDOM && spex_spec_seq_path(spec, 0) == SPEX_SPEC_PATH_REJECTION;
    if (o->draft_cut < 0 && fixed_rejection) {
        spex_spec_set_draft_cut(spec, false);
        fprintf(stderr, "note: draft cut off for a fixed --seed at T > 0 (its clock-based price would change the "
                        "sampled tokens from run to run); --spec-draft-cut on to use it\n");
    }
    /* --spec-guard auto: the same rule, for the same reason (which steps draft follows the clock) */
    if (o->guard < 0 && fixed_rejection) {
        spex_spec_set_guard(spec, false);
        fprintf(stderr, "note: realized-rate guard off for a fixed --seed at T > 0 (it follows the clock); "
                        "--spec-guard on to use it\n");
    }
    if (o->verbose)
        fprintf(stderr, "speculative path: %s, n_max %d\n", spex_spec_path_name(spex_spec_seq_path(spec, 0)),
                spex_spec_get_params(spec)->n_max);

    const char *reason = "n_predict";
    long n_gen = 0;
    int32_t bos = spex_token_bos(tok), eot = spex_token_eot(tok);
    spex_spec_out out;
    out.n = 1;
    out.tokens[0] = first;
    bool stop = o->n_predict == 0;
    while (!stop) {
        for (int32_t k = 0; k < out.n; k++) {
            int32_t id = out.tokens[k];
            if (spex_token_is_eog(tok, id)) {
                reason = id == eot ? "eot" : "eos";
                stop = true;
                break;
            }
            if (id == bos) {
                reason = "bos";
                stop = true;
                break;
            }
            n_gen++;
            spex_str piece;
            if (spex_detok_stream_push(ds, id, &piece, &err) != SPEX_OK) {
                fprintf(stderr, "\nerror: detokenize: %s\n", err.msg);
                goto done;
            }
            run_write_str(piece);
            if (o->n_predict >= 0 && n_gen >= o->n_predict) {
                stop = true;
                break;
            }
        }
        fflush(stdout);
        if (stop) break;
        if (o->n_predict >= 0 && n_gen >= o->n_predict) break;
        if (spex_spec_seq_len(spec, 0) >= n_ctx) {
            reason = "context full";
            break;
        }
        /* Never draft past -n: what is left of the budget bounds the step (§15.6). */
        int32_t max_emit = o->n_predict >= 0 ? (int32_t)(o->n_predict - n_gen) : SPEX_DRAFT_MAX_N + 1;
        int32_t seq = 0;
        if (spex_spec_step(spec, &seq, 1, &max_emit, &out, &err) != SPEX_OK) {
            fprintf(stderr, "\nerror: speculative step: %s\n", err.msg);
            goto done;
        }
    }
    run_write_str(spex_detok_stream_flush(ds));
    fflush(stdout);
    double t2 = run_now_s();

    const spex_spec_stats *st = spex_spec_seq_stats(spec, 0);
    fprintf(stderr, "\nprompt:    %d tokens, %.2f ms, %.2f t/s\n", n_prompt, (t1 - t0) * 1e3,
            run_rate(n_prompt, t1 - t0));
    fprintf(stderr, "generated: %ld tokens, %.2f ms, %.2f t/s\n", n_gen, (t2 - t1) * 1e3, run_rate(n_gen, t2 - t1));
    fprintf(stderr, "stop:      %s\n", reason);
    fprintf(stderr, "speculative: %s, path %s, n_max %d, p_min %.3g, draft cut %s (%llu tokens cut), %llu verify steps\n",
            info->variant,
            spex_spec_path_name(spex_spec_seq_path(spec, 0)),
            spex_spec_get_params(spec)->n_max, (double)o->p_draft_min, spex_spec_get_params(spec)->draft_cut ? "on" : "off",
            (unsigned long long)st->n_cut, (unsigned long long)st->n_steps);
    const spex_spec_stats *tot = spex_spec_total_stats(spec);
    fprintf(stderr, "guard:     %s, %llu of %llu steps kept plain\n", spex_spec_get_params(spec)->guard ? "on" : "off",
            (unsigned long long)tot->n_guard_plain, (unsigned long long)tot->n_steps);
    fprintf(stderr, "draft acceptance rate = %.5f (%llu accepted / %llu generated)\n",
            spex_spec_stats_acceptance(st), (unsigned long long)st->n_accepted, (unsigned long long)st->n_drafted);
    fprintf(stderr, "mean acceptance length = %.3f\n", spex_spec_stats_mean_len(st));
    fprintf(stderr, "acceptance per position:");
    for (int p = 0; p < SPEX_DRAFT_MAX_N && st->drafted_at[p]; p++)
        fprintf(stderr, " %d:%.3f", p + 1, (double)st->accepted_at[p] / (double)st->drafted_at[p]);
    fprintf(stderr, "\ntime:      draft %.2f ms, verify %.2f ms, other %.2f ms\n", st->t_draft * 1e3,
            st->t_verify * 1e3, st->t_other * 1e3);
    rc = 0;
done:
    spex_detok_stream_free(ds);
    spex_sampler_free(smp);
    spex_session_free(ses);
    return rc;
}
