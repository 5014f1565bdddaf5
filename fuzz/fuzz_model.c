/*
 * fuzz_model.c — libFuzzer target for the target-model loader (src/model/model.c,
 * model_qwen35.c: hyper-parameters, layer pattern, tensor validation of llama / qwen3 /
 * qwen35) and, for files it accepts, a context and a two-token forward.
 *
 * Arbitrary bytes go through spex_gguf_open_memory (the reader itself is fuzz_gguf's job) and
 * spex_model_load_gguf. Checked: no crash, hang or sanitizer report; a refusal carries a
 * one-line message and leaves no model; an accepted model has sane hyper-parameters, and when
 * its weights are small (< 2 MiB) a context of 16 positions runs two tokens (one batch of two,
 * then a rollback and one token for recurrent models) and every logit is read. Bad dimensions
 * must be refused at load, not discovered by the forward.
 * Seeds: fuzz/corpus/model/ (tiny llama, qwen3, qwen35 with GDN + MTP, qwen35 tied with
 * recurrent_layers; written by fuzz/make_model_seeds.py).
 * Run: make fuzz && ./build-fuzz/fuzz_model -max_total_time=20 build-fuzz/corpus-model fuzz/corpus/model
 */
#include "spex.h"
#include "gguf/api.h"
#include "model/api.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile float sink;

static void run_two_tokens(const spex_model *m) {
    const spex_model_hparams *hp = spex_model_get_hparams(m);
    spex_context_params cp = spex_context_default_params();
    cp.n_ctx_per_seq = 16;
    cp.n_batch_max = 4;
    cp.n_outputs_max = 4;
    cp.kv_type = SPEX_TYPE_F32;
    cp.n_rs_seq = 1;
    spex_context *c = NULL;
    spex_error err;
    err.msg[0] = 0;
    if (spex_context_init(m, &cp, &c, &err) != SPEX_OK) {
        if (c || !err.msg[0]) __builtin_trap();
        return;
    }
    spex_batch_token bt[2] = {{0, 0, 0, true}, {hp->n_vocab - 1, 1, 0, true}};
    if (spex_forward(c, &(spex_batch){bt, 2}, &err) != SPEX_OK) __builtin_trap();
    for (int i = 0; i < 2; i++) {
        const float *z = spex_logits(c, i);
        if (!z) __builtin_trap();
        for (int32_t v = 0; v < hp->n_vocab; v++) sink += z[v];
    }
    /* rollback by one (free on every architecture with n_rs_seq 1) and one more token */
    if (spex_kv_seq_truncate(c, 0, 1, &err) != SPEX_OK) __builtin_trap();
    spex_batch_token one = {0, 1, 0, true};
    if (spex_forward(c, &(spex_batch){&one, 1}, &err) != SPEX_OK) __builtin_trap();
    sink += spex_logits(c, 0)[0];
    spex_context_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    spex_gguf *g = NULL;
    spex_error err;
    err.msg[0] = 0;
    if (spex_gguf_open_memory(data, size, "fuzz", &g, &err) != SPEX_OK) return 0;
    spex_model *m = NULL;
    err.msg[0] = 0;
    if (spex_model_load_gguf(g, NULL, &m, &err) != SPEX_OK) {
        if (m || !err.msg[0] || strchr(err.msg, '\n')) __builtin_trap();
        return 0;
    }
    const spex_model_hparams *hp = spex_model_get_hparams(m);
    if (hp->n_layer < 1 || hp->n_embd < 1 || hp->n_vocab < 1 || hp->n_head < 1 || hp->n_head_kv < 1 ||
        hp->n_head % hp->n_head_kv || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        __builtin_trap();
    if (hp->arch == SPEX_ARCH_QWEN35 &&
        (hp->n_recurrent < 0 || hp->n_recurrent > hp->n_layer || hp->ssm_dt_rank % hp->ssm_n_group ||
         (int64_t)hp->ssm_dt_rank * hp->ssm_d_state != hp->ssm_d_inner))
        __builtin_trap();
    if (spex_model_weight_bytes(m) < (2u << 20)) run_two_tokens(m);
    spex_model_free(m);
    return 0;
}
