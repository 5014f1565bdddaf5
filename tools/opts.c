/*
 * opts.c — the table of the options `spex run` and `spex serve` share (tools/opts.h).
 *
 * What it is: one row per option — every name it answers to, its value kind and bounds, and
 * where cli_common keeps it — walked by cli_common_flag, so that both tools accept the same
 * names with the same value rules and the same error lines. What it is not: the flags one tool
 * alone has (serve's --port, run's -p ...), nor llama.cpp's flags without effect
 * (tools/compat.c); each tool tries this table first, then its own flags, then compat.c.
 *
 * llama.cpp's older speculative names: llama.cpp now refuses --draft, --draft-n, --draft-max,
 * --draft-min and --draft-n-min with "the argument has been removed" (its current behaviour,
 * which both tools follow: a script written for llama.cpp fails the same way here);
 * --draft-p-min is still one of its names of --spec-draft-p-min.
 */
#include "opts.h"
#include "cli.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

enum opt_kind {
    K_SWITCH,    /* no value: names set true, neg names false                   */
    K_INT,       /* long in [lo, hi]                                            */
    K_FLOAT,     /* finite float in [lo, hi]                                    */
    K_OOA,       /* on|off|auto: 1, 0, -1                                       */
    K_KV,        /* a KV cache type; has_at: its "given" bool                   */
    K_STR,       /* a string kept as given                                      */
    K_STRS,      /* a repeatable string: CLI_MAX_OVERRIDES of them; has_at: count */
    K_FN,        /* fn parses                                                   */
};

typedef struct opt_row {
    const char *names[6];
    const char *neg[3];
    enum opt_kind kind;
    double lo, hi;
    size_t at, has_at;
    int (*fn)(const char *a, const char *v, cli_common *o);
} opt_row;

#define AT(f) offsetof(cli_common, f)

static bool need(const char *a, const char *v) {
    if (!v) fprintf(stderr, "error: %s needs a value\n", a);
    return v != NULL;
}

static int p_spec_type(const char *a, const char *v, cli_common *o) {
    if (!need(a, v)) return -1;
    if (!spex_spec_type_parse(v, &o->spec)) {
        fprintf(stderr, "error: %s expects auto, none, dflash (draft-dflash), mtp (draft-mtp), ngram, draft-simple "
                        "or hybrid, got '%s'\n", a, v);
        return -1;
    }
    o->spec_type = v;
    return 1;
}

static int p_sampling(const char *a, const char *v, cli_common *o) {
    if (!need(a, v)) return -1;
    if (strcmp(v, "probabilistic") && strcmp(v, "greedy")) {
        fprintf(stderr, "error: %s expects probabilistic or greedy, got '%s'\n", a, v);
        return -1;
    }
    o->draft_greedy = !strcmp(v, "greedy");
    return 1;
}

static int p_removed(const char *a, const char *v, cli_common *o) {
    fprintf(stderr, "error: %s: the argument has been removed. use --spec-draft-n-max or --spec-draft-n-min\n", a);
    return -1;
}

static int p_repeat_penalty(const char *a, const char *v, cli_common *o) {
    float f;
    if (!cli_parse_float(a, v, &f)) return -1;
    if (f <= 0) {
        fprintf(stderr, "error: %s expects a value > 0, got '%s'\n", a, v);
        return -1;
    }
    o->sp.repeat_penalty = f;
    return 1;
}

static int p_samplers(const char *a, const char *v, cli_common *o) {
    if (!need(a, v)) return -1;
    spex_error err = {0};
    if (spex_sampler_parse_stages(v, &o->sp, &err) != SPEX_OK) {
        fprintf(stderr, "error: %s: %s\n", a, err.msg);
        return -1;
    }
    return 1;
}

static int p_chat_template(const char *a, const char *v, cli_common *o) {
    spex_chat_template t;
    if (!need(a, v)) return -1;
    if (!spex_chat_template_from_name(v, &t)) {
        fprintf(stderr, "error: unknown %s '%s' (none, chatml, qwen3, qwen35; a Jinja file: --chat-template-file)\n",
                a, v);
        return -1;
    }
    o->chat_template = v;
    return 1;
}

/* A JSON object of extra template variables; enable_thinking, when there, a boolean. */
static int p_kwargs(const char *a, const char *v, cli_common *o) {
    if (!need(a, v)) return -1;
    cJSON *j = cJSON_Parse(v);
    int rc = 1;
    if (!cJSON_IsObject(j)) {
        fprintf(stderr, "error: %s expects a JSON object, got '%s'\n", a, v);
        rc = -1;
    } else {
        const cJSON *et = cJSON_GetObjectItemCaseSensitive(j, "enable_thinking");
        if (et && !cJSON_IsBool(et)) {
            fprintf(stderr, "error: %s: enable_thinking must be true or false\n", a);
            rc = -1;
        } else if (et) {
            o->enable_thinking = cJSON_IsTrue(et);
        }
    }
    cJSON_Delete(j);
    if (rc > 0) o->chat_template_kwargs = v;
    return rc;
}

static int p_reasoning(const char *a, const char *v, cli_common *o) {
    if (!need(a, v)) return -1;
    if (strcmp(v, "on") && strcmp(v, "off") && strcmp(v, "auto")) {
        fprintf(stderr, "error: %s expects on, off or auto, got '%s'\n", a, v);
        return -1;
    }
    o->enable_thinking = strcmp(v, "off") != 0;   /* auto: the template's default, on */
    return 1;
}

static int p_ngram(const char *a, const char *v, cli_common *o) { return cli_ngram_flag(a, v, &o->ngram); }

static const opt_row g_rows[] = {
    {{"-m", "--model"}, {0}, K_STR, 0, 0, AT(model), 0, NULL},
    {{"-md", "--model-draft", "--spec-draft-model"}, {0}, K_STR, 0, 0, AT(draft), 0, NULL},
    {{"--spec-type"}, {0}, K_FN, 0, 0, 0, 0, p_spec_type},
    {{"--spec-draft-n-max"}, {0}, K_INT, 0, 1024, AT(n_draft_max), 0, NULL},
    {{"--spec-draft-n-min"}, {0}, K_INT, 0, 1024, AT(n_draft_min), 0, NULL},
    {{"--draft", "--draft-n", "--draft-max", "--draft-min", "--draft-n-min"}, {0}, K_FN, 0, 0, 0, 0, p_removed},
    {{"--spec-draft-p-min", "--draft-p-min"}, {0}, K_FLOAT, 0, 1, AT(p_draft_min), 0, NULL},
    {{"--spec-draft-sampling"}, {0}, K_FN, 0, 0, 0, 0, p_sampling},
    {{"--spec-draft-cut"}, {0}, K_OOA, 0, 0, AT(draft_cut), 0, NULL},
    {{"--spec-draft-override-kv"}, {0}, K_STRS, 0, 0, AT(overrides), AT(n_overrides), NULL},
    {{"--spec-ngram-size-n", "--spec-ngram-simple-size-n", "--spec-ngram-map-k-size-n"}, {0}, K_FN, 0, 0, 0, 0, p_ngram},
    {{"--spec-ngram-size-m", "--spec-ngram-simple-size-m", "--spec-ngram-map-k-size-m"}, {0}, K_FN, 0, 0, 0, 0, p_ngram},
    {{"--spec-ngram-min-hits", "--spec-ngram-simple-min-hits", "--spec-ngram-map-k-min-hits"}, {0}, K_FN, 0, 0, 0, 0,
     p_ngram},
    {{"--override-kv"}, {0}, K_STRS, 0, 0, AT(model_overrides), AT(n_model_overrides), NULL},
    {{"-ctk", "--cache-type-k"}, {0}, K_KV, 0, 0, AT(kt), AT(has_kt), NULL},
    {{"-ctv", "--cache-type-v"}, {0}, K_KV, 0, 0, AT(vt), AT(has_vt), NULL},
    {{"-ctkd", "--cache-type-k-draft", "--spec-draft-type-k"}, {0}, K_KV, 0, 0, AT(dkt), AT(has_dkt), NULL},
    {{"-ctvd", "--cache-type-v-draft", "--spec-draft-type-v"}, {0}, K_KV, 0, 0, AT(dvt), AT(has_dvt), NULL},
    {{"--temp", "--temperature"}, {0}, K_FLOAT, -1e30, 1e30, AT(sp.temp), 0, NULL},
    {{"--top-k"}, {0}, K_INT, 0, 1L << 30, AT(top_k), 0, NULL},
    {{"--top-p"}, {0}, K_FLOAT, 0, 1, AT(sp.top_p), 0, NULL},
    {{"--min-p"}, {0}, K_FLOAT, 0, 1, AT(sp.min_p), 0, NULL},
    {{"--repeat-penalty"}, {0}, K_FN, 0, 0, 0, 0, p_repeat_penalty},
    {{"--repeat-last-n"}, {0}, K_INT, -1, 1L << 24, AT(repeat_last_n), 0, NULL},
    {{"--presence-penalty"}, {0}, K_FLOAT, -1e30, 1e30, AT(sp.presence_penalty), 0, NULL},
    {{"--frequency-penalty"}, {0}, K_FLOAT, -1e30, 1e30, AT(sp.frequency_penalty), 0, NULL},
    {{"--samplers"}, {0}, K_FN, 0, 0, 0, 0, p_samplers},
    {{"-s", "--seed"}, {0}, K_INT, -1, 0xFFFFFFFEL, AT(seed), 0, NULL},
    {{"-t", "--threads"}, {0}, K_INT, -1, 1024, AT(n_threads), 0, NULL},
    {{"-c", "--ctx-size"}, {0}, K_INT, 0, 1L << 24, AT(n_ctx), 0, NULL},
    {{"-b", "--batch-size"}, {0}, K_INT, 1, 1L << 16, AT(n_batch), 0, NULL},
    {{"-n", "--n-predict", "--predict"}, {0}, K_INT, -1, 1L << 30, AT(n_predict), 0, NULL},
    {{"--chat-template"}, {0}, K_FN, 0, 0, 0, 0, p_chat_template},
    {{"--chat-template-file"}, {0}, K_STR, 0, 0, AT(chat_template_file), 0, NULL},
    {{"--chat-template-kwargs"}, {0}, K_FN, 0, 0, 0, 0, p_kwargs},
    {{"-rea", "--reasoning"}, {0}, K_FN, 0, 0, 0, 0, p_reasoning},
    {{"--jinja"}, {"--no-jinja"}, K_SWITCH, 0, 0, AT(jinja), 0, NULL},
    {{"--no-mmap"}, {"--mmap"}, K_SWITCH, 0, 0, AT(no_mmap), 0, NULL},
    {{"-nr", "--no-repack"}, {"--repack"}, K_SWITCH, 0, 0, AT(no_repack), 0, NULL},
};
#define N_ROWS (int)(sizeof g_rows / sizeof g_rows[0])

void cli_common_init(cli_common *o) {
    memset(o, 0, sizeof *o);
    o->spec = SPEX_SPEC_AUTO;
    o->n_draft_max = -1;
    o->draft_cut = -1;
    o->ngram = spex_ngram_default_params();
    o->kv_type = o->draft_kv = o->kt = o->vt = o->dkt = o->dvt = SPEX_TYPE_F16;
    o->sp = spex_sampler_default_params();
    o->top_k = o->sp.top_k;
    o->seed = -1;
    o->repeat_last_n = o->sp.repeat_last_n;
    o->n_batch = 512;
    o->n_predict = -1;
    o->enable_thinking = -1;
}

static bool in_list(const char *a, const char *const *names, int n) {
    for (int i = 0; i < n && names[i]; i++)
        if (!strcmp(a, names[i])) return true;
    return false;
}

/* The row's value in v into *o: 1, or -1 after an error line. */
static int apply(const opt_row *r, const char *a, const char *v, cli_common *o) {
    char *base = (char *)o;
    switch (r->kind) {
    case K_INT:
        return cli_parse_int(a, v, (long)r->lo, (long)r->hi, (long *)(base + r->at)) ? 1 : -1;
    case K_FLOAT: {
        float f;
        if (!cli_parse_float(a, v, &f)) return -1;
        if (f < r->lo || f > r->hi) {
            fprintf(stderr, "error: %s expects a value in [%g, %g], got '%s'\n", a, r->lo, r->hi, v);
            return -1;
        }
        *(float *)(base + r->at) = f;
        return 1;
    }
    case K_OOA:
        if (!need(a, v)) return -1;
        if (strcmp(v, "on") && strcmp(v, "off") && strcmp(v, "auto")) {
            fprintf(stderr, "error: %s expects on, off or auto, got '%s'\n", a, v);
            return -1;
        }
        *(int *)(base + r->at) = !strcmp(v, "on") ? 1 : !strcmp(v, "off") ? 0 : -1;
        return 1;
    case K_KV:
        if (!cli_parse_kv_type(a, v, (spex_type *)(base + r->at))) return -1;
        *(bool *)(base + r->has_at) = true;
        return 1;
    case K_STR:
        if (!need(a, v)) return -1;
        *(const char **)(base + r->at) = v;
        return 1;
    case K_STRS: {
        int *n = (int *)(base + r->has_at);
        if (!need(a, v)) return -1;
        if (*n >= CLI_MAX_OVERRIDES) {
            fprintf(stderr, "error: at most %d %s flags\n", CLI_MAX_OVERRIDES, a);
            return -1;
        }
        ((const char **)(base + r->at))[(*n)++] = v;
        return 1;
    }
    case K_FN:
        return r->fn(a, v, o);
    case K_SWITCH:
        break;
    }
    return -1;
}

int cli_common_flag(const char *a, const char *v, cli_common *o, bool *takes) {
    return cli_common_flag_in(a, v, o, takes, NULL);
}

int cli_common_flag_in(const char *a, const char *v, cli_common *o, bool *takes, const char *const *rows) {
    for (int i = 0; i < N_ROWS; i++) {
        const opt_row *r = &g_rows[i];
        if (rows && !in_list(r->names[0], rows, 64)) continue;
        const bool pos = in_list(a, r->names, 6), neg = !pos && in_list(a, r->neg, 3);
        if (!pos && !neg) continue;
        if (r->kind == K_SWITCH) {
            *(bool *)((char *)o + r->at) = pos;
            *takes = false;
            return 1;
        }
        *takes = true;
        return apply(r, a, v, o);
    }
    return 0;
}

int cli_common_finish(cli_common *o) {
    if (!cli_kv_pair("target", o->has_kt, o->kt, o->has_vt, o->vt, &o->kv_type)) return -1;
    if (!cli_kv_pair("draft", o->has_dkt, o->dkt, o->has_dvt, o->dvt, &o->draft_kv)) return -1;
    if (o->chat_template && o->chat_template_file) {
        fprintf(stderr, "error: give --chat-template NAME or --chat-template-file FILE, not both\n");
        return -1;
    }
    if (o->n_draft_max > 0 && o->n_draft_min > o->n_draft_max) {
        /* llama.cpp clamps n-min to n-max too; a line says so, since one of the two was wrong */
        fprintf(stderr, "warning: --spec-draft-n-min %ld > --spec-draft-n-max %ld: n-min set to %ld\n",
                o->n_draft_min, o->n_draft_max, o->n_draft_max);
        o->n_draft_min = o->n_draft_max;
    }
    const bool lookup = o->spec == SPEX_SPEC_MTP || o->spec == SPEX_SPEC_NGRAM || cli_is_ngram_type(o->spec_type);
    if (o->n_draft_max == 0 && (o->draft || lookup) && o->spec != SPEX_SPEC_NONE) {
        /* llama.cpp's meaning: a draft of at most 0 tokens is no drafting */
        fprintf(stderr, "note: --spec-draft-n-max 0: nothing is drafted (speculative decoding off)\n");
        o->spec = SPEX_SPEC_NONE;
        o->spec_type = "none";
    }
    if (o->spec == SPEX_SPEC_NONE) o->draft = NULL;
    o->sp.top_k = (int32_t)o->top_k;
    o->sp.seed = o->seed < 0 ? SPEX_SEED_RANDOM : (uint64_t)o->seed;
    o->sp.repeat_last_n = o->repeat_last_n < 0 ? -1 : (int32_t)o->repeat_last_n;
    /* the sampler values the flags alone cannot judge (the library's rules), before any load */
    spex_sampler_params probe = o->sp;
    if (probe.repeat_last_n < 0) probe.repeat_last_n = 0;
    spex_sampler *s = NULL;
    spex_error err = {0};
    if (spex_sampler_init(&probe, 1, &s, &err) != SPEX_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        return -1;
    }
    spex_sampler_free(s);
    return 0;
}

bool cli_common_row(int i, char *buf, size_t cap, bool *takes_value) {
    if (i < 0 || i >= N_ROWS || !cap) return false;
    size_t n = 0;
    buf[0] = 0;
    for (int k = 0; k < 6 && g_rows[i].names[k]; k++)
        n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s%s", n ? " " : "", g_rows[i].names[k]);
    for (int k = 0; k < 3 && g_rows[i].neg[k]; k++)
        n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, " %s", g_rows[i].neg[k]);
    *takes_value = g_rows[i].kind != K_SWITCH;
    return true;
}
