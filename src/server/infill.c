/*
 * infill.c — POST /infill (fill-in-the-middle, llama-server's endpoint): its fields, the
 * model's FIM tokens and the prompt layout. The response is /completion's (http.c).
 *
 * Layout (llama-server's format_infill, the repo-level FIM pattern of arXiv 2409.12186):
 *   extra = [FIM_REP] "myproject\n"                 when the model has FIM_REP
 *           per input_extra chunk: [FIM_SEP] "<filename>\n" <text>
 *                                 (without FIM_SEP: "\n\n--- snippet ---\n\n" <text>)
 *           [FIM_SEP] "filename\n"                   when the model has FIM_SEP
 *   PSM: extra' [BOS] [FIM_PRE] prefix' prompt [FIM_SUF] suffix' [FIM_MID]
 *   SPM (--spm-infill): extra' [BOS] [FIM_SUF] suffix' [FIM_PRE] prefix' prompt [FIM_MID]
 * Every text is tokenized without special tokens or their parsing. [BOS] only when the
 * tokenizer adds one. Budgets: prefix' = the last min(|prefix|, 3·(n_batch/4)) tokens, suffix'
 * = the first max(0, n_batch/4 − (2 + |prompt|)), extra' = the last max(0, n_ctx − n_batch −
 * 2·n_predict) tokens of extra (n_predict −1 counts as 0 here).
 * What it is not: a template engine; a model without FIM_PRE, FIM_SUF and FIM_MID gets a 400.
 */
#include "gguf/api.h"
#include "server/server.h"
#include "tok/api.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *dup_s(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

void srv_infill_free(srv_infill *f) {
    if (!f) return;
    free(f->prefix);
    free(f->suffix);
    for (int i = 0; i < f->n_extra; i++) free(f->files[i]), free(f->texts[i]);
    free(f->files);
    free(f->texts);
    free(f);
}

/* An optional string field: 0 (*out malloc'd; def when absent or null) or 400. */
static int opt_str(const cJSON *o, const char *key, const char *def, char **out, char *msg, size_t cap) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (v && !cJSON_IsNull(v) && !cJSON_IsString(v)) return snprintf(msg, cap, "'%s' must be a string", key), 400;
    *out = dup_s(v && cJSON_IsString(v) ? v->valuestring : def);
    return *out ? 0 : (snprintf(msg, cap, "out of memory"), 500);
}

int srv_infill_parse(srv_request *r, const cJSON *o, char *msg, size_t cap) {
    srv_infill *f = calloc(1, sizeof *f);
    if (!f) return snprintf(msg, cap, "out of memory"), 500;
    r->infill = f;
    int rc;
    if ((rc = opt_str(o, "input_prefix", "", &f->prefix, msg, cap))) return rc;
    if ((rc = opt_str(o, "input_suffix", "", &f->suffix, msg, cap))) return rc;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "prompt");
    if (p && !cJSON_IsNull(p)) {
        if (!cJSON_IsString(p)) return snprintf(msg, cap, "'prompt' of /infill must be a string"), 400;
        if (!(r->prompt = dup_s(p->valuestring))) return snprintf(msg, cap, "out of memory"), 500;
    }
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, "input_extra");
    if (!x || cJSON_IsNull(x)) return 0;
    if (!cJSON_IsArray(x)) return snprintf(msg, cap, "'input_extra' must be an array of {\"filename\", \"text\"}"), 400;
    int n = cJSON_GetArraySize(x);
    f->files = calloc((size_t)(n ? n : 1), sizeof *f->files);
    f->texts = calloc((size_t)(n ? n : 1), sizeof *f->texts);
    if (!f->files || !f->texts) return snprintf(msg, cap, "out of memory"), 500;
    int i = 0;
    for (const cJSON *c = x->child; c; c = c->next, i++) {
        if (!cJSON_IsObject(c)) return snprintf(msg, cap, "'input_extra[%d]' must be an object", i), 400;
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "filename");
        const cJSON *tx = cJSON_GetObjectItemCaseSensitive(c, "text");
        if (fn && !cJSON_IsString(fn)) return snprintf(msg, cap, "'input_extra[%d].filename' must be a string", i), 400;
        if (!cJSON_IsString(tx))   /* required, as llama-server */
            return snprintf(msg, cap, "'input_extra[%d]' must have a string 'text'", i), 400;
        f->files[i] = dup_s(fn ? fn->valuestring : "tmp");
        f->texts[i] = dup_s(tx->valuestring);
        f->n_extra = i + 1;
        if (!f->files[i] || !f->texts[i]) return snprintf(msg, cap, "out of memory"), 500;
    }
    return 0;
}

static int32_t key_id(const spex_gguf *g, const char *key, int32_t nv) {
    uint32_t v;
    if (!g || spex_gguf_find_key(g, key) < 0 || spex_gguf_get_u32(g, key, &v, NULL) != SPEX_OK) return -1;
    return v < (uint32_t)nv ? (int32_t)v : -1;
}

static int32_t text_id(const spex_tokenizer *tok, const char *const *names) {
    for (; *names; names++) {
        int32_t id = spex_token_find(tok, *names, strlen(*names));
        if (id >= 0) return id;
    }
    return -1;
}

void srv_fim_tokens(const spex_gguf *g, const spex_tokenizer *tok, srv_fim *out) {
    const int32_t nv = spex_tokenizer_n_vocab(tok);
    static const char *const pre[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", NULL};
    static const char *const suf[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", NULL};
    static const char *const mid[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", NULL};
    static const char *const pad[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", NULL};
    static const char *const rep[] = {"<|repo_name|>", "<repo_name>", "<reponame>", NULL};
    static const char *const sep[] = {"<|file_sep|>", "<file_sep>", NULL};
    struct {
        int32_t *dst;
        const char *key, *old;
        const char *const *names;
    } k[] = {{&out->pre, "tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id", pre},
             {&out->suf, "tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id", suf},
             {&out->mid, "tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id", mid},
             {&out->pad, "tokenizer.ggml.fim_pad_token_id", NULL, pad},
             {&out->rep, "tokenizer.ggml.fim_rep_token_id", NULL, rep},
             {&out->sep, "tokenizer.ggml.fim_sep_token_id", NULL, sep}};
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
        int32_t id = key_id(g, k[i].key, nv);
        if (id < 0 && k[i].old) id = key_id(g, k[i].old, nv);
        if (id < 0) id = text_id(tok, k[i].names);
        *k[i].dst = id;
    }
}

/* A growable token list. */
typedef struct {
    int32_t *p;
    int n, cap;
    bool oom;
} tl;

static void tl_push(tl *l, const int32_t *ids, int n) {
    if (l->oom || n <= 0) return;
    if (l->n + n > l->cap) {
        int nc = l->cap ? l->cap : 256;
        while (nc < l->n + n) nc *= 2;
        int32_t *q = realloc(l->p, sizeof *q * (size_t)nc);
        if (!q) {
            l->oom = true;
            return;
        }
        l->p = q, l->cap = nc;
    }
    memcpy(l->p + l->n, ids, sizeof *ids * (size_t)n);
    l->n += n;
}

static void tl_one(tl *l, int32_t id) { tl_push(l, &id, 1); }

/* Appends text's tokens (no special tokens added or parsed); false on a tokenizer error. */
static bool tl_text(tl *l, const spex_tokenizer *tok, const char *s, size_t len) {
    if (len == 0) return true;
    int n = 0;
    spex_status st = spex_tokenize(tok, s, len, false, false, NULL, 0, &n, NULL);
    if (st != SPEX_OK && st != SPEX_ERR_RANGE) return false;
    if (n <= 0) return true;
    int32_t *ids = malloc(sizeof *ids * (size_t)n);
    if (!ids) return l->oom = true, false;
    bool ok = spex_tokenize(tok, s, len, false, false, ids, n, &n, NULL) == SPEX_OK;
    if (ok) tl_push(l, ids, n);
    free(ids);
    return ok;
}

static bool tl_str(tl *l, const spex_tokenizer *tok, const char *s) { return tl_text(l, tok, s, strlen(s)); }

int srv_infill_tokens(const spex_tokenizer *tok, const srv_fim *fim, const srv_request *r, bool spm, int32_t n_batch,
                      int32_t n_ctx, long n_predict, int32_t **ids, int *n_ids, char *msg, size_t cap) {
    *ids = NULL, *n_ids = 0;
    if (fim->pre < 0 || fim->suf < 0 || fim->mid < 0)
        return snprintf(msg, cap, "the model has no FIM tokens (fim_pre, fim_suf, fim_mid): /infill is not supported"),
               400;
    const srv_infill *f = r->infill;
    tl extra = {0}, pre = {0}, suf = {0}, prm = {0}, out = {0};
    bool ok = tl_str(&pre, tok, f->prefix) && tl_str(&suf, tok, f->suffix) && (!r->prompt || tl_str(&prm, tok, r->prompt));
    if (ok && fim->rep >= 0) tl_one(&extra, fim->rep), ok = tl_str(&extra, tok, "myproject\n");
    for (int i = 0; ok && i < f->n_extra; i++) {
        if (fim->sep >= 0) {
            tl_one(&extra, fim->sep);
            size_t fl = strlen(f->files[i]);
            char *line = malloc(fl + 2);   /* "<filename>\n", tokenized as one text */
            if (!line) {
                extra.oom = true;
                break;
            }
            memcpy(line, f->files[i], fl);
            memcpy(line + fl, "\n", 2);
            ok = tl_str(&extra, tok, line);
            free(line);
        } else {
            ok = tl_str(&extra, tok, "\n\n--- snippet ---\n\n");
        }
        ok = ok && tl_str(&extra, tok, f->texts[i]);
    }
    if (ok && fim->sep >= 0) tl_one(&extra, fim->sep), ok = tl_str(&extra, tok, "filename\n");
    int rc = 0;
    if (!ok || extra.oom || pre.oom || suf.oom || prm.oom) {
        rc = extra.oom || pre.oom || suf.oom || prm.oom ? 500 : 400;
        snprintf(msg, cap, rc == 500 ? "out of memory" : "/infill: a text could not be tokenized");
        goto done;
    }
    {
        int np = pre.n < 3 * (n_batch / 4) ? pre.n : 3 * (n_batch / 4);
        int ns_max = n_batch / 4 - (2 + prm.n);
        int ns = suf.n < ns_max ? suf.n : (ns_max > 0 ? ns_max : 0);
        long ne_max = (long)n_ctx - n_batch - 2 * (n_predict > 0 ? n_predict : 0);
        int ne = ne_max <= 0 ? 0 : extra.n < ne_max ? extra.n : (int)ne_max;
        if (ne > 0) tl_push(&out, extra.p + extra.n - ne, ne);
        int32_t bos = spex_token_bos(tok);
        if (spex_tokenizer_add_bos(tok) && bos >= 0) tl_one(&out, bos);
        for (int pass = 0; pass < 2; pass++) {
            if ((pass == 0) == !spm) {   /* the prefix part: PSM first, SPM second */
                tl_one(&out, fim->pre);
                if (np > 0) tl_push(&out, pre.p + pre.n - np, np);
                if (prm.n > 0) tl_push(&out, prm.p, prm.n);
            } else {
                tl_one(&out, fim->suf);
                if (ns > 0) tl_push(&out, suf.p, ns);
            }
        }
        tl_one(&out, fim->mid);
        if (out.oom) {
            rc = 500;
            snprintf(msg, cap, "out of memory");
            goto done;
        }
        *ids = out.p, *n_ids = out.n;
        out.p = NULL;
    }
done:
    free(extra.p), free(pre.p), free(suf.p), free(prm.p), free(out.p);
    return rc;
}
