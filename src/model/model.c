/*
 * model.c — spex_model_load and the model getters (include/spex.h, "Models").
 *
 * What it is: the architecture table, the reading of <arch>.* hyper-parameters with the
 * defaults of ../shared/docs/targets.md §4.1 (llama) and §5.1 (qwen3), and the validation of
 * every tensor the forward pass reads: presence, type (matmul-able for 2-D weights, F32 for
 * norms) and exact shape, with errors that name the tensor and both shapes. Weights are
 * views into the GGUF mapping; nothing is copied. What it is not: the forward pass
 * (forward.c) or any per-run state (context.c).
 *
 * Architectures: a row in `archs`; llama and qwen3 load here, qwen35 in model_qwen35.c
 * with the shared helpers declared in model.h.
 */
#include "gguf/api.h"
#include "model/model.h"
#include "tensor/api.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Upper bound on every dimension read from a file: keeps all size products far from
 * overflow (2^24 * 2^24 * 4 bytes < 2^63) while allowing any real model. */
#define DIM_MAX (1 << 24)

/* ======================================================================== */
/* Logging                                                                   */
/* ======================================================================== */

void spex_model_log(const spex_model *m, const char *fmt, ...) {
    if (!m->params.verbose) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (m->params.log) m->params.log(m->params.log_user, line);
    else fprintf(stderr, "%s\n", line);
}

/* ======================================================================== */
/* Hyper-parameters                                                          */
/* ======================================================================== */


const char *spex_model_kname(key_reader *r, const char *suffix) {
    snprintf(r->key, sizeof r->key, "%s.%s", r->arch, suffix);
    return r->key;
}

static bool has_key(key_reader *r, const char *suffix) { return spex_gguf_find_key(r->g, spex_model_kname(r, suffix)) >= 0; }

/* A positive dimension, required or with a default (def < 0: required). */
spex_status spex_model_read_dim(key_reader *r, const char *suffix, int64_t def, int32_t *out, spex_error *err) {
    const char *key = spex_model_kname(r, suffix);
    if (spex_gguf_find_key(r->g, key) < 0) {
        if (def < 0)
            return spex_error_set(err, SPEX_ERR_NOT_FOUND, "%s: required key '%s' is missing",
                                  spex_gguf_path(r->g), key);
        *out = (int32_t)def;
        return SPEX_OK;
    }
    int64_t v;
    spex_status s = spex_gguf_get_i64(r->g, key, &v, err);
    if (s != SPEX_OK) return s;
    if (v < 1 || v > DIM_MAX)
        return spex_error_set(err, SPEX_ERR_RANGE, "%s: key '%s' = %" PRId64 ", expected 1 .. %d",
                              spex_gguf_path(r->g), key, v, DIM_MAX);
    *out = (int32_t)v;
    return SPEX_OK;
}

spex_status spex_model_read_f32(key_reader *r, const char *suffix, float def, bool required, float *out,
                            spex_error *err) {
    const char *key = spex_model_kname(r, suffix);
    if (spex_gguf_find_key(r->g, key) < 0) {
        if (required)
            return spex_error_set(err, SPEX_ERR_NOT_FOUND, "%s: required key '%s' is missing",
                                  spex_gguf_path(r->g), key);
        *out = def;
        return SPEX_OK;
    }
    return spex_gguf_get_f32(r->g, key, out, err);
}

/* The keys shared by the dense architectures (targets.md §4.1; qwen3 §5.1 uses the same
 * names). Shapes that need tensors (V) are filled in later. */
spex_status spex_model_read_dense_hparams(key_reader *r, spex_model_hparams *hp, spex_error *err) {
    const char *path = spex_gguf_path(r->g);
    spex_status s;
    if ((s = spex_model_read_dim(r, "block_count", -1, &hp->n_layer, err)) ||
        (s = spex_model_read_dim(r, "context_length", -1, &hp->n_ctx_train, err)) ||
        (s = spex_model_read_dim(r, "embedding_length", -1, &hp->n_embd, err)) ||
        (s = spex_model_read_dim(r, "feed_forward_length", -1, &hp->n_ff, err)) ||
        (s = spex_model_read_dim(r, "attention.head_count", -1, &hp->n_head, err)) ||
        (s = spex_model_read_dim(r, "attention.head_count_kv", hp->n_head, &hp->n_head_kv, err)))
        return s;
    /* Every layer needs several tensors: a block count beyond the tensor count is a hostile or
     * broken file, refused before anything is sized by it. */
    if ((int64_t)hp->n_layer > spex_gguf_n_tensors(r->g))
        return spex_error_set(err, SPEX_ERR_FORMAT, "%s: %s.block_count %d exceeds the file's %lld tensors", path,
                              r->arch, hp->n_layer, (long long)spex_gguf_n_tensors(r->g));
    if (hp->n_head_kv > hp->n_head || hp->n_head % hp->n_head_kv != 0)
        return spex_error_set(err, SPEX_ERR_FORMAT,
                              "%s: %s.attention.head_count %d is not a multiple of head_count_kv %d", path,
                              r->arch, hp->n_head, hp->n_head_kv);
    /* head_dim: key_length when present (qwen3: 128, not E/H), else E/H. */
    int32_t def_hd = hp->n_embd % hp->n_head == 0 ? hp->n_embd / hp->n_head : -1;
    if (!has_key(r, "attention.key_length") && def_hd < 0)
        return spex_error_set(err, SPEX_ERR_FORMAT,
                              "%s: no %s.attention.key_length and embedding_length %d is not a multiple of "
                              "head_count %d",
                              path, r->arch, hp->n_embd, hp->n_head);
    if ((s = spex_model_read_dim(r, "attention.key_length", def_hd, &hp->head_dim, err))) return s;
    int32_t vlen;
    if ((s = spex_model_read_dim(r, "attention.value_length", hp->head_dim, &vlen, err))) return s;
    if (vlen != hp->head_dim)
        return spex_error_set(err, SPEX_ERR_UNSUPPORTED,
                              "%s: %s.attention.value_length %d differs from key_length %d (unsupported)", path,
                              r->arch, vlen, hp->head_dim);
    if ((s = spex_model_read_dim(r, "rope.dimension_count", hp->head_dim, &hp->n_rot, err))) return s;
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2 != 0 || hp->n_rot > SPEX_ROPE_MAX_ROT)
        return spex_error_set(err, SPEX_ERR_FORMAT,
                              "%s: %s.rope.dimension_count %d: expected an even value <= head_dim %d", path,
                              r->arch, hp->n_rot, hp->head_dim);
    if ((s = spex_model_read_f32(r, "rope.freq_base", 10000.0f, false, &hp->rope_freq_base, err))) return s;
    if (!(hp->rope_freq_base > 0.0f))
        return spex_error_set(err, SPEX_ERR_RANGE, "%s: %s.rope.freq_base %g: expected > 0", path, r->arch,
                              (double)hp->rope_freq_base);
    if ((s = spex_model_read_f32(r, "attention.layer_norm_rms_epsilon", 0.0f, true, &hp->rms_eps, err))) return s;
    if (!(hp->rms_eps >= 0.0f) || hp->rms_eps > 1.0f)
        return spex_error_set(err, SPEX_ERR_RANGE, "%s: %s.attention.layer_norm_rms_epsilon %g: expected 0 .. 1",
                              path, r->arch, (double)hp->rms_eps);

    /* RoPE scaling: "linear" divides positions by the factor; the others change the
     * frequencies in ways spex does not implement yet. */
    hp->rope_freq_scale = 1.0f;
    const char *st_key = spex_model_kname(r, "rope.scaling.type");
    if (spex_gguf_find_key(r->g, st_key) >= 0) {
        spex_str st;
        if ((s = spex_gguf_get_str(r->g, st_key, &st, err))) return s;
        if (st.len == 6 && !memcmp(st.ptr, "linear", 6)) {
            float f;
            if ((s = spex_model_read_f32(r, "rope.scaling.factor", 1.0f, false, &f, err))) return s;
            if (!(f >= 1.0f))
                return spex_error_set(err, SPEX_ERR_RANGE, "%s: %s.rope.scaling.factor %g: expected >= 1", path,
                                      r->arch, (double)f);
            hp->rope_freq_scale = 1.0f / f;
        } else if (!(st.len == 4 && !memcmp(st.ptr, "none", 4))) {
            return spex_error_set(err, SPEX_ERR_UNSUPPORTED, "%s: %s = '%.*s': only 'none' and 'linear' are supported",
                                  path, st_key, (int)(st.len > 32 ? 32 : st.len), st.ptr);
        }
    }
    if (has_key(r, "expert_count")) {
        int64_t ne;
        if ((s = spex_gguf_get_i64(r->g, spex_model_kname(r, "expert_count"), &ne, err))) return s;
        if (ne > 0)
            return spex_error_set(err, SPEX_ERR_UNSUPPORTED, "%s: %s.expert_count = %" PRId64 ": MoE models are not supported",
                                  path, r->arch, ne);
    }
    return SPEX_OK;
}

/* ======================================================================== */
/* Tensors                                                                   */
/* ======================================================================== */


static void fmt_shape(char *buf, size_t cap, const int64_t *ne, uint32_t n_dims) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, cap - o, "[");
    for (uint32_t i = 0; i < n_dims && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%" PRId64, i ? ", " : "", ne[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

/* Finds tensor `name` and checks it: a matrix {ne0, ne1} of a type with a matmul kernel, or
 * a norm vector {ne0} in F32. optional: absence is fine (*w zeroed). */
spex_status spex_model_find_weight(spex_model *m, const char *name, model_wkind kind, int64_t ne0, int64_t ne1, bool optional,
                               model_weight *w, spex_error *err) {
    const char *path = spex_gguf_path(m->gguf);
    memset(w, 0, sizeof *w);
    const spex_tensor_info *t = spex_gguf_find_tensor(m->gguf, name);
    if (!t) {
        if (optional) return SPEX_OK;
        return spex_error_set(err, SPEX_ERR_NOT_FOUND, "%s: tensor '%s' is missing", path, name);
    }
    const int64_t want[SPEX_MAX_DIMS] = {ne0, kind == W_NORM ? 1 : ne1, 1, 1};
    const uint32_t want_dims = kind == W_NORM ? 1 : 2;
    bool same = true;
    for (int i = 0; i < SPEX_MAX_DIMS; i++) same &= t->ne[i] == want[i];
    if (!same) {
        char got_s[96], want_s[96];
        fmt_shape(got_s, sizeof got_s, t->ne, t->n_dims ? t->n_dims : 1);
        fmt_shape(want_s, sizeof want_s, want, want_dims);
        return spex_error_set(err, SPEX_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected %s", path, name, got_s,
                              want_s);
    }
    const spex_type_info *ti = spex_type_get_info((int)t->type);
    const char *tname = ti ? ti->name : "unknown";
    if (kind != W_MATRIX) {
        if (t->type != SPEX_TYPE_F32)
            return spex_error_set(err, SPEX_ERR_TYPE, "%s: tensor '%s' has type %s, expected f32 (%s)", path, name,
                                  tname, kind == W_NORM ? "norm weights" : "read element-wise");
    } else {
        const spex_type act = spex_matmul_act_type(t->type);
        const spex_matmul_kernels *k = spex_matmul_kernels_get();
        if (act == SPEX_TYPE_COUNT || !k->dot[t->type] || !k->act_quant[act])
            return spex_error_set(err, SPEX_ERR_TYPE,
                                  "%s: tensor '%s' has type %s, which spex cannot multiply (expected f32, f16, bf16, "
                                  "q8_0, q4_0, q4_1, q5_0, q5_1, q4_K, q5_K or q6_K)",
                                  path, name, tname);
        const spex_type_info *ai = spex_type_get_info((int)act);
        if (ne0 % ti->block_size != 0 || ne0 % ai->block_size != 0)
            return spex_error_set(err, SPEX_ERR_FORMAT,
                                  "%s: tensor '%s': row length %" PRId64 " is not a multiple of the %s block (%" PRId64 ")",
                                  path, name, ne0, tname, ti->block_size > ai->block_size ? ti->block_size : ai->block_size);
    }
    /* Kernels and the reference dequantizers read f32 / f16 fields in place. */
    if ((uintptr_t)t->data % sizeof(float) != 0)
        return spex_error_set(err, SPEX_ERR_FORMAT, "%s: tensor '%s': data is not 4-byte aligned (general.alignment)",
                              path, name);
    w->t = t;
    w->data = t->data;
    w->type = t->type;
    w->n_in = ne0;
    w->n_out = kind == W_NORM ? 1 : ne1;
    m->weight_bytes += t->nbytes;
    m->n_params += (uint64_t)ne0 * (uint64_t)w->n_out;
    return SPEX_OK;
}

spex_status spex_model_find_norm(spex_model *m, const char *name, int64_t n, bool optional, const float **out,
                             spex_error *err) {
    model_weight w;
    spex_status s = spex_model_find_weight(m, name, W_NORM, n, 1, optional, &w, err);
    *out = w.data;
    return s;
}

/* Tensors spex does not implement yet: refused by name rather than silently ignored. */
spex_status spex_model_refuse_tensor(spex_model *m, const char *name, const char *why, spex_error *err) {
    if (spex_gguf_find_tensor(m->gguf, name))
        return spex_error_set(err, SPEX_ERR_UNSUPPORTED, "%s: tensor '%s': %s", spex_gguf_path(m->gguf), name, why);
    return SPEX_OK;
}

spex_status spex_model_load_globals(spex_model *m, spex_error *err) {
    spex_model_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd;
    const char *path = spex_gguf_path(m->gguf);
    spex_status s;

    const spex_tensor_info *te = spex_gguf_find_tensor(m->gguf, "token_embd.weight");
    if (!te) return spex_error_set(err, SPEX_ERR_NOT_FOUND, "%s: tensor 'token_embd.weight' is missing", path);
    if (te->ne[1] < 1 || te->ne[1] > DIM_MAX)
        return spex_error_set(err, SPEX_ERR_FORMAT, "%s: tensor 'token_embd.weight': vocabulary %" PRId64 " out of range",
                              path, te->ne[1]);
    hp->n_vocab = (int32_t)te->ne[1];
    char key[160];
    snprintf(key, sizeof key, "%s.vocab_size", spex_arch_name(hp->arch));
    if (spex_gguf_find_key(m->gguf, key) >= 0) {
        int64_t v;
        if ((s = spex_gguf_get_i64(m->gguf, key, &v, err))) return s;
        if (v != hp->n_vocab)
            return spex_error_set(err, SPEX_ERR_FORMAT, "%s: %s = %" PRId64 " but token_embd.weight has %d rows", path, key,
                                  v, hp->n_vocab);
    }
    if ((s = spex_model_find_weight(m, "token_embd.weight", W_MATRIX, E, hp->n_vocab, false, &m->tok_embd, err))) return s;
    if ((s = spex_model_find_norm(m, "output_norm.weight", E, false, &m->output_norm, err))) return s;
    if ((s = spex_model_find_weight(m, "output.weight", W_MATRIX, E, hp->n_vocab, true, &m->output, err))) return s;
    hp->tied_output = m->output.t == NULL;
    if (hp->tied_output) m->output = m->tok_embd;
    return spex_model_refuse_tensor(m, "rope_freqs.weight", "RoPE frequency factors are not supported", err);
}

/* llama and qwen3: targets.md §4.2 and §5.2. */
static spex_status load_dense_tensors(spex_model *m, spex_error *err) {
    spex_model_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, F = hp->n_ff, hd = hp->head_dim;
    const int64_t q_dim = (int64_t)hp->n_head * hd, kv_dim = (int64_t)hp->n_head_kv * hd;
    const char *path = spex_gguf_path(m->gguf);
    spex_status s;
    if ((s = spex_model_load_globals(m, err))) return s;
    m->n_kv_layers = hp->n_layer;

    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) return spex_error_set(err, SPEX_ERR_NOMEM, "%s: out of memory", path);
    static const char *const biases[] = {"attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.bias",
                                         "ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"};
    char name[96];
#define NAME(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, l), name)
    for (int l = 0; l < hp->n_layer; l++) {
        model_layer *L = &m->layers[l];
        L->kv_index = l;
        L->rs_index = -1;
        if ((s = spex_model_find_norm(m, NAME("attn_norm.weight"), E, false, &L->attn_norm, err)) ||
            (s = spex_model_find_weight(m, NAME("attn_q.weight"), W_MATRIX, E, q_dim, false, &L->wq, err)) ||
            (s = spex_model_find_weight(m, NAME("attn_k.weight"), W_MATRIX, E, kv_dim, false, &L->wk, err)) ||
            (s = spex_model_find_weight(m, NAME("attn_v.weight"), W_MATRIX, E, kv_dim, false, &L->wv, err)) ||
            (s = spex_model_find_weight(m, NAME("attn_output.weight"), W_MATRIX, q_dim, E, false, &L->wo, err)) ||
            (s = spex_model_find_norm(m, NAME("ffn_norm.weight"), E, false, &L->ffn_norm, err)) ||
            (s = spex_model_find_weight(m, NAME("ffn_gate.weight"), W_MATRIX, E, F, false, &L->w_gate, err)) ||
            (s = spex_model_find_weight(m, NAME("ffn_up.weight"), W_MATRIX, E, F, false, &L->w_up, err)) ||
            (s = spex_model_find_weight(m, NAME("ffn_down.weight"), W_MATRIX, F, E, false, &L->w_down, err)))
            return s;
        if (hp->qk_norm) {
            if ((s = spex_model_find_norm(m, NAME("attn_q_norm.weight"), hd, false, &L->q_norm, err)) ||
                (s = spex_model_find_norm(m, NAME("attn_k_norm.weight"), hd, false, &L->k_norm, err)))
                return s;
        }
        for (size_t i = 0; i < sizeof biases / sizeof biases[0]; i++) {
            snprintf(name, sizeof name, "blk.%d.%s", l, biases[i]);
            if ((s = spex_model_refuse_tensor(m, name, "bias tensors are not supported", err))) return s;
        }
    }
#undef NAME
    return SPEX_OK;
}

/* ======================================================================== */
/* Architectures                                                             */
/* ======================================================================== */

typedef struct arch_desc {
    spex_arch arch;
    const char *name;
    spex_rope_mode rope;
    bool qk_norm;
} arch_desc;

static const arch_desc archs[] = {
    {SPEX_ARCH_LLAMA, "llama", SPEX_ROPE_NORM, false},
    {SPEX_ARCH_QWEN3, "qwen3", SPEX_ROPE_NEOX, true},
    {SPEX_ARCH_QWEN35, "qwen35", SPEX_ROPE_NEOX, true},
};
#define N_ARCHS (int)(sizeof archs / sizeof archs[0])

const char *spex_arch_name(spex_arch arch) {
    for (int i = 0; i < N_ARCHS; i++)
        if (archs[i].arch == arch) return archs[i].name;
    return "?";
}

static const char *rope_name(int mode) { return mode == SPEX_ROPE_NEOX ? "neox" : "norm"; }

spex_model_params spex_model_default_params(void) {
    spex_model_params p;
    memset(&p, 0, sizeof p);
    return p;
}

/* The type most of the weight bytes are in, for the load line. */
static const char *main_type(const spex_model *m) {
    uint64_t bytes[SPEX_TYPE_COUNT] = {0};
    for (int64_t i = 0; i < spex_gguf_n_tensors(m->gguf); i++) {
        const spex_tensor_info *t = spex_gguf_tensor(m->gguf, i);
        if ((int)t->type < SPEX_TYPE_COUNT) bytes[t->type] += t->nbytes;
    }
    int best = 0;
    for (int i = 1; i < SPEX_TYPE_COUNT; i++)
        if (bytes[i] > bytes[best]) best = i;
    const spex_type_info *ti = spex_type_get_info(best);
    return ti ? ti->name : "?";
}

/* The matmul weights into the R16 layout where the kernels gain from it (repack_weights.c).
 * An embedding table that is also the LM head (tied) follows the head into the new layout:
 * embeddings are read through spex_model_weight_row, which reads either layout. */
static spex_status repack_model(spex_model *m, spex_error *err) {
    if (m->params.no_repack) return SPEX_OK;
    const int per_layer = 12;
    const int n = m->hp.n_layer * per_layer + 2 + per_layer + 1;
    model_weight **ws = calloc((size_t)n, sizeof *ws);
    if (!ws) return spex_error_set(err, SPEX_ERR_NOMEM, "%s: out of memory", spex_gguf_path(m->gguf));
    int k = 0;
    for (int32_t l = 0; l <= m->hp.n_layer; l++) {
        model_layer *L = l < m->hp.n_layer ? &m->layers[l] : m->has_mtp ? &m->mtp.layer : NULL;
        if (!L) continue;
        model_weight *lw[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down, &L->w_qkv,
                              &L->w_z, &L->w_beta, &L->w_alpha, &L->w_ssm_out};
        for (int i = 0; i < per_layer; i++) ws[k++] = lw[i];
    }
    ws[k++] = &m->output;
    if (m->has_mtp) {
        ws[k++] = &m->mtp.eh_proj;
        ws[k++] = &m->mtp.head;
    }
    spex_status s = spex_model_repack(ws, k, NULL, 0, m->gguf, &m->repack, err);
    free(ws);
    model_weight *emb[2] = {&m->tok_embd, m->has_mtp ? &m->mtp.embed : NULL};
    for (int e = 0; e < 2 && s == SPEX_OK; e++)
        for (int j = 0; emb[e] && j < m->repack.n; j++)
            if (emb[e]->data == m->repack.src[j]) emb[e]->data = m->repack.bufs[j], emb[e]->r16 = true;
    return s;
}

spex_status spex_model_load(const char *path, const spex_model_params *params, spex_model **out, spex_error *err) {
    if (!out) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spex_model_load: out is NULL");
    *out = NULL;
    if (!path) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spex_model_load: path is NULL");
    spex_gguf *g = NULL;
    spex_status s = params && params->no_mmap ? spex_gguf_open_read(path, &g, err) : spex_gguf_open(path, &g, err);
    if (s != SPEX_OK) return s;
    return spex_model_load_gguf(g, params, out, err);
}

spex_status spex_model_load_gguf(spex_gguf *g, const spex_model_params *params, spex_model **out, spex_error *err) {
    if (!out || !g) {
        spex_gguf_close(g);
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spex_model_load_gguf: NULL %s", out ? "gguf" : "out");
    }
    *out = NULL;
    const char *path = spex_gguf_path(g);
    spex_model *m = calloc(1, sizeof *m);
    if (!m) {
        spex_gguf_close(g);
        return spex_error_set(err, SPEX_ERR_NOMEM, "%s: out of memory", path);
    }
    m->params = params ? *params : spex_model_default_params();
    m->params.overrides = NULL;   /* borrowed for the call only */
    m->params.n_overrides = 0;
    m->gguf = g;
    spex_status s;
    if (params && (params->n_overrides < 0 || (params->n_overrides > 0 && !params->overrides))) {
        s = spex_error_set(err, SPEX_ERR_INVALID_ARG, "spex_model_load: bad overrides (%d entries)", params->n_overrides);
        goto fail;
    }
    for (int32_t i = 0; params && i < params->n_overrides; i++)
        if ((s = spex_gguf_override(g, params->overrides[i], err))) goto fail;

    spex_str an;
    if ((s = spex_gguf_get_str(m->gguf, "general.architecture", &an, err))) goto fail;
    const arch_desc *ad = NULL;
    for (int i = 0; i < N_ARCHS; i++)
        if (an.len == strlen(archs[i].name) && !memcmp(an.ptr, archs[i].name, an.len)) ad = &archs[i];
    if (!ad) {
        s = spex_error_set(err, SPEX_ERR_UNSUPPORTED,
                           "%s: general.architecture '%.*s' is not supported (spex loads llama, qwen3 and qwen35)",
                           path,
                           (int)(an.len > 64 ? 64 : an.len), an.ptr);
        goto fail;
    }
    m->hp.arch = ad->arch;
    m->hp.rope_mode = ad->rope;
    m->hp.qk_norm = ad->qk_norm;

    key_reader r = {.g = m->gguf, .arch = ad->name};
    if ((s = spex_model_read_dense_hparams(&r, &m->hp, err))) goto fail;
    if (ad->arch == SPEX_ARCH_QWEN35) s = spex_model_load_qwen35(m, &r, err);
    else s = load_dense_tensors(m, err);
    if (s != SPEX_OK) goto fail;
    if ((s = repack_model(m, err)) != SPEX_OK) goto fail;

    const spex_model_hparams *hp = &m->hp;
    spex_model_log(m,
                   "model: %s %s: %d layers, E %d, H %d/%d, hd %d, F %d, V %d, rope %s n_rot %d base %g, ctx %d, "
                   "%s output, weights %.2f MiB (mostly %s, mapped; %.2f MiB of it in R16 copies), %.3f M params",
                   spex_arch_name(hp->arch), path, hp->n_layer, hp->n_embd, hp->n_head, hp->n_head_kv, hp->head_dim,
                   hp->n_ff, hp->n_vocab, rope_name(hp->rope_mode), hp->n_rot, (double)hp->rope_freq_base,
                   hp->n_ctx_train, hp->tied_output ? "tied" : "untied", (double)m->weight_bytes / (1024.0 * 1024.0),
                   main_type(m), (double)m->repack.bytes / (1024.0 * 1024.0), (double)m->n_params / 1e6);
    *out = m;
    return SPEX_OK;
fail:
    spex_model_free(m);
    return s;
}

void spex_model_free(spex_model *m) {
    if (!m) return;
    spex_model_repack_free(&m->repack);
    free(m->layers);
    spex_gguf_close(m->gguf);
    free(m);
}

const spex_model_hparams *spex_model_get_hparams(const spex_model *m) { return m ? &m->hp : NULL; }
const spex_gguf *spex_model_gguf(const spex_model *m) { return m ? m->gguf : NULL; }
spex_arch spex_model_arch(const spex_model *m) { return m ? m->hp.arch : (spex_arch)0; }
int32_t spex_model_n_vocab(const spex_model *m) { return m ? m->hp.n_vocab : 0; }
int32_t spex_model_n_ctx_train(const spex_model *m) { return m ? m->hp.n_ctx_train : 0; }
uint64_t spex_model_weight_bytes(const spex_model *m) { return m ? m->weight_bytes : 0; }
uint64_t spex_model_n_params(const spex_model *m) { return m ? m->n_params : 0; }
bool spex_model_layer_is_recurrent(const spex_model *m, int32_t l) {
    return m && l >= 0 && l < m->hp.n_layer && m->layers[l].recurrent;
}
uint64_t spex_model_recurrent_state_bytes(const spex_model *m) {
    spex_qwen35_plan p;
    return m && m->hp.n_recurrent > 0 && spex_model_plan(&m->hp, 0, &p) == 0 ? p.state : 0;
}

int spex_model_plan(const spex_model_hparams *hp, int32_t n_max, spex_qwen35_plan *out) {
    spex_qwen35_plan_in in = {.n_layer = hp->n_layer, .n_attn = hp->n_layer - hp->n_recurrent,
                              .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim, .ssm_n_group = hp->ssm_n_group,
                              .ssm_dt_rank = hp->ssm_dt_rank, .ssm_d_state = hp->ssm_d_state,
                              .ssm_d_conv = hp->ssm_d_conv, .n_max = n_max};
    return spex_qwen35_plan_compute(&in, out);
}
const spex_tensor_info *spex_model_token_embd(const spex_model *m) { return m ? m->tok_embd.t : NULL; }
const spex_tensor_info *spex_model_lm_head(const spex_model *m) { return m ? m->output.t : NULL; }

spex_status spex_model_embed(const spex_model *m, const int32_t *tokens, int32_t n, float *out, spex_error *err) {
    if (!m || (n > 0 && (!tokens || !out)) || n < 0)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "spex_model_embed: bad arguments");
    const int64_t E = m->hp.n_embd;
    for (int32_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= m->hp.n_vocab)
            return spex_error_set(err, SPEX_ERR_RANGE, "spex_model_embed: token %d of %d is %d, expected 0 .. %d", i, n,
                                  tokens[i], m->hp.n_vocab - 1);
        spex_model_weight_row(&m->tok_embd, tokens[i], out + (size_t)i * (size_t)E);
    }
    return SPEX_OK;
}
