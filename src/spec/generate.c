/*
 * generate.c — the one generation loop (include/spex.h, "Generation"): a prompt in, tokens
 * out through a callback, on one sequence of a speculative loop, with or without a drafter.
 * `spex run`, `spex bench spec`, `spex demo` and examples/chat_stream.c are this loop; the
 * server's engine is the batched scheduler for many sequences and steps spex_spec itself.
 *
 * What it is: sampler priming (the prompt into the penalty history, as llama-cli does), the
 * prompt, then steps until a stop — an end-of-generation token, BOS, n_predict tokens, a full
 * context or the caller's callback — with each step bounded by what is left of n_predict (a
 * draft is never verified past it), the detokenized text of every token, and the timings.
 * What it is not: stop strings, chat rendering or anything about a terminal (callers).
 *
 * Stops inside a step's emitted run keep the tokens before the stop only; the sequence is
 * ended before returning, so its caches are free for the next call.
 */
#include "spex.h"
#include "sample/api.h"
#include "spec/api.h"
#include "core/clock.h"

#include <stdarg.h>
#include <stdio.h>

const char *spex_stop_name(spex_stop s) {
    switch (s) {
    case SPEX_STOP_LENGTH: return "n_predict";
    case SPEX_STOP_EOS: return "eos";
    case SPEX_STOP_EOT: return "eot";
    case SPEX_STOP_BOS: return "bos";
    case SPEX_STOP_CONTEXT: return "context full";
    case SPEX_STOP_CALLER: return "caller";
    }
    return "?";
}

spex_gen_params spex_gen_default_params(void) {
    return (spex_gen_params){.n_predict = -1, .prime_sampler = true, .text = true,
                             .detok_flags = SPEX_DETOK_STRIP_SPACE, .draft_cut = -1, .guard = -1};
}

static void note(const spex_spec *spec, const char *line) {
    const spex_spec_params *p = spex_spec_get_params(spec);
    if (p->log) p->log(p->log_user, line);
    else fprintf(stderr, "%s\n", line);
}

/* -1 keeps the loop's setting, except that a fixed seed on the rejection path turns it off:
 * the cut and the guard follow the clock, so which rows are verified, and with them the
 * sampled tokens, would change from run to run (greedy and sample-and-match outputs do not
 * depend on what is verified). */
static bool policy(const spex_spec *spec, int8_t asked, bool current, bool fixed_rejection, const char *what) {
    if (asked >= 0) return asked != 0;
    if (current && fixed_rejection) {
        char line[200];
        snprintf(line, sizeof line,
                 "note: %s off for a fixed seed at T > 0 (it follows the clock, so the sampled tokens would "
                 "change from run to run)", what);
        note(spec, line);
        return false;
    }
    return current;
}

/* Which stop id is, or SPEX_STOP_LENGTH for none (the caller's counts decide that one). */
static spex_stop stop_of(const spex_tokenizer *tok, int32_t id) {
    if (spex_token_is_eog(tok, id)) return id == spex_token_eot(tok) ? SPEX_STOP_EOT : SPEX_STOP_EOS;
    if (id == spex_token_bos(tok) && id >= 0) return SPEX_STOP_BOS;
    return SPEX_STOP_LENGTH;
}

typedef struct gen_run {
    spex_spec *spec;
    const spex_tokenizer *tok;
    const spex_gen_params *p;
    spex_detok_stream *ds;
    spex_gen_result *res;
} gen_run;

/* Hands out's tokens to the caller in order; sets *stop when generation stops (res->stop says why). */
static spex_status emit(gen_run *g, const spex_spec_out *out, bool *stop, spex_error *err) {
    for (int32_t k = 0; k < out->n; k++) {
        int32_t id = out->tokens[k];
        spex_stop why = stop_of(g->tok, id);
        if (why != SPEX_STOP_LENGTH) {
            g->res->stop = why;
            *stop = true;
            return SPEX_OK;
        }
        spex_str piece = {0};
        if (g->ds) {
            spex_status st = spex_detok_stream_push(g->ds, id, &piece, err);
            if (st != SPEX_OK) return st;
        }
        g->res->n_gen++;
        if (g->p->on_token && !g->p->on_token(g->p->user, id, piece)) {
            g->res->stop = SPEX_STOP_CALLER;
            *stop = true;
            return SPEX_OK;
        }
        if (g->p->n_predict >= 0 && g->res->n_gen >= g->p->n_predict) {
            g->res->stop = SPEX_STOP_LENGTH;
            *stop = true;
            return SPEX_OK;
        }
    }
    return SPEX_OK;
}

/* The prompt, then steps until a stop. */
static spex_status run_loop(gen_run *g, const int32_t *prompt, int32_t n_prompt, spex_sampler *smp,
                            spex_error *err) {
    spex_spec *spec = g->spec;
    const spex_gen_params *p = g->p;
    spex_gen_result *res = g->res;
    double t0 = spex_now_s();
    int32_t first;
    spex_status st = spex_spec_seq_begin(spec, 0, prompt, n_prompt, smp, &first, err);
    if (st != SPEX_OK) return st;
    const double t1 = spex_now_s(), other0 = spex_spec_seq_stats(spec, 0)->t_other;
    res->t_prompt = t1 - t0;
    res->path = spex_spec_seq_path(spec, 0);

    const spex_spec_params *sp = spex_spec_get_params(spec);
    const bool fixed_rejection = spex_sampler_get_params(smp)->seed != SPEX_SEED_RANDOM &&
                                 res->path == SPEX_SPEC_PATH_REJECTION;
    const bool cut0 = sp->draft_cut, guard0 = sp->guard;
    spex_spec_set_draft_cut(spec, policy(spec, p->draft_cut, cut0, fixed_rejection, "draft cut"));
    spex_spec_set_guard(spec, policy(spec, p->guard, guard0, fixed_rejection, "realized-rate guard"));
    res->draft_cut = spex_spec_get_params(spec)->draft_cut;
    res->guard = spex_spec_get_params(spec)->guard;

    const int32_t n_ctx = spex_spec_n_ctx(spec);
    spex_spec_out out = {.n = 1, .tokens = {first}};
    bool stop = p->n_predict == 0;
    while (!stop && st == SPEX_OK) {
        if ((st = emit(g, &out, &stop, err)) != SPEX_OK || stop) break;
        if (spex_spec_seq_len(spec, 0) >= n_ctx) {
            res->stop = SPEX_STOP_CONTEXT;
            break;
        }
        /* Never draft past n_predict: what is left of it bounds the step. */
        int32_t seq = 0;
        int32_t max_emit = p->n_predict >= 0 ? p->n_predict - res->n_gen : SPEX_DRAFT_MAX_N + 1;
        st = spex_spec_step(spec, &seq, 1, &max_emit, &out, err);
    }
    res->t_gen = spex_now_s() - t1;
    res->stats = *spex_spec_seq_stats(spec, 0);
    res->stats.t_other -= other0;   /* the prompt's last forward is not a step */
    spex_spec_seq_end(spec, 0);
    spex_spec_set_draft_cut(spec, cut0);
    spex_spec_set_guard(spec, guard0);
    return st;
}

spex_status spex_spec_generate(spex_spec *spec, const spex_tokenizer *tok, const int32_t *prompt, int32_t n_prompt,
                               const spex_gen_params *params, spex_gen_result *res, spex_error *err) {
    if (!spec || !tok || !prompt || n_prompt < 1 || !res)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "generate: NULL loop, tokenizer or result, or empty prompt");
    const spex_gen_params def = spex_gen_default_params();
    const spex_gen_params *p = params ? params : &def;
    *res = (spex_gen_result){.n_prompt = n_prompt, .stop = SPEX_STOP_LENGTH};
    const int32_t n_ctx = spex_spec_n_ctx(spec);
    if (n_prompt > n_ctx)
        return spex_error_set(err, SPEX_ERR_RANGE, "the prompt is %d tokens, longer than the context of %d",
                              n_prompt, n_ctx);

    spex_status st = SPEX_OK;
    spex_sampler *own = NULL, *smp = p->sampler;
    if (!smp) {   /* greedy */
        spex_sampler_params gp = spex_sampler_default_params();
        gp.temp = 0.0f;
        st = spex_sampler_init(&gp, spex_spec_n_vocab(spec),
                               &own, err);
        smp = own;
    }
    gen_run g = {.spec = spec, .tok = tok, .p = p, .res = res};
    if (st == SPEX_OK && p->text) st = spex_detok_stream_create(tok, p->detok_flags, &g.ds, err);
    const int32_t n_vocab = smp ? spex_sampler_n_vocab(smp) : 0;
    if (st == SPEX_OK && p->prime_sampler) spex_sampler_reset(smp);
    /* The prompt's pieces go through the stream unprinted (the first generated piece is then
     * rendered as a continuation), its ids into the penalty history. */
    for (int32_t i = 0; st == SPEX_OK && i < n_prompt; i++) {
        if (prompt[i] < 0 || prompt[i] >= n_vocab) {
            st = spex_error_set(err, SPEX_ERR_RANGE, "prompt token %d: id %d outside the vocabulary of %d", i,
                                prompt[i], n_vocab);
            break;
        }
        spex_str ignored;
        if (g.ds) st = spex_detok_stream_push(g.ds, prompt[i], &ignored, err);
        if (st == SPEX_OK && p->prime_sampler) st = spex_sampler_accept(smp, prompt[i]);
    }
    /* A prompt ending inside a UTF-8 sequence must not leak its U+FFFD into the output. */
    if (g.ds) (void)spex_detok_stream_flush(g.ds);

    if (st == SPEX_OK) st = run_loop(&g, prompt, n_prompt, smp, err);
    if (st == SPEX_OK && g.ds && p->on_token) {   /* a character the last token left unfinished */
        spex_str tail = spex_detok_stream_flush(g.ds);
        if (tail.len) (void)p->on_token(p->user, -1, tail);
    }
    spex_detok_stream_free(g.ds);
    spex_sampler_free(own);
    return st;
}
