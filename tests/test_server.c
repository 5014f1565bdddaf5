/*
 * test_server.c — `spex serve` end to end: starts the build's own spex binary (the sibling of
 * this program's folder, as test_run.c does) on a free loopback port with the synthetic pair
 * tiny-qwen3 + tiny-qwen3.dflash2, and talks raw HTTP/1.1 over sockets.
 *
 * What it checks: /health, /v1/models; chat completions at temperature 0, plain and streamed,
 * whose text equals `spex run --chat` with the same prompt and -n; /v1/completions and
 * /completion against `spex run`; usage and timings fields; stop strings (plain and streamed);
 * every error status (400 bad JSON / wrong types / missing fields / multimodal, 401, 404, 405,
 * 413, 503); 4 concurrent clients on -np 2 with greedy texts equal to serial runs; a client
 * that disconnects mid-stream frees its slot; /metrics counters add up; /props and /slots
 * (idle, during a stream, --no-slots, POST /props with and without --props); SIGTERM ends the
 * server cleanly (and, in the ASan build, without a sanitizer report), and so does SIGINT
 * with requests running and queued (each ends with a 503); a long prompt is processed in
 * chunks while another stream keeps flowing; stalled, over-limit and vanished clients;
 * system messages, text parts and every sampler field against `spex run`.
 * What it is not: a test of the speculative loop's losslessness (test_spec) or of sampling.
 */
#include "spex.h"
#include "server/server.h"
#include "test.h"
#include "srv_client.h"
#include "spec/api.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define TINY_QWEN3 "tests/data/models/tiny-qwen3.gguf"
#define TINY_DRAFT2 "tests/data/dflash/tiny-qwen3.dflash2.gguf"

/* ======================================================================== */
/* Processes                                                                 */
/* ======================================================================== */



/* stdout of `spex run ARGS` (malloc'd), NULL on failure. */
static char *spex_run(const char *const *args, size_t *len) {
    const char *bin = test_spex_bin();
    if (!bin) return NULL;
    char out_path[] = "/tmp/spex_test_srv_run_XXXXXX";
    int fo = mkstemp(out_path), fe = open("/dev/null", O_WRONLY);
    if (fo < 0 || fe < 0) return NULL;
    const char *argv[64];
    int n = 0;
    argv[n++] = bin;
    argv[n++] = "run";
    for (int i = 0; args[i] && n < 63; i++) argv[n++] = args[i];
    argv[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fo, 1);
    posix_spawn_file_actions_adddup2(&fa, fe, 2);
    pid_t pid;
    fflush(stdout);
    int e = posix_spawn(&pid, bin, &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fo);
    close(fe);
    int st = 0;
    char *out = NULL;
    if (e == 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0) out = test_slurp(out_path, len);
    unlink(out_path);
    return out;
}

/* A generation request body: chat (user message) or completion prompt, greedy. */
static char *gen_body(bool chat, const char *prompt, int n, bool stream, const char *stop) {
    cJSON *o = cJSON_CreateObject();
    if (chat) {
        cJSON *ms = cJSON_AddArrayToObject(o, "messages"), *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", prompt);
        cJSON_AddItemToArray(ms, m);
        cJSON_AddNumberToObject(o, "max_tokens", n);
    } else {
        cJSON_AddStringToObject(o, "prompt", prompt);
        cJSON_AddNumberToObject(o, "max_tokens", n);
    }
    cJSON_AddNumberToObject(o, "temperature", 0);
    cJSON_AddBoolToObject(o, "stream", stream);
    if (stop) cJSON_AddStringToObject(o, "stop", stop);
    cJSON_AddStringToObject(o, "unknown_field_is_ignored", "yes");
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

typedef struct gen_result {
    int status;
    char text[8192];
    char finish[32];
    long prompt_tokens, completion_tokens, cache_n, prompt_n;
    bool has_timings, has_draft, done_marker;
} gen_result;

/* The text of a non-streaming or streaming chat / completions response. */
static bool gen(int port, bool chat, const char *prompt, int n, bool stream, const char *stop, gen_result *g) {
    memset(g, 0, sizeof *g);
    char *body = gen_body(chat, prompt, n, stream, stop);
    resp r;
    bool ok = http(port, "POST", chat ? "/v1/chat/completions" : "/v1/completions", NULL, body, &r);
    free(body);
    if (!ok) return false;
    g->status = r.status;
    size_t tl = 0;
    cJSON *last = NULL;
    if (!stream) {
        cJSON *o = cJSON_Parse(r.body);
        cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
        const char *t = chat ? cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "message"), "content"))
                             : cJSON_GetStringValue(cJSON_GetObjectItem(c0, "text"));
        if (t) snprintf(g->text, sizeof g->text, "%s", t);
        last = o;
    } else {
        if (!strstr(r.head, "text/event-stream")) ok = false;
        for (char *p = r.body; p && *p;) {
            char *e = strstr(p, "\n\n");
            if (!e) break;
            *e = 0;
            if (!strncmp(p, "data: ", 6)) {
                if (!strcmp(p + 6, "[DONE]")) g->done_marker = true;
                else {
                    cJSON *o = cJSON_Parse(p + 6);
                    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
                    const char *t = chat ? cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "delta"), "content"))
                                         : cJSON_GetStringValue(cJSON_GetObjectItem(c0, "text"));
                    if (t && tl + strlen(t) < sizeof g->text) memcpy(g->text + tl, t, strlen(t)), tl += strlen(t);
                    if (!o) ok = false;
                    cJSON_Delete(last);
                    last = o;
                }
            }
            p = e + 2;
        }
        g->text[tl] = 0;
    }
    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(last, "choices"), 0);
    const char *fr = cJSON_GetStringValue(cJSON_GetObjectItem(c0, "finish_reason"));
    if (fr) snprintf(g->finish, sizeof g->finish, "%s", fr);
    cJSON *tm = cJSON_GetObjectItem(last, "timings");
    g->has_timings = tm && cJSON_IsNumber(cJSON_GetObjectItem(tm, "prompt_n")) &&
                     cJSON_IsNumber(cJSON_GetObjectItem(tm, "prompt_ms")) &&
                     cJSON_IsNumber(cJSON_GetObjectItem(tm, "prompt_per_second")) &&
                     cJSON_IsNumber(cJSON_GetObjectItem(tm, "predicted_n")) &&
                     cJSON_IsNumber(cJSON_GetObjectItem(tm, "predicted_ms")) &&
                     cJSON_IsNumber(cJSON_GetObjectItem(tm, "predicted_per_second")) &&
                     cJSON_IsNumber(cJSON_GetObjectItem(tm, "cache_n"));
    g->cache_n = tm ? (long)cJSON_GetNumberValue(cJSON_GetObjectItem(tm, "cache_n")) : -1;
    g->prompt_n = tm ? (long)cJSON_GetNumberValue(cJSON_GetObjectItem(tm, "prompt_n")) : -1;
    g->has_draft = tm && cJSON_IsNumber(cJSON_GetObjectItem(tm, "draft_n")) &&
                   cJSON_IsNumber(cJSON_GetObjectItem(tm, "draft_n_accepted"));
    cJSON *u = cJSON_GetObjectItem(last, "usage");
    if (u) {
        g->prompt_tokens = (long)cJSON_GetNumberValue(cJSON_GetObjectItem(u, "prompt_tokens"));
        g->completion_tokens = (long)cJSON_GetNumberValue(cJSON_GetObjectItem(u, "completion_tokens"));
        if (tm && (long)cJSON_GetNumberValue(cJSON_GetObjectItem(tm, "predicted_n")) != g->completion_tokens) ok = false;
        if ((long)cJSON_GetNumberValue(cJSON_GetObjectItem(u, "total_tokens")) != g->prompt_tokens + g->completion_tokens)
            ok = false;
    } else if (tm) {
        g->prompt_tokens = (long)cJSON_GetNumberValue(cJSON_GetObjectItem(tm, "prompt_n"));
        g->completion_tokens = (long)cJSON_GetNumberValue(cJSON_GetObjectItem(tm, "predicted_n"));
    }
    cJSON_Delete(last);
    resp_free(&r);
    return ok;
}

/* `spex run` text for the same prompt (chat or plain), -n n, greedy. */
static char *expected(bool chat, const char *prompt, int n) {
    char nb[16];
    snprintf(nb, sizeof nb, "%d", n);
    size_t len;
    if (chat) {
        const char *a[] = {"-m", TINY_QWEN3, "--chat", "-p", prompt, "-n", nb, "--temp", "0", "-t", "1", NULL};
        return spex_run(a, &len);
    }
    const char *a[] = {"-m", TINY_QWEN3, "-p", prompt, "-n", nb, "--temp", "0", "-t", "1", NULL};
    return spex_run(a, &len);
}

/* ======================================================================== */
/* The shared server                                                         */
/* ======================================================================== */

static shared_server g_srv;

static int main_port(void) {
    const char *a[] = {"-m", TINY_QWEN3, "-md", TINY_DRAFT2, "-np", "2", "-c", "512", "--metrics", "-t", "1", NULL};
    return shared_server_port(&g_srv, a);
}

#define REQUIRE_SERVER(port) REQUIRE_SERVER_FROM(port, main_port)

/* ======================================================================== */
/* Tests                                                                     */
/* ======================================================================== */

TEST(health_and_models) {
    REQUIRE_SERVER(port);
    resp r;
    CHECK(http(port, "GET", "/health", NULL, NULL, &r));
    CHECK_EQ_INT(r.status, 200);
    CHECK(strstr(r.body, "\"status\":\"ok\""));
    resp_free(&r);
    CHECK(http(port, "GET", "/v1/models", NULL, NULL, &r));
    CHECK_EQ_INT(r.status, 200);
    cJSON *o = cJSON_Parse(r.body);
    cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "data"), 0);
    bool ok = !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(o, "object")), "list") &&
              !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(m, "id")), TINY_QWEN3) &&
              cJSON_GetObjectItem(cJSON_GetObjectItem(m, "meta"), "speculative");
    cJSON_Delete(o);
    resp_free(&r);
    CHECK(ok);
}

TEST(chat_equals_run) {
    REQUIRE_SERVER(port);
    char *want = expected(true, "Hello", 24);
    CHECK(want);
    gen_result g;
    bool ok = gen(port, true, "Hello", 24, false, NULL, &g);
    bool same = !strcmp(g.text, want);
    if (!same) printf("  server '%s'\n  run    '%s'\n", g.text, want);
    free(want);
    CHECK(ok);
    CHECK_EQ_INT(g.status, 200);
    CHECK(same);
    CHECK(!strcmp(g.finish, "length"));
    CHECK_EQ_INT(g.completion_tokens, 24);
    CHECK(g.has_timings);
}

/* A slot keeps its cache after a request: the same prompt again (and a longer prompt that
 * extends it) reuses the cached prefix (timings.cache_n) and still gives spex run's text. */
TEST(prompt_prefix_reuse) {
    REQUIRE_SERVER(port);
    const char *p1 = "Prefix reuse: once upon a time there was a little robot";
    const char *p2 = "Prefix reuse: once upon a time there was a little robot who loved tea";
    char *want1 = expected(false, p1, 12), *want2 = expected(false, p2, 12);
    CHECK(want1 && want2);
    gen_result a, b, c;
    bool ok = gen(port, false, p1, 12, false, NULL, &a) && gen(port, false, p1, 12, false, NULL, &b) &&
              gen(port, false, p2, 12, true, NULL, &c);
    bool same = !strcmp(a.text, want1) && !strcmp(b.text, want1) && !strcmp(c.text, want2);
    printf("  cache_n %ld / %ld / %ld of %ld / %ld / %ld prompt tokens\n", a.cache_n, b.cache_n, c.cache_n,
           a.prompt_tokens, b.prompt_tokens, c.prompt_tokens);
    free(want1);
    free(want2);
    CHECK(ok);
    CHECK(same);
    /* The test server has several slots and other tests run before: a's cache_n may be 0 or
     * not; the repeat must reuse all but the last prompt token, the extension at least p1's. */
    CHECK_EQ_INT(b.cache_n, b.prompt_tokens - 1);
    CHECK(c.cache_n >= a.prompt_tokens - 1 && c.prompt_n >= 1);
    CHECK_EQ_INT(b.prompt_n + b.cache_n, b.prompt_tokens);
}

TEST(chat_stream_equals_run) {
    REQUIRE_SERVER(port);
    char *want = expected(true, "Tell me", 20);
    CHECK(want);
    gen_result g;
    bool ok = gen(port, true, "Tell me", 20, true, NULL, &g);
    bool same = !strcmp(g.text, want);
    if (!same) printf("  server '%s'\n  run    '%s'\n", g.text, want);
    free(want);
    CHECK(ok);
    CHECK_EQ_INT(g.status, 200);
    CHECK(same);
    CHECK(g.done_marker);
    CHECK(g.has_timings);
    CHECK(!strcmp(g.finish, "length"));
}

TEST(completions_equal_run) {
    REQUIRE_SERVER(port);
    char *want = expected(false, "Once upon", 16);
    CHECK(want);
    gen_result a, b;
    bool ok = gen(port, false, "Once upon", 16, false, NULL, &a) && gen(port, false, "Once upon", 16, true, NULL, &b);
    bool same = !strcmp(a.text, want) && !strcmp(b.text, want);
    if (!same) printf("  plain '%s'\n  stream '%s'\n  run '%s'\n", a.text, b.text, want);
    /* llama.cpp's native endpoint */
    resp r;
    bool ok2 = http(port, "POST", "/completion", NULL, "{\"prompt\":\"Once upon\",\"n_predict\":16,\"temperature\":0}", &r);
    cJSON *o = cJSON_Parse(r.body);
    bool same2 = ok2 && r.status == 200 && cJSON_GetStringValue(cJSON_GetObjectItem(o, "content")) &&
                 !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(o, "content")), want) &&
                 cJSON_IsObject(cJSON_GetObjectItem(o, "timings"));
    cJSON_Delete(o);
    resp_free(&r);
    free(want);
    CHECK(ok);
    CHECK(same);
    CHECK(same2);
    CHECK(a.has_timings && b.has_timings && b.done_marker);
}

/* include_usage adds a choices-less usage chunk before [DONE]; /completion streams
 * {"content", "stop"} events ending with stop: true and timings, without [DONE]. */
TEST(stream_usage_and_native_stream) {
    REQUIRE_SERVER(port);
    resp r;
    CHECK(http(port, "POST", "/v1/chat/completions", NULL,
               "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":6,\"temperature\":0,"
               "\"stream\":true,\"stream_options\":{\"include_usage\":true}}", &r));
    CHECK_EQ_INT(r.status, 200);
    char *u = strstr(r.body, "\"choices\":[]");
    bool ok = u && strstr(u, "\"usage\":{") && strstr(u, "\"completion_tokens\":6") && strstr(u, "\"timings\":{") &&
              strstr(u, "data: [DONE]\n\n") && !strncmp(r.body, "data: {", 7);
    if (!ok) printf("  %s\n", r.body);
    resp_free(&r);
    CHECK(ok);
    CHECK(http(port, "POST", "/completion", NULL, "{\"prompt\":\"Hi\",\"n_predict\":5,\"temperature\":0,\"stream\":true}", &r));
    ok = r.status == 200 && strstr(r.body, "\"stop\":false") && strstr(r.body, "\"stop\":true") &&
         strstr(r.body, "\"tokens_predicted\":5") && strstr(r.body, "\"timings\":{") && !strstr(r.body, "[DONE]");
    if (!ok) printf("  %s\n", r.body);
    resp_free(&r);
    CHECK(ok);
}

/* A stop string taken from the greedy text: the answer is the text up to its first
 * occurrence, finish_reason "stop", plain and streamed. */
TEST(stop_strings) {
    REQUIRE_SERVER(port);
    gen_result full;
    CHECK(gen(port, false, "Hello", 40, false, NULL, &full));
    const char *t = full.text;
    size_t n = strlen(t), i;
    for (i = 3; i + 2 < n; i++)
        if (t[i] > 32 && t[i] < 127 && t[i + 1] > 32 && t[i + 1] < 127) break;
    if (i + 2 >= n) SKIP("the greedy text has no two printable ASCII bytes in a row");
    char stop[3] = {t[i], t[i + 1], 0};
    size_t cut = (size_t)(strstr(t, stop) - t);
    gen_result a, b;
    CHECK(gen(port, false, "Hello", 40, false, stop, &a));
    CHECK(gen(port, false, "Hello", 40, true, stop, &b));
    bool ok = strlen(a.text) == cut && !memcmp(a.text, t, cut) && !strcmp(a.text, b.text);
    if (!ok) printf("  full '%s' stop '%s'\n  plain '%s'\n  stream '%s'\n", t, stop, a.text, b.text);
    CHECK(ok);
    CHECK(!strcmp(a.finish, "stop") && !strcmp(b.finish, "stop"));
}

TEST(request_errors) {
    REQUIRE_SERVER(port);
    static const struct {
        const char *path, *body;
        int code;
    } cases[] = {
        {"/v1/chat/completions", "{not json", 400},
        {"/v1/chat/completions", "[1,2]", 400},
        {"/v1/chat/completions", "{}", 400},                                                         /* no messages */
        {"/v1/chat/completions", "{\"messages\":5}", 400},
        {"/v1/chat/completions", "{\"messages\":[]}", 400},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":\"9\"}", 400},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"temperature\":\"hot\"}", 400},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":1}", 400},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stop\":7}", 400},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"wizard\",\"content\":\"hi\"}]}", 400},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}}]}]}", 400},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"n\":2}", 501},
        {"/v1/completions", "{\"prompt\":12}", 400},
        {"/v1/completions", "{\"prompt\":\"x\",\"top_p\":3}", 400},
        {"/v1/completions", "{\"prompt\":[1,99999]}", 400},
        {"/v1/completions", "{\"prompt\":\"bad \xff\xfe utf-8\"}", 400},
        {"/v1/completions", "{\"prompt\":[\"a\",\"b\"]}", 501},
        {"/tokenize", "{\"content\":5}", 400},
        {"/detokenize", "{\"tokens\":\"a\"}", 400},
        {"/apply-template", "{}", 400},
        {"/apply-template", "{\"messages\":[{\"role\":\"user\"}],\"tools\":5}", 400},
        {"/apply-template", "{oops", 400},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        resp r;
        CHECK(http(port, "POST", cases[k].path, NULL, cases[k].body, &r));
        bool ok = is_error(&r, cases[k].code, cases[k].code == 400 ? "invalid_request_error" : NULL);
        resp_free(&r);
        CHECK_MSG(ok, "case %zu: %s", k, cases[k].body);
    }
    /* a prompt longer than a slot's context (512 / 2) */
    char *big = malloc(8192);
    strcpy(big, "{\"prompt\":\"");
    for (int k = 0; k < 1000; k++) strcat(big, "ab ");
    strcat(big, "\"}");
    resp r;
    CHECK(http(port, "POST", "/v1/completions", NULL, big, &r));
    free(big);
    bool ok = is_error(&r, 400, "exceed_context_size_error") && strstr(r.body, "\"n_ctx\":256");
    resp_free(&r);
    CHECK(ok);
    CHECK(http(port, "GET", "/no/such/path", NULL, NULL, &r));
    ok = is_error(&r, 404, "not_found_error");
    resp_free(&r);
    CHECK(ok);
    CHECK(http(port, "GET", "/v1/chat/completions", NULL, NULL, &r));
    ok = is_error(&r, 405, NULL);
    resp_free(&r);
    CHECK(ok);
    CHECK(http(port, "POST", "/v1/models", NULL, "{}", &r));
    ok = is_error(&r, 405, NULL);
    resp_free(&r);
    CHECK(ok);
    /* 413: a declared body beyond the limit is refused before it is read */
    int fd = connect_to(port);
    CHECK(fd >= 0);
    const char *h = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
                    "Content-Length: 100000000\r\n\r\n";
    CHECK(send_all(fd, h, strlen(h)));
    CHECK(read_response(fd, &r));
    ok = is_error(&r, 413, NULL);
    resp_free(&r);
    CHECK(ok);
    /* the server still serves */
    CHECK(http(port, "GET", "/health", NULL, NULL, &r));
    CHECK_EQ_INT(r.status, 200);
    resp_free(&r);
}

TEST(tokenize_detokenize) {
    REQUIRE_SERVER(port);
    resp r;
    CHECK(http(port, "POST", "/tokenize", NULL, "{\"content\":\"Hello\"}", &r));
    CHECK_EQ_INT(r.status, 200);
    cJSON *o = cJSON_Parse(r.body);
    cJSON *toks = cJSON_DetachItemFromObject(o, "tokens");
    cJSON_Delete(o);
    resp_free(&r);
    CHECK(cJSON_GetArraySize(toks) > 0);
    cJSON *d = cJSON_CreateObject();
    cJSON_AddItemToObject(d, "tokens", toks);
    char *body = cJSON_PrintUnformatted(d);
    cJSON_Delete(d);
    CHECK(http(port, "POST", "/detokenize", NULL, body, &r));
    free(body);
    bool ok = r.status == 200 && strstr(r.body, "\"content\":\"Hello\"");
    if (!ok) printf("  %s\n", r.body);
    resp_free(&r);
    CHECK(ok);
    /* with_pieces: {id, piece} objects whose pieces spell the text (the tiny model's vocab is
     * bytes only: no special tokens to parse here; test_tok covers those) */
    CHECK(http(port, "POST", "/tokenize", NULL, "{\"content\":\"Hi there\",\"with_pieces\":true}", &r));
    CHECK_EQ_INT(r.status, 200);
    o = cJSON_Parse(r.body);
    cJSON *arr = cJSON_GetObjectItem(o, "tokens"), *it;
    char spelled[256] = "";
    int n_obj = 0;
    const char *first = NULL;
    cJSON_ArrayForEach(it, arr) {
        const char *pc = cJSON_GetStringValue(cJSON_GetObjectItem(it, "piece"));
        if (cJSON_IsNumber(cJSON_GetObjectItem(it, "id")) && pc && strlen(spelled) + strlen(pc) < sizeof spelled) {
            strcat(spelled, pc);
            if (!n_obj) first = pc;
            n_obj++;
        }
    }
    bool pieces_ok = n_obj == cJSON_GetArraySize(arr) && n_obj >= 2 && !strcmp(spelled, "Hi there") && first &&
                     !strcmp(first, "H");
    if (!pieces_ok) printf("  with_pieces: %s\n", r.body);
    cJSON_Delete(o);
    resp_free(&r);
    CHECK(pieces_ok);
}

typedef struct client_arg {
    int port;
    bool chat, stream;
    const char *prompt;
    int n;
    gen_result g;
    bool ok;
} client_arg;

static void *client_main(void *p) {
    client_arg *a = p;
    a->ok = gen(a->port, a->chat, a->prompt, a->n, a->stream, NULL, &a->g);
    return NULL;
}

/* 4 clients at once on 2 slots: all complete, each greedy text equals a serial `spex run`,
 * and the /metrics counters move by exactly their token counts. */
TEST(concurrent_clients_and_metrics) {
    REQUIRE_SERVER(port);
    resp r;
    CHECK(http(port, "GET", "/metrics", NULL, NULL, &r));
    CHECK_EQ_INT(r.status, 200);
    double p0 = 0, g0 = 0, d0 = 0, a0 = 0, k0 = 0;
    bool ok = metric_value(r.body, "llamacpp:prompt_tokens_total", &p0) &&
              metric_value(r.body, "llamacpp:prompt_tokens_cached_total", &k0) &&
              metric_value(r.body, "llamacpp:tokens_predicted_total", &g0) &&
              metric_value(r.body, "llamacpp:spec_decode_num_draft_tokens_total", &d0) &&
              metric_value(r.body, "llamacpp:spec_decode_num_accepted_tokens_total", &a0);
    resp_free(&r);
    CHECK(ok);
    client_arg c[4] = {
        {port, true, false, "Hello", 30, {0}, false},
        {port, false, true, "The cat", 25, {0}, false},
        {port, true, true, "Why is the sky", 20, {0}, false},
        {port, false, false, "abc def", 28, {0}, false},
    };
    pthread_t th[4];
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, client_main, &c[i]);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    long sum_p = 0, sum_g = 0, sum_k = 0;
    for (int i = 0; i < 4; i++) {
        char *want = expected(c[i].chat, c[i].prompt, c[i].n);
        bool same = want && !strcmp(want, c[i].g.text);
        if (!same) printf("  client %d: '%s' vs run '%s'\n", i, c[i].g.text, want ? want : "(run failed)");
        free(want);
        CHECK_MSG(c[i].ok && c[i].g.status == 200, "client %d failed (status %d)", i, c[i].g.status);
        CHECK_MSG(same, "client %d text differs", i);
        sum_p += c[i].g.prompt_n;   /* processed prompt tokens: a reused prefix is not counted */
        sum_k += c[i].g.cache_n;    /* ... but counted as cached */
        sum_g += c[i].g.completion_tokens;
    }
    CHECK(http(port, "GET", "/metrics", NULL, NULL, &r));
    double p1 = 0, g1 = 0, d1 = 0, a1 = 0, k1 = 0, busy = -1, def = -1, ds = -1, bs = -1;
    ok = metric_value(r.body, "spex:draft_seconds_total", &ds) &&
         metric_value(r.body, "spex:draft_backlog_seconds_total", &bs) &&
         metric_value(r.body, "llamacpp:prompt_tokens_total", &p1) &&
         metric_value(r.body, "llamacpp:prompt_tokens_cached_total", &k1) &&
         metric_value(r.body, "llamacpp:tokens_predicted_total", &g1) &&
         metric_value(r.body, "llamacpp:spec_decode_num_draft_tokens_total", &d1) &&
         metric_value(r.body, "llamacpp:spec_decode_num_accepted_tokens_total", &a1) &&
         metric_value(r.body, "llamacpp:requests_processing", &busy) &&
         metric_value(r.body, "llamacpp:requests_deferred", &def) && strstr(r.body, "# TYPE llamacpp:n_decode_total counter");
    resp_free(&r);
    CHECK(ok);
    CHECK_EQ_INT((long)(p1 - p0), sum_p);
    CHECK_EQ_INT((long)(k1 - k0), sum_k);
    CHECK_EQ_INT((long)(g1 - g0), sum_g);
    CHECK(a1 - a0 <= d1 - d0);
    CHECK_MSG(bs >= 0 && bs <= ds, "backlog %g s of %g s drafting", bs, ds);   /* a part of the drafting time */
    CHECK_EQ_INT((long)busy, 0);
    CHECK_EQ_INT((long)def, 0);
}

/* A second server: one slot, a queue of one, slowed steps, an API key. */
TEST(auth_queue_full_and_cancel) {
    if (!test_spex_bin()) SKIP("no spex binary next to this test's folder");
    server s;
    const char *a[] = {"-m", TINY_QWEN3, "-np", "1", "--queue-max", "1", "--api-key", "k1,k2", "--metrics", "-t", "1", NULL};
    CHECK_MSG(server_start_slowed(&s, 20, a), "the server did not start");
    int port = s.port;
    const char *auth = "Authorization: Bearer k2\r\n";
    resp r;
    bool ok = http(port, "GET", "/health", NULL, NULL, &r) && r.status == 200;   /* public */
    resp_free(&r);
    ok = ok && http(port, "GET", "/v1/models", NULL, NULL, &r) && is_error(&r, 401, "authentication_error");
    resp_free(&r);
    ok = ok && http(port, "GET", "/v1/models", "Authorization: Bearer nope\r\n", NULL, &r) && r.status == 401;
    resp_free(&r);
    ok = ok && http(port, "GET", "/v1/models", auth, NULL, &r) && r.status == 200;
    resp_free(&r);
    ok = ok && http(port, "GET", "/v1/models", "X-Api-Key: k1\r\n", NULL, &r) && r.status == 200;
    resp_free(&r);
    /* A (streaming, long) takes the slot, B waits in the queue, C is refused with 503. */
    const char *longreq = "{\"prompt\":\"Hello\",\"max_tokens\":200,\"temperature\":0,\"stream\":true}";
    int fa = open_request(port, "POST", "/v1/completions", auth, longreq);
    usleep(300 * 1000);
    int fb = open_request(port, "POST", "/v1/completions", auth, longreq);
    usleep(300 * 1000);
    bool ok503 = http(port, "POST", "/v1/completions", auth, "{\"prompt\":\"x\",\"max_tokens\":2}", &r) &&
                 is_error(&r, 503, "unavailable_error");
    resp_free(&r);
    /* GET /slots?fail_on_no_slot=1: 503 while the one slot is held, 200 without the flag */
    bool no_slot = http(port, "GET", "/slots?fail_on_no_slot=1", auth, NULL, &r) && r.status == 503;
    resp_free(&r);
    no_slot = no_slot && http(port, "GET", "/slots", auth, NULL, &r) && r.status == 200;
    resp_free(&r);
    /* A reads a little and goes away; B goes away: both are cancelled, the slot frees. */
    char buf[256];
    bool got = fa >= 0 && recv(fa, buf, sizeof buf, 0) > 0;
    if (fa >= 0) close(fa);
    if (fb >= 0) close(fb);
    double busy = -1, def = -1;
    for (int i = 0; i < 50; i++) {
        usleep(100 * 1000);
        if (!http(port, "GET", "/metrics", auth, NULL, &r)) continue;
        metric_value(r.body, "llamacpp:requests_processing", &busy);
        metric_value(r.body, "llamacpp:requests_deferred", &def);
        resp_free(&r);
        if (busy == 0 && def == 0) break;
    }
    bool ok_after = http(port, "POST", "/v1/completions", auth, "{\"prompt\":\"x\",\"max_tokens\":2}", &r) &&
                    r.status == 200;
    resp_free(&r);
    bool ok_idle_slot = http(port, "GET", "/slots?fail_on_no_slot=1", auth, NULL, &r) && r.status == 200;
    resp_free(&r);
    bool clean;
    int rc = server_stop(&s, &clean);
    CHECK(ok);
    CHECK(fa >= 0 && fb >= 0 && got);
    CHECK(ok503);
    CHECK(no_slot);
    CHECK_MSG(busy == 0 && def == 0, "after the clients left: processing %g, deferred %g", busy, def);
    CHECK(ok_after);
    CHECK(ok_idle_slot);
    CHECK_EQ_INT(rc, 0);
    CHECK(clean);
}

/* The </think> split (§6.3) on fixed texts, final and partial. */
TEST(reasoning_split_rules) {
    size_t r0, r1, c0;
    const char *t = "<think>\nplan\n</think>\n\nanswer";
    CHECK(srv_split_reasoning(t, strlen(t), false, true, &r0, &r1, &c0) == SRV_SPLIT_YES);
    CHECK(r1 - r0 == 4 && !memcmp(t + r0, "plan", 4) && !strcmp(t + c0, "answer"));
    t = "plan</think>ok";   /* the template opened the block */
    CHECK(srv_split_reasoning(t, strlen(t), true, true, &r0, &r1, &c0) == SRV_SPLIT_YES);
    CHECK(r0 == 0 && r1 == 4 && !strcmp(t + c0, "ok"));
    t = "no reasoning here";
    CHECK(srv_split_reasoning(t, strlen(t), false, true, &r0, &r1, &c0) == SRV_SPLIT_NONE);
    t = "<think>abc</thi";   /* streaming: a partial closing tag is held back */
    CHECK(srv_split_reasoning(t, strlen(t), false, false, &r0, &r1, &c0) == SRV_SPLIT_YES);
    CHECK(r1 - r0 == 3 && c0 == strlen(t));
    t = "<thi";              /* streaming: maybe an opening tag */
    CHECK(srv_split_reasoning(t, strlen(t), false, false, &r0, &r1, &c0) == SRV_SPLIT_WAIT);
    CHECK(srv_split_reasoning(t, strlen(t), false, true, &r0, &r1, &c0) == SRV_SPLIT_NONE);
}

/* A template that opens <think> (qwen35 with thinking on): the generation is reasoning
 * until </think>; reasoning_content equals `spex run`'s text, plain and streamed, and
 * reasoning_format none or enable_thinking false put the text in content. */
TEST(reasoning_content) {
    if (!test_spex_bin()) SKIP("no spex binary next to this test's folder");
    server s;
    const char *a[] = {"-m", TINY_QWEN3, "--chat-template", "qwen35", "-t", "1", NULL};
    CHECK_MSG(server_start(&s, a), "the server did not start");
    size_t len;
    const char *ra[] = {"-m", TINY_QWEN3, "--chat", "--chat-template", "qwen35", "-p", "Hello", "-n", "12", "--temp", "0", "-t", "1", NULL};
    char *want = spex_run(ra, &len);
    const char *ra2[] = {"-m", TINY_QWEN3, "--chat", "--no-think", "--chat-template", "qwen35", "-p", "Hello", "-n", "12", "--temp", "0", "-t", "1", NULL};
    char *want_nt = spex_run(ra2, &len);
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"max_tokens\":12,\"temperature\":0%s}";
    char b[512];
    resp r;
    bool ok = want && want_nt;
    snprintf(b, sizeof b, body, "");
    ok = ok && http(s.port, "POST", "/v1/chat/completions", NULL, b, &r);
    cJSON *o = cJSON_Parse(r.body), *m = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0), "message");
    bool ok1 = ok && cJSON_GetStringValue(cJSON_GetObjectItem(m, "reasoning_content")) &&
               !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(m, "reasoning_content")), want) &&
               !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(m, "content")), "");
    cJSON_Delete(o);
    resp_free(&r);
    /* streamed: the reasoning deltas add up to the same text */
    snprintf(b, sizeof b, body, ",\"stream\":true");
    char acc[4096] = "";
    bool ok2 = ok && http(s.port, "POST", "/v1/chat/completions", NULL, b, &r);
    for (char *p = ok2 ? r.body : NULL; p && (p = strstr(p, "data: {"));) {
        char *e = strstr(p, "\n\n");
        if (!e) break;
        *e = 0;
        cJSON *c = cJSON_Parse(p + 6);
        const char *rc = cJSON_GetStringValue(cJSON_GetObjectItem(
            cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "choices"), 0), "delta"), "reasoning_content"));
        if (rc && strlen(acc) + strlen(rc) < sizeof acc) strcat(acc, rc);
        cJSON_Delete(c);
        p = e + 2;
    }
    if (ok2) resp_free(&r);
    ok2 = ok2 && !strcmp(acc, want);
    snprintf(b, sizeof b, body, ",\"reasoning_format\":\"none\"");
    bool ok3 = ok && http(s.port, "POST", "/v1/chat/completions", NULL, b, &r);
    o = cJSON_Parse(ok3 ? r.body : "");
    m = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0), "message");
    ok3 = ok3 && cJSON_GetStringValue(cJSON_GetObjectItem(m, "content")) &&
          !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(m, "content")), want) && !cJSON_GetObjectItem(m, "reasoning_content");
    cJSON_Delete(o);
    if (ok) resp_free(&r);
    snprintf(b, sizeof b, body, ",\"chat_template_kwargs\":{\"enable_thinking\":false}");
    bool ok4 = ok && http(s.port, "POST", "/v1/chat/completions", NULL, b, &r);
    o = cJSON_Parse(ok4 ? r.body : "");
    m = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0), "message");
    ok4 = ok4 && cJSON_GetStringValue(cJSON_GetObjectItem(m, "content")) &&
          !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(m, "content")), want_nt);
    cJSON_Delete(o);
    if (ok) resp_free(&r);
    free(want);
    free(want_nt);
    bool clean;
    int rc = server_stop(&s, &clean);
    CHECK(ok);
    CHECK(ok1);
    CHECK(ok2);
    CHECK(ok3);
    CHECK(ok4);
    CHECK_EQ_INT(rc, 0);
    CHECK(clean);
}

/* ---- /props and /slots (§12) ---------------------------------------------- */

static cJSON *jget(cJSON *o, const char *path) {   /* "a/0/c": object keys, array indexes */
    char key[64];
    while (o && *path) {
        size_t n = strcspn(path, "/");
        snprintf(key, sizeof key, "%.*s", (int)n, path);
        o = cJSON_IsArray(o) ? cJSON_GetArrayItem(o, atoi(key)) : cJSON_GetObjectItem(o, key);
        path += n + (path[n] == '/');
    }
    return o;
}

static double jnum(cJSON *o, const char *path) {
    cJSON *v = jget(o, path);
    return cJSON_IsNumber(v) ? v->valuedouble : -12345;
}

static const char *jstr(cJSON *o, const char *path) {
    const char *v = cJSON_GetStringValue(jget(o, path));
    return v ? v : "";
}

/* The shared server (-np 2, -c 512, drafter, no --props): /props matches the flags, /slots
 * lists two idle slots with the defaults, POST /props is 403 permission_error. */
TEST(props_and_slots_idle) {
    REQUIRE_SERVER(port);
    cJSON *o = get_json(port, "/props", NULL);
    CHECK(o);
    bool ok = jnum(o, "total_slots") == 2 && jnum(o, "default_generation_settings/n_ctx") == 256 &&
              jnum(o, "default_generation_settings/params/n_predict") == -1 &&
              jnum(o, "default_generation_settings/params/temperature") == 0.8 &&
              jnum(o, "default_generation_settings/params/top_k") == 40 &&
              jnum(o, "default_generation_settings/params/speculative.n_max") >= 1 &&
              jnum(o, "default_generation_settings/params/speculative.n_min") == 0 &&
              jnum(o, "default_generation_settings/params/speculative.p_min") == 0 &&
              !strcmp(jstr(o, "default_generation_settings/params/speculative.type"), "draft-dflash") &&
              !strcmp(jstr(o, "model_path"), TINY_QWEN3) &&
              cJSON_IsString(jget(o, "chat_template")) && cJSON_IsString(jget(o, "build_info")) &&
              cJSON_IsFalse(jget(o, "modalities/vision")) && cJSON_IsFalse(jget(o, "modalities/audio")) &&
              cJSON_IsTrue(jget(o, "endpoint_slots")) && cJSON_IsFalse(jget(o, "endpoint_props"));
    /* llama-server's build_info form, b<commits>-<commit> (b0-unknown outside a git checkout) */
    const char *bi = jstr(o, "build_info");
    unsigned build = 0;
    char commit[16] = "";
    bool bi_ok = bi && (!strcmp(bi, "b0-unknown") ||
                        (sscanf(bi, "b%u-%15[0-9a-f]", &build, commit) == 2 && build > 0 && strlen(commit) >= 7));
    CHECK_MSG(bi_ok, "build_info '%s'", bi ? bi : "(none)");
    double n_max = jnum(o, "default_generation_settings/params/speculative.n_max");
    if (!ok) jprint("props", o);
    cJSON_Delete(o);
    CHECK(ok);
    /* the earlier tests' requests have ended; a slot is freed just after its response */
    cJSON *sl = NULL;
    for (int i = 0; i < 50; i++) {
        cJSON_Delete(sl);
        sl = get_json(port, "/slots", NULL);
        bool busy = false;
        for (int k = 0; k < cJSON_GetArraySize(sl); k++)
            busy |= !cJSON_IsFalse(cJSON_GetObjectItem(cJSON_GetArrayItem(sl, k), "is_processing"));
        if (sl && !busy) break;
        usleep(100 * 1000);
    }
    CHECK(sl && cJSON_GetArraySize(sl) == 2);
    for (int k = 0; k < 2; k++) {
        cJSON *s1 = cJSON_GetArrayItem(sl, k);
        ok = jnum(s1, "id") == k && jnum(s1, "n_ctx") == 256 && cJSON_IsTrue(jget(s1, "speculative")) &&
             cJSON_IsFalse(jget(s1, "is_processing")) && jnum(s1, "params/n_predict") == -1 &&
             jnum(s1, "params/speculative.n_max") == n_max && cJSON_IsFalse(jget(s1, "next_token/0/has_next_token")) &&
             jnum(s1, "next_token/0/n_decoded") == 0 && cJSON_IsNumber(jget(s1, "next_token/0/n_remain")) &&
             cJSON_GetArraySize(jget(s1, "next_token")) == 1 && jnum(s1, "id_task") == -1 &&
             jnum(s1, "n_prompt_tokens") == 0;
        if (!ok) break;
    }
    cJSON_Delete(sl);
    CHECK(ok);
    resp r;
    CHECK(http(port, "POST", "/props", NULL, "{}", &r));
    ok = is_error(&r, 403, "permission_error") && strstr(r.body, "--props");
    resp_free(&r);
    CHECK(ok);
    CHECK(http(port, "DELETE", "/slots", NULL, NULL, &r));
    ok = is_error(&r, 405, NULL);
    resp_free(&r);
    CHECK(ok);
}

/* A server with --props, an API key, -n 7, --temp 0.5 and slowed steps: /props echoes the
 * flags; while a stream runs, /slots shows its slot processing with the request's own
 * params (speculative.n_max 2, n_min 1, p_min 0.25, stop) and a growing n_decoded; POST /props answers
 * {"success": true} for an object and 400 otherwise; every endpoint wants the key. */
TEST(slots_while_streaming_and_props_post) {
    if (!test_spex_bin()) SKIP("no spex binary next to this test's folder");
    server s;
    const char *a[] = {"-m", TINY_QWEN3, "-md", TINY_DRAFT2, "-np", "2", "-c", "1024", "-n", "7", "--temp", "0.5",
                       "--props", "--api-key", "k1", "-t", "1", NULL};
    CHECK_MSG(server_start_slowed(&s, 40, a), "the server did not start");
    int port = s.port;
    const char *auth = "Authorization: Bearer k1\r\n";
    resp r;
    bool ok401 = true;
    static const char *const paths[][2] = {{"GET", "/props"}, {"GET", "/slots"}, {"POST", "/props"}};
    for (int i = 0; i < 3; i++) {
        ok401 = ok401 && http(port, paths[i][0], paths[i][1], NULL, i == 2 ? "{}" : NULL, &r) &&
                is_error(&r, 401, "authentication_error");
        resp_free(&r);
    }
    cJSON *o = get_json(port, "/props", auth);
    bool okp = o && jnum(o, "default_generation_settings/params/n_predict") == 7 &&
               jnum(o, "default_generation_settings/params/temperature") == 0.5 && jnum(o, "total_slots") == 2 &&
               jnum(o, "default_generation_settings/n_ctx") == 512 && cJSON_IsTrue(jget(o, "endpoint_props"));
    cJSON_Delete(o);
    bool okpost = http(port, "POST", "/props", auth, "{\"anything\":1}", &r) && r.status == 200 &&
                  strstr(r.body, "\"success\":true");
    resp_free(&r);
    okpost = okpost && http(port, "POST", "/props", auth, "[1]", &r) && is_error(&r, 400, "invalid_request_error");
    resp_free(&r);
    okpost = okpost && http(port, "POST", "/props", auth, "{bad", &r) && is_error(&r, 400, "invalid_request_error");
    resp_free(&r);

    const char *body = "{\"prompt\":\"Hello\",\"max_tokens\":300,\"temperature\":0,\"stream\":true,"
                       "\"speculative.n_max\":2,\"speculative.n_min\":1,\"speculative.p_min\":0.25,\"stop\":[\"zq#\"]}";
    int fd = open_request(port, "POST", "/v1/completions", auth, body);
    long n1 = -1, n2 = -1;
    int busy_id = -1;
    bool okbusy = fd >= 0;
    for (int i = 0; okbusy && i < 200 && n2 < 0; i++) {   /* up to ~20 s (ASan) */
        usleep(100 * 1000);
        cJSON *sl = get_json(port, "/slots", auth);
        for (int k = 0; k < cJSON_GetArraySize(sl); k++) {
            cJSON *s1 = cJSON_GetArrayItem(sl, k);
            if (!cJSON_IsTrue(jget(s1, "is_processing"))) continue;
            long nd = (long)jnum(s1, "next_token/0/n_decoded");
            if (nd < 1) continue;
            cJSON *stop = jget(s1, "params/stop");
            bool params_ok = jnum(s1, "params/temperature") == 0 && jnum(s1, "params/n_predict") == 300 &&
                             jnum(s1, "params/speculative.n_max") == 2 && cJSON_GetArraySize(stop) == 1 &&
                             jnum(s1, "params/speculative.n_min") == 1 &&
                             jnum(s1, "params/speculative.p_min") == 0.25 &&
                             cJSON_IsString(cJSON_GetArrayItem(stop, 0)) &&
                             !strcmp(cJSON_GetArrayItem(stop, 0)->valuestring, "zq#") &&
                             jnum(s1, "next_token/0/n_remain") == 300 - nd &&
                             cJSON_IsTrue(jget(s1, "next_token/0/has_next_token")) &&
                             jnum(s1, "id_task") >= 0 && jnum(s1, "n_prompt_tokens") > 0 &&
                             jnum(s1, "n_prompt_tokens_processed") + jnum(s1, "n_prompt_tokens_cache") ==
                                 jnum(s1, "n_prompt_tokens") &&
                             cJSON_IsNumber(jget(s1, "draft_n")) && cJSON_IsNumber(jget(s1, "draft_n_accepted")) &&
                             cJSON_IsFalse(jget(cJSON_GetArrayItem(sl, 1 - k), "is_processing"));
            if (!params_ok) {
                jprint("busy slot", s1);
                okbusy = false;
            } else if (n1 < 0) {
                n1 = nd, busy_id = k;
            } else if (k == busy_id && nd > n1) {
                n2 = nd;
            }
        }
        cJSON_Delete(sl);
    }
    printf("  n_decoded %ld then %ld on slot %d\n", n1, n2, busy_id);
    if (fd >= 0) close(fd);   /* the stream is cancelled */
    bool clean;
    int rc = server_stop(&s, &clean);
    CHECK(ok401);
    CHECK(okp);
    CHECK(okpost);
    CHECK(okbusy);
    CHECK(n1 >= 1 && n2 > n1);
    CHECK_EQ_INT(rc, 0);
    CHECK(clean);
}

/* --no-slots: GET /slots is 501 not_supported_error with llama-server's message; /props
 * still answers and says so. */
TEST(no_slots) {
    if (!test_spex_bin()) SKIP("no spex binary next to this test's folder");
    server s;
    const char *a[] = {"-m", TINY_QWEN3, "-np", "1", "--no-slots", "-t", "1", NULL};
    CHECK_MSG(server_start(&s, a), "the server did not start");
    resp r;
    bool ok = http(s.port, "GET", "/slots", NULL, NULL, &r) && is_error(&r, 501, "not_supported_error") &&
              strstr(r.body, "--slots");
    resp_free(&r);
    cJSON *o = get_json(s.port, "/props", NULL);
    bool okp = o && cJSON_IsFalse(jget(o, "endpoint_slots")) && jnum(o, "total_slots") == 1 &&
               jnum(o, "default_generation_settings/params/speculative.n_max") == 0 &&
               !strcmp(jstr(o, "default_generation_settings/params/speculative.type"), "none");
    cJSON_Delete(o);
    bool clean;
    int rc = server_stop(&s, &clean);
    CHECK(ok);
    CHECK(okp);
    CHECK_EQ_INT(rc, 0);
    CHECK(clean);
}

/* Last: SIGTERM stops the shared server cleanly. */
/* ---- tools (§6.1, §6.2) --------------------------------------------------- */

/* The default model is not trained to call tools, so this checks the request side: a chat
 * request with tools (and tool-call history) is accepted and its prompt is exactly the
 * template's render with the tools block — the prompt's token count (usage.prompt_tokens)
 * equals /tokenize of the text spex_chat_apply_tools renders for the server's built-in
 * template (GET /props), and POST /apply-template returns that text. tool_choice "none"
 * renders no tools. The output side is
 * tests/test_toolcall.c. */
TEST(chat_tools_rendered_in_prompt) {
    if (!test_spex_bin()) SKIP("no spex binary next to this test's folder");
    /* the tiny model has no template (plain completion ignores tools): force Qwen3's */
    server s;
    const char *a[] = {"-m", TINY_QWEN3, "-np", "1", "-c", "4096", "--chat-template", "chatml-qwen3", "-t", "1", NULL};
    CHECK_MSG(server_start(&s, a), "the server did not start");
    int port = s.port;
    cJSON *props = get_json(port, "/props", NULL);
    CHECK(props);
    spex_chat_template tmpl;
    CHECK(spex_chat_template_from_name(jstr(props, "chat_template_builtin"), &tmpl));
    cJSON_Delete(props);
    CHECK_EQ_INT(tmpl, SPEX_CHAT_CHATML_QWEN3);
    const char *tool = "{\"type\":\"function\",\"function\":{\"name\":\"add\",\"description\":\"Adds two numbers\","
                       "\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\"},"
                       "\"b\":{\"type\":\"number\"}},\"required\":[\"a\",\"b\"]}}}";
    spex_chat_tool_call call = {"add", "{\"a\":2,\"b\":3}"};
    spex_chat_msg msgs[] = {{.role = SPEX_CHAT_USER, .content = "What is 2+3?"},
                            {.role = SPEX_CHAT_ASSISTANT, .content = "", .tool_calls = &call, .n_tool_calls = 1},
                            {.role = SPEX_CHAT_TOOL, .content = "5"},
                            {.role = SPEX_CHAT_USER, .content = "And 4+4?"}};
    const char *history =
        "[{\"role\":\"user\",\"content\":\"What is 2+3?\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
        "\"function\":{\"name\":\"add\",\"arguments\":\"{\\\"a\\\":2,\\\"b\\\":3}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"5\"},"
        "{\"role\":\"user\",\"content\":\"And 4+4?\"}]";
    int n_with = -1, n_without = -1;
    for (int with = 0; with < 2; with++) {
        static char text[8192];
        size_t len;
        spex_error e = {0};
        CHECK_OK(spex_chat_apply_tools(tmpl, msgs, 4, &tool, with ? 1 : 0, true, true, text, sizeof text, &len, &e));
        if (with) CHECK(strstr(text, "<tools>\n{\"type\": \"function\""));
        int want = tokenize_count(port, text);
        CHECK(want > 0);
        char body[4096];
        snprintf(body, sizeof body,
                 "{\"messages\":%s,\"max_tokens\":1,\"tools\":[%s],\"tool_choice\":%s,\"parallel_tool_calls\":true}",
                 history, tool, with ? "\"auto\"" : "\"none\"");
        /* POST /apply-template renders the same body to exactly that text */
        cJSON *at = post_json(port, "/apply-template", body, 200);
        CHECK(at);
        const char *prompt = jstr(at, "prompt");
        CHECK(prompt && !strcmp(prompt, text));
        cJSON_Delete(at);
        cJSON *o = post_json(port, "/v1/chat/completions", body, 200);
        CHECK(o);
        int got = (int)jnum(o, "usage/prompt_tokens");
        if (got != want) jprint("response", o);
        cJSON_Delete(o);
        CHECK_EQ_INT(got, want);
        if (with) n_with = got;
        else n_without = got;
    }
    printf("  prompt tokens: %d with the tools block, %d without\n", n_with, n_without);
    CHECK(n_with > n_without);
    /* required / a named function: accepted, rendered like auto (forcing not implemented) */
    char body[2048];
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":1,\"tools\":[%s],"
             "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"add\"}}}",
             tool);
    cJSON *o = post_json(port, "/v1/chat/completions", body, 200);
    CHECK(o);
    cJSON_Delete(o);
    bool clean;
    CHECK_EQ_INT(server_stop(&s, &clean), 0);
}

TEST(chat_tools_request_errors) {
    REQUIRE_SERVER(port);
    static const char *const bodies[] = {
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":5}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[{\"type\":\"code\"}]}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[{\"type\":\"function\",\"function\":{}}]}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":[]}}]}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tool_choice\":\"maybe\"}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tool_choice\":{\"type\":\"function\"}}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"parallel_tool_calls\":\"yes\"}",
        "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":{}}]}",
        "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"type\":\"function\",\"function\":{\"name\":1}}]}]}",
        "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":3}}]}]}",
        "{\"messages\":[{\"role\":\"user\",\"tool_calls\":[{\"function\":{\"name\":\"f\"}}]}]}",
        "{\"messages\":[{\"role\":\"tool\",\"tool_call_id\":3,\"content\":\"x\"}]}",
    };
    for (size_t k = 0; k < sizeof bodies / sizeof *bodies; k++) {
        resp r;
        CHECK(http(port, "POST", "/v1/chat/completions", NULL, bodies[k], &r));
        bool ok = is_error(&r, 400, "invalid_request_error");
        if (!ok) printf("  case %zu: %d %s\n", k, r.status, r.body);
        resp_free(&r);
        CHECK(ok);
    }
}


/* ======================================================================== */
/* Streams read in the background, shutdown and slow clients                 */
/* ======================================================================== */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A response read on its own thread, with the arrival time of each SSE event ("data: ..."
 * followed by a blank line; ": ping" comments are not events). */
enum { SSE_MAX_EVENTS = 4096 };
typedef struct sse_reader {
    int fd;
    pthread_t th;
    pthread_mutex_t mu;
    char *buf;
    size_t len, cap;
    int n_events;
    double t_event[SSE_MAX_EVENTS];
    bool closed;
} sse_reader;

static void *sse_reader_main(void *p) {
    sse_reader *r = p;
    char tmp[4096];
    size_t scan = 0;   /* events are counted from here on */
    for (;;) {
        ssize_t k = recv(r->fd, tmp, sizeof tmp, 0);
        const double t = now_s();
        pthread_mutex_lock(&r->mu);
        if (k <= 0) {
            r->closed = true;
            pthread_mutex_unlock(&r->mu);
            break;
        }
        if (r->len + (size_t)k + 1 > r->cap) {
            r->cap = (r->len + (size_t)k + 1) * 2;
            r->buf = realloc(r->buf, r->cap);
        }
        memcpy(r->buf + r->len, tmp, (size_t)k);
        r->len += (size_t)k;
        r->buf[r->len] = 0;
        for (char *e; (e = strstr(r->buf + scan, "\n\n")) != NULL; scan = (size_t)(e - r->buf) + 2) {
            /* an event starts at scan (after a chunk-size line of the chunked encoding, if any) */
            char *d = strstr(r->buf + scan, "data: ");
            if (d && d < e && r->n_events < SSE_MAX_EVENTS) r->t_event[r->n_events++] = t;
        }
        pthread_mutex_unlock(&r->mu);
    }
    return NULL;
}

static bool sse_start(sse_reader *r, int fd) {
    memset(r, 0, sizeof *r);
    r->fd = fd;
    pthread_mutex_init(&r->mu, NULL);
    return fd >= 0 && pthread_create(&r->th, NULL, sse_reader_main, r) == 0;
}

/* Waits up to timeout_s for at least n events; returns the count. */
static int sse_wait_events(sse_reader *r, int n, double timeout_s) {
    const double t_end = now_s() + timeout_s;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        int got = r->n_events;
        bool closed = r->closed;
        pthread_mutex_unlock(&r->mu);
        if (got >= n || closed || now_s() > t_end) return got;
        usleep(2000);
    }
}

/* Events that arrived in (t0, t1). */
static int sse_events_between(sse_reader *r, double t0, double t1) {
    pthread_mutex_lock(&r->mu);
    int n = 0;
    for (int i = 0; i < r->n_events; i++) n += r->t_event[i] > t0 && r->t_event[i] < t1;
    pthread_mutex_unlock(&r->mu);
    return n;
}

/* Joins the reader (after the peer closed, or after shutdown(fd) by the caller); the
 * received bytes stay in r->buf until sse_free. */
static void sse_join(sse_reader *r) {
    pthread_join(r->th, NULL);
    close(r->fd);
}

static void sse_free(sse_reader *r) {
    free(r->buf);
    pthread_mutex_destroy(&r->mu);
}

/* SIGINT with a stream running and a request queued: the stream ends with an error event
 * (503), the queued request gets a 503 error object, and the process exits 0 after "server:
 * stopped" (in the ASan build, without a report) — nothing is left hanging. */
TEST(shutdown_sigint_with_requests_in_flight) {
    if (!test_spex_bin()) SKIP("no spex binary next to this test's folder");
    server s;
    const char *a[] = {"-m", TINY_QWEN3, "-np", "1", "--queue-max", "1", "--metrics",
                       "-t", "1", NULL};
    CHECK_MSG(server_start_slowed(&s, 20, a), "the server did not start");
    const char *longreq = "{\"prompt\":\"Hello\",\"max_tokens\":200,\"temperature\":0,\"stream\":true}";
    sse_reader ra;
    bool started = sse_start(&ra, open_request(s.port, "POST", "/v1/completions", NULL, longreq));
    int ev = started ? sse_wait_events(&ra, 3, 20) : 0;
    /* B (non-streaming) waits in the queue behind A: wait until the server says so */
    int fb = open_request(s.port, "POST", "/v1/completions", NULL,
                          "{\"prompt\":\"The cat\",\"max_tokens\":50,\"temperature\":0}");
    double deferred = -1;
    for (int i = 0; i < 200 && deferred != 1; i++) {
        resp r;
        if (http(s.port, "GET", "/metrics", NULL, NULL, &r)) metric_value(r.body, "llamacpp:requests_deferred", &deferred);
        resp_free(&r);
        if (deferred != 1) usleep(20 * 1000);
    }
    bool clean;
    int rc = server_stop_sig(&s, SIGINT, &clean);
    resp rb;
    bool got_b = fb >= 0 && read_response(fb, &rb);
    if (started) sse_join(&ra);
    const char *body_a = ra.buf ? ra.buf : "";
    bool a_err = strstr(body_a, "\"code\":503") != NULL && strstr(body_a, "shutting down") != NULL;
    bool a_done = strstr(body_a, "[DONE]") != NULL;
    if (!a_err) printf("  stream A:\n%s\n", body_a);
    CHECK(started && ev >= 3);
    CHECK_MSG(deferred == 1, "B was not queued (requests_deferred %g)", deferred);
    CHECK_MSG(a_err && !a_done, "the running stream did not end with a 503 error event");
    CHECK(got_b && is_error(&rb, 503, NULL));
    if (got_b) resp_free(&rb);
    if (started) sse_free(&ra);
    CHECK_EQ_INT(rc, 0);
    CHECK(clean);
}

/* A prompt of ~2000 tokens goes in in chunks (SRV_PREFILL_CHUNK per engine iteration), so a
 * stream that is already running keeps receiving tokens while it is processed; the long
 * prompt's text still equals `spex run`'s. Steps are slowed (the serve_slow harness) so that
 * each iteration is at least 10 ms: an unchunked prefill would deliver at most one event of
 * A in that window, the chunked one about one per chunk. */
TEST(long_prompt_in_chunks_keeps_streams_flowing) {
    if (!test_spex_bin()) SKIP("no spex binary next to this test's folder");
    server s;
    const char *a[] = {"-m", TINY_QWEN3, "-np", "2", "-c", "8192", "-t", "1", NULL};
    CHECK_MSG(server_start_slowed(&s, 10, a), "the server did not start");
    char longp[2048] = "";
    for (int i = 0; i < 84; i++) strcat(longp, "the cat sat on the mat. ");
    int n_long = tokenize_count(s.port, longp);
    sse_reader ra, rb;
    bool sa = sse_start(&ra, open_request(s.port, "POST", "/v1/completions", NULL,
                                          "{\"prompt\":\"Hello\",\"max_tokens\":1000,\"temperature\":0,\"stream\":true}"));
    int ev_a = sa ? sse_wait_events(&ra, 3, 20) : 0;
    char *bb = gen_body(false, longp, 6, true, NULL);
    const double t0 = now_s();
    bool sb = sse_start(&rb, open_request(s.port, "POST", "/v1/completions", NULL, bb));
    free(bb);
    int ev_b = sb ? sse_wait_events(&rb, 1, 30) : 0;
    double t1 = 0;
    if (ev_b > 0) {
        pthread_mutex_lock(&rb.mu);
        t1 = rb.t_event[0];
        pthread_mutex_unlock(&rb.mu);
    }
    int during = sa && ev_b > 0 ? sse_events_between(&ra, t0, t1) : -1;
    const int a_now = sa ? sse_wait_events(&ra, 0, 0) : 0;
    const int a_after = sa ? sse_wait_events(&ra, a_now + 1, 5) : 0;   /* A still running afterwards */
    if (sb) sse_join(&rb);   /* B ends by itself (6 tokens) */
    if (sa) {
        shutdown(ra.fd, SHUT_RDWR);   /* A goes away: cancelled */
        sse_join(&ra);
    }
    /* B's text from its events */
    char text[1024] = "";
    for (char *p = rb.buf ? strstr(rb.buf, "data: ") : NULL; p; p = strstr(p + 6, "data: ")) {
        char *e = strstr(p, "\n\n");
        if (!e) break;
        *e = 0;
        cJSON *o = cJSON_Parse(p + 6);
        const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0), "text"));
        if (t && strlen(text) + strlen(t) < sizeof text) strcat(text, t);
        cJSON_Delete(o);
        *e = '\n';
    }
    const char *ra_[] = {"-m", TINY_QWEN3, "-p", longp, "-n", "6", "--temp", "0", "-t", "1", "-c", "4096", NULL};
    size_t wl;
    char *want = spex_run(ra_, &wl);
    printf("  long prompt: %d tokens, first event after %.0f ms; stream A: %d events meanwhile\n", n_long,
           1e3 * (t1 - t0), during);
    bool same = want && !strcmp(want, text);
    if (!same) printf("  server '%s'\n  run    '%s'\n", text, want ? want : "(run failed)");
    free(want);
    if (sa) sse_free(&ra);
    if (sb) sse_free(&rb);
    bool clean;
    int rc = server_stop(&s, &clean);
    CHECK(n_long > 7 * 256);   /* 8 chunks */
    CHECK(sa && ev_a >= 3 && sb && ev_b >= 1);
    CHECK_MSG(during >= 4, "stream A got %d events while the long prompt was processed", during);
    CHECK(a_after > a_now);
    CHECK(same);
    CHECK_EQ_INT(rc, 0);
    CHECK(clean);
}

/* Clients that misbehave, on a server with a 1 s connection timeout and a 4 KiB body limit:
 * one that sends half a request and stalls is disconnected; a chunked body over the limit
 * gets 413; a non-streaming client that hangs up mid-generation is cancelled
 * (spex:requests_cancelled_total + 1) and its slot serves the next request. The server keeps
 * serving throughout. */
TEST(slow_and_vanished_clients) {
    if (!test_spex_bin()) SKIP("no spex binary next to this test's folder");
    server s;
    const char *a[] = {"-m", TINY_QWEN3, "-np", "1", "-to", "1", "--header-timeout", "1", "--body-max", "4096",
                       "--metrics", "-t", "1", NULL};
    CHECK_MSG(server_start_slowed(&s, 20, a), "the server did not start");
    int port = s.port;
    /* 1. half a request, then nothing */
    int fs = connect_to(port);
    const char *half = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le";
    bool sent = fs >= 0 && send_all(fs, half, strlen(half));
    resp r;
    bool health = http(port, "GET", "/health", NULL, NULL, &r) && r.status == 200;   /* not blocked by it */
    resp_free(&r);
    const double t0 = now_s();
    /* the header timeout: a 408, then the close (recv 0 or an error) */
    resp r408 = {0};
    bool got408 = fs >= 0 && read_response(fs, &r408) && r408.status == 408;
    resp_free(&r408);
    const double waited = now_s() - t0;
    /* 2. a chunked body of 3 x 2000 bytes */
    int fc = connect_to(port);
    char chunk[2000];
    memset(chunk, ' ', sizeof chunk);
    const char *head = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                       "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
    bool ok_c = fc >= 0 && send_all(fc, head, strlen(head));
    for (int i = 0; i < 3 && ok_c; i++)
        ok_c = send_all(fc, "7d0\r\n", 5) && send_all(fc, chunk, sizeof chunk) && send_all(fc, "\r\n", 2);
    ok_c = ok_c && send_all(fc, "0\r\n\r\n", 5);
    resp rc413;
    bool got413 = ok_c && read_response(fc, &rc413) && is_error(&rc413, 413, NULL);
    if (ok_c && rc413.head) resp_free(&rc413);
    /* 3. a non-streaming request whose client leaves */
    double c0 = -1, c1 = -1, busy = -1;
    if (http(port, "GET", "/metrics", NULL, NULL, &r)) metric_value(r.body, "spex:requests_cancelled_total", &c0);
    resp_free(&r);
    int fl = open_request(port, "POST", "/v1/completions", NULL, "{\"prompt\":\"Hello\",\"max_tokens\":200,\"temperature\":0}");
    usleep(400 * 1000);
    if (fl >= 0) close(fl);
    for (int i = 0; i < 50; i++) {
        usleep(100 * 1000);
        if (!http(port, "GET", "/metrics", NULL, NULL, &r)) continue;
        metric_value(r.body, "spex:requests_cancelled_total", &c1);
        metric_value(r.body, "llamacpp:requests_processing", &busy);
        resp_free(&r);
        if (busy == 0 && c1 == c0 + 1) break;
    }
    bool after = http(port, "POST", "/v1/completions", NULL, "{\"prompt\":\"x\",\"max_tokens\":2}", &r) && r.status == 200;
    resp_free(&r);
    bool clean;
    int rc = server_stop(&s, &clean);
    CHECK(sent && health);
    CHECK_MSG(got408 && waited < 5, "the stalled connection: 408 %d after %.1f s", got408, waited);
    CHECK(got413);
    CHECK_MSG(c0 >= 0 && c1 == c0 + 1 && busy == 0, "cancelled %g -> %g, processing %g", c0, c1, busy);
    CHECK(after);
    CHECK_EQ_INT(rc, 0);
    CHECK(clean);
}

/* llama-server's fields and behaviour where real clients tripped (issue list of the drop-in
 * work): a CORS preflight answers with the methods and the asked headers; /completion ended by
 * a stop string says stop_type "word" and the stopping_word, counts the whole prompt in
 * tokens_evaluated with the reused part in tokens_cached, and its stream's last event carries
 * the same; a generation that fills the slot's context is truncated; max_tokens 0 still counts
 * the prompt in usage; neutral values of unsupported fields are accepted; /tokenize pieces
 * that are part of a character come as bytes and /detokenize of such ids is valid UTF-8. */
TEST(llama_server_fields) {
    REQUIRE_SERVER(port);
    resp r;
    CHECK(http(port, "OPTIONS", "/v1/chat/completions",
               "Origin: http://other.example\r\nAccess-Control-Request-Method: POST\r\n"
               "Access-Control-Request-Headers: authorization, content-type\r\n",
               NULL, &r));
    CHECK_MSG(r.status == 204 && strstr(r.head, "Access-Control-Allow-Origin: *") &&
                  strstr(r.head, "Access-Control-Allow-Methods: GET, HEAD, POST, OPTIONS") &&
                  strstr(r.head, "Access-Control-Allow-Headers: authorization, content-type"),
              "preflight: %d %s", r.status, r.head);
    resp_free(&r);

    /* a stop string from the greedy text itself */
    cJSON *full = post_json(port, "/completion", "{\"prompt\":\"Hello\",\"n_predict\":40,\"temperature\":0}", 200);
    const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(full, "content"));
    size_t n = t ? strlen(t) : 0, i;
    for (i = 3; i + 2 < n; i++)
        if (t[i] > 32 && t[i] < 127 && t[i] != '"' && t[i] != '\\' && t[i + 1] > 32 && t[i + 1] < 127 &&
            t[i + 1] != '"' && t[i + 1] != '\\')
            break;
    CHECK_MSG(i + 2 < n, "the greedy text has no two printable ASCII bytes in a row: '%s'", t ? t : "");
    char stop[3] = {t[i], t[i + 1], 0}, body[256];
    snprintf(body, sizeof body, "{\"prompt\":\"Hello\",\"n_predict\":40,\"temperature\":0,\"stop\":[\"%s\"]}", stop);
    cJSON *o = post_json(port, "/completion", body, 200);
    CHECK_MSG(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(o, "stop_type")), "word") &&
                  !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(o, "stopping_word")), stop),
              "stop_type %s, stopping_word %s", cJSON_GetStringValue(cJSON_GetObjectItem(o, "stop_type")),
              cJSON_GetStringValue(cJSON_GetObjectItem(o, "stopping_word")));
    double ev = cJSON_GetNumberValue(cJSON_GetObjectItem(o, "tokens_evaluated"));
    double cached = cJSON_GetNumberValue(cJSON_GetObjectItem(o, "tokens_cached"));
    double pn = cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "timings"), "prompt_n"));
    printf("  stop '%s': tokens_evaluated %g = tokens_cached %g + prompt_n %g\n", stop, ev, cached, pn);
    CHECK(ev >= 5 && cached > 0 && ev == cached + pn);   /* "Hello" again: its prefix is reused */
    CHECK(cJSON_IsFalse(cJSON_GetObjectItem(o, "truncated")) && cJSON_IsNumber(cJSON_GetObjectItem(o, "id_slot")));
    CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(full, "stop_type")), "limit") &&
          !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(full, "stopping_word")), ""));
    cJSON_Delete(o);
    cJSON_Delete(full);
    /* streamed: the last event has the same end fields */
    snprintf(body, sizeof body, "{\"prompt\":\"Hello\",\"n_predict\":40,\"temperature\":0,\"stream\":true,\"stop\":\"%s\"}",
             stop);
    CHECK(http(port, "POST", "/completion", NULL, body, &r) && r.status == 200);
    const char *last = NULL;
    for (const char *p = r.body; (p = strstr(p, "data: ")) != NULL; p += 6) last = p + 6;
    o = last ? cJSON_Parse(last) : NULL;
    CHECK_MSG(o && cJSON_IsTrue(cJSON_GetObjectItem(o, "stop")) &&
                  !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(o, "stop_type")), "word") &&
                  cJSON_IsFalse(cJSON_GetObjectItem(o, "truncated")) && cJSON_IsNumber(cJSON_GetObjectItem(o, "id_slot")) &&
                  cJSON_IsNumber(cJSON_GetObjectItem(o, "tokens_cached")),
              "last event: %s", last ? last : "(none)");
    cJSON_Delete(o);
    resp_free(&r);

    /* return_tokens, generation_settings, prompt, has_new_line, index; response_fields picks */
    o = post_json(port, "/completion", "{\"prompt\":\"Hello\",\"n_predict\":6,\"temperature\":0,\"return_tokens\":true}",
                  200);
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(o, "tokens")) == 6 && cJSON_IsBool(cJSON_GetObjectItem(o, "has_new_line")));
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "generation_settings"), "n_predict")) == 6);
    CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(o, "prompt")), "Hello") &&
          cJSON_GetNumberValue(cJSON_GetObjectItem(o, "index")) == 0);
    char *text6 = strdup(cJSON_GetStringValue(cJSON_GetObjectItem(o, "content")));
    cJSON_Delete(o);
    o = post_json(port, "/completion",
                  "{\"prompt\":\"Hello\",\"n_predict\":6,\"temperature\":0,\"response_fields\":"
                  "[\"content\",\"generation_settings/n_predict\",\"no_such_field\"]}",
                  200);
    CHECK_MSG(cJSON_GetArraySize(o) == 2 && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(o, "content")), text6) &&
                  cJSON_GetNumberValue(cJSON_GetObjectItem(o, "generation_settings/n_predict")) == 6,
              "response_fields gave %d fields", cJSON_GetArraySize(o));
    cJSON_Delete(o);
    free(text6);
    cJSON_Delete(post_json(port, "/completion", "{\"prompt\":\"x\",\"response_fields\":\"content\"}", 400));
    CHECK(http(port, "POST", "/completion", NULL,
               "{\"prompt\":\"Hello\",\"n_predict\":6,\"temperature\":0,\"stream\":true,\"return_tokens\":true}", &r));
    int n_tok = 0;
    for (const char *p = r.body; (p = strstr(p, "data: ")) != NULL; p += 6) {
        cJSON *event = cJSON_Parse(p + 6);
        n_tok += cJSON_GetArraySize(cJSON_GetObjectItem(event, "tokens"));
        cJSON_Delete(event);
    }
    resp_free(&r);
    CHECK_EQ_INT(n_tok, 6);   /* every generated id once over the stream's events */

    /* the slot's context (256 tokens: -c 512 over 2 slots) runs out: truncated */
    o = post_json(port, "/completion", "{\"prompt\":\"Hello\",\"n_predict\":-1,\"temperature\":0}", 200);
    double pred = cJSON_GetNumberValue(cJSON_GetObjectItem(o, "tokens_predicted"));
    bool eos = !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(o, "stop_type")), "eos");
    CHECK_MSG(eos || (cJSON_IsTrue(cJSON_GetObjectItem(o, "truncated")) &&
                      !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(o, "stop_type")), "limit")),
              "unlimited generation: %g tokens, truncated %d", pred, cJSON_IsTrue(cJSON_GetObjectItem(o, "truncated")));
    if (eos) printf("  (the greedy text ended on its own after %g tokens: truncation not reached)\n", pred);
    cJSON_Delete(o);

    /* max_tokens 0: no tokens, the prompt still counted */
    o = post_json(port, "/v1/completions", "{\"prompt\":\"Hello there\",\"max_tokens\":0}", 200);
    CHECK_MSG(cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "usage"), "prompt_tokens")) >= 2,
              "max_tokens 0: prompt_tokens %g",
              cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "usage"), "prompt_tokens")));
    cJSON_Delete(o);

    /* neutral values are accepted; real ones still refused, never silently ignored (n_probs
     * until token probabilities exist) */
    static const struct {
        const char *path, *body;
        int want;
    } neutral[] = {
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2,"
         "\"response_format\":{\"type\":\"text\"},\"grammar\":\"\",\"n\":null}",
         200},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2,"
         "\"response_format\":{\"type\":\"json_object\"}}",
         400},
        {"/completion", "{\"prompt\":\"hi\",\"n_predict\":2,\"n_probs\":0}", 200},
        {"/completion", "{\"prompt\":\"hi\",\"n_predict\":2,\"n_probs\":3}", 400},
    };
    for (size_t k = 0; k < sizeof neutral / sizeof *neutral; k++) {
        o = post_json(port, neutral[k].path, neutral[k].body, neutral[k].want);
        CHECK_MSG(o != NULL, "%s %s: not %d", neutral[k].path, neutral[k].body, neutral[k].want);
        cJSON_Delete(o);
    }

    /* "é" is one character of two bytes; the byte-level vocabulary splits it into two tokens */
    o = post_json(port, "/tokenize", "{\"content\":\"caf\u00e9\",\"with_pieces\":true}", 200);
    cJSON *toks = cJSON_GetObjectItem(o, "tokens"), *it;
    int n_bytes_pieces = 0;
    char ids[128] = "";
    cJSON_ArrayForEach(it, toks) {
        cJSON *piece = cJSON_GetObjectItem(it, "piece");
        CHECK(cJSON_IsString(piece) || cJSON_IsArray(piece));
        n_bytes_pieces += cJSON_IsArray(piece);
        snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%d", ids[0] ? "," : "",
                 (int)cJSON_GetNumberValue(cJSON_GetObjectItem(it, "id")));
    }
    cJSON_Delete(o);
    printf("  'caf\u00e9': ids %s, %d pieces as bytes\n", ids, n_bytes_pieces);
    CHECK(n_bytes_pieces >= 1);
    /* the ids without their last one end inside "é": U+FFFD, valid JSON */
    char *comma = strrchr(ids, ',');
    if (comma) *comma = 0;
    snprintf(body, sizeof body, "{\"tokens\":[%s]}", ids);
    CHECK(http(port, "POST", "/detokenize", NULL, body, &r) && r.status == 200);
    CHECK_MSG(strstr(r.body, "caf\xEF\xBF\xBD") != NULL, "detokenize: %s", r.body);
    resp_free(&r);
}

/* A llama-server command line typical of DFlash users starts unchanged and serves: the flags
 * spex applies are applied, llama.cpp's flags without effect here each get a "note:" line, and
 * one that spex cannot honour (a download) is an error naming the way; `spex run` takes the same. */
TEST(llama_server_command_line) {
    if (!test_spex_bin()) SKIP("no spex binary next to this test's folder");
    char tmpl[256];
    snprintf(tmpl, sizeof tmpl, "%s/chatml.jinja", test_tmp_dir());
    FILE *f = fopen(tmpl, "w");
    CHECK(f);
    fputs("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
          f);
    fclose(f);
    const char *a[] = {"-m", TINY_QWEN3, "-md", TINY_DRAFT2, "--spec-type", "draft-dflash", "--spec-draft-n-max", "4",
                       "-fa", "on", "-ngl", "999", "-ngld", "999", "--no-mmap", "-ctk", "q8_0", "-ctv", "q8_0",
                       "--fit", "off", "--reasoning-preserve", "--jinja", "--chat-template-file", tmpl, "-c", "512",
                       "-np", "2", "-t", "1", "-ub", "512", "-cb", NULL};
    server s;
    CHECK_MSG(server_start(&s, a), "the server did not start");
    gen_result g;
    bool ok = gen(s.port, true, "Hello", 8, false, NULL, &g) && g.status == 200;
    size_t len = 0;
    char *err = test_slurp(s.err_path, &len);
    bool notes = err && strstr(err, "note: -fa on: no effect") && strstr(err, "note: -ngl 999: no effect: no GPU backend") &&
                 !strstr(err, "note: --no-mmap") && strstr(err, "note: --fit off: no effect") &&
                 strstr(err, "note: --reasoning-preserve: no effect") && strstr(err, "chat template: Jinja, from") &&
                 strstr(err, "n_max 4") && strstr(err, "target KV q8_0");
    if (!notes) printf("  stderr:\n%s\n", err ? err : "");
    free(err);
    bool clean = false;
    CHECK_EQ_INT(server_stop(&s, &clean), 0);
    CHECK(ok && clean);
    CHECK(notes);
    remove(tmpl);
    const char *run[] = {"run", "-m", TINY_QWEN3, "-p", "Hello", "-n", "4", "-fa", "-ngl", "99", "--no-mmap", "-t", "1", NULL};
    test_proc r;
    CHECK(test_spex_exec(run, &r));
    CHECK_MSG(r.rc == 0 && strstr(r.err, "note: -fa: no effect"), "run: exit %d %s", r.rc, r.err);
    test_proc_free(&r);
    const char *bad[][6] = {{"serve", "-hf", "Qwen/Qwen3-8B-GGUF", NULL}, {"run", "-m", TINY_QWEN3, "-ngl", "lots", NULL},
                            {"serve", "-m", TINY_QWEN3, "--flash-attention", NULL},
                            {"serve", "-m", TINY_QWEN3, "--test-step-delay-ms", "20", NULL}};
    const char *want[] = {"spex never downloads: pass the GGUF file with -m FILE", "-ngl needs an integer",
                          "unknown flag '--flash-attention'", "unknown flag '--test-step-delay-ms'"};
    for (int i = 0; i < 4; i++) {
        CHECK(test_spex_exec(bad[i], &r));
        CHECK_MSG(r.rc == 2 && strstr(r.err, want[i]), "%s: exit %d %s", bad[i][1], r.rc, r.err);
        test_proc_free(&r);
    }
}

/* --spec-type ngram (prompt lookup) on the server and in `spex run`: greedy texts equal the
 * target alone's (`spex run` without speculation), drafts are made and some accepted (the
 * random-weight target repeats itself), /v1/models names the type; with -md it is an error. */
TEST(ngram_speculation) {
    if (!test_spex_bin()) SKIP("no spex binary next to this test's folder");
    const char *a[] = {"-m", TINY_QWEN3, "--spec-type", "ngram", "--spec-ngram-size-n", "2", "-np", "2", "-c", "1024",
                       "-t", "1", NULL};
    server s;
    CHECK_MSG(server_start(&s, a), "the server did not start");
    const char *prompts[3] = {"Hello", "The cat", "abc def abc def"};
    gen_result g[3];
    bool ok = true;
    for (int i = 0; i < 3; i++) ok = ok && gen(s.port, i == 1, prompts[i], 120, i == 2, NULL, &g[i]) && g[i].status == 200;
    resp r;
    bool models = http(s.port, "GET", "/v1/models", NULL, NULL, &r) && strstr(r.body, "\"type\":\"ngram\"");
    resp_free(&r);
    bool clean = false;
    CHECK_EQ_INT(server_stop(&s, &clean), 0);
    CHECK(ok && clean && models);
    bool drafted = false;
    for (int i = 0; i < 3; i++) {
        char *want = expected(i == 1, prompts[i], 120);
        CHECK_MSG(want && !strcmp(want, g[i].text), "prompt %d: '%s' vs run '%s'", i, g[i].text, want ? want : "");
        free(want);
        drafted = drafted || g[i].has_draft;
    }
    CHECK_MSG(drafted, "no request drafted");
    /* spex run with the same drafting prints the same text, and its acceptance */
    size_t len;
    const char *ra[] = {"-m", TINY_QWEN3, "-p", prompts[0], "-n", "120", "--temp", "0", "-t", "1", "--spec-type",
                        "ngram-simple", "--spec-ngram-size-n", "2", NULL};
    char *got = spex_run(ra, &len), *want = expected(false, prompts[0], 120);
    CHECK_MSG(got && want && !strcmp(got, want), "run: '%s' vs '%s'", got ? got : "", want ? want : "");
    free(got);
    free(want);
    const char *bad[] = {"serve", "-m", TINY_QWEN3, "--spec-type", "ngram", "-md", TINY_DRAFT2, NULL};
    test_proc p;
    CHECK(test_spex_exec(bad, &p));
    CHECK_MSG(p.rc == 2 && strstr(p.err, "drop -md"), "exit %d: %s", p.rc, p.err);
    test_proc_free(&p);
    const char *bad2[] = {"run", "-m", TINY_QWEN3, "--spec-type", "ngram", "--spec-ngram-size-n", "0", NULL};
    CHECK(test_spex_exec(bad2, &p));
    CHECK_MSG(p.rc == 2 && strstr(p.err, "--spec-ngram-size-n"), "exit %d: %s", p.rc, p.err);
    test_proc_free(&p);
}

/* draft-simple: a small model of the target's vocabulary drafts for every slot; the text equals
 * spex run's target-only text, /v1/models and /props name the type, and a request can turn
 * drafting off with speculative.n_max 0. */
TEST(draft_simple_speculation) {
    if (!test_spex_bin()) SKIP("no spex binary next to this test's folder");
    const char *a[] = {"-m", TINY_QWEN3, "-md", "tests/data/models/tiny-qwen3-q8_0.gguf", "--spec-type", "draft-simple",
                       "--spec-draft-n-max", "5", "-np", "2", "-c", "1024", "-t", "1", NULL};
    server s;
    CHECK_MSG(server_start(&s, a), "the server did not start");
    const char *prompts[3] = {"Hello", "The cat", "Once upon a time"};
    gen_result g[3];
    bool ok = true;
    for (int i = 0; i < 3; i++) ok = ok && gen(s.port, i == 1, prompts[i], 100, i == 2, NULL, &g[i]) && g[i].status == 200;
    resp r;
    bool models = http(s.port, "GET", "/v1/models", NULL, NULL, &r) && strstr(r.body, "\"type\":\"draft-simple\"");
    resp_free(&r);
    bool props = http(s.port, "GET", "/props", NULL, NULL, &r) && strstr(r.body, "draft-simple");
    resp_free(&r);
    bool clean = false;
    CHECK_EQ_INT(server_stop(&s, &clean), 0);
    CHECK(ok && clean && models && props);
    bool drafted = false;
    for (int i = 0; i < 3; i++) {
        char *want = expected(i == 1, prompts[i], 100);
        CHECK_MSG(want && !strcmp(want, g[i].text), "prompt %d: '%s' vs run '%s'", i, g[i].text, want ? want : "");
        free(want);
        drafted = drafted || g[i].has_draft;
    }
    CHECK_MSG(drafted, "no request drafted");
    const char *bad[] = {"serve", "-m", TINY_QWEN3, "--spec-type", "draft-simple", NULL};
    test_proc p;
    CHECK(test_spex_exec(bad, &p));
    CHECK_MSG(p.rc == 2 && strstr(p.err, "needs a drafter"), "exit %d: %s", p.rc, p.err);
    test_proc_free(&p);
}

/* llama.cpp's LLAMA_ARG_* variables, one of each class: a value (context, slots), a boolean
 * true and false (the /metrics and /slots endpoints), a flag without effect (-fa), the
 * speculative type; a flag on the command line wins over its variable; a bad value is a
 * start-up error that names the variable; `spex run` reads the variables it has flags for. */
TEST(llama_arg_environment) {
    if (!test_spex_bin()) SKIP("no spex binary next to this test's folder");
    setenv("LLAMA_ARG_N_PARALLEL", "3", 1);
    setenv("LLAMA_ARG_CTX_SIZE", "768", 1);
    setenv("LLAMA_ARG_ENDPOINT_METRICS", "1", 1);
    setenv("LLAMA_ARG_ENDPOINT_SLOTS", "off", 1);
    setenv("LLAMA_ARG_FLASH_ATTN", "on", 1);
    setenv("LLAMA_ARG_SPEC_TYPE", "ngram", 1);
    const char *a1[] = {"-m", TINY_QWEN3, "-t", "1", NULL};
    const char *a2[] = {"-m", TINY_QWEN3, "-t", "1", "-np", "2", NULL};
    server s;
    bool started = server_start(&s, a1);
    resp r;
    bool metrics = started && http(s.port, "GET", "/metrics", NULL, NULL, &r) && r.status == 200;
    if (started) resp_free(&r);
    bool slots_off = started && http(s.port, "GET", "/slots", NULL, NULL, &r) && r.status == 501;
    if (started) resp_free(&r);
    size_t len = 0;
    char *err = started ? test_slurp(s.err_path, &len) : NULL;
    bool logged = err && strstr(err, "ready: 3 slots x 256 tokens") && strstr(err, "note: -fa on: no effect") &&
                  strstr(err, "speculative: type ngram");
    if (!logged) printf("  stderr: %s\n", err ? err : "");
    free(err);
    bool clean = false;
    if (started) server_stop(&s, &clean);
    bool started2 = server_start(&s, a2);   /* -np 2 on the command line wins */
    err = started2 ? test_slurp(s.err_path, &len) : NULL;
    bool wins = err && strstr(err, "ready: 2 slots x 384 tokens");
    free(err);
    if (started2) server_stop(&s, &clean);
    setenv("LLAMA_ARG_CTX_SIZE", "lots", 1);
    const char *bad[] = {"serve", "-m", TINY_QWEN3, NULL};
    test_proc p;
    bool bad_ok = test_spex_exec(bad, &p) && p.rc == 2 && strstr(p.err, "-c") &&
                  strstr(p.err, "LLAMA_ARG_CTX_SIZE=lots");
    if (!bad_ok) printf("  bad value: exit %d %s\n", p.rc, p.err);
    test_proc_free(&p);
    unsetenv("LLAMA_ARG_CTX_SIZE");
    setenv("LLAMA_ARG_ENDPOINT_METRICS", "maybe", 1);
    bool bad_bool = test_spex_exec(bad, &p) && p.rc == 2 && strstr(p.err, "LLAMA_ARG_ENDPOINT_METRICS=maybe");
    test_proc_free(&p);
    const char *vars[] = {"LLAMA_ARG_N_PARALLEL", "LLAMA_ARG_ENDPOINT_METRICS", "LLAMA_ARG_ENDPOINT_SLOTS",
                          "LLAMA_ARG_FLASH_ATTN", "LLAMA_ARG_SPEC_TYPE"};
    for (int i = 0; i < 5; i++) unsetenv(vars[i]);
    setenv("LLAMA_ARG_N_PREDICT", "5", 1);
    const char *run[] = {"run", "-m", TINY_QWEN3, "-p", "Hello", "--temp", "0", "-t", "1", NULL};
    bool run_ok = test_spex_exec(run, &p) && p.rc == 0 && strstr(p.err, "generated: 5 tokens");
    if (!run_ok) printf("  run: exit %d %s\n", p.rc, p.err);
    test_proc_free(&p);
    unsetenv("LLAMA_ARG_N_PREDICT");
    CHECK(started && metrics && slots_off && logged);
    CHECK_MSG(started2 && wins, "the command line's -np did not win");
    CHECK(bad_ok);
    CHECK(bad_bool);
    CHECK(run_ok);
}

/* Draft bounds with llama.cpp's meaning: --spec-draft-n-max 0 drafts nothing (a note, no
 * drafter loaded, /props says none); an n-min above the draft length is clamped with a
 * warning, and the start-up line and /props give the clamped value. */
TEST(draft_bounds_llama_meaning) {
    if (!test_spex_bin()) SKIP("no spex binary next to this test's folder");
    const char *a0[] = {"-m", TINY_QWEN3, "-md", TINY_DRAFT2, "--spec-draft-n-max", "0", "-t", "1", NULL};
    const char *a9[] = {"-m", TINY_QWEN3, "-md", TINY_DRAFT2, "--spec-draft-n-min", "9", "-t", "1", NULL};
    server s;
    CHECK_MSG(server_start(&s, a0), "the server did not start");
    cJSON *o = get_json(s.port, "/props", NULL);
    bool none = o && !strcmp(jstr(o, "default_generation_settings/params/speculative.type"), "none");
    cJSON_Delete(o);
    size_t len = 0;
    char *err = test_slurp(s.err_path, &len);
    bool note = err && strstr(err, "note: --spec-draft-n-max 0: nothing is drafted") && !strstr(err, "speculative: type");
    free(err);
    bool clean = false;
    CHECK_EQ_INT(server_stop(&s, &clean), 0);
    CHECK(none && note);
    CHECK_MSG(server_start(&s, a9), "the server did not start");
    o = get_json(s.port, "/props", NULL);
    double n_min = o ? jnum(o, "default_generation_settings/params/speculative.n_min") : -1;
    double n_max = o ? jnum(o, "default_generation_settings/params/speculative.n_max") : -1;
    cJSON_Delete(o);
    err = test_slurp(s.err_path, &len);
    bool warned = err && strstr(err, "warning: --spec-draft-n-min 9 is above the draft length 7: clamped to 7") &&
                  strstr(err, "n_max 7, n_min 7");
    if (!warned) printf("  stderr: %s\n", err ? err : "");
    free(err);
    CHECK_EQ_INT(server_stop(&s, &clean), 0);
    CHECK(warned);
    CHECK_MSG(n_min == 7 && n_max == 7, "/props n_min %g n_max %g", n_min, n_max);
    size_t l1, l2;
    const char *r0[] = {"-m", TINY_QWEN3, "-md", TINY_DRAFT2, "-p", "Hello", "-n", "16", "--temp", "0", "-t", "1",
                        "--spec-draft-n-max", "0", NULL};
    const char *rp[] = {"-m", TINY_QWEN3, "-p", "Hello", "-n", "16", "--temp", "0", "-t", "1", NULL};
    char *t0 = spex_run(r0, &l1), *tp = spex_run(rp, &l2);
    CHECK(t0 && tp && !strcmp(t0, tp));
    free(t0);
    free(tp);
}

/* Request fields end to end on the shared server: a system message and a user message whose
 * content is an array of text parts equal `spex run --chat --system` with the parts joined by
 * "\n" (as llama.cpp and vLLM join them);
 * seeded sampling with top_k / top_p / min_p / penalties and drafting off for the request
 * (speculative.n_max 0) equals `spex run` with the same flags and seed. */
TEST(request_fields_system_parts_and_sampling) {
    REQUIRE_SERVER(port);
    const char *body1 =
        "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Why is\"},{\"type\":\"text\",\"text\":\"the sky blue?\"}]}],"
        "\"max_tokens\":24,\"temperature\":0}";
    cJSON *o = post_json(port, "/v1/chat/completions", body1, 200);
    const char *t1 = cJSON_GetStringValue(
        cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0), "message"), "content"));
    const char *r1[] = {"-m", TINY_QWEN3, "--chat", "--system", "Be brief.", "-p", "Why is\nthe sky blue?", "-n", "24",
                        "--temp", "0", "-t", "1", NULL};
    size_t wl;
    char *w1 = spex_run(r1, &wl);
    bool same1 = t1 && w1 && !strcmp(t1, w1);
    if (!same1) printf("  system+parts: server '%s'\n  run '%s'\n", t1 ? t1 : "(null)", w1 ? w1 : "(null)");
    cJSON_Delete(o);
    free(w1);
    const char *body2 =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a story\"}],\"max_tokens\":40,"
        "\"temperature\":0.9,\"top_k\":20,\"top_p\":0.9,\"min_p\":0.02,\"seed\":1234,\"repeat_penalty\":1.1,"
        "\"presence_penalty\":0.2,\"frequency_penalty\":0.1,\"speculative.n_max\":0}";
    o = post_json(port, "/v1/chat/completions", body2, 200);
    const char *t2 = cJSON_GetStringValue(
        cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0), "message"), "content"));
    const char *r2[] = {"-m", TINY_QWEN3, "--chat", "-p", "Tell me a story", "-n", "40", "--temp", "0.9", "--top-k", "20",
                        "--top-p", "0.9", "--min-p", "0.02", "--seed", "1234", "--repeat-penalty", "1.1",
                        "--presence-penalty", "0.2", "--frequency-penalty", "0.1", "-t", "1", NULL};
    char *w2 = spex_run(r2, &wl);
    bool same2 = t2 && w2 && !strcmp(t2, w2);
    if (!same2) printf("  sampled: server '%s'\n  run '%s'\n", t2 ? t2 : "(null)", w2 ? w2 : "(null)");
    char *t2c = t2 ? strdup(t2) : NULL;
    /* a different seed gives a different text (the seed is used, not ignored) */
    cJSON_Delete(o);
    char *body3 = strdup(body2);
    char *sp = strstr(body3, "1234");
    memcpy(sp, "4321", 4);
    o = post_json(port, "/v1/chat/completions", body3, 200);
    const char *t3 = cJSON_GetStringValue(
        cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0), "message"), "content"));
    bool differs = t3 && t2c && strcmp(t2c, t3);
    cJSON_Delete(o);
    free(t2c);
    free(body3);
    free(w2);
    CHECK(same1);
    CHECK(same2);
    CHECK(differs);
}

/* Per-request speculative.p_min and n_min (llama-server's fields) take effect as n_max does:
 * p_min 1 stops every walk at its first slot (no token is that certain), so nothing is drafted;
 * p_min 0 drafts; the text is the target's either way; bad values are 400s. */
TEST(per_request_draft_limits) {
    if (!test_spex_bin()) SKIP("no spex binary next to this test's folder");
    /* its own server: adaptive lengths off, so every step drafts what the limits allow (the
     * shared server's cost model may have stopped drafting after the other tests) */
    const char *a[] = {"-m", TINY_QWEN3, "-md", TINY_DRAFT2, "--spec-adaptive", "off", "-t", "1", NULL};
    server srv;
    CHECK_MSG(server_start(&srv, a), "the server did not start");
    const int port = srv.port;
    const char *b1 = "{\"prompt\":\"Hello\",\"n_predict\":24,\"temperature\":0,\"speculative.p_min\":1.0}";
    const char *b0 = "{\"prompt\":\"Hello\",\"n_predict\":24,\"temperature\":0,\"speculative.p_min\":0,"
                     "\"speculative.n_min\":0}";
    cJSON *o1 = post_json(port, "/completion", b1, 200), *o0 = post_json(port, "/completion", b0, 200);
    const char *t1 = cJSON_GetStringValue(cJSON_GetObjectItem(o1, "content"));
    const char *t0 = cJSON_GetStringValue(cJSON_GetObjectItem(o0, "content"));
    char *want = expected(false, "Hello", 24);
    const bool same = t1 && t0 && want && !strcmp(t1, want) && !strcmp(t0, want);
    const double d1 = jnum(o1, "timings/draft_n"), d0 = jnum(o0, "timings/draft_n");
    printf("  draft_n: p_min 1 -> %g, p_min 0 -> %g\n", d1, d0);
    cJSON_Delete(o1);
    cJSON_Delete(o0);
    free(want);
    static const char *const bad[] = {
        "{\"prompt\":\"Hi\",\"speculative.p_min\":1.5}",
        "{\"prompt\":\"Hi\",\"speculative.p_min\":\"x\"}",
        "{\"prompt\":\"Hi\",\"speculative.n_min\":-1}",
    };
    bool bad_ok = true;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        resp r;
        bool ok = http(port, "POST", "/completion", NULL, bad[i], &r) && is_error(&r, 400, "invalid_request_error") &&
                  strstr(r.body, "speculative.");
        resp_free(&r);
        if (!ok) printf("  not a 400 naming the field: %s\n", bad[i]);
        bad_ok = bad_ok && ok;
    }
    bool clean = false;
    CHECK_EQ_INT(server_stop(&srv, &clean), 0);
    CHECK(same);
    CHECK_MSG(!(d1 > 0) && d0 > 0, "p_min 1 drafted %g tokens, p_min 0 %g", d1, d0);
    CHECK(bad_ok);
}

/* The prompt /apply-template renders for one user message "Hi" on a server started with args;
 * NULL when the server does not start or answer. props: /props chat_template too (may be NULL). */
static char *applied_prompt(const char *const *args, char **props) {
    server s;
    if (!server_start(&s, args)) return NULL;
    cJSON *o = post_json(s.port, "/apply-template", "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}", 200);
    const char *p = cJSON_GetStringValue(cJSON_GetObjectItem(o, "prompt"));
    char *out = p ? strdup(p) : NULL;
    cJSON_Delete(o);
    if (props) {   /* /props chat_template: the template that renders */
        o = get_json(s.port, "/props", NULL);
        *props = cJSON_GetStringValue(cJSON_GetObjectItem(o, "chat_template")) ? strdup(jstr(o, "chat_template")) : NULL;
        cJSON_Delete(o);
    }
    bool clean = false;
    if (server_stop(&s, &clean) != 0) free(out), out = NULL;
    return out;
}

/* --chat-template-file renders chat prompts through that Jinja template; --jinja through the
 * GGUF's own (the shipped target's is Qwen3's, which must give the built-in renderer's text);
 * a template that does not parse stops the start with the template's line and column; /props
 * reports the file's template. */
TEST(jinja_templates) {
    if (!test_spex_bin()) SKIP("no spex binary next to this test's folder");
    char path[64], bad[64];
    snprintf(path, sizeof path, "/tmp/spex-test-%d.jinja", (int)getpid());
    snprintf(bad, sizeof bad, "/tmp/spex-test-bad-%d.jinja", (int)getpid());
    FILE *f = fopen(path, "w"), *fb = fopen(bad, "w");
    CHECK(f && fb);
    fputs("{%- for m in messages %}<{{ m.role }}>{{ m.content | upper }}</{{ m.role }}>{% endfor -%}\n"
          "{%- if add_generation_prompt %}<assistant>{% endif %}", f);
    fputs("{% for m in messages %}{{ m.content }", fb);
    fclose(f);
    fclose(fb);
    const char *af[] = {"-m", TINY_QWEN3, "-np", "1", "-t", "1", "--chat-template-file", path, NULL};
    char *tf = NULL, *pf = applied_prompt(af, &tf);
    const char *aj[] = {"-m", "models/target.gguf", "-np", "1", "-t", "1", "--jinja", NULL};
    const char *ab[] = {"-m", "models/target.gguf", "-np", "1", "-t", "1", NULL};
    char *pj = applied_prompt(aj, NULL), *pb = applied_prompt(ab, NULL);
    const char *xb[] = {"serve", "-m", TINY_QWEN3, "--chat-template-file", bad, NULL};
    test_proc rb;
    bool ran = test_spex_exec(xb, &rb);
    bool refused = ran && rb.rc != 0 && strstr(rb.err, "jinja: line 1");
    if (ran && !refused) printf("  bad template: rc %d: %s\n", rb.rc, rb.err);
    if (ran) test_proc_free(&rb);
    remove(path);
    remove(bad);
    printf("  file: %s\n  --jinja: %s\n", pf ? pf : "(null)", pj ? pj : "(null)");
    const bool file_ok = pf && !strcmp(pf, "<user>HI</user><assistant>") && tf && strstr(tf, "m.content | upper");
    free(tf);
    const bool gguf_ok = pj && pb && !strcmp(pj, pb) && strstr(pj, "<|im_start|>user\nHi<|im_end|>");
    free(pf);
    free(pj);
    free(pb);
    CHECK(file_ok);
    CHECK(gguf_ok);
    CHECK(refused);
}

/* -ctk / -ctv (the target's KV type): a bad type, or K and V apart, is a clear start-up error;
 * a Q8_0 cache serves (with a drafter), and the memory line names it. */
TEST(target_kv_type_flags) {
    const char *bad_kv[][8] = {{"serve", "-m", TINY_QWEN3, "-ctk", "q4_0", NULL},
                               {"serve", "-m", TINY_QWEN3, "-ctk", "f32", "--cache-type-v", "f16", NULL}};
    for (int i = 0; i < 2; i++) {
        test_proc rk;
        CHECK(test_spex_exec(bad_kv[i], &rk));
        CHECK_MSG(rk.rc == 2 && strstr(rk.err, i ? "differ" : "expects f16, f32 or q8_0"), "case %d: rc %d: %s", i,
                  rk.rc, rk.err);
        test_proc_free(&rk);
    }
    /* a Q8_0 cache with the drafter serves, and the memory line names it (test_run's
     * target_kv_type_flags checks its speculative text against the target alone) */
    if (!test_spex_bin()) SKIP("no spex binary next to this test's folder");
    server s;
    const char *a8[] = {"-m", TINY_QWEN3, "-md", TINY_DRAFT2, "-np", "1", "-t", "1", "-ctk", "q8_0", NULL};
    CHECK_MSG(server_start(&s, a8), "the q8_0 server did not start");
    size_t len = 0;
    char *err = test_slurp(s.err_path, &len);
    bool named = err && strstr(err, "target KV q8_0");
    free(err);
    gen_result g;
    bool ok = gen(s.port, false, "Once upon a time", 24, false, NULL, &g);
    bool clean = false;
    CHECK_EQ_INT(server_stop(&s, &clean), 0);
    CHECK(named && ok && clean && g.status == 200 && g.completion_tokens > 0);
}

/* --spec-draft-cut: a bad value is a start-up error; on (the default, as auto) and off both serve, and
 * the speculative start-up line names the setting. */
TEST(spec_draft_cut_flag) {
    const char *bad[] = {"serve", "-m", TINY_QWEN3, "-md", TINY_DRAFT2, "--spec-draft-cut", "maybe", NULL};
    test_proc rk;
    CHECK(test_spex_exec(bad, &rk));
    CHECK_MSG(rk.rc == 2 && strstr(rk.err, "expects on, off or auto"), "rc %d: %s", rk.rc, rk.err);
    test_proc_free(&rk);
    if (!test_spex_bin()) SKIP("no spex binary next to this test's folder");
    for (int off = 0; off < 2; off++) {
        server s;
        const char *a[] = {"-m", TINY_QWEN3, "-md", TINY_DRAFT2, "-np", "1", "-t", "1", "--metrics",
                           off ? "--spec-draft-cut" : NULL, "off", NULL};
        CHECK_MSG(server_start(&s, a), "the server did not start");
        size_t len = 0;
        char *err = test_slurp(s.err_path, &len);
        bool named = err && strstr(err, off ? "draft cut off" : "draft cut on");
        free(err);
        gen_result g;
        bool ok = gen(s.port, false, "Once upon a time", 24, false, NULL, &g);
        /* the engine's warm-up drafts full blocks every other step, and the cut's own warm-up
         * halves every other drafted block: with the cut on, some tokens are cut */
        resp r = {0};
        double cut = -1;
        bool got = http(s.port, "GET", "/metrics", NULL, NULL, &r) &&
                   metric_value(r.body, "spex:spec_cut_tokens_total", &cut);
        resp_free(&r);
        bool clean = false;
        CHECK_EQ_INT(server_stop(&s, &clean), 0);
        CHECK_MSG(named && ok && clean && g.status == 200 && g.completion_tokens > 0, "draft cut %s", off ? "off" : "on");
        CHECK_MSG(got && (off ? cut == 0 : cut > 0), "draft cut %s: spex:spec_cut_tokens_total %g", off ? "off" : "on",
                  cut);
    }
}

TEST(shutdown_clean) {
    REQUIRE_SERVER(port);
    (void)port;
    bool clean;
    int rc = shared_server_stop(&g_srv, &clean);
    CHECK_EQ_INT(rc, 0);
    CHECK(clean);
}

TEST_MAIN()

/* A recurrent (qwen35) target: a prompt diverging from the slot's cached one after 40 bytes
 * reuses those 40 positions — the state ring no longer holds them, so the slot is rewound
 * from a checkpoint or by replay (docs/speculative.md) — and the text equals a fresh server's. */
TEST(qwen35_prefix_reuse_by_rewind) {
    const char *t = "tests/data/qwen35/tiny-qwen35.gguf", *d = "tests/data/qwen35/tiny-qwen35.dflash2.gguf";
    if (access(t, R_OK) || access(d, R_OK)) SKIP("tests/data/qwen35 fixtures missing");
    const char *p1 = "A shared beginning of forty bytes, wow: and then one way";
    const char *p2 = "A shared beginning of forty bytes, wow: but another way round";
    const char *a[] = {"-m", t, "-md", d, "-np", "1", "-c", "512", "-t", "2", "--ctx-checkpoints", "4",
                       "--checkpoint-min-step", "8", NULL};
    server s, f;
    CHECK_MSG(server_start(&s, a), "the server did not start");
    gen_result r1, r2;
    bool ok = gen(s.port, false, p1, 12, false, NULL, &r1) && gen(s.port, false, p2, 12, false, NULL, &r2);
    bool clean = false;
    CHECK_EQ_INT(server_stop(&s, &clean), 0);
    CHECK(ok && clean && r1.status == 200 && r2.status == 200);
    CHECK_MSG(server_start(&f, a), "the fresh server did not start");
    gen_result fr;
    ok = gen(f.port, false, p2, 12, false, NULL, &fr);
    CHECK_EQ_INT(server_stop(&f, &clean), 0);
    CHECK(ok && fr.status == 200);
    printf("  second prompt: cache_n %ld, prompt_n %ld of %ld tokens\n", r2.cache_n, r2.prompt_n, r2.prompt_tokens);
    CHECK_EQ_INT(r2.cache_n, 40);   /* byte tokenizer: one token per byte */
    CHECK_MSG(!strcmp(r2.text, fr.text), "reused '%s' vs fresh '%s'", r2.text, fr.text);
}

/* --spec-type draft-mtp on a qwen35 target with an MTP block: greedy texts equal a server
 * without speculation, draft counts in timings, and draft-mtp with -md is refused. */
TEST(qwen35_draft_mtp) {
    const char *t = "tests/data/qwen35/tiny-qwen35.gguf";
    if (access(t, R_OK)) SKIP("tests/data/qwen35 fixtures missing");
    const char *am[] = {"-m", t, "--spec-type", "draft-mtp", "-np", "2", "-c", "512", "-t", "2", NULL};
    const char *an[] = {"-m", t, "-np", "2", "-c", "512", "-t", "2", NULL};
    const char *prompts[2] = {"The MTP block drafts three tokens", "and the target verifies them"};
    gen_result gm[2], gn[2];
    server s;
    CHECK_MSG(server_start(&s, am), "the draft-mtp server did not start");
    bool ok = gen(s.port, false, prompts[0], 20, false, NULL, &gm[0]) && gen(s.port, false, prompts[1], 20, true, NULL, &gm[1]);
    bool clean = false;
    CHECK_EQ_INT(server_stop(&s, &clean), 0);
    CHECK(ok && clean && gm[0].status == 200 && gm[1].status == 200);
    CHECK_MSG(server_start(&s, an), "the plain server did not start");
    ok = gen(s.port, false, prompts[0], 20, false, NULL, &gn[0]) && gen(s.port, false, prompts[1], 20, true, NULL, &gn[1]);
    CHECK_EQ_INT(server_stop(&s, &clean), 0);
    CHECK(ok);
    for (int i = 0; i < 2; i++) CHECK_MSG(!strcmp(gm[i].text, gn[i].text), "prompt %d: '%s' vs '%s'", i, gm[i].text, gn[i].text);
    CHECK(gm[0].has_draft);
    /* -md together with draft-mtp: a clear start-up error */
    const char *bad[] = {"serve", "-m", t, "--spec-type", "draft-mtp", "-md", "tests/data/qwen35/tiny-qwen35.dflash2.gguf",
                         NULL};
    test_proc r;
    CHECK(test_spex_exec(bad, &r));
    CHECK(r.rc == 2 && strstr(r.err, "draft-mtp"));
    test_proc_free(&r);
}
