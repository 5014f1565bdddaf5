/*
 * serve.c — `spex serve`: flag parsing for the HTTP server (src/server/), llama-server's names.
 *
 * What it is: server-api.md §2 mapped onto srv_config (the options shared with `spex run` are
 * tools/opts.c's table, copied in by from_common); the server itself (model loading,
 * listener, engine) is src/server/http.c. What it is not: every llama-server flag — those
 * spex does not apply are tools/compat.c's (accepted with a note, or refused with the reason);
 * docs/server.md has the table of all of them; unknown flags are errors.
 */
#include "spex.h"
#include "cli.h"
#include "opts.h"
#include "server/server.h"
#include "server/webui.h"
#include "spec/api.h"
#include "model/api.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
            "  --sse-ping-interval N       seconds between SSE pings (30; -1: none)\n"
            "  --kv-unified-per-slot N     without -c: -c is N x -np\n"
            "  -nr, --no-repack            keep every weight in the file's layout (no R16 copies at load; --repack: the default)\n"
            "  --no-mmap / --mmap          read the model files into memory / map them (default)\n"
            "  --override-kv KEY=TYPE:VALUE  the target's metadata override (repeatable; TYPE int, float, bool, str)\n"
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
            "  -ctkd/-ctvd f16|f32|q8_0    draft KV type (K = V)                --spec-draft-override-kv KEY=TYPE:VALUE\n"
            "  --spec-adaptive on|off      adaptive draft length (on)           --spec-min-gain X (1.05)\n"
            "  --spec-draft-cut on|off|auto  cost-aware cut of a lone slot's drafts after the walk (auto: on)\n"
            "  --queue-max N               waiting requests before 503 (64)     --body-max BYTES (8 MiB)\n"
            "  --conn-max N                requests in service, and connections still sending their head (1024)\n"
            "  --conn-max-per-ip N         the same per client address (256; 0: no limit)\n"
            "  --header-timeout S          seconds from accept to a complete request head (10)\n"
            "  -ctxcp, --ctx-checkpoints N recurrent (qwen35) state checkpoints per slot for prefix reuse (32)\n"
            "  -cms, --checkpoint-min-step N  tokens between two checkpoints of a slot (8192); one is also\n"
            "                              taken at the end of every prompt\n"
            "  --spec-ngram-simple-size-n N, --spec-ngram-map-k-size-n N (and so for size-m, min-hits):\n"
            "                              llama.cpp's newer names of --spec-ngram-size-n, --spec-ngram-size-m,\n"
            "                              --spec-ngram-min-hits\n"
            "  --jinja, --no-jinja         render chat prompts with the GGUF's own Jinja template (off: built-in)\n"
            "  --chat-template-file FILE   render chat prompts with this Jinja template\n"
            "  --no-webui, --webui         the chat page at / off (404) / on (default)   --path DIR  serve DIR's files at / instead\n"
            "  --cors-origins LIST         origins whose pages may call the API: * (default), localhost, or\n"
            "                              http[s]://host[:port],... (others get no Access-Control-Allow-Origin)\n"
            "  --spm-infill                POST /infill lays the suffix before the prefix (SPM order)\n"
            "  --slot-save-path DIR        POST /slots/{id}?action=save|restore files live in DIR\n"
            "  --embedding, --embeddings   serve POST /v1/embeddings, /embeddings, /embedding (inputs up to -b tokens)\n"
            "  --pooling none|mean|cls|last   pooling of the embeddings (default: the model's pooling_type, else none)\n"
            "  -h, --help, --usage         this text\n");
    cli_llama_flags_help(f, true);
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

/* What the flags set beyond srv_config, settled after the loop (serve_finish). */
typedef struct serve_args {
    long kv_per_slot;
} serve_args;

static bool need(const char *a, const char *v) {
    if (!v) fprintf(stderr, "error: %s needs a value\n", a);
    return v != NULL;
}

static bool on_off(const char *a, const char *v, bool *out) {
    if (!v || (strcmp(v, "on") && strcmp(v, "off"))) {
        fprintf(stderr, "error: %s expects on or off\n", a);
        return false;
    }
    *out = !strcmp(v, "on");
    return true;
}

static srv_config serve_defaults(void) {
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
    return c;
}

/* The model, the slots and the listener: 1 when a is one of these flags (*takes: v was its
 * value), 0 when not, -1 after an error line. The same contract for the two groups below. */
static int flag_server(const char *a, const char *v, srv_config *c, serve_args *sa, bool *takes) {
    long n;
    float f;
    if (is(a, "-a", "--alias")) {
        if (!need(a, v)) return -1;
        c->alias = v;
    } else if (is(a, "--kv-unified-per-slot", NULL)) {
        if (!cli_parse_int(a, v, 1, 1L << 24, &sa->kv_per_slot)) return -1;
    } else if (is(a, "-np", "--parallel")) {
        if (!cli_parse_int(a, v, -1, 64, &n)) return -1;
        c->n_slots = n <= 0 ? 4 : (int32_t)n;   /* auto = 4 (§2.1) */
    } else if (is(a, "--ctx-checkpoints", "-ctxcp") || is(a, "--swa-checkpoints", NULL)) {
        if (!cli_parse_int(a, v, 0, 1024, &n)) return -1;
        c->n_ctx_checkpoints = (int32_t)n;
    } else if (is(a, "--checkpoint-min-step", "-cms")) {
        if (!cli_parse_int(a, v, 0, 1L << 30, &n)) return -1;
        c->checkpoint_min_step = n < 1 ? 1 : (int32_t)n;   /* llama.cpp's 0: no minimum */
    } else if (is(a, "--host", NULL)) {
        if (!need(a, v)) return -1;
        c->host = v;
    } else if (is(a, "--port", NULL)) {
        if (!cli_parse_int(a, v, 0, 65535, &n)) return -1;
        c->port = (int)n;
    } else if (is(a, "--api-key", NULL)) {
        if (!need(a, v)) return -1;
        c->api_keys = v;
    } else if (is(a, "--api-key-file", NULL)) {
        if (!need(a, v)) return -1;
        c->api_keys = read_key_file(v);
        if (!c->api_keys) {
            fprintf(stderr, "error: cannot read --api-key-file '%s'\n", v);
            return -1;
        }
    } else if (is(a, "--cors-origins", NULL)) {
        char msg[320];
        if (!need(a, v)) return -1;
        if (!srv_cors_valid(v, msg, sizeof msg)) {
            fprintf(stderr, "error: %s\n", msg);
            return -1;
        }
        c->cors_origins = v;
    } else if (is(a, "--ui", "--webui") || is(a, "--no-ui", "--no-webui")) {
        c->no_webui = !strncmp(a, "--no-", 5), *takes = false;
    } else if (is(a, "--path", NULL)) {
        struct stat st;
        if (!need(a, v)) return -1;
        if (*v && (stat(v, &st) != 0 || !S_ISDIR(st.st_mode))) {
            fprintf(stderr, "error: --path '%s': not a folder (llama-server's static files folder)\n", v);
            return -1;
        }
        c->static_path = *v ? v : NULL;   /* "": the built-in page, as llama-server's default */
    } else if (is(a, "-to", "--timeout")) {
        if (!cli_parse_int(a, v, 1, 1L << 24, &n)) return -1;
        c->timeout_s = (int)n;
    } else if (is(a, "--sse-ping-interval", NULL)) {
        if (!cli_parse_int(a, v, -1, 1L << 20, &n)) return -1;
        c->sse_ping_s = (int)n;
    } else if (is(a, "--metrics", NULL) || is(a, "--props", NULL)) {
        *(!strcmp(a, "--props") ? &c->props : &c->metrics) = true, *takes = false;
    } else if (is(a, "--slots", NULL) || is(a, "--no-slots", NULL)) {
        c->slots = !strcmp(a, "--slots"), *takes = false;
    } else if (is(a, "--spm-infill", NULL)) {
        c->spm_infill = true, *takes = false;
    } else if (is(a, "--slot-save-path", NULL)) {
        if (!need(a, v)) return -1;
        c->slot_save_path = v;
    } else if (is(a, "--embedding", "--embeddings")) {
        c->embedding = true, *takes = false;
    } else if (is(a, "--pooling", NULL)) {
        if (!need(a, v)) return -1;
        c->pooling = spex_pooling_parse(v);
        if (c->pooling < 0) {
            fprintf(stderr, "error: --pooling '%s': expected none, mean, cls, last or rank\n", v);
            return -1;
        }
    } else if (is(a, "--queue-max", NULL)) {
        if (!cli_parse_int(a, v, 1, 1L << 20, &n)) return -1;
        c->queue_max = (int32_t)n;
    } else if (is(a, "--body-max", NULL)) {
        if (!cli_parse_int(a, v, 1024, 1L << 30, &n)) return -1;
        c->body_max = (size_t)n;
    } else if (is(a, "--conn-max", NULL) || is(a, "--conn-max-per-ip", NULL)) {
        bool per_ip = !strcmp(a, "--conn-max-per-ip");
        if (!cli_parse_int(a, v, per_ip ? 0 : 1, 1L << 20, &n)) return -1;
        *(per_ip ? &c->conn_max_per_ip : &c->conn_max) = (int)n;
    } else if (is(a, "--header-timeout", NULL)) {
        if (!cli_parse_float(a, v, &f)) return -1;
        if (!(f >= 0.1f && f <= 3600.0f)) {
            fprintf(stderr, "error: --header-timeout %s: must be 0.1 to 3600 seconds\n", v);
            return -1;
        }
        c->header_timeout_s = f;
    } else {
        return 0;
    }
    return 1;
}

/* Reasoning. */
static int flag_chat(const char *a, const char *v, srv_config *c) {
    if (!is(a, "--reasoning-format", NULL)) return 0;
    if (!need(a, v)) return -1;
    if (!strcmp(v, "none")) c->reasoning_format = SRV_REASONING_NONE;
    else if (!strcmp(v, "deepseek") || !strcmp(v, "auto")) c->reasoning_format = SRV_REASONING_DEEPSEEK;
    else if (!strcmp(v, "deepseek-legacy")) c->reasoning_format = SRV_REASONING_LEGACY;
    else {
        fprintf(stderr, "error: %s expects none, auto, deepseek or deepseek-legacy, got '%s'\n", a, v);
        return -1;
    }
    return 1;
}

/* Speculative decoding, serve's own flags. */
static int flag_spec(const char *a, const char *v, srv_config *c) {
    float f;
    if (is(a, "--spec-adaptive", NULL)) {
        if (!on_off(a, v, &c->adaptive)) return -1;
    } else if (is(a, "--spec-min-gain", NULL)) {
        if (!cli_parse_float(a, v, &f)) return -1;
        c->min_gain = f;
    } else {
        return 0;
    }
    return 1;
}

/* cli_common into srv_config: the values as the server reads them. The common options live in
 * static storage, as the override lists must outlive the parse. */
static void from_common(srv_config *c, const cli_common *o) {
    c->model = o->model;
    c->draft = o->draft;
    c->spec_type = o->spec;
    c->n_draft_max = (int32_t)o->n_draft_max;
    c->n_draft_min = (int32_t)o->n_draft_min;
    c->p_draft_min = o->p_draft_min;
    c->draft_greedy = o->draft_greedy;
    c->draft_cut = o->draft_cut != 0;   /* auto: on, serve's default */
    c->model_overrides = o->model_overrides;
    c->n_model_overrides = o->n_model_overrides;
    c->overrides = o->overrides;
    c->n_overrides = o->n_overrides;
    c->ngram_params = o->ngram;
    c->kv_type = o->kv_type;
    c->draft_kv = o->draft_kv;
    c->sp = o->sp;
    c->n_threads = (int32_t)o->n_threads;
    c->n_ctx = (int32_t)o->n_ctx;   /* the total over the slots */
    c->n_batch = (int32_t)o->n_batch;
    c->n_predict = o->n_predict;
    c->chat_template = o->chat_template;
    c->chat_template_file = o->chat_template_file;
    c->jinja = o->jinja;
    if (o->enable_thinking >= 0) c->enable_thinking = o->enable_thinking;
    c->no_mmap = o->no_mmap;
    c->no_repack = o->no_repack;
}

/* After the loop: the checks across flags, and the values settled from several. */
static int serve_finish(srv_config *c, serve_args *sa, cli_common *o) {
    if (cli_common_finish(o) < 0) return 2;
    from_common(c, o);
    if (!c->model) {
        fprintf(stderr, "error: -m MODEL is required (see 'spex serve --help')\n");
        return 2;
    }
    if (sa->kv_per_slot > 0 && c->n_ctx == 0) c->n_ctx = (int32_t)(sa->kv_per_slot * c->n_slots);
    const spex_spec_type t = c->spec_type;
    const bool needs_file = t == SPEX_SPEC_DFLASH || t == SPEX_SPEC_DRAFT_MODEL || t == SPEX_SPEC_HYBRID;
    if (needs_file && !c->draft) {
        fprintf(stderr, "error: --spec-type %s needs a drafter (-md FILE)\n", spex_spec_type_name(t));
        return 2;
    }
    if (t == SPEX_SPEC_NGRAM && c->draft) {
        fprintf(stderr, "error: --spec-type ngram drafts by lookup in the request's own tokens: drop -md\n");
        return 2;
    }
    if (t == SPEX_SPEC_MTP && c->draft) {
        fprintf(stderr, "error: --spec-type draft-mtp drafts with the target's MTP block: drop -md\n");
        return 2;
    }
    return -1;
}

static int serve_parse_args(int argc, char **argv, srv_config *out) {
    static cli_common o;   /* static: c's override lists point into it */
    srv_config c = serve_defaults();
    serve_args sa = {0};
    cli_common_init(&o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (is(a, "-h", "--help") || !strcmp(a, "--usage")) {
            usage(stdout);
            return 0;
        }
        bool takes = true;
        int r = cli_common_flag(a, v, &o, &takes);
        if (!r) takes = true, r = flag_server(a, v, &c, &sa, &takes);
        if (!r) r = flag_chat(a, v, &c);
        if (!r) r = flag_spec(a, v, &c);
        if (!r && (takes = true, r = cli_llama_flag(true, a, v, &takes)) == 0) {   /* llama.cpp's, not applied here */
            fprintf(stderr, "error: unknown flag '%s' (see 'spex serve --help')\n", a);
            return 2;
        }
        if (r < 0) return 2;
        if (takes) i++;
    }
    int rc = serve_finish(&c, &sa, &o);
    if (rc < 0) *out = c;
    return rc;
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
