/*
 * genset.c — prompt sets and the timed generation loop of `spex demo` and `spex bench spec`
 * (contract in tools/genset.h).
 *
 * What it is: JSON-lines reading (cJSON), chat rendering with the target's built-in template,
 * and one generation through spex_spec timed from the first emitted token on, so decode
 * numbers exclude the prompt. What it is not: anything that decides what to run or prints a
 * table; the two tools do that.
 */
#include "gguf/api.h"
#include "cpu/api.h"
#include "genset.h"
#include "spec/api.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double genset_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void genset_quiet(void *user, const char *line) {
    (void)user;
    (void)line;
}

static char *dup_or_null(const cJSON *s) {
    return cJSON_IsString(s) ? strdup(s->valuestring) : NULL;
}

int genset_load(const char *path, genset_prompt *p, int cap) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "error: cannot read %s\n", path);
        return -1;
    }
    static char line[1 << 16];
    int n = 0;
    while (n < cap && fgets(line, sizeof line, f)) {
        cJSON *j = cJSON_Parse(line);
        if (!j) continue;
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "user");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "prompt");
        if (cJSON_IsString(u) || cJSON_IsString(t)) {
            p[n] = (genset_prompt){0};
            if (cJSON_IsString(u)) {
                p[n].user = dup_or_null(u);
                p[n].system = dup_or_null(cJSON_GetObjectItemCaseSensitive(j, "system"));
            } else {
                p[n].text = dup_or_null(t);
            }
            n++;
        }
        cJSON_Delete(j);
    }
    fclose(f);
    if (n == 0) fprintf(stderr, "error: %s: no line with a \"user\" or \"prompt\" string\n", path);
    return n > 0 ? n : -1;
}

void genset_free(genset_prompt *p, int n) {
    for (int i = 0; i < n; i++) {
        free(p[i].system);
        free(p[i].user);
        free(p[i].text);
        p[i] = (genset_prompt){0};
    }
}

spex_chat_template genset_template(const spex_model *m, const spex_tokenizer *tok) {
    return spex_model_chat_template(m, tok, NULL);
}

int genset_prompt_ids(const spex_tokenizer *tok, spex_chat_template tmpl, const genset_prompt *p, int32_t *ids,
                      int cap) {
    static char text[1 << 14];
    size_t len = 0;
    spex_error e = {0};
    const char *src = text;
    if (p->user) {
        spex_chat_msg msgs[2];
        size_t n = 0;
        if (p->system) msgs[n++] = (spex_chat_msg){.role = SPEX_CHAT_SYSTEM, .content = p->system};
        msgs[n++] = (spex_chat_msg){.role = SPEX_CHAT_USER, .content = p->user};
        if (spex_chat_apply(tmpl, msgs, n, true, true, text, sizeof text, &len, &e) != SPEX_OK) {
            fprintf(stderr, "error: chat template: %s\n", e.msg);
            return -1;
        }
    } else {
        src = p->text;
        len = strlen(src);
    }
    int k = 0;
    if (spex_tokenize(tok, src, len, true, true, ids, cap, &k, &e) != SPEX_OK) {
        fprintf(stderr, "error: tokenize: %s\n", e.msg);
        return -1;
    }
    if (k == 0) {
        fprintf(stderr, "error: a prompt tokenizes to nothing\n");
        return -1;
    }
    return k;
}

/* Thread 0's waits, and the workers' summed (spex_pool_wait_s: read between runs). */
static void pool_waits(const spex_pool *pool, double *caller, double *workers) {
    *caller = spex_pool_wait_s(pool, 0);
    *workers = 0.0;
    for (int t = 1; t < spex_pool_n_threads(pool); t++) *workers += spex_pool_wait_s(pool, t);
}

/* Every thread's waits by site and kind, summed, into w[site][kind]. */
static void pool_site_waits(const spex_pool *pool, double w[SPEX_SITE_COUNT][2]) {
    for (int st = 0; st < SPEX_SITE_COUNT; st++)
        for (int k = 0; k < 2; k++) {
            w[st][k] = 0.0;
            for (int t = 0; t < spex_pool_n_threads(pool); t++) {
                double x;
                spex_pool_wait_site(pool, t, st, k == 1, &x, NULL);
                w[st][k] += x;
            }
        }
}

/* What the token callback of one generation keeps: the tokens, and the pool's waits at the
 * first token (the decode's start; the prompt's waits stay out). */
typedef struct gen_collect {
    int32_t *out;
    int n, cap;
    spex_pool *pool;
    bool started;
    double w0c, w0w, ws0[SPEX_SITE_COUNT][2];
} gen_collect;

static bool collect(void *user, int32_t token, spex_str text) {
    (void)text;
    gen_collect *c = user;
    if (!c->started && c->pool) {
        spex_pool_wait_split(c->pool); /* the workers' waits at the window's edges: by site as in total */
        pool_waits(c->pool, &c->w0c, &c->w0w);
        pool_site_waits(c->pool, c->ws0);
    }
    c->started = true;
    if (token >= 0 && c->n < c->cap) c->out[c->n++] = token;
    return true;
}

int genset_generate(spex_spec *spec, const spex_tokenizer *tok, const int32_t *ids, int np, int n_predict,
                    spex_sampler *smp, int32_t *out, genset_row *row, spex_pool *pool) {
    spex_error e = {0};
    gen_collect c = {.out = out, .cap = n_predict, .pool = pool};
    spex_gen_params gp = spex_gen_default_params();
    gp.n_predict = n_predict;
    gp.sampler = smp;
    gp.text = false;
    /* the loop's own settings, whatever the seed: every method is timed as configured */
    gp.draft_cut = spex_spec_get_params(spec)->draft_cut;
    gp.guard = spex_spec_get_params(spec)->guard;
    gp.on_token = collect;
    gp.user = &c;
    spex_gen_result res;
    if (spex_spec_generate(spec, tok, ids, np, &gp, &res, &e) != SPEX_OK) {
        fprintf(stderr, "error: %s\n", e.msg);
        return -1;
    }
    row->t_decode += res.t_gen;
    if (pool && c.started) {
        double w1c, w1w;
        spex_pool_wait_split(pool);
        pool_waits(pool, &w1c, &w1w);
        row->t_wait_caller += w1c - c.w0c;
        row->t_wait_workers += w1w - c.w0w;
        double ws1[SPEX_SITE_COUNT][2];
        pool_site_waits(pool, ws1);
        for (int si = 0; si < SPEX_SITE_COUNT; si++)
            for (int k = 0; k < 2; k++) row->t_wait_site[si][k] += ws1[si][k] - c.ws0[si][k];
    }
    const spex_spec_stats *st = &res.stats;
    row->n_gen += c.n;
    row->normal_stops += res.stop == SPEX_STOP_EOS || res.stop == SPEX_STOP_EOT;
    row->n_runs++;
    row->steps += st->n_steps;
    row->accepted += st->n_accepted;
    row->drafted += st->n_drafted;
    row->cut += st->n_cut;
    row->t_draft += st->t_draft;
    row->t_verify += st->t_verify;
    row->t_other += st->t_other;
    return c.n;
}
