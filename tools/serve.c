/*
 * serve.c — `spex serve`: flag parsing for the HTTP server (src/server/), llama-server's names.
 *
 * What it is: server-api.md §2 mapped onto srv_config; the server itself (model loading,
 * listener, engine) is src/server/http.c. What it is not: every llama-server flag — flags spex
 * accepts without effect are listed as such in docs/server.md; unknown flags are errors.
 */
#include "spex.h"
#include "cli.h"
#include "server/server.h"
#include "spec/api.h"
#include "model/api.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SERVE_MAX_OVERRIDES 16

static void usage(FILE *f) {
    fprintf(f,
            "usage: spex serve -m MODEL [options]   (OpenAI- and llama-server-compatible HTTP server)\n"
            "\n"
            "  -m, --model FILE            target GGUF                          -a, --alias NAME   model id\n"
            "  -c, --ctx-size N            KV tokens in total; each slot gets N / np (default 4096 per slot)\n"
            "  -np, --parallel N           slots (default 4)                    -n, --n-predict N  default max tokens (-1)\n"
            "  -b, --batch-size N          prompt batch (512)                   -t, --threads N    threads (all CPUs)\n"
            "  --host HOST (127.0.0.1)     --port PORT (8080)                   --api-key K[,K..]  --api-key-file FILE\n"
            "  -to, --timeout N            connection timeout, s (3600)         --metrics          enable /metrics\n"
            "  -nr, --no-repack            keep every weight in the file's layout (no R16 copies at load)\n"
            "  --slots / --no-slots        GET /slots on (default) / off (501)  --props            allow POST /props\n"
            "  --chat-template NAME        chatml, qwen3, qwen35, none          --chat-template-kwargs JSON\n"
            "  --reasoning-format F        none, deepseek (auto), deepseek-legacy   -rea on|off|auto\n"
            "  --temp --top-k --top-p --min-p --seed --repeat-penalty --repeat-last-n --presence-penalty\n"
            "  --frequency-penalty --samplers LIST      sampling defaults (llama.cpp's)\n"
            "  -md, --model-draft FILE     DFlash drafter or draft model  --spec-type none|draft-dflash|draft-mtp|ngram|draft-simple|hybrid\n"
            "                              (draft-mtp: a qwen35 target's own MTP block drafts; no -md; n-max 3)\n"
            "                              (ngram: prompt lookup in each request's tokens; no -md; n-max 16)\n"
            "                              (draft-simple: -md is a small model of the target's vocabulary; n-max 16)\n"
            "                              (hybrid: -md's DFlash drafter and n-gram lookup, the better draft per step)\n"
            "  --spec-ngram-size-n N (12)  --spec-ngram-size-m N (48)  --spec-ngram-min-hits N (1)\n"
            "  --spec-draft-n-max N  --spec-draft-n-min N  --spec-draft-p-min P  --spec-draft-sampling greedy|probabilistic\n"
            "  -ctk/-ctv f16|f32|q8_0      target KV type (f16; K = V)\n"
            "  -ctkd/-ctvd f16|f32|q8_0    draft KV type                        --spec-draft-override-kv KEY=TYPE:VALUE\n"
            "  --spec-adaptive on|off      adaptive draft length (on)           --spec-min-gain X (1.05)\n"
            "  --spec-draft-cut on|off     cost-aware cut of a lone slot's drafts after the walk (on)\n"
            "  --queue-max N               waiting requests before 503 (64)     --body-max BYTES (8 MiB)\n"
            "  --conn-max N                requests in service, and connections still sending their head (1024)\n"
            "  --conn-max-per-ip N         the same per client address (256; 0: no limit)\n"
            "  --header-timeout S          seconds from accept to a complete request head (10)\n"
            "  --ctx-checkpoints N         recurrent (qwen35) state checkpoints per slot for prefix reuse (32)\n"
            "  --checkpoint-min-step N     tokens between two checkpoints of a slot (8192); one is also taken\n"
            "                              at the end of every prompt\n"
            "  --embedding, --embeddings   serve POST /v1/embeddings, /embeddings, /embedding (inputs up to -b tokens)\n"
            "  --pooling none|mean|cls|last   pooling of the embeddings (default: the model's pooling_type, else none)\n");
}

static bool is(const char *a, const char *x, const char *y) {
    return !strcmp(a, x) || (y && !strcmp(a, y));
}


static char *read_key_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    for (size_t i = 0; i < n; i++)
        if (buf[i] == '\n' || buf[i] == '\r') buf[i] = ',';
    while (n > 0 && buf[n - 1] == ',') buf[--n] = 0;
    return buf;
}

static int serve_parse_args(int argc, char **argv, srv_config *out) {
    static const char *overrides[SERVE_MAX_OVERRIDES];
    srv_config c;
    memset(&c, 0, sizeof c);
    c.host = "127.0.0.1";
    c.port = 8080;
    c.n_slots = 4;   /* llama-server -np -1 = auto; spex auto = 4 (§2.1) */
    c.n_batch = 512;
    c.n_predict = -1;
    c.sp = spex_sampler_default_params();
    c.draft_kv = SPEX_TYPE_F16;
    c.kv_type = SPEX_TYPE_F16;
    c.enable_thinking = 1;
    c.reasoning_format = SRV_REASONING_DEEPSEEK;
    c.queue_max = 64;
    c.body_max = 8u << 20;
    c.timeout_s = 3600;
    c.ngram_params = spex_ngram_default_params();
    c.spec_type = SPEX_SPEC_AUTO;
    c.n_draft_max = -1;   /* unset: the drafter's own bound */
    c.conn_max = 1024;
    c.conn_max_per_ip = 256;
    c.header_timeout_s = 10;
    c.sse_ping_s = 30;
    c.slots = true;   /* GET /slots on by default, as in llama-server (§2.3) */
    c.adaptive = true;
    c.draft_cut = true;
    c.min_gain = 1.05f;
    c.n_ctx_checkpoints = 32;
    c.checkpoint_min_step = 8192;
    c.pooling = SPEX_POOLING_UNSPECIFIED;   /* the model's <arch>.pooling_type */
    c.overrides = overrides;
    spex_type kt = SPEX_TYPE_F16, vt = SPEX_TYPE_F16; /* -ctk / -ctv */
    bool has_kt = false, has_vt = false;
    long repeat_last_n = c.sp.repeat_last_n;
    bool spec_none = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        float f;
        bool takes = true, compat_takes = false;
        if (is(a, "-h", "--help")) {
            usage(stdout);
            return 0;
        } else if (is(a, "-m", "--model")) {
            if (!v) goto need;
            c.model = v;
        } else if (is(a, "-a", "--alias")) {
            if (!v) goto need;
            c.alias = v;
        } else if (is(a, "-md", "--model-draft") || !strcmp(a, "--spec-draft-model")) {
            if (!v) goto need;
            c.draft = v;
        } else if (is(a, "-c", "--ctx-size")) {
            if (!cli_parse_int(a, v, 0, 1L << 24, &n)) return 2;
            c.n_ctx = (int32_t)n;
        } else if (is(a, "-np", "--parallel")) {
            if (!cli_parse_int(a, v, -1, 64, &n)) return 2;
            c.n_slots = n <= 0 ? 4 : (int32_t)n;   /* auto = 4 (§2.1) */
        } else if (is(a, "-n", "--n-predict") || !strcmp(a, "--predict")) {
            if (!cli_parse_int(a, v, -1, 1L << 30, &n)) return 2;
            c.n_predict = n;
        } else if (is(a, "-b", "--batch-size")) {
            if (!cli_parse_int(a, v, 1, 1L << 16, &n)) return 2;
            c.n_batch = (int32_t)n;
        } else if ((n = cli_ngram_flag(a, v, &c.ngram_params)) != 0) {
            if (n < 0) return 2;
        } else if ((n = cli_llama_flag(a, v, &compat_takes)) != 0) {   /* llama.cpp's, no effect here */
            if (n < 0) return 2;
            takes = compat_takes;
        } else if (is(a, "--slots", NULL) || is(a, "--no-slots", NULL)) {
            c.slots = !strcmp(a, "--slots"), takes = false;
        } else if (is(a, "--props", NULL)) {
            c.props = true, takes = false;
        } else if (is(a, "--sse-ping-interval", NULL)) {
            if (!cli_parse_int(a, v, -1, 1L << 20, &n)) return 2;
            c.sse_ping_s = (int)n;
        } else if (is(a, "-t", "--threads")) {
            if (!cli_parse_int(a, v, -1, 1024, &n)) return 2;
            c.n_threads = (int32_t)n;
        } else if (is(a, "--host", NULL)) {
            if (!v) goto need;
            c.host = v;
        } else if (is(a, "--port", NULL)) {
            if (!cli_parse_int(a, v, 0, 65535, &n)) return 2;
            c.port = (int)n;
        } else if (is(a, "--api-key", NULL)) {
            if (!v) goto need;
            c.api_keys = v;
        } else if (is(a, "--api-key-file", NULL)) {
            if (!v) goto need;
            c.api_keys = read_key_file(v);
            if (!c.api_keys) {
                fprintf(stderr, "error: cannot read --api-key-file '%s'\n", v);
                return 2;
            }
        } else if (is(a, "-to", "--timeout")) {
            if (!cli_parse_int(a, v, 1, 1L << 24, &n)) return 2;
            c.timeout_s = (int)n;
        } else if (is(a, "--metrics", NULL)) {
            c.metrics = true, takes = false;
        } else if (is(a, "--embedding", "--embeddings")) {
            c.embedding = true, takes = false;
        } else if (is(a, "--pooling", NULL)) {
            if (!v) goto need;
            c.pooling = spex_pooling_parse(v);
            if (c.pooling < 0) {
                fprintf(stderr, "error: --pooling '%s': expected none, mean, cls, last or rank\n", v);
                return 2;
            }
        } else if (is(a, "-nr", "--no-repack")) {
            c.no_repack = true, takes = false;
        } else if (is(a, "--chat-template", NULL)) {
            if (!v) goto need;
            spex_chat_template t;
            if (!spex_chat_template_from_name(v, &t)) {
                fprintf(stderr, "error: --chat-template '%s' is not supported: use --chat-template chatml\n", v);
                return 2;
            }
            c.chat_template = v;
        } else if (is(a, "--chat-template-kwargs", NULL)) {
            if (!v) goto need;
            if (strstr(v, "\"enable_thinking\"") && strstr(v, "false")) c.enable_thinking = 0;
            else if (strstr(v, "\"enable_thinking\"") && strstr(v, "true")) c.enable_thinking = 1;
        } else if (is(a, "--reasoning-format", NULL)) {
            if (!v) goto need;
            if (!strcmp(v, "none")) c.reasoning_format = SRV_REASONING_NONE;
            else if (!strcmp(v, "deepseek") || !strcmp(v, "auto")) c.reasoning_format = SRV_REASONING_DEEPSEEK;
            else if (!strcmp(v, "deepseek-legacy")) c.reasoning_format = SRV_REASONING_LEGACY;
            else {
                fprintf(stderr, "error: %s expects none, auto, deepseek or deepseek-legacy, got '%s'\n", a, v);
                return 2;
            }
        } else if (is(a, "-rea", "--reasoning")) {
            if (!v) goto need;
            if (!strcmp(v, "off")) c.enable_thinking = 0;
            else if (!strcmp(v, "on") || !strcmp(v, "auto")) c.enable_thinking = 1;
            else {
                fprintf(stderr, "error: %s expects on, off or auto, got '%s'\n", a, v);
                return 2;
            }
        } else if (is(a, "--temp", "--temperature")) {
            if (!cli_parse_float(a, v, &f)) return 2;
            c.sp.temp = f;
        } else if (is(a, "--top-k", NULL)) {
            if (!cli_parse_int(a, v, 0, 1L << 30, &n)) return 2;
            c.sp.top_k = (int32_t)n;
        } else if (is(a, "--top-p", NULL)) {
            if (!cli_parse_float(a, v, &f)) return 2;
            c.sp.top_p = f;
        } else if (is(a, "--min-p", NULL)) {
            if (!cli_parse_float(a, v, &f)) return 2;
            c.sp.min_p = f;
        } else if (is(a, "--repeat-penalty", NULL)) {
            if (!cli_parse_float(a, v, &f)) return 2;
            c.sp.repeat_penalty = f;
        } else if (is(a, "--repeat-last-n", NULL)) {
            if (!cli_parse_int(a, v, -1, 1L << 24, &repeat_last_n)) return 2;
        } else if (is(a, "--presence-penalty", NULL)) {
            if (!cli_parse_float(a, v, &f)) return 2;
            c.sp.presence_penalty = f;
        } else if (is(a, "--frequency-penalty", NULL)) {
            if (!cli_parse_float(a, v, &f)) return 2;
            c.sp.frequency_penalty = f;
        } else if (is(a, "--samplers", NULL)) {
            if (!v) goto need;
            spex_error err = {0};
            if (spex_sampler_parse_stages(v, &c.sp, &err) != SPEX_OK) {
                fprintf(stderr, "error: %s: %s\n", a, err.msg);
                return 2;
            }
        } else if (is(a, "-s", "--seed")) {
            if (!cli_parse_int(a, v, -1, 0xFFFFFFFEL, &n)) return 2;
            c.sp.seed = n < 0 ? SPEX_SEED_RANDOM : (uint64_t)n;
        } else if (is(a, "--spec-type", NULL)) {
            if (!v) goto need;
            if (!spex_spec_type_parse(v, &c.spec_type)) {
                fprintf(stderr,
                        "error: --spec-type '%s' is not supported (none, draft-dflash, draft-mtp, ngram, draft-simple, hybrid)\n",
                        v);
                return 2;
            }
            spec_none = c.spec_type == SPEX_SPEC_NONE;
        } else if (is(a, "--spec-draft-n-max", NULL)) {
            if (!cli_parse_int(a, v, 0, 1024, &n)) return 2;
            c.n_draft_max = (int32_t)n;
        } else if (is(a, "--spec-draft-n-min", NULL)) {
            if (!cli_parse_int(a, v, 0, 1024, &n)) return 2;
            c.n_draft_min = (int32_t)n;
        } else if (is(a, "--spec-draft-p-min", "--draft-p-min")) {
            if (!cli_parse_float(a, v, &f)) return 2;
            c.p_draft_min = f;
        } else if (is(a, "--spec-draft-p-split", "--draft-p-split")) {
            if (!cli_parse_float(a, v, &f)) return 2;
        } else if (is(a, "--spec-draft-sampling", NULL)) {
            if (!v || (strcmp(v, "greedy") && strcmp(v, "probabilistic"))) {
                fprintf(stderr, "error: %s expects greedy or probabilistic\n", a);
                return 2;
            }
            c.draft_greedy = !strcmp(v, "greedy");
        } else if (is(a, "-ctk", "--cache-type-k")) {
            if (!cli_parse_kv_type(a, v, &kt)) return 2;
            has_kt = true;
        } else if (is(a, "-ctv", "--cache-type-v")) {
            if (!cli_parse_kv_type(a, v, &vt)) return 2;
            has_vt = true;
        } else if (is(a, "-ctkd", "--spec-draft-type-k") || is(a, "-ctvd", "--spec-draft-type-v")) {
            if (!cli_parse_kv_type(a, v, &c.draft_kv)) return 2;
        } else if (is(a, "--spec-draft-override-kv", NULL)) {
            if (!v) goto need;
            if (c.n_overrides >= SERVE_MAX_OVERRIDES) {
                fprintf(stderr, "error: at most %d %s flags\n", SERVE_MAX_OVERRIDES, a);
                return 2;
            }
            overrides[c.n_overrides++] = v;
        } else if (is(a, "--spec-adaptive", NULL)) {
            if (!v || (strcmp(v, "on") && strcmp(v, "off"))) {
                fprintf(stderr, "error: %s expects on or off\n", a);
                return 2;
            }
            c.adaptive = !strcmp(v, "on");
        } else if (is(a, "--spec-draft-cut", NULL)) {
            if (!v || (strcmp(v, "on") && strcmp(v, "off"))) {
                fprintf(stderr, "error: %s expects on or off\n", a);
                return 2;
            }
            c.draft_cut = !strcmp(v, "on");
        } else if (is(a, "--spec-min-gain", NULL)) {
            if (!cli_parse_float(a, v, &f)) return 2;
            c.min_gain = f;
        } else if (is(a, "--ctx-checkpoints", "-ctxcp")) {
            if (!cli_parse_int(a, v, 0, 1024, &n)) return 2;
            c.n_ctx_checkpoints = (int32_t)n;
        } else if (is(a, "--checkpoint-min-step", NULL)) {
            if (!cli_parse_int(a, v, 1, 1L << 30, &n)) return 2;
            c.checkpoint_min_step = (int32_t)n;
        } else if (is(a, "--queue-max", NULL)) {
            if (!cli_parse_int(a, v, 1, 1L << 20, &n)) return 2;
            c.queue_max = (int32_t)n;
        } else if (is(a, "--body-max", NULL)) {
            if (!cli_parse_int(a, v, 1024, 1L << 30, &n)) return 2;
            c.body_max = (size_t)n;
        } else if (is(a, "--conn-max", NULL)) {
            if (!cli_parse_int(a, v, 1, 1L << 20, &n)) return 2;
            c.conn_max = (int)n;
        } else if (is(a, "--conn-max-per-ip", NULL)) {
            if (!cli_parse_int(a, v, 0, 1L << 20, &n)) return 2;
            c.conn_max_per_ip = (int)n;
        } else if (is(a, "--header-timeout", NULL)) {
            if (!cli_parse_float(a, v, &f)) return 2;
            if (!(f >= 0.1f && f <= 3600.0f)) {
                fprintf(stderr, "error: --header-timeout %s: must be 0.1 to 3600 seconds\n", v);
                return 2;
            }
            c.header_timeout_s = f;
        } else if (is(a, "--draft", "--draft-n") || is(a, "--draft-max", "--draft-min") || is(a, "--draft-n-min", NULL)) {
            fprintf(stderr, "error: the argument has been removed. use --spec-draft-n-max or --spec-draft-n-min\n");
            return 2;
        } else {
            fprintf(stderr, "error: unknown flag '%s' (see 'spex serve --help')\n", a);
            return 2;
        }
        if (takes) i++;
        continue;
    need:
        fprintf(stderr, "error: %s needs a value\n", a);
        return 2;
    }
    if (!cli_kv_pair("target", has_kt, kt, has_vt, vt, &c.kv_type)) return 2;
    if (!c.model) {
        fprintf(stderr, "error: -m MODEL is required (see 'spex serve --help')\n");
        return 2;
    }
    const spex_spec_type t = c.spec_type;
    const bool needs_file = t == SPEX_SPEC_DFLASH || t == SPEX_SPEC_DRAFT_MODEL || t == SPEX_SPEC_HYBRID;
    if (needs_file && !c.draft) {
        fprintf(stderr, "error: --spec-type %s needs a drafter (-md FILE)\n", spex_spec_type_name(t));
        return 2;
    }
    if (c.n_draft_max == 0 && (c.draft || t == SPEX_SPEC_MTP || t == SPEX_SPEC_NGRAM) && !spec_none) {
        /* llama.cpp's meaning: a draft of at most 0 tokens is no drafting */
        fprintf(stderr, "note: --spec-draft-n-max 0: nothing is drafted (speculative decoding off)\n");
        spec_none = true;
    }
    if (spec_none) c.draft = NULL, c.spec_type = SPEX_SPEC_NONE;
    if (t == SPEX_SPEC_NGRAM && c.draft) {
        fprintf(stderr, "error: --spec-type ngram drafts by lookup in the request's own tokens: drop -md\n");
        return 2;
    }
    if (t == SPEX_SPEC_MTP && c.draft) {
        fprintf(stderr, "error: --spec-type draft-mtp drafts with the target's MTP block: drop -md\n");
        return 2;
    }
    c.sp.repeat_last_n = repeat_last_n < 0 ? -1 : (int32_t)repeat_last_n;
    spex_sampler_params probe = c.sp;
    if (probe.repeat_last_n < 0) probe.repeat_last_n = 0;
    spex_sampler *s = NULL;
    spex_error err = {0};
    if (spex_sampler_init(&probe, 1, &s, &err) != SPEX_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 2;
    }
    spex_sampler_free(s);
    *out = c;
    return -1;
}

int serve_parse(int argc, char **argv, srv_config *c) {
    int n = 0;
    char **args = NULL;
    if (!cli_env_args(true, argc, argv, &n, &args)) return 2;   /* LLAMA_ARG_*: before the flags */
    int rc = serve_parse_args(n, args, c);
    if (rc == 2) cli_env_explain();
    return rc;
}

int cmd_serve(int argc, char **argv) {
    srv_config c;
    int rc = serve_parse(argc, argv, &c);
    return rc >= 0 ? rc : srv_main(&c);
}
