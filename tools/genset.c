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

int genset_generate(spex_spec *spec, const spex_tokenizer *tok, const int32_t *ids, int np, int n_predict,
                    spex_sampler *smp, int32_t *out, genset_row *row, spex_pool *pool) {
    spex_error e = {0};
    spex_sampler_reset(smp);
    for (int i = 0; i < np; i++) (void)spex_sampler_accept(smp, ids[i]);
    int32_t first;
    if (spex_spec_seq_begin(spec, 0, ids, np, smp, &first, &e) != SPEX_OK) {
        fprintf(stderr, "error: %s\n", e.msg);
        return -1;
    }
    /* seq_begin counts its last prompt token's forward as "other": keep it out of the steps. */
    const spex_spec_stats *st = spex_spec_seq_stats(spec, 0);
    const double other0 = st->t_other;
    double w0c = 0.0, w0w = 0.0, ws0[SPEX_SITE_COUNT][2];
    if (pool) {
        spex_pool_wait_split(pool); /* the workers' waits at the window's edges: by site as in total */
        pool_waits(pool, &w0c, &w0w);
        pool_site_waits(pool, ws0);
    }
    double t0 = genset_now_s();
    int n = 0;
    bool eog = false;
    spex_spec_out so = {.n = 1, .tokens = {first}};
    for (;;) {
        for (int k = 0; k < so.n && !eog && n < n_predict; k++) {
            if (spex_token_is_eog(tok, so.tokens[k])) eog = true;
            else out[n++] = so.tokens[k];
        }
        if (eog || n >= n_predict) break;
        int32_t seq = 0, budget = n_predict - n;
        if (spex_spec_step(spec, &seq, 1, &budget, &so, &e) != SPEX_OK) {
            fprintf(stderr, "error: %s\n", e.msg);
            return -1;
        }
    }
    row->t_decode += genset_now_s() - t0;
    if (pool) {
        double w1c, w1w;
        spex_pool_wait_split(pool);
        pool_waits(pool, &w1c, &w1w);
        row->t_wait_caller += w1c - w0c;
        row->t_wait_workers += w1w - w0w;
        double ws1[SPEX_SITE_COUNT][2];
        pool_site_waits(pool, ws1);
        for (int si = 0; si < SPEX_SITE_COUNT; si++)
            for (int k = 0; k < 2; k++) row->t_wait_site[si][k] += ws1[si][k] - ws0[si][k];
    }
    row->n_gen += n;
    row->normal_stops += eog;
    row->n_runs++;
    st = spex_spec_seq_stats(spec, 0);
    row->steps += st->n_steps;
    row->accepted += st->n_accepted;
    row->drafted += st->n_drafted;
    row->cut += st->n_cut;
    row->t_draft += st->t_draft;
    row->t_verify += st->t_verify;
    row->t_other += st->t_other - other0;
    spex_spec_seq_end(spec, 0);
    return n;
}
