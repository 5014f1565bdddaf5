/*
 * chat_stream.c — an embedding example: streams a chat reply with DFlash2 speculative
 * decoding, using nothing but the public header include/spex.h.
 *
 * Usage: chat_stream TARGET.gguf DRAFTER.gguf "user message" [max tokens, default 256]
 *   e.g. build/examples/chat_stream models/target.gguf models/drafter.gguf "What is 7 times 6?"
 *
 * What it is: the whole path an embedder needs — load the target, open a speculative session
 * (drafter, contexts and sizes in one call), render one user turn with the model's chat
 * template, tokenize, and generate, printing each token's text as it arrives. Greedy (T = 0),
 * so the reply equals the target alone's token for token.
 * What it is not: a CLI (`spex run -m T -md D --chat` is that) or a tour of the parameters.
 */
#include "spex.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every call reports failure the same way: its status, and a message in err naming the cause. */
#define TRY(call, what) \
    do { if ((call) != SPEX_OK) { fprintf(stderr, "chat_stream: %s: %s\n", (what), err.msg); goto done; } } while (0)

static bool print_piece(void *user, int32_t token, spex_str text) {
    (void)user, (void)token;
    fwrite(text.ptr, 1, text.len, stdout);
    fflush(stdout);
    return true;
}

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

    TRY(spex_model_load(argv[1], NULL, &m, &err), "target");
    TRY(spex_tokenizer_load_gguf(spex_model_gguf(m), &tok, &err), "tokenizer");
    /* The session loads the drafter and sizes everything: contexts, taps, draft length. */
    spex_session_params pp = spex_session_default_params();
    pp.type = SPEX_SPEC_DFLASH;
    pp.draft_path = argv[2];
    TRY(spex_session_create(m, &pp, &ses, &err), "drafter");

    /* One user turn through the model's chat template. */
    spex_chat_template tmpl = spex_model_chat_template(m, tok, NULL);
    const spex_chat_msg msg = {.role = SPEX_CHAT_USER, .content = argv[3]};
    size_t len = 0;
    TRY(spex_chat_apply(tmpl, &msg, 1, true, true, text, sizeof text, &len, &err), "chat template");
    TRY(spex_tokenize(tok, text, len, true, true, ids, (int)(sizeof ids / sizeof *ids), &n_prompt, &err), "prompt");

    /* Greedy (no sampler given), each token's text printed as it comes, at most n_max tokens. */
    spex_gen_params gp = spex_gen_default_params();
    gp.n_predict = (int32_t)n_max;
    gp.on_token = print_piece;
    spex_gen_result res;
    TRY(spex_session_generate(ses, tok, ids, n_prompt, &gp, &res, &err), "generate");
    printf("\n");
    fprintf(stderr, "chat_stream: %d tokens (stop: %s), mean acceptance length %.2f\n", res.n_gen,
            spex_stop_name(res.stop), spex_spec_stats_mean_len(&res.stats));
    rc = 0;
done:
    spex_session_free(ses);
    spex_tokenizer_free(tok);
    spex_model_free(m);
    return rc;
}
