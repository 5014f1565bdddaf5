/*
 * test_server_node.c — `spex serve` with a real client: the official `openai` npm package
 * (tests/node, pinned in its package-lock; `.ci/run` installs it with `npm ci`) talks to a
 * server on a free loopback port running the default pair models/target.gguf +
 * models/drafter.gguf with -np 4 (docs/server.md, "Tests").
 *
 * What it checks: tests/node/openai_chat.mjs — a non-streaming and a streaming chat completion
 * (temperature 0, max_tokens 64) whose texts equal `spex run --chat -n 64 --temp 0` byte for
 * byte, with llama.cpp's `timings` present; tests/node/load.mjs — 16 concurrent streaming
 * clients × 3 requests against -np 4: every request completes, each greedy text equals a
 * serial `spex run` of the same prompt, and the /metrics llamacpp:tokens_predicted_total delta
 * equals the sum of the completion tokens; tests/node/openai_embd.mjs — embeddings.create in
 * base64 (the client's default) and float (the server also runs --embedding --pooling mean);
 * tests/node/openai_responses.mjs — responses.create plain and streamed, whose texts equal the
 * same `spex run`, with typed events in sequence, and models.retrieve;
 * tests/node/anthropic_messages.mjs — the @anthropic-ai/sdk client's messages.create and
 * messages.stream (temperature 0, max_tokens 64) whose texts equal `spex run --chat -n 64 --temp 0`
 * byte for byte, with usage.input_tokens + cache_read_input_tokens equal to messages.countTokens;
 * SIGTERM then stops the server cleanly.
 * The scripts send reasoning_format "none" so the <think> section stays in `content`, as
 * `spex run` prints it.
 * What it is not: the raw-HTTP protocol and error tests (test_server.c, test_server_anthropic.c).
 * It SKIPs when `node`, tests/node/node_modules/openai or @anthropic-ai/sdk, or the default models
 * are missing — and FAILs instead when
 * SPEX_TEST_REQUIRE_NODE is set (.ci/run sets it: CI installs all three, so a skip there
 * would hide a broken install step).
 */
#include "srv_client.h"
#include "test.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define TARGET "models/target.gguf"
#define DRAFTER "models/drafter.gguf"
#define OPENAI_PKG "tests/node/node_modules/openai/package.json"
#define ANTHROPIC_PKG "tests/node/node_modules/@anthropic-ai/sdk/package.json"

/* ======================================================================== */
/* Processes                                                                 */
/* ======================================================================== */

/* The `node` executable on PATH (static buffer), or NULL. */
static const char *node_bin(void) {
    static char path[4096];
    const char *env = getenv("PATH");
    if (!env) return NULL;
    while (*env) {
        const char *end = strchr(env, ':');
        size_t n = end ? (size_t)(end - env) : strlen(env);
        if (n > 0 && n < sizeof path - 8) {
            memcpy(path, env, n);
            strcpy(path + n, "/node");
            if (access(path, X_OK) == 0) return path;
        }
        env += n + (end ? 1 : 0);
    }
    return NULL;
}

/* Runs argv[0] with stdout captured; returns its stdout (malloc'd) when it exits 0, else NULL
 * (after printing its stderr, so a failing script explains itself). */
static char *capture(const char *const *argv) {
    char out_path[] = "/tmp/spex_test_node_out_XXXXXX", err_path[] = "/tmp/spex_test_node_err_XXXXXX";
    int fo = mkstemp(out_path), fe = mkstemp(err_path);
    if (fo < 0 || fe < 0) return NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fo, 1);
    posix_spawn_file_actions_adddup2(&fa, fe, 2);
    pid_t pid;
    fflush(stdout);
    int e = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fo);
    close(fe);
    int st = 0;
    bool ok = e == 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    size_t len = 0;
    char *out = ok ? test_slurp(out_path, &len) : NULL;
    if (!ok) {
        char *err = test_slurp(err_path, &len);
        printf("  %s %s failed (spawn %d, status 0x%x): %s\n", argv[0], argv[1] ? argv[1] : "", e, st,
               err ? err : "");
        free(err);
    }
    unlink(out_path);
    unlink(err_path);
    return out;
}

/* `spex run --chat` of prompt, -n n, greedy: the text the server must return. */
static char *expected(const char *prompt, int n) {
    char nb[16];
    snprintf(nb, sizeof nb, "%d", n);
    const char *a[] = {test_spex_bin(), "run", "-m", TARGET, "--chat", "-p", prompt, "-n", nb, "--temp", "0", "-t", "2", NULL};
    return capture(a);
}

/* Runs `node tests/node/SCRIPT PORT` and parses its JSON stdout (NULL on any failure). */
static cJSON *node_script(const char *script, int port) {
    char path[256], ps[16];
    snprintf(path, sizeof path, "tests/node/%s", script);
    snprintf(ps, sizeof ps, "%d", port);
    const char *a[] = {node_bin(), path, ps, NULL};
    char *out = capture(a);
    cJSON *o = out ? cJSON_Parse(out) : NULL;
    if (out && !o) printf("  %s printed no JSON: %s\n", script, out);
    free(out);
    return o;
}

/* ======================================================================== */
/* The server                                                                */
/* ======================================================================== */

static pid_t g_pid;
static int g_port;
static bool g_tried;
static char g_err_path[64];

/* Why the tests cannot run here, or NULL. */
static const char *skip_reason(void) {
    if (!test_spex_bin()) return "no spex binary next to this test's folder";
    if (!node_bin()) return "no `node` on PATH (Debian: apt-get install nodejs npm)";
    if (access(OPENAI_PKG, R_OK) != 0) return "tests/node/node_modules/openai missing (run: npm ci --prefix tests/node)";
    if (access(ANTHROPIC_PKG, R_OK) != 0)
        return "tests/node/node_modules/@anthropic-ai/sdk missing (run: npm ci --prefix tests/node)";
    if (access(TARGET, R_OK) != 0 || access(DRAFTER, R_OK) != 0) return "models/target.gguf or models/drafter.gguf missing";
    return NULL;
}

/* At exit (a filtered run may skip shutdown_clean): no server outlives the test. */
static void server_kill(void) {
    if (g_pid <= 0) return;
    kill(g_pid, SIGKILL);
    waitpid(g_pid, NULL, 0);
    unlink(g_err_path);
    g_pid = 0;
}

/* Starts `spex serve` once, waits for "server: ready"; the port, or -1. */
static int server_port(void) {
    if (g_tried) return g_port > 0 ? g_port : -1;
    g_tried = true;
    atexit(server_kill);
    snprintf(g_err_path, sizeof g_err_path, "/tmp/spex_test_node_srv_XXXXXX");
    int fe = mkstemp(g_err_path);
    if (fe < 0) return -1;
    const char *argv[] = {test_spex_bin(), "serve", "-m", TARGET, "-md", DRAFTER, "-np", "4", "--port", "0",
                          "--metrics", "-t", "2", "--embedding", "--pooling", "mean", NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fe, 2);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    fflush(stdout);
    int e = posix_spawn(&g_pid, argv[0], &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fe);
    if (e != 0) return g_pid = 0, -1;
    const char *key = "listening on http://127.0.0.1:";
    for (int i = 0; i < 600; i++) {   /* up to 60 s (the ASan build loads slowly) */
        size_t len = 0;
        char *err = test_slurp(g_err_path, &len);
        const char *p = err ? strstr(err, key) : NULL;
        int port = p ? atoi(p + strlen(key)) : 0;
        bool ready = err && strstr(err, "server: ready");
        bool dead = waitpid(g_pid, NULL, WNOHANG) == g_pid;
        if (dead) printf("  server exited: %s\n", err ? err : "");
        free(err);
        if (dead) return g_pid = 0, -1;
        if (ready && port > 0) return g_port = port;
        usleep(100 * 1000);
    }
    server_kill();
    return -1;
}

#define REQUIRE_SERVER(port)                                              \
    int port = -1;                                                        \
    do {                                                                  \
        const char *why_ = skip_reason();                                 \
        CHECK_MSG(!why_ || !getenv("SPEX_TEST_REQUIRE_NODE"),             \
                  "SPEX_TEST_REQUIRE_NODE is set but: %s", why_);         \
        if (why_) SKIP("%s", why_);                                       \
        port = server_port();                                             \
        CHECK_MSG(port > 0, "the server did not start");                  \
    } while (0)

static const char *jstr(const cJSON *o, const char *k) { return cJSON_GetStringValue(cJSON_GetObjectItem(o, k)); }
static double jnum(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItem(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* ======================================================================== */
/* Tests                                                                     */
/* ======================================================================== */

TEST(openai_chat_equals_run) {
    REQUIRE_SERVER(port);
    cJSON *o = node_script("openai_chat.mjs", port);
    CHECK(o);
    const char *prompt = jstr(o, "prompt"), *plain = jstr(o, "text_plain"), *streamed = jstr(o, "text_stream");
    char *want = prompt ? expected(prompt, 64) : NULL;
    bool same_plain = want && plain && !strcmp(plain, want);
    bool same_stream = want && streamed && !strcmp(streamed, want);
    if (!same_plain || !same_stream)
        printf("  plain  '%s'\n  stream '%s'\n  run    '%s'\n", plain ? plain : "(null)", streamed ? streamed : "(null)",
               want ? want : "(null)");
    bool timings = cJSON_IsTrue(cJSON_GetObjectItem(o, "timings_present")) &&
                   cJSON_IsTrue(cJSON_GetObjectItem(o, "timings_stream_present"));
    double draft_n = jnum(o, "draft_n"), acc = jnum(o, "draft_n_accepted");
    printf("  draft_n %.0f, draft_n_accepted %.0f, completion_tokens %.0f\n", draft_n, acc, jnum(o, "completion_tokens"));
    free(want);
    cJSON_Delete(o);
    CHECK(want != NULL || !prompt);
    CHECK(same_plain);
    CHECK(same_stream);
    CHECK(timings);
    /* With the drafter loaded, a 64-token greedy answer is drafted for (adaptive speculation
     * may shorten drafts but keeps drafting on an idle server). */
    CHECK(draft_n > 0 && acc >= 0 && acc <= draft_n);
}

/* The Anthropic SDK: messages.create and messages.stream give `spex run`'s text; countTokens
 * counts the prompt the request used. */
/* What the server chose not to draft or verify (/metrics): steps the adaptive rule or the
 * realized-rate guard kept plain, and drafted tokens the draft cut left unverified; -1 when
 * unreadable. */
static double undrafted_steps(int port) {
    resp r;
    double d = -1, v = -1, c = -1;
    if (!http(port, "GET", "/metrics", NULL, NULL, &r)) return -1;
    bool ok = metric_value(r.body, "spex:spec_disabled_steps_total", &d) &&
              metric_value(r.body, "spex:spec_vetoed_steps_total", &v) &&
              metric_value(r.body, "spex:spec_cut_tokens_total", &c);
    resp_free(&r);
    return ok ? d + v + c : -1;
}

TEST(anthropic_messages_equal_run) {
    REQUIRE_SERVER(port);
    const double undrafted0 = undrafted_steps(port);
    cJSON *o = node_script("anthropic_messages.mjs", port);
    const double undrafted1 = undrafted_steps(port);
    CHECK(o);
    const char *prompt = jstr(o, "prompt"), *plain = jstr(o, "text_plain"), *streamed = jstr(o, "text_stream");
    const char *final = jstr(o, "text_stream_final"), *sp = jstr(o, "stop_plain"), *ss = jstr(o, "stop_stream");
    char *want = prompt ? expected(prompt, 64) : NULL;
    bool same = want && plain && streamed && final && !strcmp(plain, want) && !strcmp(streamed, want) &&
                !strcmp(final, want);
    if (!same)
        printf("  plain  '%s'\n  stream '%s'\n  final  '%s'\n  run    '%s'\n", plain ? plain : "(null)",
               streamed ? streamed : "(null)", final ? final : "(null)", want ? want : "(null)");
    const double in = jnum(o, "input_tokens") + jnum(o, "cache_read_input_tokens"), counted = jnum(o, "count_tokens");
    const double out = jnum(o, "output_tokens"), out_s = jnum(o, "output_tokens_stream"), draft_n = jnum(o, "draft_n");
    printf("  stop_reason %s / %s, input %.0f, count_tokens %.0f, output %.0f / %.0f, draft_n %.0f\n", sp ? sp : "?",
           ss ? ss : "?", in, counted, out, out_s, draft_n);
    const bool stops = sp && ss && !strcmp(sp, ss) && (!strcmp(sp, "max_tokens") || !strcmp(sp, "end_turn"));
    const bool id_ok = cJSON_IsTrue(cJSON_GetObjectItem(o, "id_ok")), tm = cJSON_IsTrue(cJSON_GetObjectItem(o, "timings_present"));
    free(want);
    cJSON_Delete(o);
    CHECK(same);
    CHECK(stops);
    CHECK(in > 0 && in == counted);
    CHECK(out > 0 && out == out_s);
    CHECK(id_ok);
    CHECK(tm);
    /* the drafter is loaded: the same speculative path as the chat endpoint, so the answer was
     * drafted for, or the server chose plain steps where drafting measured slower (a sanitizer
     * build shifts the costs) and counted them */
    CHECK_MSG(draft_n > 0 || (undrafted0 >= 0 && undrafted1 > undrafted0), "draft_n %.0f, undrafted steps %.0f -> %.0f",
              draft_n, undrafted0, undrafted1);
}

TEST(openai_load_16_clients_np4) {
    REQUIRE_SERVER(port);
    cJSON *o = node_script("load.mjs", port);
    CHECK(o);
    cJSON *res = cJSON_GetObjectItem(o, "results");
    int n = cJSON_GetArraySize(res), mismatched = 0;
    long long tokens = 0, prompt_n = 0;
    /* Serial runs, one per distinct prompt (the 48 requests cycle over 24 problems). */
    enum { MAXP = 64 };
    const char *prompts[MAXP];
    char *wants[MAXP];
    int np = 0;
    bool run_ok = true;
    cJSON *r;
    cJSON_ArrayForEach(r, res) {
        const char *p = jstr(r, "prompt"), *text = jstr(r, "text");
        tokens += (long long)jnum(r, "completion_tokens");
        prompt_n += (long long)jnum(r, "prompt_n");
        if (!p || !text) {
            mismatched++;
            continue;
        }
        int k = 0;
        while (k < np && strcmp(prompts[k], p)) k++;
        if (k == np && np < MAXP) {
            prompts[np] = p;
            wants[np] = expected(p, 48);
            run_ok = run_ok && wants[np];
            np++;
        }
        if (k < np && (!wants[k] || strcmp(wants[k], text))) {
            if (mismatched++ < 3)
                printf("  client %.0f request %.0f\n    server '%s'\n    run    '%s'\n", jnum(r, "client"),
                       jnum(r, "request"), text, wants[k] ? wants[k] : "(null)");
        }
    }
    /* /metrics around the load: every counter moved by what the 48 responses say */
    const cJSON *mb = cJSON_GetObjectItem(o, "metrics_before"), *ma = cJSON_GetObjectItem(o, "metrics_after");
#define DELTA(name) (long long)(jnum(ma, name) - jnum(mb, name))
    const long long d_pred = DELTA("llamacpp:tokens_predicted_total"), d_prompt = DELTA("llamacpp:prompt_tokens_total");
    const long long d_req = DELTA("spex:requests_total"), d_cancel = DELTA("spex:requests_cancelled_total");
    const long long d_draft = DELTA("llamacpp:spec_decode_num_draft_tokens_total");
    const long long d_acc = DELTA("llamacpp:spec_decode_num_accepted_tokens_total");
#undef DELTA
    const double busy = jnum(ma, "llamacpp:requests_processing"), deferred = jnum(ma, "llamacpp:requests_deferred");
    printf("  %d requests, %d distinct prompts, %lld completion tokens (metric +%lld), %lld prompt tokens processed "
           "(metric +%lld), requests_total +%lld, drafted +%lld, accepted +%lld\n",
           n, np, tokens, d_pred, prompt_n, d_prompt, d_req, d_draft, d_acc);
    for (int k = 0; k < np; k++) free(wants[k]);
    const bool have_metrics = mb && ma;
    cJSON_Delete(o);
    CHECK_EQ_INT(n, 48);
    CHECK(run_ok);
    CHECK_EQ_INT(mismatched, 0);
    CHECK(have_metrics);
    CHECK_EQ_INT(d_pred, tokens);
    CHECK_EQ_INT(d_prompt, prompt_n);
    CHECK_EQ_INT(d_req, 48);   /* no request lost, none counted twice */
    CHECK_EQ_INT(d_cancel, 0);
    CHECK(d_acc >= 0 && d_acc <= d_draft);
    CHECK_EQ_INT((long)busy, 0);
    CHECK_EQ_INT((long)deferred, 0);
}

/* client.responses.create, plain and streamed: both texts equal `spex run --chat -n 64 --temp
 * 0`; the status says whether the 64-token budget ran out; the stream's events count up and end
 * with the final response; client.models.retrieve finds the listed model. */
TEST(openai_responses_equals_run) {
    REQUIRE_SERVER(port);
    cJSON *o = node_script("openai_responses.mjs", port);
    CHECK(o);
    const char *prompt = jstr(o, "prompt"), *plain = jstr(o, "text_plain"), *streamed = jstr(o, "text_stream");
    const char *st_plain = jstr(o, "status_plain"), *st_stream = jstr(o, "status_stream");
    const char *first = jstr(o, "first_event"), *last = jstr(o, "last_event"), *id = jstr(o, "id_plain");
    char *want = prompt ? expected(prompt, 64) : NULL;
    bool same_plain = want && plain && !strcmp(plain, want);
    bool same_stream = want && streamed && !strcmp(streamed, want);
    if (!same_plain || !same_stream)
        printf("  plain  '%s'\n  stream '%s'\n  run    '%s'\n", plain ? plain : "(null)", streamed ? streamed : "(null)",
               want ? want : "(null)");
    const double out = jnum(o, "output_tokens"), out_s = jnum(o, "output_tokens_stream"), in = jnum(o, "input_tokens");
    const char *want_status = out >= 64 ? "incomplete" : "completed";
    printf("  %.0f input / %.0f output tokens, status %s / %s, %.0f events (%s .. %s)\n", in, out,
           st_plain ? st_plain : "?", st_stream ? st_stream : "?", jnum(o, "n_events"), first ? first : "?",
           last ? last : "?");
    const bool status_ok = st_plain && st_stream && !strcmp(st_plain, want_status) && !strcmp(st_stream, want_status);
    const bool events_ok = cJSON_IsTrue(cJSON_GetObjectItem(o, "events_ok")) && first &&
                           !strcmp(first, "response.created") && last && !strncmp(last, "response.", 9) &&
                           !strcmp(last + 9, want_status);
    const bool id_ok = id && !strncmp(id, "resp_", 5);
    const bool retrieved = cJSON_IsTrue(cJSON_GetObjectItem(o, "model_retrieved"));
    free(want);
    cJSON_Delete(o);
    CHECK(want != NULL || !prompt);
    CHECK(same_plain);
    CHECK(same_stream);
    CHECK(in > 0 && out > 0 && out == out_s);
    CHECK(status_ok);
    CHECK(events_ok);
    CHECK(id_ok);
    CHECK(retrieved);
}

/* client.embeddings.create: base64 by the client's default (decoded by it) and float, two
 * inputs; the server runs --embedding --pooling mean beside the chat tests' generation. */
TEST(openai_embeddings_create) {
    REQUIRE_SERVER(port);
    cJSON *o = node_script("openai_embd.mjs", port);
    CHECK(o);
    const char *obj = jstr(o, "object"), *model = jstr(o, "model");
    const double n = jnum(o, "n"), dims = jnum(o, "dims"), index1 = jnum(o, "index1"), norm0 = jnum(o, "norm0");
    const double pt = jnum(o, "prompt_tokens"), diff = jnum(o, "max_diff_base64_float");
    printf("  %s: %.0f x %.0f floats, |v0| %.7f, prompt_tokens %.0f, model %s, base64 vs float %.3g\n", obj ? obj : "?",
           n, dims, norm0, pt, model ? model : "?", diff);
    const bool list = obj && !strcmp(obj, "list"), target = model && !strcmp(model, "target");
    cJSON_Delete(o);
    CHECK(list);
    CHECK(target);   /* the request's model is echoed */
    CHECK_EQ_INT((long)n, 2);
    CHECK_EQ_INT((long)dims, 320);
    CHECK_EQ_INT((long)index1, 1);
    CHECK_NEAR(norm0, 1.0, 1e-5);
    CHECK(pt > 0);
    CHECK(diff == 0);
}

/* Last: SIGTERM stops the server cleanly (and, in the ASan build, without a report). */
TEST(shutdown_clean) {
    if (skip_reason()) SKIP("%s", skip_reason());
    if (!g_tried) SKIP("no server was started (filtered run)");
    CHECK_MSG(g_pid > 0, "no server running");
    kill(g_pid, SIGTERM);
    int st = 0, rc = -1;
    for (int i = 0; i < 300 && rc < 0; i++) {
        if (waitpid(g_pid, &st, WNOHANG) == g_pid) rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        else usleep(100 * 1000);
    }
    if (rc < 0) {
        kill(g_pid, SIGKILL);
        waitpid(g_pid, &st, 0);
    }
    g_pid = 0;
    size_t len = 0;
    char *err = test_slurp(g_err_path, &len);
    bool clean = err && !strstr(err, "Sanitizer") && !strstr(err, "runtime error") && strstr(err, "server: stopped");
    if (!clean || rc != 0) printf("  server stderr:\n%s\n", err ? err : "(none)");
    free(err);
    unlink(g_err_path);
    CHECK_EQ_INT(rc, 0);
    CHECK(clean);
}

TEST_MAIN()
