/*
 * embd.c — sentence embeddings from a target model: the pooling kinds, the model's default
 * pooling, the normalisations, and one sequence's pooled vector on an embeddings context.
 *
 * What it is: the hidden states llama.cpp calls a decoder's embeddings — per token, the last
 * layer's output after the final RMSNorm (output_norm), before the LM head — read from a
 * context created with params.embeddings, pooled over a sequence's tokens (mean, first token
 * "cls", last token) or kept per token ("none"), and the embd_normalize rules of llama.cpp's
 * server (-1 none, 0 max-abs scaled to int16 range, 1 taxicab, 2 euclidean, p > 2 p-norm).
 * Pooling ids are GGUF's <arch>.pooling_type values. What it is not: a classification head
 * ("rank" pooling needs one, which no supported target has) or HTTP (src/server/embd.c).
 */
#include "model/api.h"
#include "gguf/api.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const POOLING_NAMES[] = {"none", "mean", "cls", "last", "rank"};

const char *spex_pooling_name(spex_pooling p) {
    return p >= SPEX_POOLING_NONE && p <= SPEX_POOLING_RANK ? POOLING_NAMES[p] : "unspecified";
}

spex_pooling spex_pooling_parse(const char *s) {
    for (int i = 0; s && i <= SPEX_POOLING_RANK; i++)
        if (!strcmp(s, POOLING_NAMES[i])) return (spex_pooling)i;
    return SPEX_POOLING_UNSPECIFIED;
}

spex_pooling spex_model_pooling(const spex_model *m) {
    const spex_gguf *g = spex_model_gguf(m);
    if (!g) return SPEX_POOLING_NONE;
    char key[64];
    snprintf(key, sizeof key, "%s.pooling_type", spex_arch_name(spex_model_get_hparams(m)->arch));
    int64_t v = 0;
    if (spex_gguf_find_key(g, key) < 0 || spex_gguf_get_i64(g, key, &v, NULL) != SPEX_OK) return SPEX_POOLING_NONE;
    return v >= SPEX_POOLING_NONE && v <= SPEX_POOLING_RANK ? (spex_pooling)v : SPEX_POOLING_NONE;
}

/* max |x_i|, by compare and branch: aarch64 gcc 12 fails with an internal compiler error
 * vectorizing an fmax reduction at -O3. */
static double max_abs(const float *x, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        const double a = fabs((double)x[i]);
        if (a > m) m = a;
    }
    return m;
}

void spex_embd_normalize(float *x, int64_t n, int32_t norm) {
    if (norm < 0 || n <= 0) return;
    double sum = 0;
    if (norm == 0) {                 /* max |x_i| maps to 32760 (int16 range, llama.cpp) */
        sum = max_abs(x, n) / 32760.0;
    } else if (norm == 1) {
        for (int64_t i = 0; i < n; i++) sum += fabs((double)x[i]);
    } else if (norm == 2) {
        for (int64_t i = 0; i < n; i++) sum += (double)x[i] * (double)x[i];
        sum = sqrt(sum);
    } else {   /* p-norm, scaled by max |x_i| first so that a large p cannot overflow */
        const double m = max_abs(x, n);
        for (int64_t i = 0; m > 0 && i < n; i++) sum += pow(fabs((double)x[i]) / m, (double)norm);
        sum = m * pow(sum, 1.0 / (double)norm);
    }
    const double k = sum > 0 ? 1.0 / sum : 0.0;   /* the zero vector stays zero */
    for (int64_t i = 0; i < n; i++) x[i] = (float)((double)x[i] * k);
}

/* Folds one forward's output rows (tokens t0 .. t0+k-1 of the sequence, every row asked for
 * output) into out: pooling none copies each row to its place, mean adds it. */
static void pool_rows(const spex_context *ctx, spex_pooling pooling, int32_t t0, int32_t k, int64_t E, float *out) {
    for (int32_t i = 0; i < k; i++) {
        const float *h = spex_embeddings(ctx, i);
        if (pooling == SPEX_POOLING_NONE) memcpy(out + (int64_t)(t0 + i) * E, h, (size_t)E * sizeof *out);
        else for (int64_t e = 0; e < E; e++) out[e] += h[e];
    }
}

/* The checks both entry points share: an embeddings context and a pooling it can do. */
static spex_status check_embed(const spex_context_params *p, spex_pooling pooling, spex_error *err) {
    if (!p || !p->embeddings)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "embed: the context was not created with embeddings");
    if (pooling == SPEX_POOLING_RANK)
        return spex_error_set(err, SPEX_ERR_UNSUPPORTED, "embed: rank pooling needs a classification head, which "
                                                         "this model does not have");
    if (pooling < SPEX_POOLING_NONE || pooling > SPEX_POOLING_LAST)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "embed: pooling %d", (int)pooling);
    return SPEX_OK;
}

spex_status spex_embed_tokens(spex_context *ctx, int32_t seq, const int32_t *tokens, int32_t n, spex_pooling pooling,
                              spex_batch_token *scratch, float *out, spex_error *err) {
    const spex_context_params *p = spex_context_get_params(ctx);
    spex_status s0 = check_embed(p, pooling, err);
    if (s0 != SPEX_OK) return s0;
    if (n < 1 || !tokens || !out || !scratch)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "embed: empty input");
    if (n > p->n_ctx_per_seq)
        return spex_error_set(err, SPEX_ERR_RANGE, "embed: %d tokens exceed the context's %d positions", n,
                              p->n_ctx_per_seq);
    const int64_t E = spex_model_get_hparams(spex_context_model(ctx))->n_embd;
    spex_status s = spex_kv_seq_clear(ctx, seq, err);
    if (s != SPEX_OK) return s;
    if (pooling != SPEX_POOLING_NONE) memset(out, 0, (size_t)E * sizeof *out);
    /* only the rows pooling reads ask for output; a sequence longer than a batch continues
     * its cache, as causal attention allows */
    const int32_t chunk = p->n_outputs_max < p->n_batch_max ? p->n_outputs_max : p->n_batch_max;
    for (int32_t t0 = 0; t0 < n && s == SPEX_OK; t0 += chunk) {
        const int32_t k = n - t0 < chunk ? n - t0 : chunk;
        for (int32_t i = 0; i < k; i++) {
            const int32_t t = t0 + i;
            const bool want = pooling == SPEX_POOLING_NONE || pooling == SPEX_POOLING_MEAN ||
                              (pooling == SPEX_POOLING_CLS && t == 0) || (pooling == SPEX_POOLING_LAST && t == n - 1);
            scratch[i] = (spex_batch_token){.token = tokens[t], .pos = t, .seq = seq, .logits = want};
        }
        spex_batch b = {.tokens = scratch, .n_tokens = k};
        if ((s = spex_forward(ctx, &b, err)) != SPEX_OK) break;
        /* outputs are in batch order: for none/mean every row, for cls/last the one row */
        if (pooling == SPEX_POOLING_CLS || pooling == SPEX_POOLING_LAST) {
            if (spex_n_outputs(ctx) == 1) memcpy(out, spex_embeddings(ctx, 0), (size_t)E * sizeof *out);
        } else {
            pool_rows(ctx, pooling, t0, k, E, out);
        }
    }
    if (s == SPEX_OK && pooling == SPEX_POOLING_MEAN)
        for (int64_t e = 0; e < E; e++) out[e] /= (float)n;
    spex_status c = spex_kv_seq_clear(ctx, seq, NULL);
    return s != SPEX_OK ? s : c;
}

spex_status spex_embed_batch(spex_context *ctx, const int32_t *tokens, const int32_t *n_tokens, int32_t n_in,
                             spex_pooling pooling, spex_batch_token *scratch, float *out, spex_error *err) {
    const spex_context_params *p = spex_context_get_params(ctx);
    spex_status s0 = check_embed(p, pooling, err);
    if (s0 != SPEX_OK) return s0;
    if (n_in < 1 || n_in > p->n_seq_max || !tokens || !n_tokens || !out || !scratch)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "embed: %d inputs for %d sequences", n_in, p->n_seq_max);
    int32_t total = 0;
    for (int32_t i = 0; i < n_in; i++) {
        if (n_tokens[i] < 1 || n_tokens[i] > p->n_ctx_per_seq)
            return spex_error_set(err, n_tokens[i] < 1 ? SPEX_ERR_INVALID_ARG : SPEX_ERR_RANGE,
                                  "embed: input %d has %d tokens (1 .. %d)", i, n_tokens[i], p->n_ctx_per_seq);
        total += n_tokens[i];
        if (total > p->n_batch_max || total > p->n_outputs_max)
            return spex_error_set(err, SPEX_ERR_RANGE, "embed: the inputs exceed one batch of %d tokens",
                                  p->n_batch_max < p->n_outputs_max ? p->n_batch_max : p->n_outputs_max);
    }
    spex_status s = SPEX_OK;
    for (int32_t i = 0; i < n_in && s == SPEX_OK; i++) s = spex_kv_seq_clear(ctx, i, err);
    if (s != SPEX_OK) return s;
    /* input i is sequence i; only the rows pooling reads ask for output */
    for (int32_t i = 0, b = 0; i < n_in; i++) {
        for (int32_t t = 0; t < n_tokens[i]; t++, b++) {
            const bool want = pooling == SPEX_POOLING_NONE || pooling == SPEX_POOLING_MEAN ||
                              (pooling == SPEX_POOLING_CLS && t == 0) ||
                              (pooling == SPEX_POOLING_LAST && t == n_tokens[i] - 1);
            scratch[b] = (spex_batch_token){.token = tokens[b], .pos = t, .seq = i, .logits = want};
        }
    }
    spex_batch batch = {.tokens = scratch, .n_tokens = total};
    s = spex_forward(ctx, &batch, err);
    const int64_t E = spex_model_get_hparams(spex_context_model(ctx))->n_embd;
    /* outputs in batch order: none, every row (input after input, as out wants them); mean,
     * every row, summed per input; cls / last, one row per input */
    for (int32_t i = 0, o = 0; s == SPEX_OK && i < n_in; i++) {
        if (pooling == SPEX_POOLING_NONE) {
            memcpy(out + (int64_t)o * E, spex_embeddings(ctx, o), (size_t)(n_tokens[i] * E) * sizeof *out);
            o += n_tokens[i];
        } else if (pooling == SPEX_POOLING_MEAN) {
            float *v = out + (int64_t)i * E;
            memset(v, 0, (size_t)E * sizeof *v);
            for (int32_t t = 0; t < n_tokens[i]; t++, o++) {
                const float *h = spex_embeddings(ctx, o);
                for (int64_t e = 0; e < E; e++) v[e] += h[e];
            }
            for (int64_t e = 0; e < E; e++) v[e] /= (float)n_tokens[i];
        } else {
            memcpy(out + (int64_t)i * E, spex_embeddings(ctx, o++), (size_t)E * sizeof *out);
        }
    }
    for (int32_t i = 0; i < n_in; i++) (void)spex_kv_seq_clear(ctx, i, NULL);
    return s;
}
