/*
 * env.c — llama.cpp's LLAMA_ARG_* environment variables for `spex run` and `spex serve`
 * (contract in cli.h, cli_env_args).
 *
 * What it is: one table from variable to flag, as llama.cpp maps them (LLAMA_ARG_ and the long
 * flag name, with llama.cpp's own exceptions: LLAMA_ARG_N_PARALLEL, LLAMA_ARG_BATCH,
 * LLAMA_API_KEY, LLAMA_ARG_ENDPOINT_*, LLAMA_ARG_DRAFT_*). The variables set in the environment
 * become flags placed before the command line's own, and every parser here lets the last of a
 * flag win, so a flag given on the command line wins over its variable. A boolean variable
 * takes 1/true/on/enabled/yes or 0/false/off/disabled/no. What it is not: a parser — the flags
 * go through the tool's own, which reports a bad value; cli_env_explain then names the
 * variable it came from.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum { ENV_RUN = 1, ENV_SERVE = 2, ENV_BOTH = 3 };

typedef struct env_flag {
    const char *var;
    const char *flag;      /* a value flag, or the flag of a true boolean          */
    const char *flag_off;  /* a boolean's flag when false (NULL: nothing); value flags: NULL */
    bool boolean;
    unsigned tools;
} env_flag;

static const env_flag ENV[] = {
    {"LLAMA_ARG_MODEL", "-m", NULL, false, ENV_BOTH},
    {"LLAMA_ARG_CHAT_TEMPLATE", "--chat-template", NULL, false, ENV_BOTH},
    {"LLAMA_ARG_CTX_SIZE", "-c", NULL, false, ENV_BOTH},
    {"LLAMA_ARG_N_PREDICT", "-n", NULL, false, ENV_BOTH},
    {"LLAMA_ARG_BATCH", "-b", NULL, false, ENV_BOTH},
    {"LLAMA_ARG_UBATCH", "-ub", NULL, false, ENV_BOTH},
    {"LLAMA_ARG_THREADS", "-t", NULL, false, ENV_BOTH},
    {"LLAMA_ARG_THREADS_BATCH", "-tb", NULL, false, ENV_BOTH},
    {"LLAMA_ARG_N_GPU_LAYERS", "-ngl", NULL, false, ENV_BOTH},
    {"LLAMA_ARG_N_GPU_LAYERS_DRAFT", "-ngld", NULL, false, ENV_BOTH},
    {"LLAMA_ARG_FLASH_ATTN", "-fa", NULL, false, ENV_BOTH},
    {"LLAMA_ARG_CACHE_TYPE_K", "-ctk", NULL, false, ENV_BOTH},
    {"LLAMA_ARG_CACHE_TYPE_V", "-ctv", NULL, false, ENV_BOTH},
    {"LLAMA_ARG_CACHE_TYPE_K_DRAFT", "-ctkd", NULL, false, ENV_BOTH},
    {"LLAMA_ARG_CACHE_TYPE_V_DRAFT", "-ctvd", NULL, false, ENV_BOTH},
    {"LLAMA_ARG_SPEC_TYPE", "--spec-type", NULL, false, ENV_BOTH},
    {"LLAMA_ARG_SPEC_DRAFT_MODEL", "-md", NULL, false, ENV_BOTH},
    {"LLAMA_ARG_MODEL_DRAFT", "-md", NULL, false, ENV_BOTH},
    {"LLAMA_ARG_DRAFT_MAX", "--spec-draft-n-max", NULL, false, ENV_BOTH},
    {"LLAMA_ARG_DRAFT_MIN", "--spec-draft-n-min", NULL, false, ENV_BOTH},
    {"LLAMA_ARG_DRAFT_P_MIN", "--spec-draft-p-min", NULL, false, ENV_BOTH},
    {"LLAMA_ARG_NO_MMAP", "--no-mmap", NULL, true, ENV_BOTH},
    {"LLAMA_ARG_MMAP", "--mmap", "--no-mmap", true, ENV_BOTH},
    {"LLAMA_ARG_JINJA", "--jinja", "--no-jinja", true, ENV_BOTH},
    {"LLAMA_ARG_CHAT_TEMPLATE_FILE", "--chat-template-file", NULL, false, ENV_BOTH},
    {"LLAMA_CHAT_TEMPLATE_KWARGS", "--chat-template-kwargs", NULL, false, ENV_BOTH},
    {"LLAMA_ARG_CHAT_TEMPLATE_KWARGS", "--chat-template-kwargs", NULL, false, ENV_BOTH},
    {"LLAMA_ARG_ALIAS", "-a", NULL, false, ENV_SERVE},
    {"LLAMA_ARG_N_PARALLEL", "-np", NULL, false, ENV_SERVE},
    {"LLAMA_ARG_HOST", "--host", NULL, false, ENV_SERVE},
    {"LLAMA_ARG_PORT", "--port", NULL, false, ENV_SERVE},
    {"LLAMA_API_KEY", "--api-key", NULL, false, ENV_SERVE},
    {"LLAMA_ARG_API_KEY_FILE", "--api-key-file", NULL, false, ENV_SERVE},
    {"LLAMA_ARG_TIMEOUT", "--timeout", NULL, false, ENV_SERVE},
    {"LLAMA_ARG_THREADS_HTTP", "--threads-http", NULL, false, ENV_SERVE},
    {"LLAMA_ARG_CONT_BATCHING", "-cb", "-nocb", true, ENV_SERVE},
    {"LLAMA_ARG_ENDPOINT_METRICS", "--metrics", NULL, true, ENV_SERVE},
    {"LLAMA_ARG_EMBEDDINGS", "--embeddings", NULL, true, ENV_SERVE},
    {"LLAMA_ARG_POOLING", "--pooling", NULL, false, ENV_SERVE},
    {"LLAMA_ARG_ENDPOINT_SLOTS", "--slots", "--no-slots", true, ENV_SERVE},
    {"LLAMA_ARG_ENDPOINT_PROPS", "--props", NULL, true, ENV_SERVE},
    {"LLAMA_ARG_CORS_ORIGINS", "--cors-origins", NULL, false, ENV_SERVE},
    {"LLAMA_ARG_STATIC_PATH", "--path", NULL, false, ENV_SERVE},
    {"LLAMA_ARG_UI", "--ui", "--no-ui", true, ENV_SERVE},
};
#define ENV_N (sizeof ENV / sizeof *ENV)

static char *g_argv[1 + 2 * ENV_N + 256];   /* the tools' argv are short: 256 is far more */
static const char *g_used[ENV_N];           /* the variables applied, for cli_env_explain */
static int g_n_used;

static int parse_bool(const char *v) {
    static const char *yes[] = {"1", "true", "on", "enabled", "yes"}, *no[] = {"0", "false", "off", "disabled", "no"};
    for (int i = 0; i < 5; i++) {
        if (!strcasecmp(v, yes[i])) return 1;
        if (!strcasecmp(v, no[i])) return 0;
    }
    return -1;
}

bool cli_env_args(bool serve, int argc, char **argv, int *out_argc, char ***out_argv) {
    int n = 0;
    g_n_used = 0;
    g_argv[n++] = argv[0];
    for (size_t i = 0; i < ENV_N; i++) {
        const env_flag *e = &ENV[i];
        const char *v = getenv(e->var);
        if (!v || !(e->tools & (serve ? ENV_SERVE : ENV_RUN))) continue;
        if (e->boolean) {
            int b = parse_bool(v);
            if (b < 0) {
                fprintf(stderr, "error: %s=%s: expects 1/true/on/enabled or 0/false/off/disabled\n", e->var, v);
                return false;
            }
            const char *f = b ? e->flag : e->flag_off;
            if (f) g_argv[n++] = (char *)f;
        } else {
            g_argv[n++] = (char *)e->flag;
            g_argv[n++] = (char *)v;
        }
        g_used[g_n_used++] = e->var;
    }
    if (argc - 1 + n >= (int)(sizeof g_argv / sizeof *g_argv)) {
        fprintf(stderr, "error: too many arguments\n");
        return false;
    }
    for (int i = 1; i < argc; i++) g_argv[n++] = argv[i];
    g_argv[n] = NULL;
    *out_argc = n;
    *out_argv = g_argv;
    return true;
}

void cli_env_explain(void) {
    if (!g_n_used) return;
    fprintf(stderr, "note: flags taken from the environment:");
    for (int i = 0; i < g_n_used; i++) fprintf(stderr, " %s=%s", g_used[i], getenv(g_used[i]));
    fprintf(stderr, "\n");
}
