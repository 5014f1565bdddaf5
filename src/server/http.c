/*
 * http.c — `spex serve`: libmicrohttpd glue, routing, auth, request preparation, responses and
 * SSE streams; model loading and shutdown.
 *
 * What it is: server-api.md §3–§12 on top of engine.c. The front door (door.c) accepts and
 * checks each request head, then hands the connection to libmicrohttpd, which runs a thread
 * per request in service and closes the connection after the response. That thread parses
 * the body (api.c), renders the chat template, tokenizes, checks the context, builds the
 * request's sampler and detokenizer stream, and queues a task. A non-streaming request then waits for the task; a streaming one returns a
 * callback response whose reader waits for released text and writes SSE events. Both waits
 * poll the socket, so a client that goes away cancels its task within ~100 ms (§8.3).
 * What it is not: scheduling or generation (engine.c) or JSON request parsing (api.c).
 *
 * Choices: the listener starts before the model loads (/health answers 503 meanwhile, §4);
 * errors after SSE headers are `data: {"error": ...}` without [DONE] (§17); /completion
 * (llama.cpp native) streams {"content", "stop"} events without [DONE], as llama-server does.
 */
#include "server/server.h"

#include <cjson/cJSON.h>
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SRV_FINGERPRINT "spex-b1"

typedef struct srv_server {
    const srv_config *cfg;
    struct MHD_Daemon *daemon;
    srv_door *door;           /* accepts, checks heads, hands requests to the daemon  */
    volatile int ready;       /* 0 loading, 1 ready, -1 shutting down */
    spex_model *model;
    spex_tokenizer *tok;
    spex_drafter *drafter;
    spex_context *ctx;
    spex_draft_context *dc;
    spex_mtp_context *mtp;
    spex_spec *spec;
    srv_engine *engine;
    spex_chat_template tmpl;
    int32_t n_ctx_slot, n_max;
    long created;
    const char *model_id;
    atomic_int n_live;        /* requests received and not yet completed (their srv_conn) */
} srv_server;

/* Seconds a shutdown waits for the responses of ended requests to be written. */
#define SRV_DRAIN_S 5.0

/* Per-connection state: the body being received. */
typedef struct srv_conn {
    char *body;
    size_t len, cap;
    bool too_big, alloc_failed;
} srv_conn;

/* ======================================================================== */
/* Small helpers                                                             */
/* ======================================================================== */

/* allow: the Allow header of a 405 (RFC 9110 §15.5.6), else NULL. */
static enum MHD_Result send_text_allow(struct MHD_Connection *c, unsigned code, const char *ctype, char *body,
                                       const char *allow) {
    if (!body) {
        static char oom[] = "{\"error\":{\"code\":500,\"message\":\"out of memory\",\"type\":\"server_error\"}}";
        body = malloc(sizeof oom);
        if (!body) return MHD_NO;
        memcpy(body, oom, sizeof oom);
        code = 500;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
    MHD_add_response_header(r, "Connection", "close");   /* every request comes through the door */
    if (allow) MHD_add_response_header(r, "Allow", allow);
    enum MHD_Result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned code, const char *ctype, char *body) {
    return send_text_allow(c, code, ctype, body, NULL);
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned code, cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return send_text(c, code, "application/json; charset=utf-8", s);
}

static enum MHD_Result send_error(struct MHD_Connection *c, unsigned code, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return send_text(c, code, "application/json; charset=utf-8", srv_error_json((int)code, msg));
}

static enum MHD_Result send_405(struct MHD_Connection *c, const char *method, const char *url, const char *allow) {
    char msg[512];
    snprintf(msg, sizeof msg, "method %.64s is not allowed on %.200s (allowed: %s)", method, url, allow);
    return send_text_allow(c, 405, "application/json; charset=utf-8", srv_error_json(405, msg), allow);
}

/* A CORS preflight (OPTIONS): any origin may call with any method the server has and the
 * headers it asks for (echoed when they are a plain list of header names), so a browser page
 * on another origin can POST JSON with an Authorization header. */
static enum MHD_Result send_preflight(struct MHD_Connection *c) {
    const char *asked = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    bool plain = asked && asked[0] && strlen(asked) <= 512;
    for (const char *p = asked; plain && *p; p++)
        plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("-_, ", *p);
    char *empty = calloc(1, 1);
    struct MHD_Response *r = empty ? MHD_create_response_from_buffer(0, empty, MHD_RESPMEM_MUST_FREE) : NULL;
    if (!r) {
        free(empty);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS");
    MHD_add_response_header(r, "Access-Control-Allow-Headers", plain ? asked : "Authorization, Content-Type, X-Api-Key");
    MHD_add_response_header(r, "Access-Control-Max-Age", "86400");
    MHD_add_response_header(r, "Connection", "close");
    enum MHD_Result ret = MHD_queue_response(c, 204, r);
    MHD_destroy_response(r);
    return ret;
}

static void random_id(char *out, size_t cap, const char *prefix) {
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    static _Atomic unsigned long long ctr;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned long long x = (unsigned long long)ts.tv_nsec * 6364136223846793005ull + ++ctr * 1442695040888963407ull +
                           (unsigned long long)ts.tv_sec;
    size_t n = (size_t)snprintf(out, cap, "%s", prefix);
    for (int i = 0; i < 24 && n + 1 < cap; i++) {
        x ^= x >> 29, x *= 0xbf58476d1ce4e5b9ull, x ^= x >> 32;
        out[n++] = al[x % (sizeof al - 1)];
    }
    out[n] = 0;
}

/* Waits up to 100 ms for t to change; false when the client is gone. The socket is checked
 * after every wake-up, not only after a timeout: a generation signals t at every token, so
 * a non-streaming request whose client left would otherwise never see the timeout and run
 * to its end (one poll per token costs about a microsecond). */
static bool wait_client(srv_task *t, int fd) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&t->cv, &t->mu, &ts);
    if (fd >= 0) {
        struct pollfd p = {.fd = fd, .events = POLLRDHUP};
        if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) return false;
    }
    return true;
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

static void add_timings(cJSON *o, const srv_timings *tm) {
    cJSON *t = cJSON_AddObjectToObject(o, "timings");
    cJSON_AddNumberToObject(t, "cache_n", (double)tm->cache_n);
    cJSON_AddNumberToObject(t, "prompt_n", (double)tm->prompt_n);
    cJSON_AddNumberToObject(t, "prompt_ms", tm->prompt_ms);
    cJSON_AddNumberToObject(t, "prompt_per_token_ms", tm->prompt_n ? tm->prompt_ms / (double)tm->prompt_n : 0);
    cJSON_AddNumberToObject(t, "prompt_per_second", tm->prompt_ms > 0 ? 1e3 * (double)tm->prompt_n / tm->prompt_ms : 0);
    cJSON_AddNumberToObject(t, "predicted_n", (double)tm->predicted_n);
    cJSON_AddNumberToObject(t, "predicted_ms", tm->predicted_ms);
    cJSON_AddNumberToObject(t, "predicted_per_token_ms",
                            tm->predicted_n ? tm->predicted_ms / (double)tm->predicted_n : 0);
    cJSON_AddNumberToObject(t, "predicted_per_second",
                            tm->predicted_ms > 0 ? 1e3 * (double)tm->predicted_n / tm->predicted_ms : 0);
    if (tm->draft_n > 0) {   /* present only when something was drafted (§10) */
        cJSON_AddNumberToObject(t, "draft_n", (double)tm->draft_n);
        cJSON_AddNumberToObject(t, "draft_n_accepted", (double)tm->draft_n_accepted);
        cJSON_AddNumberToObject(t, "draft_rounds", (double)tm->draft_rounds);
    }
}

static void add_usage(cJSON *o, const srv_timings *tm) {
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)tm->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)tm->predicted_n);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(tm->n_prompt + tm->predicted_n));
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "prompt_tokens_details"), "cached_tokens", (double)tm->cache_n);
}

/* JSON string from bytes (cJSON needs NUL-terminated text). */
static cJSON *str_n(const char *s, size_t n) {
    char *tmp = malloc(n + 1);
    if (!tmp) return cJSON_CreateString("");
    memcpy(tmp, s, n);
    tmp[n] = 0;
    cJSON *j = cJSON_CreateString(tmp);
    free(tmp);
    return j;
}

/* ======================================================================== */
/* Preparing a generation task                                               */
/* ======================================================================== */

typedef struct srv_job {
    srv_request req;
    srv_task *task;
    bool think_open;          /* the prompt opened <think> (§6.3)               */
    srv_reasoning reasoning;  /* effective format (chat only)                   */
    bool tools;               /* tools rendered: parse <tool_call> blocks (chat) */
    char id[48];
    long created;
    const char *model;        /* request's model or the alias                   */
    srv_gen_defaults defaults; /* the server's, for /completion generation_settings */
    int ids_sent;             /* stream: gen_ids already sent as "tokens"        */
} srv_job;

static int tokenize_all(const spex_tokenizer *tok, const char *text, size_t len, bool add_special, int32_t **out,
                        int *n_out, char *msg, size_t cap) {
    spex_error err = {0};
    int n = 0;
    spex_status st = spex_tokenize(tok, text, len, add_special, true, NULL, 0, &n, &err);
    if (st != SPEX_OK && st != SPEX_ERR_RANGE) return snprintf(msg, cap, "tokenize: %.400s", err.msg), 400;
    int32_t *ids = malloc(sizeof *ids * (size_t)(n > 0 ? n : 1));
    if (!ids) return snprintf(msg, cap, "out of memory"), 500;
    if (n > 0 && spex_tokenize(tok, text, len, add_special, true, ids, n, &n, &err) != SPEX_OK) {
        free(ids);
        return snprintf(msg, cap, "tokenize: %.400s", err.msg), 400;
    }
    *out = ids;
    *n_out = n;
    return 0;
}

/* Renders a chat request's messages (and tools) through the model's template with the
 * generation prompt: the prompt of /v1/chat/completions and the body of /apply-template.
 * 0 with *text_out (malloc'd, NUL-terminated) or an HTTP status with msg. */
static int render_chat(const srv_server *S, const srv_request *r, char **text_out, size_t *len_out, char *msg,
                       size_t cap) {
    spex_chat_msg *ms = calloc((size_t)r->n_msgs + 1, sizeof *ms);
    if (!ms) return snprintf(msg, cap, "out of memory"), 500;
    for (int i = 0; i < r->n_msgs; i++)
        ms[i] = (spex_chat_msg){r->msgs[i].role, r->msgs[i].content, r->msgs[i].reasoning, r->msgs[i].tool_calls,
                                (size_t)r->msgs[i].n_tool_calls};
    bool think = r->enable_thinking >= 0 ? r->enable_thinking != 0 : S->cfg->enable_thinking != 0;
    /* tool_choice none: no tools in the prompt, no parsing; forcing is not implemented */
    size_t n_tools = r->tool_choice == SRV_TOOL_CHOICE_NONE ? 0 : (size_t)r->n_tools;
    const char *const *tools = (const char *const *)r->tools;
    spex_error err = {0};
    size_t need = 0;
    spex_status st =
        spex_chat_apply_tools(S->tmpl, ms, (size_t)r->n_msgs, tools, n_tools, true, think, NULL, 0, &need, &err);
    char *text = NULL;
    if (st == SPEX_OK || st == SPEX_ERR_RANGE) {
        text = malloc(need + 1);
        if (!text) st = SPEX_ERR_NOMEM;
        else
            st = spex_chat_apply_tools(S->tmpl, ms, (size_t)r->n_msgs, tools, n_tools, true, think, text, need + 1,
                                       &need, &err);
    }
    free(ms);
    if (st != SPEX_OK) {
        free(text);
        return snprintf(msg, cap, "chat template: %.400s", err.msg), st == SPEX_ERR_NOMEM ? 500 : 400;
    }
    *text_out = text;
    *len_out = need;
    return 0;
}

/* Fills job->task from job->req; 0 or an HTTP status with msg (n_prompt for 400 context). */
static int prepare(srv_server *S, srv_job *job, char *msg, size_t cap, int *n_prompt_out) {
    const srv_config *cfg = S->cfg;
    srv_request *r = &job->req;
    srv_task *t = srv_task_new();
    if (!t) return snprintf(msg, cap, "out of memory"), 500;
    job->task = t;
    t->ep = r->ep;
    int rc = 0;
    if (r->ep == SRV_EP_CHAT) {
        job->tools = r->tool_choice != SRV_TOOL_CHOICE_NONE && r->n_tools > 0 && S->tmpl != SPEX_CHAT_NONE;
        char *text = NULL;
        size_t need = 0;
        rc = render_chat(S, r, &text, &need, msg, cap);
        if (rc) return rc;
        size_t e = need;
        while (e > 0 && (text[e - 1] == '\n' || text[e - 1] == ' ')) e--;
        job->think_open = e >= 7 && !memcmp(text + e - 7, "<think>", 7);
        rc = tokenize_all(S->tok, text, need, true, &t->ids, &t->n_ids, msg, cap);
        free(text);
        if (rc) return rc;
        job->reasoning = r->reasoning_format != SRV_REASONING_DEFAULT ? r->reasoning_format : cfg->reasoning_format;
    } else if (r->prompt) {
        rc = tokenize_all(S->tok, r->prompt, strlen(r->prompt), true, &t->ids, &t->n_ids, msg, cap);
        if (rc) return rc;
        job->reasoning = SRV_REASONING_NONE;
    } else {
        int32_t nv = spex_model_get_hparams(S->model)->n_vocab;
        for (int i = 0; i < r->n_prompt_ids; i++)
            if (r->prompt_ids[i] >= nv) return snprintf(msg, cap, "prompt token id %d is out of range", r->prompt_ids[i]), 400;
        t->ids = r->prompt_ids, t->n_ids = r->n_prompt_ids;
        r->prompt_ids = NULL, r->n_prompt_ids = 0;
        job->reasoning = SRV_REASONING_NONE;
    }
    *n_prompt_out = t->n_ids;
    t->tm.n_prompt = t->n_ids;
    if (t->n_ids == 0) return snprintf(msg, cap, "the prompt is empty"), 400;
    if (t->n_ids >= S->n_ctx_slot) return -1;   /* exceed_context_size_error */

    spex_sampler_params sp = cfg->sp;
    if (r->has_temp) sp.temp = r->temp;
    if (r->has_top_p) sp.top_p = r->top_p;
    if (r->has_top_k) sp.top_k = r->top_k;
    if (r->has_min_p) sp.min_p = r->min_p;
    if (r->has_rep) sp.repeat_penalty = r->repeat_penalty;
    if (r->has_rep_n) sp.repeat_last_n = r->repeat_last_n;
    if (r->has_freq) sp.frequency_penalty = r->freq_penalty;
    if (r->has_pres) sp.presence_penalty = r->pres_penalty;
    if (r->has_seed) sp.seed = r->seed < 0 ? SPEX_SEED_RANDOM : (uint64_t)r->seed;
    if (sp.repeat_last_n < 0) sp.repeat_last_n = S->n_ctx_slot;
    spex_error err = {0};
    int32_t nv = spex_model_get_hparams(S->model)->n_vocab;
    if (spex_sampler_init(&sp, nv, &t->smp, &err) != SPEX_OK) return snprintf(msg, cap, "%.400s", err.msg), 400;
    if (spex_detok_stream_create(S->tok, SPEX_DETOK_STRIP_SPACE, &t->ds, &err) != SPEX_OK)
        return snprintf(msg, cap, "%.400s", err.msg), 500;
    /* as spex run: the prompt goes through the stream unprinted and into the penalty history */
    for (int i = 0; i < t->n_ids; i++) {
        spex_str ignored;
        if (spex_detok_stream_push(t->ds, t->ids[i], &ignored, &err) != SPEX_OK ||
            spex_sampler_accept(t->smp, t->ids[i]) != SPEX_OK)
            return snprintf(msg, cap, "prompt token %d: %.400s", t->ids[i], err.msg), 400;
    }
    (void)spex_detok_stream_flush(t->ds);
    t->n_predict = r->n_predict == -2 ? cfg->n_predict : r->n_predict;
    for (int i = 0; i < r->n_stop; i++) snprintf(t->stop[i], SRV_MAX_STOP_LEN, "%s", r->stop[i]);
    t->n_stop = r->n_stop;
    t->spec_n_max = r->spec_n_max;
    return 0;
}

/* ======================================================================== */
/* Responses                                                                 */
/* ======================================================================== */

static cJSON *response_head(const srv_job *job, const char *object) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", job->id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)job->created);
    cJSON_AddStringToObject(o, "model", job->model);
    cJSON_AddStringToObject(o, "system_fingerprint", SRV_FINGERPRINT);
    return o;
}

/* llama-server's /completion end fields: stop_type (eos, word, limit), stopping_word, the
 * whole prompt as tokens_evaluated with its reused part as tokens_cached, truncated (the
 * context ran out) and id_slot (t->mu held, t done). */
static void add_completion_end(cJSON *o, const srv_task *t) {
    bool word = t->stop_word >= 0 && t->stop_word < t->n_stop;
    cJSON_AddStringToObject(o, "stop_type", word ? "word" : !strcmp(t->finish, "length") ? "limit" : "eos");
    cJSON_AddStringToObject(o, "stopping_word", word ? t->stop[t->stop_word] : "");
    cJSON_AddNumberToObject(o, "tokens_predicted", (double)t->tm.predicted_n);
    cJSON_AddNumberToObject(o, "tokens_evaluated", (double)t->tm.n_prompt);
    cJSON_AddNumberToObject(o, "tokens_cached", (double)t->tm.cache_n);
    cJSON_AddBoolToObject(o, "truncated", t->truncated);
    cJSON_AddNumberToObject(o, "id_slot", t->slot_used);
}

/* tool_calls [{(index), id, type, function: {name, arguments}}] for calls[from ..) (§6.2, §8.2). */
static void add_tool_calls(cJSON *m, const srv_toolparse *tp, int from, bool with_index) {
    cJSON *arr = cJSON_AddArrayToObject(m, "tool_calls");
    for (int i = from; i < tp->n_calls; i++) {
        cJSON *c = cJSON_CreateObject();
        char id[48];
        random_id(id, sizeof id, "call_");
        if (with_index) cJSON_AddNumberToObject(c, "index", i);
        cJSON_AddStringToObject(c, "id", id);
        cJSON_AddStringToObject(c, "type", "function");
        cJSON *f = cJSON_AddObjectToObject(c, "function");
        cJSON_AddStringToObject(f, "name", tp->calls[i].name);
        cJSON_AddStringToObject(f, "arguments", tp->calls[i].arguments);
        cJSON_AddItemToArray(arr, c);
    }
}

/* "tokens": the generated ids from `from` on when the request asked for them (return_tokens),
 * else empty, as llama-server sends it (t->mu held). */
static void add_tokens(cJSON *o, const srv_job *job, int from) {
    cJSON *a = cJSON_AddArrayToObject(o, "tokens");
    for (int i = from; job->req.return_tokens && i < job->task->n_gen_ids; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(job->task->gen_ids[i]));
}

/* response_fields: a new object with only the named fields of o ("a/b": o.a.b, under the key
 * "a/b"; a missing one is left out), o freed. */
static cJSON *pick_fields(cJSON *o, char *const *fields, int n) {
    if (n <= 0) return o;
    cJSON *r = cJSON_CreateObject();
    for (int i = 0; i < n; i++) {
        const cJSON *v = o;
        char part[257];
        for (const char *p = fields[i]; v && *p;) {
            size_t k = strcspn(p, "/");
            snprintf(part, sizeof part, "%.*s", (int)k, p);
            v = cJSON_GetObjectItemCaseSensitive(v, part);
            p += k + (p[k] == '/');
        }
        if (v) cJSON_AddItemToObject(r, fields[i], cJSON_Duplicate(v, true));
    }
    cJSON_Delete(o);
    return r;
}

/* The final body of a finished task (t->mu held). */
static cJSON *final_response(const srv_job *job) {
    const srv_task *t = job->task;
    if (job->req.ep == SRV_EP_COMPLETION) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "index", 0);
        cJSON_AddItemToObject(o, "content", str_n(t->text, t->len));
        add_tokens(o, job, 0);
        cJSON_AddBoolToObject(o, "stop", true);
        cJSON_AddStringToObject(o, "model", job->model);
        cJSON_AddBoolToObject(o, "has_new_line", memchr(t->text, '\n', t->len) != NULL);
        cJSON_AddItemToObject(o, "generation_settings", srv_params_json(&job->defaults, t));
        if (job->req.prompt) cJSON_AddStringToObject(o, "prompt", job->req.prompt);
        add_completion_end(o, t);
        add_timings(o, &t->tm);
        return pick_fields(o, job->req.response_fields, job->req.n_response_fields);
    }
    bool chat = job->req.ep == SRV_EP_CHAT;
    cJSON *o = response_head(job, chat ? "chat.completion" : "text_completion");
    cJSON *ch = cJSON_AddArrayToObject(o, "choices"), *c0 = cJSON_CreateObject();
    cJSON_AddItemToArray(ch, c0);
    cJSON_AddNumberToObject(c0, "index", 0);
    cJSON_AddStringToObject(c0, "finish_reason", t->finish);
    if (chat) {
        cJSON *m = cJSON_AddObjectToObject(c0, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        size_t r0, r1, c;
        bool split = job->reasoning != SRV_REASONING_NONE &&
                     srv_split_reasoning(t->text, t->len, job->think_open, true, &r0, &r1, &c) == SRV_SPLIT_YES;
        /* content: after </think> when split (legacy format: from the start) */
        size_t from = split && job->reasoning != SRV_REASONING_LEGACY ? c : 0;
        if (job->tools) {
            /* tool calls only after the reasoning: parse the post-</think> part */
            size_t tc_from = split ? c : 0;
            srv_toolparse tp;
            srv_strbuf body = {0};
            srv_toolparse_init(&tp);
            srv_strbuf_add(&body, t->text + from, tc_from - from);
            srv_toolparse_feed(&tp, t->text + tc_from, t->len - tc_from, &body);
            srv_toolparse_finish(&tp, &body);
            if (tp.n_calls > 0 && body.len == 0) cJSON_AddNullToObject(m, "content");   /* as OpenAI */
            else cJSON_AddItemToObject(m, "content", str_n(body.p ? body.p : "", body.len));
            if (tp.n_calls > 0) {
                add_tool_calls(m, &tp, 0, false);
                if (!strcmp(t->finish, "stop"))
                    cJSON_ReplaceItemInObject(c0, "finish_reason", cJSON_CreateString("tool_calls"));
            }
            srv_toolparse_free(&tp);
            srv_strbuf_free(&body);
        } else {
            cJSON_AddItemToObject(m, "content", str_n(t->text + from, t->len - from));
        }
        if (split) cJSON_AddItemToObject(m, "reasoning_content", str_n(t->text + r0, r1 - r0));
    } else {
        cJSON_AddItemToObject(c0, "text", str_n(t->text, t->len));
        cJSON_AddNullToObject(c0, "logprobs");
    }
    add_usage(o, &t->tm);
    add_timings(o, &t->tm);
    return o;
}

/* ---- streams ------------------------------------------------------------ */

typedef struct srv_stream {
    srv_server *S;
    srv_job job;
    int fd;
    char *out;
    size_t out_len, out_pos, out_cap;
    size_t c_sent, r_sent;
    size_t seen;              /* t->released when last turned into events      */
    double t_out;             /* when output was last produced (SSE pings)     */
    int phase;                /* 0 before the first event, 1 streaming, 2 ended */
    srv_toolparse tp;         /* job.tools: content is fed through it            */
    int calls_sent;           /* tp.calls already sent as deltas                 */
} srv_stream;

static void out_add(srv_stream *st, const char *s, size_t n) {
    if (st->out_len + n > st->out_cap) {
        size_t nc = st->out_cap ? st->out_cap : 4096;
        while (st->out_len + n > nc) nc *= 2;
        char *p = realloc(st->out, nc);
        if (!p) return;
        st->out = p, st->out_cap = nc;
    }
    memcpy(st->out + st->out_len, s, n);
    st->out_len += n;
}

static void out_event(srv_stream *st, cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) return;
    out_add(st, "data: ", 6);
    out_add(st, s, strlen(s));
    out_add(st, "\n\n", 2);
    free(s);
}

static cJSON *chunk(srv_stream *st, cJSON **delta_or_choice) {
    bool chat = st->job.req.ep == SRV_EP_CHAT;
    cJSON *o = response_head(&st->job, chat ? "chat.completion.chunk" : "text_completion");
    cJSON *ch = cJSON_AddArrayToObject(o, "choices"), *c0 = cJSON_CreateObject();
    cJSON_AddItemToArray(ch, c0);
    cJSON_AddNumberToObject(c0, "index", 0);
    cJSON_AddNullToObject(c0, "finish_reason");
    if (chat) *delta_or_choice = cJSON_AddObjectToObject(c0, "delta");
    else {
        cJSON_AddNullToObject(c0, "logprobs");
        *delta_or_choice = c0;
    }
    return o;
}

/* Turns what the task released since the last call into events (t->mu held). */
static void stream_progress(srv_stream *st) {
    srv_task *t = st->job.task;
    size_t rel = t->released;
    srv_endpoint ep = st->job.req.ep;
    if (st->phase == 0 && ep == SRV_EP_CHAT) {
        cJSON *d, *o = chunk(st, &d);
        cJSON_AddStringToObject(d, "role", "assistant");
        cJSON_AddNullToObject(d, "content");
        out_event(st, o);
    }
    st->phase = 1;
    size_t r0 = 0, r1 = 0, c0 = st->c_sent;
    int sp = ep == SRV_EP_CHAT && st->job.reasoning != SRV_REASONING_NONE
                 ? srv_split_reasoning(t->text, rel, st->job.think_open, t->done, &r0, &r1, &c0)
                 : SRV_SPLIT_NONE;
    bool split = sp == SRV_SPLIT_YES;
    if (sp == SRV_SPLIT_WAIT) rel = st->c_sent;   /* maybe "<think>": hold everything */
    if (split) {
        if (st->r_sent < r0) st->r_sent = r0;
        if (r1 > st->r_sent) {
            cJSON *d, *o = chunk(st, &d);
            cJSON_AddItemToObject(d, "reasoning_content", str_n(t->text + st->r_sent, r1 - st->r_sent));
            out_event(st, o);
            st->r_sent = r1;
        }
        if (st->c_sent < c0) st->c_sent = c0;
    }
    if (st->job.tools) {
        /* content through the tool-call splitter: held text never leaks a partial tag */
        srv_strbuf txt = {0};
        if (rel > st->c_sent && (!split || c0 < rel)) {
            srv_toolparse_feed(&st->tp, t->text + st->c_sent, rel - st->c_sent, &txt);
            st->c_sent = rel;
        }
        if (t->done) srv_toolparse_finish(&st->tp, &txt);
        if (txt.len > 0) {
            cJSON *d, *o = chunk(st, &d);
            cJSON_AddItemToObject(d, "content", str_n(txt.p, txt.len));
            out_event(st, o);
        }
        srv_strbuf_free(&txt);
        if (st->tp.n_calls > st->calls_sent) {
            cJSON *d, *o = chunk(st, &d);
            add_tool_calls(d, &st->tp, st->calls_sent, true);
            out_event(st, o);
            st->calls_sent = st->tp.n_calls;
        }
    } else if (rel > st->c_sent && (!split || c0 < rel)) {
        cJSON *d, *o = chunk(st, &d);
        if (ep == SRV_EP_COMPLETION) {
            cJSON_Delete(o);
            o = cJSON_CreateObject();
            cJSON_AddItemToObject(o, "content", str_n(t->text + st->c_sent, rel - st->c_sent));
            add_tokens(o, &st->job, st->job.ids_sent);
            st->job.ids_sent = t->n_gen_ids;
            cJSON_AddBoolToObject(o, "stop", false);
            cJSON_AddNumberToObject(o, "index", 0);
        } else {
            cJSON_AddItemToObject(d, ep == SRV_EP_CHAT ? "content" : "text", str_n(t->text + st->c_sent, rel - st->c_sent));
        }
        out_event(st, o);
        st->c_sent = rel;
    }
    if (!t->done) return;
    if (t->err_code) {
        char *ej = srv_error_json(t->err_code, t->err_msg[0] ? t->err_msg : "error");
        if (ej) {
            out_add(st, "data: ", 6);
            out_add(st, ej, strlen(ej));
            out_add(st, "\n\n", 2);
            free(ej);
        }
    } else if (ep == SRV_EP_COMPLETION) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "index", 0);
        cJSON_AddStringToObject(o, "content", "");
        add_tokens(o, &st->job, st->job.ids_sent);   /* any not sent with their text yet */
        st->job.ids_sent = t->n_gen_ids;
        cJSON_AddBoolToObject(o, "stop", true);
        cJSON_AddStringToObject(o, "model", st->job.model);
        cJSON_AddBoolToObject(o, "has_new_line", memchr(t->text, '\n', t->len) != NULL);
        cJSON_AddItemToObject(o, "generation_settings", srv_params_json(&st->job.defaults, t));
        if (st->job.req.prompt) cJSON_AddStringToObject(o, "prompt", st->job.req.prompt);
        add_completion_end(o, t);
        add_timings(o, &t->tm);
        out_event(st, o);
    } else {
        cJSON *d, *o = chunk(st, &d);
        cJSON *c0j = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
        cJSON_ReplaceItemInObject(
            c0j, "finish_reason",
            cJSON_CreateString(st->tp.n_calls > 0 && !strcmp(t->finish, "stop") ? "tool_calls" : t->finish));
        if (ep != SRV_EP_CHAT) cJSON_AddStringToObject(c0j, "text", "");
        if (!st->job.req.include_usage) add_timings(o, &t->tm);
        out_event(st, o);
        if (st->job.req.include_usage) {
            o = response_head(&st->job, ep == SRV_EP_CHAT ? "chat.completion.chunk" : "text_completion");
            cJSON_AddArrayToObject(o, "choices");
            add_usage(o, &t->tm);
            add_timings(o, &t->tm);
            out_event(st, o);
        }
        out_add(st, "data: [DONE]\n\n", 14);
    }
    st->phase = 2;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    srv_stream *st = cls;
    srv_task *t = st->job.task;
    while (st->out_pos == st->out_len) {
        if (st->phase == 2) return MHD_CONTENT_READER_END_OF_STREAM;
        st->out_pos = st->out_len = 0;
        pthread_mutex_lock(&t->mu);
        bool alive = true, ping = false;
        int ping_s = st->S->cfg->sse_ping_s;
        while (alive && st->phase != 0 && !t->done && t->released == st->seen) {
            alive = wait_client(t, st->fd);
            if (ping_s > 0 && srv_now_s() - st->t_out > ping_s) {
                ping = true;   /* a silent stream (long prefill, queue) gets an SSE comment (§8.1) */
                break;
            }
        }
        if (!alive) {
            pthread_mutex_unlock(&t->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (ping && t->released == st->seen && !t->done) out_add(st, ": ping\n\n", 8);
        else stream_progress(st);
        st->seen = t->released;
        st->t_out = srv_now_s();
        pthread_mutex_unlock(&t->mu);
    }
    size_t n = st->out_len - st->out_pos < max ? st->out_len - st->out_pos : max;
    memcpy(buf, st->out + st->out_pos, n);
    st->out_pos += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    srv_stream *st = cls;
    srv_task *t = st->job.task;
    pthread_mutex_lock(&t->mu);
    bool done = t->done;
    pthread_mutex_unlock(&t->mu);
    if (!done) srv_task_cancel(st->S->engine, t);
    srv_task_release(t);
    srv_request_free(&st->job.req);
    srv_toolparse_free(&st->tp);
    free(st->out);
    free(st);
}

/* ======================================================================== */
/* Endpoints                                                                 */
/* ======================================================================== */

static srv_gen_defaults gen_defaults(const srv_server *S);

static enum MHD_Result do_generate(srv_server *S, struct MHD_Connection *c, srv_endpoint ep, const srv_conn *cc) {
    srv_job job;
    memset(&job, 0, sizeof job);
    job.defaults = gen_defaults(S);
    srv_request_init(&job.req, ep);
    char msg[512] = "";
    int code = srv_request_parse(&job.req, cc->body ? cc->body : "", cc->len, msg, sizeof msg);
    int n_prompt = 0;
    if (!code) code = prepare(S, &job, msg, sizeof msg, &n_prompt);
    if (code == -1) {
        cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
        cJSON_AddNumberToObject(e, "code", 400);
        snprintf(msg, sizeof msg, "the request (%d prompt tokens) exceeds the available context size (%d tokens)",
                 n_prompt, S->n_ctx_slot);
        cJSON_AddStringToObject(e, "message", msg);
        cJSON_AddStringToObject(e, "type", "exceed_context_size_error");
        cJSON_AddNumberToObject(e, "n_prompt_tokens", n_prompt);
        cJSON_AddNumberToObject(e, "n_ctx", S->n_ctx_slot);
        srv_task_release(job.task);
        srv_request_free(&job.req);
        return send_json(c, 400, o);
    }
    if (code) {
        srv_task_release(job.task);
        srv_request_free(&job.req);
        return send_error(c, (unsigned)code, "%s", msg);
    }
    random_id(job.id, sizeof job.id, ep == SRV_EP_CHAT ? "chatcmpl-" : "cmpl-");
    job.created = (long)time(NULL);
    job.model = job.req.model ? job.req.model : S->model_id;
    srv_task *t = job.task;
    if (!srv_engine_submit(S->engine, t)) {
        srv_task_release(t);
        srv_request_free(&job.req);
        return send_error(c, 503, "the server is busy: every slot is in use and the queue is full");
    }
    int fd = conn_fd(c);
    if (job.req.stream) {
        srv_stream *st = calloc(1, sizeof *st);
        if (!st) {
            srv_task_cancel(S->engine, t);
            srv_task_release(t);
            srv_request_free(&job.req);
            return send_error(c, 500, "out of memory");
        }
        st->S = S;
        st->job = job;
        srv_toolparse_init(&st->tp);
        st->fd = fd;
        st->t_out = srv_now_s();
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, st, stream_free);
        if (!r) {
            stream_free(st);
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
        MHD_add_response_header(r, "Connection", "close");
        enum MHD_Result ret = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return ret;
    }
    pthread_mutex_lock(&t->mu);
    bool alive = true;
    while (alive && !t->done) alive = wait_client(t, fd);
    if (!alive) {
        pthread_mutex_unlock(&t->mu);
        srv_task_cancel(S->engine, t);
        srv_task_release(t);
        srv_request_free(&job.req);
        return MHD_NO;   /* the client is gone: close */
    }
    enum MHD_Result ret;
    if (t->err_code) {
        char em[256];
        snprintf(em, sizeof em, "%s", t->err_msg);
        int ec = t->err_code == 499 ? 500 : t->err_code;
        pthread_mutex_unlock(&t->mu);
        ret = send_error(c, (unsigned)ec, "%s", em);
    } else {
        cJSON *o = final_response(&job);
        pthread_mutex_unlock(&t->mu);
        ret = send_json(c, 200, o);
    }
    srv_task_release(t);
    srv_request_free(&job.req);
    return ret;
}

static enum MHD_Result do_models(srv_server *S, struct MHD_Connection *c) {
    cJSON *o = cJSON_CreateObject(), *d = cJSON_AddArrayToObject(o, "data"), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToArray(d, m);
    cJSON_AddStringToObject(m, "id", S->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)S->created);
    cJSON_AddStringToObject(m, "owned_by", "spex");
    const spex_model_hparams *hp = spex_model_get_hparams(S->model);
    cJSON *meta = cJSON_AddObjectToObject(m, "meta");
    cJSON_AddNumberToObject(meta, "vocab_type", spex_tokenizer_get_kind(S->tok) == SPEX_TOKENIZER_SPM ? 1 : 2);
    cJSON_AddNumberToObject(meta, "n_vocab", hp->n_vocab);
    cJSON_AddNumberToObject(meta, "n_ctx_train", hp->n_ctx_train);
    cJSON_AddNumberToObject(meta, "n_embd", hp->n_embd);
    cJSON_AddNumberToObject(meta, "n_params", (double)spex_model_n_params(S->model));
    cJSON_AddNumberToObject(meta, "size", (double)spex_model_weight_bytes(S->model));
    if (S->drafter) {
        const spex_drafter_hparams *dh = spex_drafter_get_hparams(S->drafter);
        cJSON *sp = cJSON_AddObjectToObject(meta, "speculative");
        cJSON_AddStringToObject(sp, "type", "draft-dflash");
        cJSON_AddStringToObject(sp, "variant", dh->variant == SPEX_DFLASH2 ? "dflash2" : "dflash");
        cJSON_AddStringToObject(sp, "draft_model", S->cfg->draft);
        cJSON_AddNumberToObject(sp, "block_size", dh->block_size);
        cJSON_AddNumberToObject(sp, "n_max", S->n_max);
    } else if (S->cfg->ngram) {
        cJSON *sp = cJSON_AddObjectToObject(meta, "speculative");
        cJSON_AddStringToObject(sp, "type", "ngram");
        cJSON_AddNumberToObject(sp, "n_max", S->n_max);
        cJSON_AddNumberToObject(sp, "size_n", S->cfg->ngram_params.size_n);
        cJSON_AddNumberToObject(sp, "size_m", S->cfg->ngram_params.size_m);
        cJSON_AddNumberToObject(sp, "min_hits", S->cfg->ngram_params.min_hits);
    }
    cJSON *ar = cJSON_AddObjectToObject(m, "architecture");
    cJSON_AddItemToObject(ar, "input_modalities", cJSON_CreateStringArray((const char *[]){"text"}, 1));
    cJSON_AddItemToObject(ar, "output_modalities", cJSON_CreateStringArray((const char *[]){"text"}, 1));
    return send_json(c, 200, o);
}

static enum MHD_Result do_tokenize(srv_server *S, struct MHD_Connection *c, const srv_conn *cc) {
    srv_request r;
    srv_request_init(&r, SRV_EP_COMPLETION);
    char msg[512];
    int code = srv_parse_tokenize(&r, cc->body ? cc->body : "", cc->len, msg, sizeof msg);
    int32_t *ids = NULL;
    int n = 0;
    if (!code) code = tokenize_all(S->tok, r.prompt, strlen(r.prompt), r.add_special, &ids, &n, msg, sizeof msg);
    if (code) {
        srv_request_free(&r);
        return send_error(c, (unsigned)code, "%s", msg);
    }
    cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "tokens");
    for (int i = 0; i < n; i++) {
        if (!r.with_pieces) {
            cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
            continue;
        }
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "id", ids[i]);
        spex_str s = {0};
        (void)spex_token_to_piece(S->tok, ids[i], true, &s, NULL);
        if (srv_utf8_valid(s.ptr, s.len)) {
            cJSON_AddItemToObject(p, "piece", str_n(s.ptr ? s.ptr : "", (size_t)s.len));
        } else {   /* part of a character: its bytes, as llama-server gives them (JSON text stays UTF-8) */
            cJSON *b = cJSON_AddArrayToObject(p, "piece");
            for (size_t k = 0; k < s.len; k++) cJSON_AddItemToArray(b, cJSON_CreateNumber((unsigned char)s.ptr[k]));
        }
        cJSON_AddItemToArray(a, p);
    }
    free(ids);
    srv_request_free(&r);
    return send_json(c, 200, o);
}

/* POST /apply-template {messages, tools?, chat_template_kwargs?} -> {prompt}: the text a chat
 * completion with the same body would tokenize (llama-server's endpoint, server-api.md §12). */
static enum MHD_Result do_apply_template(srv_server *S, struct MHD_Connection *c, const srv_conn *cc) {
    srv_request r;
    srv_request_init(&r, SRV_EP_CHAT);
    char msg[512];
    char *text = NULL;
    size_t n = 0;
    int code = srv_request_parse(&r, cc->body ? cc->body : "", cc->len, msg, sizeof msg);
    if (!code) code = render_chat(S, &r, &text, &n, msg, sizeof msg);
    srv_request_free(&r);
    if (code) return send_error(c, (unsigned)code, "%s", msg);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "prompt", str_n(text, n));
    free(text);
    return send_json(c, 200, o);
}

static enum MHD_Result do_detokenize(srv_server *S, struct MHD_Connection *c, const srv_conn *cc) {
    srv_request r;
    srv_request_init(&r, SRV_EP_COMPLETION);
    char msg[512];
    int code = srv_parse_detokenize(&r, cc->body ? cc->body : "", cc->len, msg, sizeof msg);
    if (code) {
        srv_request_free(&r);
        return send_error(c, (unsigned)code, "%s", msg);
    }
    spex_error err = {0};
    size_t need = 0;
    spex_status st = spex_detokenize(S->tok, r.prompt_ids, (size_t)r.n_prompt_ids, SPEX_DETOK_STRIP_SPACE, NULL, 0,
                                     &need, &err);
    char *buf = NULL;
    if (st == SPEX_OK || (st == SPEX_ERR_RANGE && need > 0)) {
        buf = malloc(need + 1);
        st = buf ? spex_detokenize(S->tok, r.prompt_ids, (size_t)r.n_prompt_ids, SPEX_DETOK_STRIP_SPACE, buf, need,
                                   &need, &err)
                 : SPEX_ERR_NOMEM;
    }
    srv_request_free(&r);
    if (st != SPEX_OK) {
        free(buf);
        return send_error(c, 400, "detokenize: %s", err.msg[0] ? err.msg : "a token id is out of range");
    }
    /* ids can end inside a character or hold bytes no character has: U+FFFD, so the JSON is
     * valid UTF-8 (as llama-server's replacing JSON writer does) */
    size_t len = 0;
    char *text = srv_utf8_repair(buf ? buf : "", buf ? need : 0, &len);
    free(buf);
    if (!text) return send_error(c, 500, "out of memory");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "content", str_n(text, len));
    free(text);
    return send_json(c, 200, o);
}

/* ======================================================================== */
/* Routing                                                                   */
/* ======================================================================== */

static bool authorized(const srv_server *S, struct MHD_Connection *c) {
    const char *keys = S->cfg->api_keys;
    if (!keys || !*keys) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    const char *given = NULL;
    if (h && !strncmp(h, "Bearer ", 7)) given = h + 7;
    if (!given) given = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Api-Key");
    if (!given) return false;
    size_t gl = strlen(given);
    for (const char *k = keys; *k;) {
        const char *e = strchr(k, ',');
        size_t kl = e ? (size_t)(e - k) : strlen(k);
        if (kl == gl && !memcmp(k, given, kl)) return true;
        if (!e) break;
        k = e + 1;
    }
    return false;
}

/* GET /props, POST /props, GET /slots (§12; the bodies are built in props.c and engine.c). */
static srv_gen_defaults gen_defaults(const srv_server *S) {
    const srv_config *cfg = S->cfg;
    return (srv_gen_defaults){.sp = cfg->sp, .n_predict = cfg->n_predict, .n_max = S->n_max,
                              .n_min = cfg->n_draft_min, .p_min = cfg->p_draft_min,
                              .spec_type = S->drafter         ? "draft-dflash"
                                           : S->mtp           ? "draft-mtp"
                                           : S->cfg->ngram    ? "ngram"
                                                              : "none"};
}

static enum MHD_Result do_props(srv_server *S, struct MHD_Connection *c, bool post, const srv_conn *cc) {
    const srv_config *cfg = S->cfg;
    if (post) {
        char msg[256];
        if (!cfg->props)   /* §3: permission_error (llama-server itself answers 501 here) */
            return send_error(c, 403, "This server does not support changing global properties. Start it with `--props`");
        int code = srv_props_update(cc->body, cc->len, msg, sizeof msg);
        if (code) return send_error(c, (unsigned)code, "%s", msg);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddBoolToObject(o, "success", true);
        return send_json(c, 200, o);
    }
    const spex_drafter_hparams *dh = S->drafter ? spex_drafter_get_hparams(S->drafter) : NULL;
    srv_props_info pi = {.d = gen_defaults(S), .n_slots = cfg->n_slots, .n_ctx_slot = S->n_ctx_slot,
                         .model_path = cfg->model, .model_alias = S->model_id, .gguf = spex_model_gguf(S->model),
                         .tmpl = S->tmpl, .tmpl_from_flag = cfg->chat_template != NULL,
                         .spec_variant = dh ? (dh->variant == SPEX_DFLASH2 ? "dflash2" : "dflash")
                                            : S->mtp ? "mtp" : NULL,
                         .build_info = SRV_FINGERPRINT, .endpoint_slots = cfg->slots, .endpoint_props = cfg->props,
                         .endpoint_metrics = cfg->metrics};
    return send_text(c, 200, "application/json; charset=utf-8", srv_props_json(&pi));
}

static enum MHD_Result do_slots(srv_server *S, struct MHD_Connection *c) {
    if (!S->cfg->slots) return send_error(c, 501, "This server does not support slots endpoint. Start it with `--slots`");
    srv_gen_defaults d = gen_defaults(S);
    return send_text(c, 200, "application/json; charset=utf-8", srv_engine_slots_json(S->engine, &d));
}

static enum MHD_Result route(srv_server *S, struct MHD_Connection *c, const char *url, const char *method,
                             const srv_conn *cc) {
    /* HEAD is GET without the body, which libmicrohttpd leaves out (RFC 9110 §9.3.2) */
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    if (!strcmp(method, "OPTIONS")) return send_preflight(c);
    if (!strcmp(url, "/health") || !strcmp(url, "/v1/health")) {
        if (!get) return send_405(c, method, url, "GET, HEAD, OPTIONS");
        if (S->ready != 1) return send_error(c, 503, "Loading model");
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "status", "ok");
        return send_json(c, 200, o);
    }
    static const struct {
        const char *path;
        bool post;
    } known[] = {{"/v1/models", false}, {"/models", false}, {"/metrics", false}, {"/v1/chat/completions", true},
                 {"/chat/completions", true}, {"/v1/completions", true}, {"/completions", true},
                 {"/completion", true}, {"/tokenize", true}, {"/detokenize", true}, {"/props", false},
                 {"/slots", false}, {"/apply-template", true}};
    int k = -1;
    for (int i = 0; i < (int)(sizeof known / sizeof *known); i++)
        if (!strcmp(url, known[i].path)) k = i;
    if (k < 0) return send_error(c, 404, "File Not Found: %s", url);
    if (!authorized(S, c)) return send_error(c, 401, "Invalid API Key");
    bool allowed = k == 10 ? get || post : known[k].post ? post : get;   /* /props: GET and POST */
    if (!allowed)
        return send_405(c, method, url, k == 10 ? "GET, HEAD, POST, OPTIONS" : known[k].post ? "POST, OPTIONS" : "GET, HEAD, OPTIONS");
    if (cc->too_big) return send_error(c, 413, "the request body exceeds the limit of %zu bytes", S->cfg->body_max);
    if (cc->alloc_failed) return send_error(c, 500, "out of memory");
    if (S->ready != 1) return send_error(c, 503, S->ready == 0 ? "Loading model" : "the server is shutting down");
    if (k <= 1) return do_models(S, c);
    if (k == 2) {
        if (!S->cfg->metrics) return send_error(c, 501, "This server does not support metrics endpoint. Start it with `--metrics`");
        return send_text(c, 200, "text/plain; version=0.0.4", srv_engine_metrics(S->engine));
    }
    if (k == 3 || k == 4) return do_generate(S, c, SRV_EP_CHAT, cc);
    if (k == 5 || k == 6) return do_generate(S, c, SRV_EP_COMPLETIONS, cc);
    if (k == 7) return do_generate(S, c, SRV_EP_COMPLETION, cc);
    if (k == 8) return do_tokenize(S, c, cc);
    if (k == 9) return do_detokenize(S, c, cc);
    if (k == 10) return do_props(S, c, post, cc);
    if (k == 12) return do_apply_template(S, c, cc);
    return do_slots(S, c);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    srv_server *S = cls;
    srv_conn *cc = *con_cls;
    if (!cc) {
        cc = calloc(1, sizeof *cc);
        if (!cc) return MHD_NO;
        *con_cls = cc;
        atomic_fetch_add(&S->n_live, 1);
        return MHD_YES;   /* Content-Length was checked by the door (head.c); chunked bodies below */
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (cc->too_big || cc->alloc_failed) return MHD_YES;
        if (cc->len + n > S->cfg->body_max) {
            cc->too_big = true;
            return MHD_YES;
        }
        if (cc->len + n + 1 > cc->cap) {
            size_t nc = cc->cap ? cc->cap : 4096;
            while (cc->len + n + 1 > nc) nc *= 2;
            char *p = realloc(cc->body, nc);
            if (!p) {
                cc->alloc_failed = true;
                return MHD_YES;
            }
            cc->body = p, cc->cap = nc;
        }
        memcpy(cc->body + cc->len, upload, n);
        cc->len += n;
        cc->body[cc->len] = 0;
        return MHD_YES;
    }
    return route(S, c, url, method, cc);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)c, (void)toe;
    srv_server *S = cls;
    srv_conn *cc = *con_cls;
    if (!cc) return;
    free(cc->body);
    free(cc);
    *con_cls = NULL;
    atomic_fetch_sub(&S->n_live, 1);
}

/* A connection the door handed over has ended: its place in service is free again. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    (void)socket_context;
    srv_server *S = cls;
    if (toe != MHD_CONNECTION_NOTIFY_CLOSED) return;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr_in *a = ci ? (const struct sockaddr_in *)(const void *)ci->client_addr : NULL;
    if (a && a->sin_family == AF_INET) srv_door_closed(S->door, a->sin_addr.s_addr);
}

static bool handoff(void *user, int fd, const struct sockaddr_in *addr) {
    srv_server *S = user;
    return MHD_add_connection(S->daemon, fd, (const struct sockaddr *)addr, sizeof *addr) == MHD_YES;
}

/* ======================================================================== */
/* Start-up and shutdown                                                     */
/* ======================================================================== */

/* Raises the descriptor limit to its hard limit for the connections --conn-max allows (each
 * waiting and each in service holds one); lowers conn_max, with a warning, where even the
 * hard limit is too small. 64: the process's other descriptors (model files, pipes, stdio). */
static int fit_conn_max(int conn_max) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return conn_max;
    rlim_t need = (rlim_t)conn_max * 2 + SRV_CONN_RESERVE + 64;
    if (rl.rlim_cur < need) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need ? need : rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
        (void)getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur >= need) return conn_max;
    int fit = rl.rlim_cur > SRV_CONN_RESERVE + 64 + 2 ? (int)((rl.rlim_cur - SRV_CONN_RESERVE - 64) / 2) : 1;
    fprintf(stderr, "warning: the descriptor limit (%llu) allows --conn-max %d, not %d\n",
            (unsigned long long)rl.rlim_cur, fit, conn_max);
    return fit;
}

static void log_line(void *user, const char *line) {
    (void)user;
    fprintf(stderr, "%s\n", line);
}

static int load(srv_server *S) {
    const srv_config *cfg = S->cfg;
    spex_error err = {0};
    spex_model_params mp = spex_model_default_params();
    mp.log = log_line;
    mp.no_repack = cfg->no_repack;
    if (spex_model_load(cfg->model, &mp, &S->model, &err) != SPEX_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 1;
    }
    if (spex_tokenizer_load_gguf(spex_model_gguf(S->model), &S->tok, &err) != SPEX_OK) {
        fprintf(stderr, "error: %s: tokenizer: %s\n", cfg->model, err.msg);
        return 1;
    }
    if (cfg->chat_template) {
        if (!spex_chat_template_from_name(cfg->chat_template, &S->tmpl)) {
            fprintf(stderr, "error: unknown --chat-template '%s' (chatml, qwen3, qwen35, none)\n", cfg->chat_template);
            return 1;
        }
    } else {
        spex_str js = {0};
        char *jinja = NULL;
        if (spex_gguf_get_str(spex_model_gguf(S->model), "tokenizer.chat_template", &js, NULL) == SPEX_OK) {
            jinja = malloc(js.len + 1);
            if (jinja) memcpy(jinja, js.ptr, js.len), jinja[js.len] = 0;
        }
        bool warned = false;
        spex_chat_detect(jinja, spex_token_find(S->tok, "<|im_start|>", 12) != SPEX_TOKEN_NONE, &S->tmpl, &warned);
        if (warned) fprintf(stderr, "warning: using the %s chat template\n", spex_chat_template_name(S->tmpl));
        free(jinja);
    }
    const spex_drafter_hparams *dh = NULL;
    if (cfg->draft) {
        spex_drafter_params dp = spex_drafter_default_params();
        dp.verbose = true;
        dp.log = log_line;
        dp.overrides = cfg->overrides;
        dp.n_overrides = cfg->n_overrides;
        dp.no_repack = cfg->no_repack;
        if (spex_drafter_load(cfg->draft, S->model, &dp, &S->drafter, &err) != SPEX_OK) {
            fprintf(stderr, "error: %s\n", err.msg);
            return 1;
        }
        dh = spex_drafter_get_hparams(S->drafter);
        S->n_max = cfg->n_draft_max > 0 && cfg->n_draft_max < dh->block_size - 1 ? cfg->n_draft_max : dh->block_size - 1;
        if (cfg->n_draft_max > dh->block_size - 1)
            fprintf(stderr, "warning: requested draft size %d exceeds the trained block size %d, clamping to %d\n",
                    cfg->n_draft_max, dh->block_size, dh->block_size - 1);
        if (S->n_max > SPEX_DRAFT_MAX_N) S->n_max = SPEX_DRAFT_MAX_N;
    } else if (cfg->mtp) {
        /* llama-server's draft-mtp default n_max is 3 */
        S->n_max = cfg->n_draft_max > 0 ? cfg->n_draft_max : 3;
        if (S->n_max > SPEX_DRAFT_MAX_N) S->n_max = SPEX_DRAFT_MAX_N;
    } else if (cfg->ngram) {
        /* llama-server's --draft-max default for its n-gram types is 16; --spec-ngram-size-m caps it */
        S->n_max = cfg->n_draft_max > 0 ? cfg->n_draft_max : 16;
        if (S->n_max > cfg->ngram_params.size_m) S->n_max = cfg->ngram_params.size_m;
        if (S->n_max > SPEX_DRAFT_MAX_N) S->n_max = SPEX_DRAFT_MAX_N;
    }
    int32_t np = cfg->n_slots;
    const spex_model_hparams *hp = spex_model_get_hparams(S->model);
    S->n_ctx_slot = cfg->n_ctx > 0 ? cfg->n_ctx / np : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    if (S->n_ctx_slot < 8) {
        fprintf(stderr, "error: -c %d leaves %d tokens per slot with -np %d\n", cfg->n_ctx, S->n_ctx_slot, np);
        return 1;
    }
    int32_t rows = np * (S->n_max + 1);
    spex_context_params cp = spex_context_default_params();
    cp.n_seq_max = np;
    cp.n_ctx_per_seq = S->n_ctx_slot;
    cp.n_batch_max = cfg->n_batch > rows ? cfg->n_batch : rows;
    cp.n_outputs_max = rows;
    cp.kv_type = cfg->kv_type;
    cp.n_threads = cfg->n_threads > 0 ? cfg->n_threads : 0;
    if (cp.n_threads <= 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        cp.n_threads = (int32_t)(cpus > 0 ? cpus : 1);
    }
    const int32_t tap_n = hp->n_layer;   /* MTP: the target's last hidden state */
    if (dh) cp.tap_layers = dh->target_layers, cp.n_taps = dh->n_taps;
    if (cfg->mtp) cp.tap_layers = &tap_n, cp.n_taps = 1;
    /* recurrent targets (qwen35): state copies to roll back rejected drafts */
    if ((dh || cfg->mtp || cfg->ngram) && hp->n_recurrent > 0) cp.n_rs_seq = S->n_max;
    cp.n_ctx_checkpoints = cfg->n_ctx_checkpoints;
    cp.checkpoint_min_step = cfg->checkpoint_min_step > 0 ? cfg->checkpoint_min_step : 8192;
    if (spex_context_init(S->model, &cp, &S->ctx, &err) != SPEX_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 1;
    }
    spex_memory_usage mu = spex_context_memory(S->ctx);
    fprintf(stderr, "memory: target weights %.1f MiB, target KV %s %.1f MiB (%d slots x %d tokens), compute %.1f MiB\n",
            (double)mu.weights / 1048576.0, spex_type_get_info(cfg->kv_type)->name, (double)mu.kv / 1048576.0, np,
            S->n_ctx_slot, (double)mu.compute / 1048576.0);
    if (dh) {
        spex_draft_context_params dcp = spex_draft_context_default_params();
        dcp.n_seq_max = np;
        dcp.n_ctx_per_seq = S->n_ctx_slot;
        dcp.n_blocks_max = np;
        dcp.kv_type = cfg->draft_kv;
        dcp.pool = spex_context_pool(S->ctx);
        dcp.n_threads = cp.n_threads;
        if (spex_draft_context_init(S->drafter, &dcp, &S->dc, &err) != SPEX_OK) {
            fprintf(stderr, "error: %s\n", err.msg);
            return 1;
        }
        spex_memory_usage dm = spex_draft_context_memory(S->dc);
        fprintf(stderr, "memory: drafter weights %.1f MiB, draft KV %.1f MiB, draft compute %.1f MiB\n",
                (double)spex_drafter_weight_bytes(S->drafter) / 1048576.0, (double)dm.kv / 1048576.0,
                (double)dm.compute / 1048576.0);
    }
    if (cfg->mtp) {
        spex_mtp_params mtpp = spex_mtp_default_params();
        mtpp.n_seq_max = np;
        mtpp.n_ctx_per_seq = S->n_ctx_slot;
        mtpp.n_batch_max = spex_context_get_params(S->ctx)->n_batch_max;
        mtpp.kv_type = cfg->draft_kv;
        mtpp.pool = spex_context_pool(S->ctx);
        if (spex_mtp_init(S->model, &mtpp, &S->mtp, &err) != SPEX_OK) {
            fprintf(stderr, "error: %s\n", err.msg);
            return 1;
        }
    }
    spex_spec_params spp = spex_spec_default_params();
    spp.n_max = S->n_max;
    spp.n_min = cfg->n_draft_min;
    spp.p_min = cfg->p_draft_min;
    spp.sampled_walk = !cfg->draft_greedy;
    spp.draft_cut = cfg->draft_cut;
    spp.log = log_line;
    if ((S->mtp ? spex_spec_init_mtp(S->ctx, S->mtp, &spp, &S->spec, &err)
                : spex_spec_init(S->ctx, S->dc, &spp, &S->spec, &err)) != SPEX_OK ||
        (cfg->ngram && spex_spec_set_ngram(S->spec, &cfg->ngram_params, &err) != SPEX_OK)) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 1;
    }
    if (dh)
        fprintf(stderr,
                "speculative: type draft-dflash, drafter %s, variant %s, block size %d, n_max %d, n_min %d, p_min %g, "
                "sampling %s, draft KV %s, adaptive %s (min gain %.2f), draft cut %s\n",
                cfg->draft, dh->variant == SPEX_DFLASH2 ? "dflash2" : "dflash", dh->block_size, S->n_max,
                cfg->n_draft_min, (double)cfg->p_draft_min, cfg->draft_greedy ? "greedy" : "probabilistic",
                spex_type_get_info(cfg->draft_kv)->name, cfg->adaptive ? "on" : "off", (double)cfg->min_gain,
                cfg->draft_cut ? "on" : "off");
    if (S->mtp)
        fprintf(stderr, "speculative: type draft-mtp (the target's MTP block), n_max %d, n_min %d, p_min %g, draft KV %s, "
                        "adaptive %s (min gain %.2f), draft cut %s\n",
                S->n_max, cfg->n_draft_min, (double)cfg->p_draft_min, spex_type_get_info(cfg->draft_kv)->name,
                cfg->adaptive ? "on" : "off", (double)cfg->min_gain, cfg->draft_cut ? "on" : "off");
    srv_engine_params ep = {.n_slots = np, .n_ctx_slot = S->n_ctx_slot, .queue_max = cfg->queue_max,
                            .adaptive = cfg->adaptive, .min_gain = cfg->min_gain, .step_delay_ms = cfg->step_delay_ms};
    if (cfg->ngram)
        fprintf(stderr, "speculative: type ngram (prompt lookup), n_max %d, size n %d, size m %d, min hits %d, "
                        "adaptive %s (min gain %.2f), draft cut %s\n",
                S->n_max, cfg->ngram_params.size_n, cfg->ngram_params.size_m, cfg->ngram_params.min_hits,
                cfg->adaptive ? "on" : "off", (double)cfg->min_gain, cfg->draft_cut ? "on" : "off");
    if (srv_engine_start(&ep, S->spec, S->tok, dh || S->mtp || cfg->ngram ? S->n_max : 0, &S->engine, &err) !=
        SPEX_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 1;
    }
    return 0;
}

int srv_main(const srv_config *cfg) {
    srv_server S;
    memset(&S, 0, sizeof S);
    atomic_init(&S.n_live, 0);
    S.cfg = cfg;
    S.created = (long)time(NULL);
    S.model_id = cfg->alias ? cfg->alias : cfg->model;

    /* Signals are taken synchronously by this thread (sigwait); every other thread, created
     * below, inherits the blocked mask. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* libmicrohttpd serves what the door hands it: poll() (no FD_SETSIZE limit), a thread per
     * request in service. Its own limit sits well above the door's, which does the counting;
     * its timeout is --timeout's, for requests in service (the door times out heads). */
    int conn_max = fit_conn_max(cfg->conn_max);
    unsigned mhd_limit = 2u * (unsigned)(conn_max + SRV_CONN_RESERVE) + 64u;
    S.daemon = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                                    MHD_USE_ITC | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ERROR_LOG,
                                0, NULL, NULL, on_request, &S, MHD_OPTION_NOTIFY_COMPLETED, on_completed, &S,
                                MHD_OPTION_NOTIFY_CONNECTION, on_connection, &S, MHD_OPTION_CONNECTION_LIMIT, mhd_limit,
                                MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)64 * 1024, MHD_OPTION_CONNECTION_TIMEOUT,
                                (unsigned)cfg->timeout_s, MHD_OPTION_END);
    if (!S.daemon) {
        fprintf(stderr, "error: cannot start the HTTP daemon: %s\n", strerror(errno));
        return 1;
    }
    srv_door_params dp = {.host = cfg->host, .port = cfg->port, .conn_max = conn_max,
                          .conn_max_per_ip = cfg->conn_max_per_ip, .header_timeout_s = cfg->header_timeout_s,
                          .body_max = cfg->body_max, .handoff = handoff, .user = &S};
    spex_error derr = {0};
    if (srv_door_start(&dp, &S.door, &derr) != SPEX_OK) {
        fprintf(stderr, "error: %s\n", derr.msg);
        MHD_stop_daemon(S.daemon);
        return derr.status == SPEX_ERR_INVALID_ARG ? 2 : 1;
    }
    fprintf(stderr, "server: listening on http://%s:%d\n", cfg->host, srv_door_port(S.door));
    fflush(stderr);

    int rc = load(&S);
    if (rc == 0) {
        S.ready = 1;
        fprintf(stderr, "server: ready: %d slots x %d tokens, model '%s'\n", cfg->n_slots, S.n_ctx_slot, S.model_id);
        fflush(stderr);
        int sig = 0;
        sigwait(&sigs, &sig);
        fprintf(stderr, "server: %s received, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    }
    S.ready = -1;
    /* The engine ends queued and running tasks (503), which wakes their connection threads;
     * they write those responses (a stream its error event) while the daemon still runs —
     * stopping it at once would close sockets under them, and a client would see a dropped
     * connection instead of its 503 — then the daemon joins the threads. The wait is
     * bounded (SRV_DRAIN_S): a client that does not read its response does not hold the
     * shutdown. */
    srv_door_stop(S.door);   /* no new connections; those still sending their head are closed */
    srv_engine_stop(S.engine);
    for (double t0 = srv_now_s(); atomic_load(&S.n_live) > 0 && srv_now_s() - t0 < SRV_DRAIN_S;) usleep(10 * 1000);
    MHD_stop_daemon(S.daemon);
    srv_door_free(S.door);
    srv_engine_free(S.engine);
    spex_spec_free(S.spec);
    spex_draft_context_free(S.dc);
    spex_mtp_free(S.mtp);
    spex_context_free(S.ctx);
    spex_drafter_free(S.drafter);
    spex_tokenizer_free(S.tok);
    spex_model_free(S.model);
    if (rc == 0) fprintf(stderr, "server: stopped\n");
    return rc;
}
