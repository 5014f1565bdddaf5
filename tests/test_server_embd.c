/*
 * test_server_embd.c — `spex serve --embedding` end to end over raw HTTP: POST /v1/embeddings
 * (OpenAI's shape), /embeddings and /embedding (llama-server's), on tiny-qwen3 and tiny-qwen35.
 *
 * What it checks: each input form (a string, token ids, an array of strings and id arrays; the
 * same text as a string and as its /tokenize ids gives the same vector), usage
 * counts, the model echo, encoding_format base64 (the float32 bytes of the float response),
 * every pooling kind (mean by --pooling, cls by LLAMA_ARG_EMBEDDINGS / LLAMA_ARG_POOLING, last
 * from the file's <arch>.pooling_type,
 * none: the model's default without the key, one unnormalised row per token on /embedding and
 * 400 on /v1/embeddings, as llama-server) and embd_normalize -1 / 0 / 1 / 2 / 3, all against
 * the float64 reference's tests/data/embd_golden.txt (tools/ref/embd_ref.py; tolerance as
 * test_embd's for the shipped files: cosine > 0.9999, max |diff| <= 2% of the largest value);
 * the errors (501 without --embedding, 400 for bad JSON, missing or empty input, wrong types,
 * mixed arrays, ids outside the vocabulary, an input longer than -b, too many inputs, a bad
 * encoding_format or embd_normalize, 405 for GET), start-up errors (--pooling rank, an unknown
 * pooling), and a greedy completion on a slowed engine that keeps its text while
 * embeddings requests are answered between its steps. What it is not: the model-level comparison (test_embd.c).
 */
#include "spex.h"
#include "gguf_fixtures.h"
#include "srv_client.h"
#include "test.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TINY_QWEN3 "tests/data/models/tiny-qwen3.gguf"
#define TINY_QWEN35 "tests/data/qwen35/tiny-qwen35.gguf"
#define GOLDEN "tests/data/embd_golden.txt"
#define E 64

static shared_server g_mean, g_none, g_plain;

static int mean_port(void) {
    const char *a[] = {"-m", TINY_QWEN3, "--embedding", "--pooling", "mean", "-np", "2", "-b", "64", "-t", "1", NULL};
    return shared_server_port(&g_mean, a);
}
static int none_port(void) {
    const char *a[] = {"-m", TINY_QWEN3, "--embeddings", "-np", "1", "-t", "1", NULL};
    return shared_server_port(&g_none, a);
}
static int plain_port(void) {
    const char *a[] = {"-m", TINY_QWEN3, "-np", "1", "-t", "1", NULL};
    return shared_server_port(&g_plain, a);
}

/* ---- helpers ---------------------------------------------------------------------------- */

/* The floats of golden case "case LINE" under "model PATH"; its count, or -1. */
static int golden(const char *model, const char *line, float *out, int cap) {
    size_t len = 0;
    char *t = test_slurp(GOLDEN, &len);
    if (!t) return -1;
    char head[256], want[256];
    snprintf(head, sizeof head, "\nmodel %s\n", model);
    snprintf(want, sizeof want, "\ncase %s\n", line);
    char *m = strstr(t, head), *c = m ? strstr(m, want) : NULL, *next = m ? strstr(m + 1, "\nmodel ") : NULL;
    int n = -1;
    if (c && (!next || c < next) && !strncmp(c + strlen(want), "vec ", 4)) {
        char *p = c + strlen(want) + 4;
        n = (int)strtol(p, &p, 10);
        for (int i = 0; i < n && i < cap; i++) out[i] = strtof(p, &p);
    }
    free(t);
    return n;
}

static bool close_to(const float *got, const float *ref, int n, const char *what) {
    double ab = 0, aa = 0, bb = 0, d = 0, mx = 0;
    for (int i = 0; i < n; i++) {
        ab += (double)got[i] * ref[i], aa += (double)got[i] * got[i], bb += (double)ref[i] * ref[i];
        d = fmax(d, fabs((double)got[i] - ref[i])), mx = fmax(mx, fabs((double)ref[i]));
    }
    const double cs = aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 0;
    if (cs > 0.9999 && d <= 0.02 * mx) return true;
    printf("  %s: cosine %.8f, max |diff| %.3g of max |ref| %.3g\n", what, cs, d, mx);
    return false;
}

/* n floats of a JSON array into out; the count, or -1. */
static int floats(const cJSON *a, float *out, int cap) {
    if (!cJSON_IsArray(a)) return -1;
    int n = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, a) {
        if (!cJSON_IsNumber(v) || n >= cap) return -1;
        out[n++] = (float)v->valuedouble;
    }
    return n;
}

static cJSON *post(int port, const char *path, const char *body, int *status) {
    resp r;
    if (!http(port, "POST", path, NULL, body, &r)) return NULL;
    *status = r.status;
    cJSON *o = cJSON_Parse(r.body);
    if (r.status != 200) printf("  %s %s -> %d %s\n", path, body, r.status, r.body);
    resp_free(&r);
    return o;
}

/* data[i].embedding of an OpenAI response into out (E floats). */
static bool oai_vec(const cJSON *o, int i, float *out) {
    const cJSON *d = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "data"), i);
    return d && cJSON_GetObjectItem(d, "index") && cJSON_GetObjectItem(d, "index")->valueint == i &&
           !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(d, "object")), "embedding") &&
           floats(cJSON_GetObjectItem(d, "embedding"), out, E) == E;
}

/* One OpenAI request of one input; its vector. */
static bool embed1(int port, const char *body, float *out) {
    int st = 0;
    cJSON *o = post(port, "/v1/embeddings", body, &st);
    bool ok = o && st == 200 && oai_vec(o, 0, out);
    cJSON_Delete(o);
    return ok;
}

static int error_of(int port, const char *method, const char *path, const char *body, const char *needle) {
    resp r;
    if (!http(port, method, path, NULL, body, &r)) return -1;
    int st = r.status;
    if (needle && !strstr(r.body, needle)) printf("  %s %s: '%s' not in %s\n", path, body ? body : "", needle, r.body), st = -2;
    if (st >= 400 && !is_error(&r, r.status, NULL)) st = -3;
    resp_free(&r);
    return st;
}

/* ---- tests ------------------------------------------------------------------------------ */

TEST(without_embedding_flag_501) {
    REQUIRE_SERVER_FROM(port, plain_port);
    const char *paths[] = {"/v1/embeddings", "/embeddings", "/embedding"};
    for (int i = 0; i < 3; i++)
        CHECK_EQ_INT(error_of(port, "POST", paths[i], "{\"input\":\"hi\"}", "Start it with `--embeddings`"), 501);
    bool clean;
    CHECK_EQ_INT(shared_server_stop(&g_plain, &clean), 0);
    CHECK(clean);
}

TEST(openai_shape_usage_and_model) {
    REQUIRE_SERVER_FROM(port, mean_port);
    int st = 0;
    cJSON *o = post(port, "/v1/embeddings", "{\"input\":\"Hello world\"}", &st);
    CHECK(o && st == 200);
    float v[E];
    bool shape = oai_vec(o, 0, v) && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(o, "object")), "list") &&
                 cJSON_GetArraySize(cJSON_GetObjectItem(o, "data")) == 1 &&
                 !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(o, "model")), TINY_QWEN3);
    const cJSON *u = cJSON_GetObjectItem(o, "usage");
    int pt = cJSON_GetObjectItem(u, "prompt_tokens") ? cJSON_GetObjectItem(u, "prompt_tokens")->valueint : -1;
    int tt = cJSON_GetObjectItem(u, "total_tokens") ? cJSON_GetObjectItem(u, "total_tokens")->valueint : -1;
    cJSON_Delete(o);
    CHECK(shape);
    double nn = 0;
    for (int i = 0; i < E; i++) nn += (double)v[i] * v[i];
    CHECK_NEAR(sqrt(nn), 1.0, 1e-5);   /* euclidean by default */
    o = post(port, "/tokenize", "{\"content\":\"Hello world\"}", &st);
    int n_tok = cJSON_GetArraySize(cJSON_GetObjectItem(o, "tokens"));
    cJSON_Delete(o);
    CHECK(n_tok > 0);
    CHECK_EQ_INT(pt, n_tok);
    CHECK_EQ_INT(tt, n_tok);
    o = post(port, "/v1/embeddings", "{\"input\":[1,2],\"model\":\"my-embedder\"}", &st);
    bool echo = o && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(o, "model")), "my-embedder");
    cJSON_Delete(o);
    CHECK(echo);
}

TEST(ids_and_normalisations_match_the_reference) {
    REQUIRE_SERVER_FROM(port, mean_port);
    float got[E], ref[E];
    CHECK(embed1(port, "{\"input\":[1,2,3,4,5,6,7]}", got));
    CHECK_EQ_INT(golden(TINY_QWEN3, "mean 2 7 1 2 3 4 5 6 7", ref, E), E);
    CHECK(close_to(got, ref, E, "mean of 7 ids"));
    const int norms[4] = {-1, 0, 1, 3};
    for (int k = 0; k < 4; k++) {
        char body[128], line[64];
        snprintf(body, sizeof body, "{\"input\":[10,20,30],\"embd_normalize\":%d}", norms[k]);
        snprintf(line, sizeof line, "mean %d 3 10 20 30", norms[k]);
        CHECK(embed1(port, body, got));
        CHECK_EQ_INT(golden(TINY_QWEN3, line, ref, E), E);
        CHECK_MSG(close_to(got, ref, E, line), "embd_normalize %d", norms[k]);
    }
}

TEST(batch_of_inputs_text_equals_its_ids_and_base64) {
    REQUIRE_SERVER_FROM(port, mean_port);
    int st = 0;
    cJSON *o = post(port, "/tokenize", "{\"content\":\"Hello world\"}", &st);
    char *ids = cJSON_PrintUnformatted(cJSON_GetObjectItem(o, "tokens"));
    cJSON_Delete(o);
    CHECK(ids);
    char body[512];
    snprintf(body, sizeof body, "{\"input\":[\"Hello world\",[10,20,30],%s,\"Hello world\"]}", ids);
    o = post(port, "/v1/embeddings", body, &st);
    float v[4][E], one[E];
    bool ok = o && st == 200 && cJSON_GetArraySize(cJSON_GetObjectItem(o, "data")) == 4;
    for (int i = 0; ok && i < 4; i++) ok = oai_vec(o, i, v[i]);
    int pt = o ? cJSON_GetObjectItem(cJSON_GetObjectItem(o, "usage"), "prompt_tokens")->valueint : -1;
    cJSON_Delete(o);
    CHECK(ok);
    /* text == its ids; batched with others == alone (other forwards: the fp32 rounding of
     * another batch shape) */
    CHECK(test_max_diff(v[0], v[2], E) <= 1e-6 && test_max_diff(v[0], v[3], E) <= 1e-6);
    CHECK(embed1(port, "{\"input\":[10,20,30]}", one));
    CHECK(test_max_diff(one, v[1], E) <= 1e-5);
    o = post(port, "/tokenize", "{\"content\":\"Hello world\"}", &st);
    int n_tok = cJSON_GetArraySize(cJSON_GetObjectItem(o, "tokens"));
    cJSON_Delete(o);
    CHECK_EQ_INT(pt, 3 * n_tok + 3);
    /* base64: the little-endian float32 bytes of the float answer */
    snprintf(body, sizeof body, "{\"input\":%s,\"encoding_format\":\"base64\"}", ids);
    free(ids);
    o = post(port, "/v1/embeddings", body, &st);
    const char *b64 = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "data"), 0), "embedding"));
    unsigned char bytes[E * 4 + 3];
    size_t nb = 0;
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; b64 && b64[i] && b64[i + 1] && b64[i + 2] && b64[i + 3]; i += 4) {
        uint32_t w = 0;
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            const char *p = b64[i + k] == '=' ? NULL : strchr(A, b64[i + k]);
            pad += !p;
            w = w << 6 | (uint32_t)(p ? p - A : 0);
        }
        for (int k = 0; k < 3 - pad && nb < sizeof bytes; k++) bytes[nb++] = (unsigned char)(w >> (16 - 8 * k));
    }
    cJSON_Delete(o);
    CHECK_EQ_INT(nb, E * 4);
    for (int i = 0; i < E; i++) {
        uint32_t u = (uint32_t)bytes[4 * i] | (uint32_t)bytes[4 * i + 1] << 8 | (uint32_t)bytes[4 * i + 2] << 16 |
                     (uint32_t)bytes[4 * i + 3] << 24;
        float f;
        memcpy(&f, &u, 4);
        CHECK_MSG(f == v[0][i], "element %d: base64 %.9g, float %.9g", i, f, v[0][i]);
    }
}

/* 25 inputs of 1 .. 25 tokens (325 in all: several forwards of up to 8 inputs and 64 tokens,
 * over two engine iterations): each in its place, each equal to the same input alone. */
TEST(many_inputs_across_forwards) {
    REQUIRE_SERVER_FROM(port, mean_port);
    char body[4096] = "{\"input\":[", one[256];
    for (int i = 0; i < 25; i++) {
        strcat(body, i ? ",[" : "[");
        for (int t = 0; t <= i; t++) snprintf(body + strlen(body), 16, t ? ",%d" : "%d", (7 * i + 3 * t) % 256);
        strcat(body, "]");
    }
    strcat(body, "]}");
    int st = 0;
    cJSON *o = post(port, "/v1/embeddings", body, &st);
    CHECK(o && st == 200 && cJSON_GetArraySize(cJSON_GetObjectItem(o, "data")) == 25);
    CHECK_EQ_INT(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "usage"), "prompt_tokens")->valueint, 325);
    bool ok = true;
    for (int i = 0; ok && i < 25; i++) {
        float v[E], w[E];
        strcpy(one, "{\"input\":[");
        for (int t = 0; t <= i; t++) snprintf(one + strlen(one), 16, t ? ",%d" : "%d", (7 * i + 3 * t) % 256);
        strcat(one, "]}");
        ok = oai_vec(o, i, v) && embed1(port, one, w) && test_max_diff(v, w, E) <= 1e-5;
        if (!ok) printf("  input %d differs\n", i);
    }
    cJSON_Delete(o);
    CHECK(ok);
}

TEST(llama_server_shapes) {
    REQUIRE_SERVER_FROM(port, mean_port);
    float ref[E], got[E];
    CHECK(embed1(port, "{\"input\":[10,20,30]}", ref));
    const char *cases[][2] = {{"/embedding", "{\"content\":[10,20,30]}"},
                              {"/embeddings", "{\"input\":[[10,20,30],[10,20,30]]}"},
                              {"/v1/embeddings", "{\"content\":[10,20,30]}"}};   /* "content": the native shape */
    for (int k = 0; k < 3; k++) {
        int st = 0;
        cJSON *o = post(port, cases[k][0], cases[k][1], &st);
        bool ok = o && st == 200 && cJSON_IsArray(o) && cJSON_GetArraySize(o) == (k == 1 ? 2 : 1);
        for (int i = 0; ok && i < cJSON_GetArraySize(o); i++) {
            const cJSON *d = cJSON_GetArrayItem(o, i), *rows = cJSON_GetObjectItem(d, "embedding");
            ok = cJSON_GetObjectItem(d, "index")->valueint == i && cJSON_GetArraySize(rows) == 1 &&
                 floats(cJSON_GetArrayItem(rows, 0), got, E) == E && test_max_diff(got, ref, E) <= 1e-5;
        }
        cJSON_Delete(o);
        CHECK_MSG(ok, "%s %s", cases[k][0], cases[k][1]);
    }
}

TEST(request_errors) {
    REQUIRE_SERVER_FROM(port, mean_port);
    char *many = malloc(2049 * 4 + 32), *longest = malloc(65 * 4 + 32);
    CHECK(many && longest);
    strcpy(many, "{\"input\":[");
    for (int i = 0; i < 2049; i++) strcat(many, i ? ",\"a\"" : "\"a\"");
    strcat(many, "]}");
    strcpy(longest, "{\"input\":[");
    for (int i = 0; i < 65; i++) strcat(longest, i ? ",5" : "5");
    strcat(longest, "]}");
    const struct {
        const char *path, *body, *needle;
        int code;
    } cases[] = {
        {"/v1/embeddings", "{\"input\":", "malformed JSON", 400},
        {"/v1/embeddings", "[1]", "JSON object", 400},
        {"/v1/embeddings", "{\"prompt\":\"hi\"}", "\\\"input\\\" or \\\"content\\\" must be provided", 400},
        {"/v1/embeddings", "{\"input\":5}", "'input' must be", 400},
        {"/v1/embeddings", "{\"input\":{\"a\":1}}", "'input' must be", 400},
        {"/v1/embeddings", "{\"input\":[]}", "empty array", 400},
        {"/v1/embeddings", "{\"input\":\"\"}", "Input content cannot be empty", 400},
        {"/v1/embeddings", "{\"input\":[\"a\",[]]}", "input 1: Input content cannot be empty", 400},
        {"/v1/embeddings", "{\"input\":[\"a\",5]}", "mixes strings and token ids", 400},
        {"/v1/embeddings", "{\"input\":[\"a\",null]}", "input 1 must be a string or an array of token ids", 400},
        {"/v1/embeddings", "{\"input\":[1,-2]}", "integer in 0 .. 2147483647", 400},
        {"/v1/embeddings", "{\"input\":[1,2.5]}", "integer in 0 .. 2147483647", 400},
        {"/v1/embeddings", "{\"input\":[1,256]}", "token id 256 is outside the vocabulary (0 .. 255)", 400},
        {"/v1/embeddings", longest, "input 0 (65 tokens) is too large to process", 400},
        {"/v1/embeddings", longest, "--batch-size 64", 400},
        {"/v1/embeddings", many, "2049 inputs, at most 2048", 400},
        {"/v1/embeddings", "{\"input\":\"a\",\"encoding_format\":\"hex\"}", "encoding_format", 400},
        {"/v1/embeddings", "{\"input\":\"a\",\"encoding_format\":1}", "encoding_format", 400},
        {"/v1/embeddings", "{\"input\":\"a\",\"embd_normalize\":\"2\"}", "embd_normalize", 400},
        {"/v1/embeddings", "{\"input\":\"a\",\"embd_normalize\":1.5}", "embd_normalize", 400},
        {"/v1/embeddings", "{\"input\":\"a\",\"model\":7}", "'model' must be a string", 400},
        {"/embedding", "{\"content\":[300]}", "outside the vocabulary", 400},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int st = error_of(port, "POST", cases[i].path, cases[i].body, cases[i].needle);
        if (st != cases[i].code) free(many), free(longest);
        CHECK_MSG(st == cases[i].code, "case %zu: %d, expected %d", i, st, cases[i].code);
    }
    free(many);
    free(longest);
    CHECK_EQ_INT(error_of(port, "GET", "/v1/embeddings", NULL, "allowed: POST"), 405);
    float v[E];
    CHECK(embed1(port, "{\"input\":\"still serving\"}", v));
}

typedef struct gen_arg {
    int port;
    char *text;
    atomic_bool done;
} gen_arg;

static char *complete(int port) {
    int st = 0;
    cJSON *o = post(port, "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":40,\"temperature\":0}", &st);
    const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0), "text"));
    char *s = t && st == 200 ? strdup(t) : NULL;
    cJSON_Delete(o);
    return s;
}

static void *gen_thread(void *p) {
    gen_arg *g = p;
    g->text = complete(g->port);
    atomic_store(&g->done, true);
    return NULL;
}

/* On a server whose engine steps are slowed to 25 ms (the test harness), a 40-token greedy
 * completion takes about a second; embeddings requests sent meanwhile are answered between its
 * steps (before it ends), give the vector they give on an idle server, and the completion's
 * text is the one it has alone. */
TEST(generation_runs_beside_embeddings) {
    if (!test_spex_bin()) SKIP("no spex binary next to this test's folder");
    const char *a[] = {"-m", TINY_QWEN3, "--embedding", "--pooling", "mean", "-np", "2", "-t", "1", "--metrics", NULL};
    server s;
    CHECK(server_start_slowed(&s, 25, a));
    char *want = complete(s.port);
    float first[E], v[E];
    bool ok = want && *want && embed1(s.port, "{\"input\":\"The same text every time\"}", first);
    gen_arg g = {.port = s.port};
    atomic_init(&g.done, false);
    pthread_t th;
    ok = ok && pthread_create(&th, NULL, gen_thread, &g) == 0;
    bool same = true, during = false;
    usleep(100 * 1000);   /* the completion is running */
    for (int i = 0; ok && i < 5; i++) {
        same = same && embed1(s.port, "{\"input\":\"The same text every time\"}", v) && !memcmp(v, first, sizeof v);
        during = during || !atomic_load(&g.done);
    }
    if (ok) pthread_join(th, NULL);
    /* /metrics: six embeddings requests of the same tokens; none cancelled */
    double n_embd = -1, n_tok = -1, n_cancel = -1;
    resp r;
    if (http(s.port, "GET", "/metrics", NULL, NULL, &r)) {
        metric_value(r.body, "spex:embeddings_requests_total", &n_embd);
        metric_value(r.body, "spex:embeddings_tokens_total", &n_tok);
        metric_value(r.body, "spex:requests_cancelled_total", &n_cancel);
        resp_free(&r);
    }
    const bool metrics_ok = n_embd == 6 && n_tok > 0 && fmod(n_tok, 6) == 0 && n_cancel == 0;
    if (!metrics_ok) printf("  embeddings %g, tokens %g, cancelled %g\n", n_embd, n_tok, n_cancel);
    /* a client that leaves while its large batch waits behind a running completion is cancelled:
     * the job is dropped (counted cancelled, not computed) */
    free(g.text);
    g.text = NULL;
    atomic_store(&g.done, false);
    bool cancel_ok = pthread_create(&th, NULL, gen_thread, &g) == 0;
    usleep(100 * 1000);
    size_t cap = 128 * 300 + 64;
    char *big = malloc(cap);
    size_t n = (size_t)snprintf(big, cap, "{\"input\":[");
    for (int i = 0; i < 128; i++)
        n += (size_t)snprintf(big + n, cap - n, "%s\"%d once upon a time there was a little girl who liked to "
                              "play in the garden with her dog and her cat every single day\"", i ? "," : "", i);
    snprintf(big + n, cap - n, "]}");
    int fd = open_request(s.port, "POST", "/v1/embeddings", NULL, big);
    free(big);
    usleep(60 * 1000);
    if (fd >= 0) close(fd);
    double c2 = -1, e2 = -1;
    for (int i = 0; cancel_ok && i < 50 && c2 < 1; i++) {
        usleep(100 * 1000);
        if (!http(s.port, "GET", "/metrics", NULL, NULL, &r)) continue;
        metric_value(r.body, "spex:requests_cancelled_total", &c2);
        metric_value(r.body, "spex:embeddings_requests_total", &e2);
        resp_free(&r);
    }
    if (cancel_ok) pthread_join(th, NULL);
    cancel_ok = cancel_ok && fd >= 0 && c2 == 1 && e2 == 6;
    if (!cancel_ok) printf("  after the hang-up: cancelled %g, embeddings %g\n", c2, e2);
    bool text_same = g.text && want && !strcmp(g.text, want);
    if (!text_same) printf("  alone '%s'\n  beside '%s'\n", want ? want : "(null)", g.text ? g.text : "(null)");
    free(want);
    free(g.text);
    bool clean;
    int rc = server_stop(&s, &clean);
    CHECK(ok);
    CHECK(same);
    CHECK_MSG(during, "no embeddings request was answered while the completion ran");
    CHECK(metrics_ok);
    CHECK(cancel_ok);
    CHECK(text_same);
    CHECK_EQ_INT(rc, 0);
    CHECK(clean);
}

TEST(mean_server_stops_clean) {
    REQUIRE_SERVER_FROM(port, mean_port);
    (void)port;
    bool clean;
    CHECK_EQ_INT(shared_server_stop(&g_mean, &clean), 0);
    CHECK(clean);
}

TEST(pooling_none_by_default) {
    REQUIRE_SERVER_FROM(port, none_port);
    CHECK_EQ_INT(error_of(port, "POST", "/v1/embeddings", "{\"input\":\"hi\"}", "Pooling type 'none' is not OAI compatible"),
                 400);
    float ref[3 * E], got[E];
    CHECK_EQ_INT(golden(TINY_QWEN3, "none -1 3 5 6 7", ref, 3 * E), 3 * E);
    /* one row per token, not normalised (embd_normalize is ignored with pooling none) */
    int st = 0;
    cJSON *o = post(port, "/embedding", "{\"content\":[5,6,7],\"embd_normalize\":2}", &st);
    const cJSON *rows = cJSON_GetObjectItem(cJSON_GetArrayItem(o, 0), "embedding");
    bool ok = st == 200 && cJSON_GetArraySize(rows) == 3;
    for (int r = 0; ok && r < 3; r++) {
        char what[32];
        snprintf(what, sizeof what, "token row %d", r);
        ok = floats(cJSON_GetArrayItem(rows, r), got, E) == E && close_to(got, ref + r * E, E, what);
    }
    cJSON_Delete(o);
    CHECK(ok);
    /* two inputs: 3 and 2 rows; [5,6] is a prefix of [5,6,7], so causal attention gives it
     * the same two rows */
    o = post(port, "/embedding", "{\"content\":[[5,6,7],[5,6]]}", &st);
    const cJSON *r0 = cJSON_GetObjectItem(cJSON_GetArrayItem(o, 0), "embedding");
    const cJSON *r1 = cJSON_GetObjectItem(cJSON_GetArrayItem(o, 1), "embedding");
    ok = st == 200 && cJSON_GetArraySize(o) == 2 && cJSON_GetArraySize(r0) == 3 && cJSON_GetArraySize(r1) == 2 &&
         cJSON_GetObjectItem(cJSON_GetArrayItem(o, 1), "index")->valueint == 1;
    for (int r = 0; ok && r < 2; r++) {
        float a[E], b[E];
        ok = floats(cJSON_GetArrayItem(r0, r), a, E) == E && floats(cJSON_GetArrayItem(r1, r), b, E) == E &&
             test_max_diff(a, b, E) <= 1e-5;
    }
    cJSON_Delete(o);
    CHECK(ok);
    bool clean;
    CHECK_EQ_INT(shared_server_stop(&g_none, &clean), 0);
    CHECK(clean);
}

/* A server of its own: args after -m MODEL; checks the vector of ids against golden LINE. */
static bool one_server_case(const char *model, const char *const *args, const char *ids, const char *gmodel,
                            const char *line, const char *log_needle) {
    const char *a[16] = {"-m", model};
    int n = 2;
    for (int i = 0; args[i] && n < 15; i++) a[n++] = args[i];
    a[n] = NULL;
    server s;
    if (!server_start(&s, a)) return printf("  the server did not start\n"), false;
    char body[128];
    snprintf(body, sizeof body, "{\"input\":%s}", ids);
    float got[E], ref[E];
    bool ok = embed1(s.port, body, got) && golden(gmodel, line, ref, E) == E && close_to(got, ref, E, line);
    size_t len = 0;
    char *err = test_slurp(s.err_path, &len);
    if (log_needle && !(err && strstr(err, log_needle))) printf("  '%s' not in the log\n", log_needle), ok = false;
    free(err);
    bool clean;
    ok = server_stop(&s, &clean) == 0 && clean && ok;
    return ok;
}

TEST(pooling_from_the_file_and_flags) {
    if (!test_spex_bin()) SKIP("no spex binary next to this test's folder");
    const char *path = test_tmp_path("tiny-qwen3-last.gguf");
    CHECK(test_write_with_u32(TINY_QWEN3, path, "qwen3.pooling_type", 3));
    const char *last[] = {"--embedding", "-np", "1", "-t", "1", NULL};
    CHECK(one_server_case(path, last, "[200,17,31,4]", TINY_QWEN3, "last 2 4 200 17 31 4", "pooling last (the model's)"));
    /* llama.cpp's variables for the two flags (tools/env.c) */
    setenv("LLAMA_ARG_EMBEDDINGS", "1", 1);
    setenv("LLAMA_ARG_POOLING", "cls", 1);
    const char *cls[] = {"-np", "1", "-t", "1", NULL};
    bool cls_ok = one_server_case(TINY_QWEN3, cls, "[9,8]", TINY_QWEN3, "cls 2 2 9 8", "pooling cls (--pooling)");
    unsetenv("LLAMA_ARG_EMBEDDINGS");
    unsetenv("LLAMA_ARG_POOLING");
    CHECK(cls_ok);
    const char *q35[] = {"--embedding", "--pooling", "last", "-np", "1", "-t", "1", NULL};
    CHECK(one_server_case(TINY_QWEN35, q35, "[100,50,25]", TINY_QWEN35, "last 2 3 100 50 25", NULL));
    unlink(path);
}

TEST(startup_errors) {
    if (!test_spex_bin()) SKIP("no spex binary next to this test's folder");
    test_proc p;
    const char *rank[] = {"serve", "-m", TINY_QWEN3, "--embedding", "--pooling", "rank", "--port", "0", NULL};
    CHECK(test_spex_exec(rank, &p));
    bool ok = p.rc != 0 && strstr(p.err, "needs a model with a classification head");
    if (!ok) printf("  rc %d: %s\n", p.rc, p.err);
    test_proc_free(&p);
    CHECK(ok);
    const char *bad[] = {"serve", "-m", TINY_QWEN3, "--pooling", "max", NULL};
    CHECK(test_spex_exec(bad, &p));
    ok = p.rc == 2 && strstr(p.err, "--pooling 'max'");
    if (!ok) printf("  rc %d: %s\n", p.rc, p.err);
    test_proc_free(&p);
    CHECK(ok);
}

TEST_MAIN()
