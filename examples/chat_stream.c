/*
 * chat_stream.c — an embedding example: streams a chat reply with DFlash2 speculative
 * decoding, using nothing but the public header include/spex.h.
 *
 * Usage: chat_stream TARGET.gguf DRAFTER.gguf "user message" [max tokens, default 256]
 *   e.g. build/examples/chat_stream models/target.gguf models/drafter.gguf "What is 7 times 6?"
 *
 * What it is: the whole path an embedder needs — load the target, open a speculative session
 * (drafter, contexts and sizes in one call), render one user turn with the model's chat
 * template, tokenize, and print each step's tokens as they arrive. Greedy (T = 0), so the reply equals the target alone's token for token.
 * What it is not: a CLI (`spex run -m T -md D --chat` is that) or a tour of the parameters.
 */
#include "spex.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every call reports failure the same way: its status, and a message in err naming the cause. */
#define TRY(call, what) \
    do { if ((call) != SPEX_OK) { fprintf(stderr, "chat_stream: %s: %s\n", (what), err.msg); goto done; } } while (0)

int main(int argc, char **argv) {
    long n_max = argc == 5 ? strtol(argv[4], NULL, 10) : 256;
    if (argc < 4 || argc > 5 || n_max <= 0) {
        fprintf(stderr, "usage: %s TARGET.gguf DRAFTER.gguf \"message\" [max tokens]\n", argv[0]);
        return 2;
    }
    static char text[1 << 16];   /* the rendered prompt */
    static int32_t ids[1 << 14];
    int rc = 1, n_prompt = 0;
    spex_error err = {0};
    spex_model *m = NULL;
    spex_tokenizer *tok = NULL;
    spex_session *ses = NULL;
    spex_sampler *smp = NULL;
    spex_detok_stream *ds = NULL;

    TRY(spex_model_load(argv[1], NULL, &m, &err), "target");
    TRY(spex_tokenizer_load_gguf(spex_model_gguf(m), &tok, &err), "tokenizer");
    /* The session loads the drafter and sizes everything: contexts, taps, draft length. */
    spex_session_params pp = spex_session_default_params();
    pp.type = SPEX_SPEC_DFLASH;
    pp.draft_path = argv[2];
    TRY(spex_session_create(m, &pp, &ses, &err), "drafter");
    spex_spec *spec = spex_session_spec(ses);

    /* One user turn through the model's chat template. */
    spex_chat_template tmpl = spex_model_chat_template(m, tok, NULL);
    const spex_chat_msg msg = {.role = SPEX_CHAT_USER, .content = argv[3]};
    size_t len = 0;
    TRY(spex_chat_apply(tmpl, &msg, 1, true, true, text, sizeof text, &len, &err), "chat template");
    TRY(spex_tokenize(tok, text, len, true, true, ids, (int)(sizeof ids / sizeof *ids), &n_prompt, &err), "prompt");

    spex_sampler_params sp = spex_sampler_default_params();
    sp.temp = 0.0f;
    TRY(spex_sampler_init(&sp, spex_model_get_hparams(m)->n_vocab, &smp, &err), "sampler");
    TRY(spex_detok_stream_create(tok, SPEX_DETOK_STRIP_SPACE, &ds, &err), "detokenizer");

    spex_str piece;   /* the prompt primes the stream (its text is not printed) */
    for (int i = 0; i < n_prompt; i++) TRY(spex_detok_stream_push(ds, ids[i], &piece, &err), "detokenize");
    (void)spex_detok_stream_flush(ds);
    int32_t seq = 0, first;
    TRY(spex_spec_seq_begin(spec, seq, ids, n_prompt, smp, &first, &err), "prompt");
    spex_spec_out out = {.n = 1, .tokens = {first}};
    long n_gen = 0;
    for (;;) {   /* print what a step emitted, up to end of generation or n_max; step again */
        int32_t k = 0;
        for (; k < out.n && n_gen < n_max && !spex_token_is_eog(tok, out.tokens[k]); k++, n_gen++) {
            TRY(spex_detok_stream_push(ds, out.tokens[k], &piece, &err), "detokenize");
            fwrite(piece.ptr, 1, piece.len, stdout);
        }
        fflush(stdout);
        if (k < out.n || n_gen >= n_max || spex_spec_seq_len(spec, seq) >= spex_session_get_info(ses)->n_ctx_per_seq) break;
        int32_t max_emit = (int32_t)(n_max - n_gen);   /* never draft past n_max */
        TRY(spex_spec_step(spec, &seq, 1, &max_emit, &out, &err), "speculative step");
    }
    piece = spex_detok_stream_flush(ds);
    printf("%.*s\n", (int)piece.len, piece.ptr);
    fflush(stdout);
    fprintf(stderr, "chat_stream: %ld tokens, mean acceptance length %.2f\n", n_gen,
            spex_spec_stats_mean_len(spex_spec_seq_stats(spec, seq)));
    rc = 0;
done:
    spex_detok_stream_free(ds);
    spex_sampler_free(smp);
    spex_session_free(ses);
    spex_tokenizer_free(tok);
    spex_model_free(m);
    return rc;
}
