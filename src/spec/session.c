/*
 * session.c — one speculative session (include/spex.h, "Speculative sessions"): the drafter
 * of the asked type, the target context, the drafter's context and the loop, with every
 * derived size worked out once here — the draft length, the verify rows, the taps, the
 * recurrent-state ring, both caches. run, serve, bench spec and the demo build on it; none of
 * them computes a size.
 *
 * Sizes: n_max = the asked draft length, else the type's default (DFlash: block_size - 1;
 * MTP: 3; n-gram: 16 within size_m; draft model: 16, llama.cpp's defaults), within
 * SPEX_DRAFT_MAX_N; verify rows n_seq x (n_max + 1) (every sequence drafts in one step);
 * n_rs_seq = n_max on recurrent targets (rejected drafts roll back inside the ring).
 */
#include "spex.h"
#include "gguf/api.h"
#include "model/api.h"
#include "spec/api.h"
#include "tok/api.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct spex_session {
    spex_session_info info;
    spex_drafter *own_drafter;    /* loaded here (else borrowed in dr) */
    const spex_drafter *dr;
    spex_model *draft_model;      /* draft-simple */
    spex_context *ctx, *dctx;
    spex_draft_context *dc;
    spex_mtp_context *mc;
    spex_spec *spec;
    bool detected;                /* AUTO told the type from the file */
};

static const struct {
    const char *name;
    spex_spec_type type;
} TYPE_NAMES[] = {
    {"none", SPEX_SPEC_NONE},          {"auto", SPEX_SPEC_AUTO},         {"dflash", SPEX_SPEC_DFLASH},
    {"draft-dflash", SPEX_SPEC_DFLASH}, {"mtp", SPEX_SPEC_MTP},          {"draft-mtp", SPEX_SPEC_MTP},
    {"ngram", SPEX_SPEC_NGRAM},        {"ngram-simple", SPEX_SPEC_NGRAM}, {"ngram-map-k", SPEX_SPEC_NGRAM},
    {"draft-simple", SPEX_SPEC_DRAFT_MODEL}, {"draft", SPEX_SPEC_DRAFT_MODEL}, {"hybrid", SPEX_SPEC_HYBRID},
    {"dflash+ngram", SPEX_SPEC_HYBRID},
};

bool spex_spec_type_parse(const char *s, spex_spec_type *out) {
    for (size_t i = 0; s && i < sizeof TYPE_NAMES / sizeof TYPE_NAMES[0]; i++)
        if (!strcmp(s, TYPE_NAMES[i].name)) {
            *out = TYPE_NAMES[i].type;
            return true;
        }
    return false;
}

const char *spex_spec_type_name(spex_spec_type t) {
    switch (t) {
    case SPEX_SPEC_NONE: return "none";
    case SPEX_SPEC_AUTO: return "auto";
    case SPEX_SPEC_DFLASH: return "draft-dflash";
    case SPEX_SPEC_MTP: return "draft-mtp";
    case SPEX_SPEC_NGRAM: return "ngram";
    case SPEX_SPEC_DRAFT_MODEL: return "draft-simple";
    case SPEX_SPEC_HYBRID: return "hybrid";
    }
    return "?";
}

spex_session_params spex_session_default_params(void) {
    return (spex_session_params){.type = SPEX_SPEC_AUTO, .n_seq = 1, .n_batch = 512, .kv_type = SPEX_TYPE_F16,
                                 .draft_kv_type = SPEX_TYPE_F16, .draft_cut = true,
                                 .ngram = spex_ngram_default_params()};
}

/* The types that draft with a DFlash drafter (and so tap the target and need a draft context). */
static bool uses_dflash(spex_spec_type t) { return t == SPEX_SPEC_DFLASH || t == SPEX_SPEC_HYBRID; }

static void say(const spex_session_params *p, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void say(const spex_session_params *p, const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (p->log) p->log(p->log_user, line);
    else fprintf(stderr, "%s\n", line);
}

void spex_session_free(spex_session *s) {
    if (!s) return;
    spex_spec_free(s->spec);
    spex_draft_context_free(s->dc);
    spex_mtp_free(s->mc);
    spex_context_free(s->dctx);
    spex_context_free(s->ctx);
    spex_model_free(s->draft_model);
    spex_drafter_free(s->own_drafter);
    free(s);
}

/* AUTO with a file: a DFlash drafter when its general.architecture says so, else a draft model. */
static spex_status detect_type(const char *path, spex_spec_type *t, spex_error *err) {
    spex_gguf *g = NULL;
    spex_status st = spex_gguf_open(path, &g, err);
    if (st != SPEX_OK) return st;
    spex_str an = {0};
    st = spex_gguf_get_str(g, "general.architecture", &an, err);
    if (st == SPEX_OK) *t = an.len == 6 && !memcmp(an.ptr, "dflash", 6) ? SPEX_SPEC_DFLASH : SPEX_SPEC_DRAFT_MODEL;
    spex_gguf_close(g);
    return st;
}

/* Loads what drafts (the DFlash drafter or the draft model) and resolves the type. */
static spex_status load_drafter(spex_session *s, const spex_model *target, const spex_session_params *p,
                                spex_error *err) {
    spex_spec_type t = p->type;
    s->dr = p->drafter;
    if (s->dr && t == SPEX_SPEC_AUTO) t = SPEX_SPEC_DFLASH;
    else if (t == SPEX_SPEC_AUTO && p->draft_path) {
        spex_status st = detect_type(p->draft_path, &t, err);
        if (st != SPEX_OK) return st;
        s->detected = true;
    } else if (t == SPEX_SPEC_AUTO)
        t = SPEX_SPEC_NONE;
    s->info.type = t;
    if ((uses_dflash(t) && !s->dr) || t == SPEX_SPEC_DRAFT_MODEL) {
        if (!p->draft_path)
            return spex_error_set(err, SPEX_ERR_INVALID_ARG, "session: --spec-type %s needs a draft model file",
                                  spex_spec_type_name(t));
    } else if (p->draft_path && !uses_dflash(t))
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "session: --spec-type %s takes no draft model file",
                              spex_spec_type_name(t));
    if (uses_dflash(t) && !s->dr) {
        spex_drafter_params dp = spex_drafter_default_params();
        dp.verbose = p->verbose;
        dp.log = p->log;
        dp.log_user = p->log_user;
        dp.overrides = p->draft_overrides;
        dp.n_overrides = p->n_draft_overrides;
        dp.no_repack = p->no_repack;
        dp.no_mmap = p->no_mmap;
        spex_status st = spex_drafter_load(p->draft_path, target, &dp, &s->own_drafter, err);
        if (st != SPEX_OK) return st;
        s->dr = s->own_drafter;
    }
    if (t == SPEX_SPEC_DRAFT_MODEL) {
        spex_model_params mp = spex_model_default_params();   /* quiet: its lines would read as the target's */
        mp.log = p->log;
        mp.log_user = p->log_user;
        mp.no_repack = p->no_repack;
        mp.no_mmap = p->no_mmap;
        spex_status st = spex_model_load(p->draft_path, &mp, &s->draft_model, err);
        if (st != SPEX_OK) return st;
        int32_t dv = spex_model_get_hparams(s->draft_model)->n_vocab, tv = spex_model_get_hparams(target)->n_vocab;
        if (dv != tv)
            return spex_error_set(err, SPEX_ERR_INVALID_ARG,
                                  "%s: the draft model's vocabulary has %d tokens, the target's %d: draft-simple "
                                  "needs a model of the target's family and vocabulary",
                                  p->draft_path, dv, tv);
    }
    if (s->detected && p->verbose)
        say(p, "auto-detected speculative type '%s' from the draft model metadata", spex_spec_type_name(t));
    return SPEX_OK;
}

/* n_max and n_min of the type (the header's rule), warning where the asked ones are clamped. */
static void resolve_lengths(spex_session *s, const spex_session_params *p) {
    int32_t def = 0, lim = SPEX_DRAFT_MAX_N;
    switch (s->info.type) {
    case SPEX_SPEC_DFLASH:
        s->info.block_size = spex_drafter_get_hparams(s->dr)->block_size;
        def = s->info.block_size - 1;
        if (def < lim) lim = def;
        break;
    case SPEX_SPEC_HYBRID:   /* DFlash drafts within its block; a lookup runs on to n-gram's 16 */
        s->info.block_size = spex_drafter_get_hparams(s->dr)->block_size;
        def = s->info.block_size - 1 > 16 ? s->info.block_size - 1 : 16;
        break;
    case SPEX_SPEC_MTP: def = 3; break;
    case SPEX_SPEC_NGRAM:
        def = 16;
        if (p->ngram.size_m < lim) lim = p->ngram.size_m;
        break;
    case SPEX_SPEC_DRAFT_MODEL: def = 16; break;
    default: lim = 0; break;
    }
    int32_t n = p->n_draft_max > 0 ? p->n_draft_max : def;
    if (n > lim) {
        if (p->n_draft_max > 0 && s->info.type == SPEX_SPEC_DFLASH)
            say(p, "warning: requested draft size %d exceeds the trained block size %d (at most %d drafted tokens): "
                   "clamping to %d",
                p->n_draft_max, s->info.block_size, lim, lim);
        n = lim;
    }
    s->info.n_max = n;
    s->info.n_min = p->n_draft_min;
    if (s->info.type != SPEX_SPEC_NONE && p->n_draft_min > n) {
        say(p, "warning: --spec-draft-n-min %d is above the draft length %d: clamped to %d", p->n_draft_min, n, n);
        s->info.n_min = n;
    }
}

static spex_status make_contexts(spex_session *s, const spex_model *target, const spex_session_params *p,
                                 spex_error *err) {
    const spex_model_hparams *hp = spex_model_get_hparams(target);
    const spex_spec_type t = s->info.type;
    const int32_t rows = p->n_seq * (s->info.n_max + 1), tap_n = hp->n_layer;
    spex_context_params cp = spex_context_default_params();
    cp.n_seq_max = p->n_seq;
    if (p->n_ctx_per_seq > 0) cp.n_ctx_per_seq = p->n_ctx_per_seq;
    cp.n_batch_max = p->n_batch > rows ? p->n_batch : rows;
    cp.n_outputs_max = rows;
    cp.kv_type = p->kv_type;
    cp.pool = p->pool;
    cp.n_threads = p->n_threads;
    if (!p->pool && cp.n_threads <= 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        cp.n_threads = (int32_t)(cpus > 0 ? cpus : 1);
    }
    if (uses_dflash(t)) {
        cp.tap_layers = spex_drafter_get_hparams(s->dr)->target_layers;
        cp.n_taps = spex_drafter_get_hparams(s->dr)->n_taps;
    } else if (t == SPEX_SPEC_MTP) {
        cp.tap_layers = &tap_n;   /* the target's last hidden state */
        cp.n_taps = 1;
    }
    if (t != SPEX_SPEC_NONE && hp->n_recurrent > 0) cp.n_rs_seq = s->info.n_max;
    cp.n_ctx_checkpoints = p->n_ctx_checkpoints;
    if (p->checkpoint_min_step > 0) cp.checkpoint_min_step = p->checkpoint_min_step;
    spex_status st = spex_context_init(target, &cp, &s->ctx, err);
    if (st != SPEX_OK) return st;
    const spex_context_params *tp = spex_context_get_params(s->ctx);
    s->info.n_ctx_per_seq = tp->n_ctx_per_seq;
    s->info.n_seq = tp->n_seq_max;
    if (uses_dflash(t)) {
        spex_draft_context_params dcp = spex_draft_context_default_params();
        dcp.n_seq_max = p->n_seq;
        dcp.n_ctx_per_seq = tp->n_ctx_per_seq;
        dcp.n_blocks_max = p->n_seq;
        dcp.kv_type = p->draft_kv_type;
        dcp.pool = spex_context_pool(s->ctx);
        dcp.n_threads = tp->n_threads;
        st = spex_draft_context_init(s->dr, &dcp, &s->dc, err);
    } else if (t == SPEX_SPEC_MTP) {
        spex_mtp_params mp = spex_mtp_default_params();
        mp.n_seq_max = p->n_seq;
        mp.n_ctx_per_seq = tp->n_ctx_per_seq;
        mp.n_batch_max = tp->n_batch_max;
        mp.kv_type = p->draft_kv_type;
        mp.pool = spex_context_pool(s->ctx);
        st = spex_mtp_init(target, &mp, &s->mc, err);
    } else if (t == SPEX_SPEC_DRAFT_MODEL) {
        spex_context_params dp = spex_context_default_params();
        dp.n_seq_max = p->n_seq;
        dp.n_ctx_per_seq = tp->n_ctx_per_seq;
        dp.n_batch_max = p->n_batch > p->n_seq ? p->n_batch : p->n_seq;
        dp.n_outputs_max = p->n_seq;
        dp.kv_type = p->draft_kv_type;
        dp.pool = spex_context_pool(s->ctx);
        if (spex_model_get_hparams(s->draft_model)->n_recurrent > 0) dp.n_rs_seq = s->info.n_max;
        st = spex_context_init(s->draft_model, &dp, &s->dctx, err);
    }
    return st;
}

spex_status spex_session_create(const spex_model *target, const spex_session_params *params, spex_session **out,
                                spex_error *err) {
    if (!out) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "session: NULL out");
    *out = NULL;
    if (!target) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "session: NULL target model");
    spex_session_params p = params ? *params : spex_session_default_params();
    if (p.n_seq < 1 || p.n_draft_max < 0 || p.n_draft_min < 0)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "session: %d sequences, draft max %d, draft min %d",
                              p.n_seq, p.n_draft_max, p.n_draft_min);
    spex_session *s = calloc(1, sizeof *s);
    if (!s) return spex_error_set(err, SPEX_ERR_NOMEM, "session: out of memory");
    spex_status st = load_drafter(s, target, &p, err);
    if (st == SPEX_OK) {
        resolve_lengths(s, &p);
        st = make_contexts(s, target, &p, err);
    }
    if (st == SPEX_OK) {
        spex_spec_params spp = spex_spec_default_params();
        spp.n_max = s->info.type == SPEX_SPEC_NONE ? 1 : s->info.n_max;
        spp.n_min = s->info.n_min;
        spp.p_min = p.p_min;
        spp.sampled_walk = !p.draft_greedy;
        spp.draft_cut = p.draft_cut;
        spp.guard = p.guard;
        spp.log = p.log;
        spp.log_user = p.log_user;
        switch (s->info.type) {
        case SPEX_SPEC_MTP: st = spex_spec_init_mtp(s->ctx, s->mc, &spp, &s->spec, err); break;
        case SPEX_SPEC_DRAFT_MODEL: st = spex_spec_init_draft_model(s->ctx, s->dctx, &spp, &s->spec, err); break;
        case SPEX_SPEC_HYBRID: st = spex_spec_init_hybrid(s->ctx, s->dc, &p.ngram, &spp, &s->spec, err); break;
        default: st = spex_spec_init(s->ctx, s->dc, &spp, &s->spec, err); break;
        }
        if (st == SPEX_OK && s->info.type == SPEX_SPEC_NGRAM) st = spex_spec_set_ngram(s->spec, &p.ngram, err);
    }
    if (st != SPEX_OK) {
        spex_session_free(s);
        return st;
    }
    bool v2 = s->dr && spex_drafter_get_hparams(s->dr)->variant == SPEX_DFLASH2;
    if (s->info.type == SPEX_SPEC_DFLASH) s->info.variant = v2 ? "dflash2" : "dflash1";
    else if (s->info.type == SPEX_SPEC_HYBRID) s->info.variant = v2 ? "dflash2+ngram" : "dflash1+ngram";
    else s->info.variant = s->info.type == SPEX_SPEC_MTP     ? "mtp"
                         : s->info.type == SPEX_SPEC_NGRAM   ? "ngram"
                         : s->info.type == SPEX_SPEC_DRAFT_MODEL ? "draft-simple"
                                                             : "none";
    *out = s;
    return SPEX_OK;
}

spex_chat_template spex_model_chat_template(const spex_model *m, const spex_tokenizer *tok, bool *guessed) {
    spex_str js = {0};
    char *jinja = NULL;   /* GGUF strings are not NUL-terminated: a copy (no allocation: read as none) */
    if (m && spex_gguf_get_str(spex_model_gguf(m), "tokenizer.chat_template", &js, NULL) == SPEX_OK &&
        (jinja = malloc(js.len + 1))) {
        memcpy(jinja, js.ptr, js.len);
        jinja[js.len] = 0;
    }
    spex_chat_template t;
    bool g = false;
    spex_chat_detect(jinja, tok && spex_token_find(tok, "<|im_start|>", 12) != SPEX_TOKEN_NONE, &t, &g);
    free(jinja);
    if (guessed) *guessed = g;
    return t;
}

const spex_session_info *spex_session_get_info(const spex_session *s) { return s ? &s->info : NULL; }
spex_spec *spex_session_spec(spex_session *s) { return s ? s->spec : NULL; }
spex_context *spex_session_context(spex_session *s) { return s ? s->ctx : NULL; }
spex_draft_context *spex_session_draft_context(spex_session *s) { return s ? s->dc : NULL; }
spex_context *spex_session_draft_model_context(spex_session *s) { return s ? s->dctx : NULL; }
const spex_drafter *spex_session_drafter(const spex_session *s) { return s ? s->dr : NULL; }
const spex_model *spex_session_draft_model(const spex_session *s) { return s ? s->draft_model : NULL; }

spex_status spex_session_generate(spex_session *s, const spex_tokenizer *tok, const int32_t *prompt,
                                  int32_t n_prompt, const spex_gen_params *params, spex_gen_result *res,
                                  spex_error *err) {
    if (!s) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "generate: NULL session");
    return spex_spec_generate(s->spec, tok, prompt, n_prompt, params, res, err);
}
