/*
 * mtp.c — the qwen35 native MTP block as a drafter (include/spex.h "MTP drafter";
 * ../shared/docs/targets.md §8.1 graph, §8.2 chaining).
 *
 * What it is: per row, e = RMSNorm(embed(t); enorm), hh = RMSNorm(h; hnorm),
 * x = eh_proj · [e | hh], then one gated full-attention block on x at the row's position
 * with the MTP context's own KV cache, h_nextn = RMSNorm(.; shared_head_norm), logits =
 * head · h_nextn. The block is run by the ordinary qwen35 forward on a one-layer view of the
 * model (layer = blk.N, output_norm = shared_head_norm, output = the MTP head) whose layer-0
 * input is x instead of a token embedding (spex_context.x_in), so the attention, cache and
 * threading code is the target's own. What it is not: the speculative loop (src/spec/spec.c).
 *
 * h passed in is the target's id-N tap (pre-output_norm residual); the post-norm state of
 * §8.1 is RMSNorm(h; output_norm), computed here. Chained steps feed h_nextn, already normed.
 */
#include "gguf/api.h"
#include "model/api.h"
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct spex_mtp_context {
    const spex_model *target;
    spex_model view;          /* one-layer model: blk.N as layer 0 */
    spex_context *ctx;        /* KV cache, buffers, pool           */
    spex_mtp_params p;
    int32_t E, V;
    float *cat;               /* [n_batch_max][2E] [e | hh]        */
    float *x;                 /* [n_batch_max][E] eh_proj output   */
    float *h_step;            /* [n_seq][E] chained hidden (drafting) */
    void *mm_ws;
    spex_batch_token *bt;     /* [n_batch_max]                     */
    int32_t *dseq;            /* [n_seq] drafting blocks of a step */
    int32_t *len0;            /* [n_seq] cache length of each block at the start */
};

spex_mtp_params spex_mtp_default_params(void) {
    spex_mtp_params p;
    memset(&p, 0, sizeof p);
    p.n_seq_max = 1;
    p.n_batch_max = 512;
    p.kv_type = SPEX_TYPE_F16;
    p.n_threads = 1;
    return p;
}

void spex_mtp_free(spex_mtp_context *mc) {
    if (!mc) return;
    spex_context_free(mc->ctx);
    free(mc->cat);
    free(mc->x);
    free(mc->h_step);
    free(mc->mm_ws);
    free(mc->bt);
    free(mc->dseq);
    free(mc->len0);
    free(mc);
}

spex_status spex_mtp_init(const spex_model *m, const spex_mtp_params *params, spex_mtp_context **out,
                          spex_error *err) {
    if (!out) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "mtp: init: out is NULL");
    *out = NULL;
    if (!m) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "mtp: init: model is NULL");
    if (!m->has_mtp)
        return spex_error_set(err, SPEX_ERR_UNSUPPORTED,
                              "mtp: %s has no MTP block (%s.nextn_predict_layers is 0 or absent): use a DFlash "
                              "drafter (-md) instead",
                              spex_gguf_path(m->gguf), spex_arch_name(m->hp.arch));
    spex_mtp_params p = params ? *params : spex_mtp_default_params();
    if (p.n_batch_max < 1)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "mtp: n_batch_max %d, expected >= 1", p.n_batch_max);
    spex_mtp_context *mc = calloc(1, sizeof *mc);
    if (!mc) return spex_error_set(err, SPEX_ERR_NOMEM, "mtp: out of memory");
    mc->target = m;
    mc->view = *m;
    mc->view.layers = (model_layer *)&m->mtp.layer;
    mc->view.hp.n_layer = 1;
    mc->view.hp.n_recurrent = 0;
    mc->view.hp.n_nextn = 0;
    mc->view.n_kv_layers = 1;
    mc->view.has_mtp = false;
    mc->view.output_norm = m->mtp.head_norm;
    mc->view.output = m->mtp.head;
    mc->view.tok_embd = m->mtp.embed;
    mc->view.params.verbose = false;
    mc->E = m->hp.n_embd;
    mc->V = m->hp.n_vocab;

    spex_context_params cp = spex_context_default_params();
    cp.n_seq_max = p.n_seq_max;
    cp.n_ctx_per_seq = p.n_ctx_per_seq;
    cp.n_batch_max = p.n_batch_max;
    cp.n_outputs_max = p.n_batch_max;
    cp.kv_type = p.kv_type;
    cp.n_threads = p.n_threads;
    cp.pool = p.pool;
    spex_status s = spex_context_init(&mc->view, &cp, &mc->ctx, err);
    if (s != SPEX_OK) {
        spex_mtp_free(mc);
        return s;
    }
    p.n_batch_max = spex_context_get_params(mc->ctx)->n_batch_max;
    p.n_ctx_per_seq = spex_context_get_params(mc->ctx)->n_ctx_per_seq;
    mc->p = p;
    const size_t nb = (size_t)p.n_batch_max, E = (size_t)mc->E;
    mc->cat = malloc(sizeof(float) * nb * 2 * E);
    mc->x = malloc(sizeof(float) * nb * E);
    mc->h_step = malloc(sizeof(float) * (size_t)p.n_seq_max * E);
    mc->mm_ws = malloc(spex_matmul_ws_size(m->mtp.eh_proj.type, 2 * (int64_t)E, p.n_batch_max) + 64);
    mc->bt = malloc(sizeof *mc->bt * nb);
    mc->dseq = malloc(sizeof(int32_t) * (size_t)p.n_seq_max);
    mc->len0 = malloc(sizeof(int32_t) * (size_t)p.n_seq_max);
    if (!mc->cat || !mc->x || !mc->h_step || !mc->mm_ws || !mc->bt || !mc->dseq || !mc->len0) {
        spex_mtp_free(mc);
        return spex_error_set(err, SPEX_ERR_NOMEM, "mtp: out of memory");
    }
    spex_model_log(m, "mtp: MTP drafter context: %d seq x %d ctx, batch %d, KV %.2f MiB, %s hidden", p.n_seq_max,
                   p.n_ctx_per_seq, p.n_batch_max, (double)spex_context_memory(mc->ctx).kv / 1048576.0,
                   p.hidden_pre_norm ? "pre-norm" : "post-norm");
    *out = mc;
    return SPEX_OK;
}

const spex_mtp_params *spex_mtp_get_params(const spex_mtp_context *mc) { return mc ? &mc->p : NULL; }
int32_t spex_mtp_seq_len(const spex_mtp_context *mc, int32_t seq) { return mc ? spex_kv_seq_len(mc->ctx, seq) : -1; }
spex_status spex_mtp_seq_truncate(spex_mtp_context *mc, int32_t seq, int32_t new_len, spex_error *err) {
    if (!mc) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "mtp: truncate: context is NULL");
    return spex_kv_seq_truncate(mc->ctx, seq, new_len, err);
}
const float *spex_mtp_logits(const spex_mtp_context *mc, int32_t i) { return mc ? spex_logits(mc->ctx, i) : NULL; }
const float *spex_mtp_hidden(const spex_mtp_context *mc, int32_t i) {
    if (!mc || i < 0 || i >= spex_n_outputs(mc->ctx)) return NULL;
    return mc->ctx->b.hout + (size_t)i * (size_t)mc->E;
}

/* Rows bt[0..n): cat = [RMSNorm(embed; enorm) | RMSNorm(h'; hnorm)] with h' = the hidden row
 * (target tap normed by output_norm when `target_h`, else as given; zero at position 0);
 * x = eh_proj · cat; then the one-layer forward with every row's logits. */
static spex_status mtp_run(spex_mtp_context *mc, const float *h, bool target_h, int32_t n, spex_error *err) {
    const spex_model *m = mc->target;
    const spex_ops_kernels *k = spex_ops_get();
    const int64_t E = mc->E;
    const float eps = m->hp.rms_eps;
    for (int32_t i = 0; i < n; i++) {
        if (mc->bt[i].token < 0 || mc->bt[i].token >= mc->V)
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "mtp: row %d: token %d, expected 0 .. %d", i,
                                  mc->bt[i].token, mc->V - 1);
        float *e = mc->cat + (int64_t)i * 2 * E, *hh = e + E;
        spex_model_weight_row(&m->mtp.embed, mc->bt[i].token, e);
        k->rmsnorm(e, m->mtp.enorm, e, E, eps);
        if (mc->bt[i].pos == 0) {
            memset(hh, 0, sizeof(float) * (size_t)E);
            continue;
        }
        const float *hi = h + (int64_t)i * E;
        if (target_h && !mc->p.hidden_pre_norm) {
            k->rmsnorm(hi, m->output_norm, hh, E, eps);
            k->rmsnorm(hh, m->mtp.hnorm, hh, E, eps);
        } else {
            k->rmsnorm(hi, m->mtp.hnorm, hh, E, eps);
        }
    }
    spex_matmul_args a = {
        .pool = spex_context_pool(mc->ctx), .wtype = m->mtp.eh_proj.type, .W = m->mtp.eh_proj.data,
        .n_out = E, .n = 2 * E, .X = mc->cat, .ldx = 2 * E, .n_rows = n, .Y = mc->x, .ldy = E, .ws = mc->mm_ws,
        .w_r16 = m->mtp.eh_proj.r16,
    };
    spex_status ms = spex_matmul(spex_context_pool(mc->ctx), &a);
    if (ms != SPEX_OK) return spex_error_set(err, ms, "mtp: eh_proj matmul failed");
    mc->ctx->x_in = mc->x;
    spex_batch b = {.tokens = mc->bt, .n_tokens = n};
    spex_status s = spex_forward(mc->ctx, &b, err);
    mc->ctx->x_in = NULL;
    return s;
}

spex_status spex_mtp_feed(spex_mtp_context *mc, const int32_t *tokens, const int32_t *pos, const int32_t *seq,
                          const float *h, int32_t n, spex_error *err) {
    if (!mc || n < 1 || !tokens || !pos || !seq || !h)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "mtp: feed: bad arguments (%d rows)", n);
    if (n > mc->p.n_batch_max)
        return spex_error_set(err, SPEX_ERR_RANGE, "mtp: feed: %d rows exceed n_batch_max %d", n, mc->p.n_batch_max);
    for (int32_t i = 0; i < n; i++)
        mc->bt[i] = (spex_batch_token){.token = tokens[i], .pos = pos[i], .seq = seq[i], .logits = true};
    return mtp_run(mc, h, true, n, err);
}

spex_status spex_mtp_draft(spex_mtp_context *mc, const spex_mtp_block *blocks, int32_t n_blocks, float p_min,
                           spex_draft *out, spex_error *err) {
    if (!mc || !blocks || !out || n_blocks < 1 || n_blocks > mc->p.n_seq_max || n_blocks > mc->p.n_batch_max)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "mtp: draft: bad arguments (%d blocks)", n_blocks);
    const int64_t E = mc->E;
    int32_t steps = 0;
    for (int32_t b = 0; b < n_blocks; b++) {
        if (blocks[b].n_max < 1 || blocks[b].n_max > SPEX_DRAFT_MAX_N || !blocks[b].h ||
            spex_kv_seq_len(mc->ctx, blocks[b].seq) < 0)
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "mtp: draft: block %d (sequence %d, n_max %d)", b,
                                  blocks[b].seq, blocks[b].n_max);
        for (int32_t j = 0; j < b; j++)
            if (blocks[j].seq == blocks[b].seq)
                return spex_error_set(err, SPEX_ERR_INVALID_ARG, "mtp: draft: sequence %d in two blocks", blocks[b].seq);
        mc->len0[b] = spex_kv_seq_len(mc->ctx, blocks[b].seq);
        out[b].n = 0;
        out[b].has_q = false;
        out[b].n_cand = 1;
        if (blocks[b].n_max > steps) steps = blocks[b].n_max;
    }
    spex_status s = SPEX_OK;
    for (int32_t step = 0; step < steps && s == SPEX_OK; step++) {
        /* This step's rows: every block still drafting. */
        int32_t n = 0;
        for (int32_t b = 0; b < n_blocks; b++) {
            if (out[b].n != step || step >= blocks[b].n_max) continue;
            const int32_t sq = blocks[b].seq;
            const int32_t tok = step == 0 ? blocks[b].anchor : out[b].ids[step - 1];
            mc->bt[n] = (spex_batch_token){.token = tok, .pos = spex_kv_seq_len(mc->ctx, sq), .seq = sq, .logits = true};
            /* the hidden rows go straight to x (mtp_run's input, free until its matmul) */
            memcpy(mc->x + (int64_t)n * E, step == 0 ? blocks[b].h : mc->h_step + (int64_t)b * E,
                   sizeof(float) * (size_t)E);
            mc->dseq[n++] = b;
        }
        if (n == 0) break;
        /* step 0: the target's tap, normed by output_norm in mtp_run; later: h_nextn, already normed */
        s = mtp_run(mc, mc->x, step == 0, n, err);
        if (s != SPEX_OK) break;
        for (int32_t i = 0; i < n; i++) {
            const int32_t b = mc->dseq[i];
            const float *z = spex_logits(mc->ctx, i);
            int32_t best = 0;
            float zmax = z[0];
            for (int32_t v = 1; v < mc->V; v++)
                if (z[v] > zmax) zmax = z[v], best = v;
            double sum = 0.0;
            for (int32_t v = 0; v < mc->V; v++) sum += exp((double)(z[v] - zmax));
            const float conf = (float)(1.0 / sum);
            if (p_min > 0.0f && conf < p_min) continue;   /* stops: out[b].n stays = step */
            out[b].ids[out[b].n] = best;
            out[b].kidx[out[b].n] = 0;
            out[b].conf[out[b].n] = conf;
            out[b].cand[out[b].n][0] = best;
            out[b].n++;
            memcpy(mc->h_step + (int64_t)b * E, spex_mtp_hidden(mc, i), sizeof(float) * (size_t)E);
        }
    }
    /* Leave every cache as it was: the draft rows were scratch. */
    for (int32_t b = 0; b < n_blocks; b++) {
        spex_status ts = spex_kv_seq_truncate(mc->ctx, blocks[b].seq, mc->len0[b], err);
        if (s == SPEX_OK) s = ts;
    }
    return s;
}
