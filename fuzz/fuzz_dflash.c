/*
 * fuzz_dflash.c — libFuzzer target for the DFlash drafter loader (src/model/dflash_load.c,
 * ../shared/docs/dflash2.md §2–§5): arbitrary bytes opened with spex_gguf_open_memory and
 * loaded as a drafter against tests/data/models/tiny-qwen3.gguf (loaded once; run from the
 * repo root).
 *
 * Checked: no crash or sanitizer report; a failure always carries a one-line message and
 * leaves no drafter. When the bytes load, everything a later stage reads is touched: the
 * hyper-parameters against their limits, the summary line, the first and last element of
 * every own weight, and one row of each codebook through spex_model_weight_row.
 *
 * What it is not: a fuzzer of the GGUF reader itself (fuzz_gguf.c) or of the forward.
 * Seeds: fuzz/corpus/dflash/ (small valid v1 and DFlash2 drafters, written by
 * tests/test_dflash_load.c case corpus_seeds).
 * Run: make fuzz && ./build-fuzz/fuzz_dflash -max_total_time=20 build-fuzz/corpus-dflash fuzz/corpus/dflash
 */
#include "spex.h"
#include "gguf/api.h"
#include "model/api.h"
#include "model/dflash.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TARGET "tests/data/models/tiny-qwen3.gguf"

static volatile uint64_t sink;
static spex_model *target;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void touch_weight(const model_weight *w) {
    if (!w->t) return;
    const uint8_t *p = w->data;
    sink += p[0] + p[w->t->nbytes - 1];
}

static void touch_f32(const float *p, int64_t n) {
    if (!p) __builtin_trap();
    sink += (uint64_t)(p[0] != 0) + (uint64_t)(p[n - 1] != 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!target) {
        spex_error err = {0};
        if (spex_model_load(TARGET, NULL, &target, &err) != SPEX_OK) {
            fprintf(stderr, "fuzz_dflash: %s (run from the repo root)\n", err.msg);
            exit(1);
        }
    }
    spex_gguf *g = NULL;
    spex_error err;
    err.msg[0] = 0;
    spex_status s = spex_gguf_open_memory(data, size, "fuzz", &g, &err);
    if (s != SPEX_OK) return 0;   /* the reader is fuzz_gguf's job */
    spex_drafter *d = NULL;
    err.msg[0] = 0;
    s = spex_drafter_load_gguf(g, target, NULL, &d, &err);
    if (s != SPEX_OK) {
        if (d || !err.msg[0] || strchr(err.msg, '\n')) __builtin_trap();
        return 0;
    }
    const spex_drafter_hparams *hp = spex_drafter_get_hparams(d);
    const spex_model_hparams *thp = spex_model_get_hparams(target);
    if (hp->n_embd != thp->n_embd || hp->n_vocab != thp->n_vocab || hp->n_layer < 1 || hp->n_layer > 64 ||
        hp->n_taps < 1 || hp->n_taps > SPEX_DFLASH_MAX_TAPS || hp->block_size < 2 ||
        hp->block_size > SPEX_DRAFT_MAX_N + 1 || hp->mask_token < 0 || hp->mask_token >= thp->n_vocab ||
        hp->selector_top_k > SPEX_DRAFT_MAX_K || hp->n_rot > hp->head_dim || hp->n_head % hp->n_head_kv)
        __builtin_trap();
    for (int i = 0; i < hp->n_taps; i++)
        if (hp->target_layers[i] < 0 || hp->target_layers[i] > thp->n_layer) __builtin_trap();
    char line[512];
    spex_drafter_describe(d, line, sizeof line);
    sink += strlen(line);
    touch_weight(&d->fc);
    touch_f32(d->enc_norm, hp->n_embd);
    touch_f32(d->output_norm, hp->n_embd);
    touch_weight(&d->tok_embd);
    touch_weight(&d->head);
    for (int l = 0; l < hp->n_layer; l++) {
        const dflash_layer *ly = &d->layers[l];
        touch_f32(ly->attn_norm, hp->n_embd);
        touch_f32(ly->q_norm, hp->head_dim);
        touch_weight(&ly->wq);
        touch_weight(&ly->w_down);
        if (hp->variant == SPEX_DFLASH2) {
            touch_f32(ly->attn_conv_base, (int64_t)hp->n_embd * hp->conv_kernel * 2);
            touch_weight(&ly->ffn_conv_proj);
        }
    }
    if (hp->variant == SPEX_DFLASH2) {
        float *row = malloc((size_t)hp->selector_rank * sizeof(float));
        if (!row) __builtin_trap();
        spex_model_weight_row(&d->sel_pred, 0, row);
        spex_model_weight_row(&d->sel_succ, hp->n_vocab - 1, row);
        sink += (uint64_t)(row[hp->selector_rank - 1] != 0);
        free(row);
    }
    spex_drafter_free(d);
    return 0;
}
