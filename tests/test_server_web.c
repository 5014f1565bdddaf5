/*
 * test_server_web.c — `spex serve`'s chat page (GET /), --path, --no-webui and --cors-origins,
 * over raw HTTP and in a real browser (headless Chromium).
 *
 * What it checks: the origin rules of --cors-origins (srv_cors_valid / srv_cors_allowed) and
 * --path's name check (srv_webui_rel_path) as pure functions; then three servers on the
 * synthetic pair tiny-qwen3 + tiny-qwen3.dflash2 (A: --api-key, --cors-origins localhost;
 * B: --cors-origins with two other origins, --path DIR; C: --no-webui): the page and its
 * assets (types, CSP, ETag and 304, 405, no key needed while the API still needs one), the
 * preflight and response headers for allowed and other origins, --path's files and every
 * way out of DIR (.., %2e%2e, hidden names, a symlink out), bad flag values at start. In
 * Chromium, driven over the DevTools protocol by tests/node/browser.mjs: a page on a second
 * origin POSTs JSON with an Authorization header — against A its text equals the server's own
 * answer to the same request, against B the browser blocks it; and the chat page itself,
 * typed into and sent, streams a reply equal to the server's answer, shows the acceptance
 * line with the answer's token count, raises no CSP report, and is saved as a screenshot
 * (its path is printed); its Stop, on a slowed engine, ends the reply and the server cancels
 * the request. What it is not: the API's own tests (test_server.c).
 * The browser tests SKIP without `chromium` or `node` — and FAIL instead when
 * SPEX_TEST_REQUIRE_NODE is set (.ci/run sets it; scripts/install-deps.sh installs both).
 */
#include "server/server.h"
#include "server/webui.h"
#include "srv_client.h"
#include "test.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TINY_QWEN3 "tests/data/models/tiny-qwen3.gguf"
#define TINY_DRAFT2 "tests/data/dflash/tiny-qwen3.dflash2.gguf"
#define KEY "sk-web-test"
#define AUTH "Authorization: Bearer " KEY "\r\n"
#define PROMPT "Write one line about the sea."

/* ======================================================================== */
/* Pure rules                                                                */
/* ======================================================================== */

TEST(cors_origin_rules) {
    char msg[320];
    CHECK(srv_cors_valid("*", msg, sizeof msg));
    CHECK(srv_cors_valid("localhost", msg, sizeof msg));
    CHECK(srv_cors_valid("http://a.example, https://b.example:8443,localhost,http://[::1]:80", msg, sizeof msg));
    static const char *const bad[] = {"", "http://a.example/", "http://a.example/x", "ftp://a.example", "a.example",
                                      "*,http://a.example", "http://a.example,,http://b", "http://a:99999",
                                      "http://a b", "http://", "http://[::1", "http://[::1]x80",
                                      "http://[::1]80"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK_MSG(!srv_cors_valid(bad[i], msg, sizeof msg) && msg[0], "'%s' accepted", bad[i]);
    CHECK(srv_cors_allowed(NULL, "http://x"));
    CHECK(srv_cors_allowed("*", NULL));
    const char *list = "http://a.example, https://b.example:8443";
    CHECK(srv_cors_allowed(list, "http://a.example"));
    CHECK(srv_cors_allowed(list, "HTTP://A.example"));
    CHECK(srv_cors_allowed(list, "https://b.example:8443"));
    CHECK(!srv_cors_allowed(list, "https://b.example"));
    CHECK(!srv_cors_allowed(list, "http://a.example.evil"));
    CHECK(!srv_cors_allowed(list, "http://a.exampl"));
    CHECK(!srv_cors_allowed(list, NULL));
    CHECK(!srv_cors_allowed(list, "null"));
    CHECK(srv_cors_allowed("localhost", "http://127.0.0.1:5173"));
    CHECK(srv_cors_allowed("localhost", "https://localhost"));
    CHECK(srv_cors_allowed("localhost", "http://[::1]:8080"));
    CHECK(!srv_cors_allowed("localhost", "http://localhost.evil.example"));
    CHECK(!srv_cors_allowed("localhost", "http://127.0.0.10"));
    CHECK(!srv_cors_allowed("localhost", "file://localhost"));
    CHECK(!srv_cors_allowed("localhost", "http://[::1]x80"));   /* a port needs its ':' */
}

TEST(static_path_rules) {
    char out[64];
    CHECK(srv_webui_rel_path("/", out, sizeof out) && !strcmp(out, "index.html"));
    CHECK(srv_webui_rel_path("/a/b.js", out, sizeof out) && !strcmp(out, "a/b.js"));
    CHECK(srv_webui_rel_path("/docs/", out, sizeof out) && !strcmp(out, "docs/index.html"));
    static const char *const bad[] = {"", "a", "/..", "/../x", "/a/../b", "/./a", "/.git/config", "/a//b", "/a\\b",
                                      "/a%2fb", "/a b", "/a/.hidden", "/" "0123456789012345678901234567890123456789"
                                      "0123456789012345678901234567890123456789"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK_MSG(!srv_webui_rel_path(bad[i], out, sizeof out), "'%s' passed", bad[i]);
    CHECK(!strcmp(srv_webui_ctype("a/b.JS"), "text/javascript; charset=utf-8"));
    CHECK(!strcmp(srv_webui_ctype("x.css"), "text/css; charset=utf-8"));
    CHECK(!strcmp(srv_webui_ctype("x.png"), "image/png"));
    CHECK(!strcmp(srv_webui_ctype("x.tar.gz"), "application/octet-stream"));
    CHECK(!strcmp(srv_webui_ctype("noext"), "application/octet-stream"));
    CHECK(!strcmp(srv_webui_ctype("dir.d/noext"), "application/octet-stream"));
}

TEST(bad_flags_refused) {
    if (!test_spex_bin()) SKIP("no spex binary next to this test's folder");
    static const char *const cases[][6] = {
        {"serve", "-m", "m.gguf", "--cors-origins", "http://a.example/app", NULL},
        {"serve", "-m", "m.gguf", "--cors-origins", "*,http://a.example", NULL},
        {"serve", "-m", "m.gguf", "--path", "/nonexistent/www", NULL},
        {"serve", "-m", "m.gguf", "--path", "README.md", NULL},
    };
    static const char *const want[] = {"is not an origin", "* must stand alone", "not a folder", "not a folder"};
    for (int i = 0; i < 4; i++) {
        test_proc p;
        CHECK(test_spex_exec(cases[i], &p));
        bool ok = p.rc == 2 && strstr(p.err, want[i]);
        if (!ok) printf("  %s %s: exit %d %s\n", cases[i][3], cases[i][4], p.rc, p.err);
        test_proc_free(&p);
        CHECK(ok);
    }
    /* llama.cpp's variable sets the flag too (and is checked the same way) */
    setenv("LLAMA_ARG_CORS_ORIGINS", "http://a.example/app", 1);
    const char *env_case[] = {"serve", "-m", "m.gguf", NULL};
    test_proc p;
    bool ran = test_spex_exec(env_case, &p);
    unsetenv("LLAMA_ARG_CORS_ORIGINS");
    bool ok = ran && p.rc == 2 && strstr(p.err, "is not an origin") && strstr(p.err, "LLAMA_ARG_CORS_ORIGINS");
    if (!ok) printf("  LLAMA_ARG_CORS_ORIGINS: exit %d %s\n", p.rc, p.err ? p.err : "");
    test_proc_free(&p);
    CHECK(ok);
}

/* ======================================================================== */
/* Servers                                                                   */
/* ======================================================================== */

static shared_server g_a, g_b, g_c;
static char g_dir[512];   /* B's --path folder */

static int port_a(void) {
    /* adaptive off: the drafter drafts every step, so the page has an acceptance to show */
    const char *a[] = {"-m", TINY_QWEN3, "-md", TINY_DRAFT2, "-np", "2", "-c", "1024", "-t", "1", "--api-key", KEY,
                       "--cors-origins", "localhost", "--spec-adaptive", "off", NULL};
    return shared_server_port(&g_a, a);
}

static bool write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

/* B serves g_dir: hello.txt, app.js, sub/index.html, .hidden, and out -> a file outside. */
static int port_b(void) {
    if (!g_dir[0]) {
        snprintf(g_dir, sizeof g_dir, "%s", test_tmp_path("www"));
        char p[600];
        bool ok = mkdir(g_dir, 0700) == 0;
        snprintf(p, sizeof p, "%s/sub", g_dir), ok = ok && mkdir(p, 0700) == 0;
        snprintf(p, sizeof p, "%s/hello.txt", g_dir), ok = ok && write_file(p, "hello from --path\n");
        snprintf(p, sizeof p, "%s/app.js", g_dir), ok = ok && write_file(p, "console.log(1);\n");
        snprintf(p, sizeof p, "%s/sub/index.html", g_dir), ok = ok && write_file(p, "<p>sub</p>\n");
        snprintf(p, sizeof p, "%s/.hidden", g_dir), ok = ok && write_file(p, "hidden\n");
        ok = ok && write_file(test_tmp_path("secret.txt"), "secret\n");
        snprintf(p, sizeof p, "%s/out", g_dir), ok = ok && symlink(test_tmp_path("secret.txt"), p) == 0;
        snprintf(p, sizeof p, "%s/in.txt", g_dir), ok = ok && symlink("hello.txt", p) == 0;
        if (!ok) printf("  cannot build %s: %s\n", g_dir, strerror(errno));
    }
    const char *a[] = {"-m", TINY_QWEN3, "-md", TINY_DRAFT2, "-np", "1", "-c", "512", "-t", "1", "--api-key", KEY,
                       "--cors-origins", "http://127.0.0.1:1,http://example.test", "--path", g_dir, NULL};
    return shared_server_port(&g_b, a);
}

static int port_c(void) {
    const char *a[] = {"-m", TINY_QWEN3, "-np", "1", "-c", "512", "-t", "1", "--no-webui", NULL};
    return shared_server_port(&g_c, a);
}

/* A header's value in a response head ("" when absent), into out. */
static const char *header(const resp *r, const char *name, char *out, size_t cap) {
    out[0] = 0;
    size_t n = strlen(name);
    for (const char *p = r->head; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncasecmp(p, name, n) || p[n] != ':') continue;
        const char *v = p + n + 1, *e = strpbrk(v, "\r\n");
        while (*v == ' ') v++;
        size_t len = e ? (size_t)(e - v) : strlen(v);
        snprintf(out, cap, "%.*s", (int)(len < cap ? len : cap - 1), v);
        break;
    }
    return out;
}

/* The server's own answer to PROMPT (temperature 0, 16 tokens): content and completion_tokens. */
static char *direct_answer(int port, const char *auth, int *tokens) {
    cJSON *o = cJSON_CreateObject(), *ms = cJSON_AddArrayToObject(o, "messages"), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "user");
    cJSON_AddStringToObject(m, "content", PROMPT);
    cJSON_AddItemToArray(ms, m);
    cJSON_AddNumberToObject(o, "temperature", 0);
    cJSON_AddNumberToObject(o, "max_tokens", 16);
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    char extra[256];
    snprintf(extra, sizeof extra, "%sContent-Type: application/json\r\n", auth);
    resp r = {0};
    char *text = NULL;
    if (body && http(port, "POST", "/v1/chat/completions", extra, body, &r) && r.status == 200) {
        cJSON *j = cJSON_Parse(r.body);
        const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
        const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "message"), "content"));
        if (s) text = strdup(s);
        const cJSON *ct = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "completion_tokens");
        if (tokens) *tokens = cJSON_IsNumber(ct) ? ct->valueint : -1;
        cJSON_Delete(j);
    }
    free(body);
    resp_free(&r);
    return text;
}

/* ======================================================================== */
/* Raw HTTP                                                                  */
/* ======================================================================== */

TEST(page_and_assets) {
    REQUIRE_SERVER_FROM(port, port_a);
    char v[512], etag[128];
    resp r = {0};
    CHECK(http(port, "GET", "/", NULL, NULL, &r));   /* no key: the page is public */
    bool html = r.status == 200 && !strcmp(header(&r, "Content-Type", v, sizeof v), "text/html; charset=utf-8") &&
                strstr(r.body, "<script src=\"webui.js\"") && strstr(r.body, "id=\"messages\"");
    bool csp = strstr(header(&r, "Content-Security-Policy", v, sizeof v), "default-src 'self'") &&
               !strstr(v, "unsafe-inline") && strstr(v, "connect-src 'self'");
    bool cache = !strcmp(header(&r, "Cache-Control", v, sizeof v), "no-cache") &&
                 !strcmp(header(&r, "X-Content-Type-Options", v, sizeof v), "nosniff");
    header(&r, "ETag", etag, sizeof etag);
    if (!html || !csp || !cache) printf("  GET /: %d\n%s\n", r.status, r.head);
    resp_free(&r);
    CHECK(html && csp && cache && etag[0] == '"');

    CHECK(http(port, "GET", "/index.html", NULL, NULL, &r));
    bool same = r.status == 200 && !strcmp(header(&r, "ETag", v, sizeof v), etag);
    resp_free(&r);
    CHECK(same);
    char extra[200];
    snprintf(extra, sizeof extra, "If-None-Match: %s\r\n", etag);
    CHECK(http(port, "GET", "/", extra, NULL, &r));
    bool not_modified = r.status == 304 && r.body_len == 0;
    resp_free(&r);
    CHECK(not_modified);

    CHECK(http(port, "GET", "/webui.js", NULL, NULL, &r));
    bool js = r.status == 200 && !strcmp(header(&r, "Content-Type", v, sizeof v), "text/javascript; charset=utf-8") &&
              strstr(r.body, "fetch('v1/chat/completions'");
    resp_free(&r);
    CHECK(js);   /* relative API path: the page works behind a proxy that adds a prefix */
    CHECK(http(port, "GET", "/webui.css", NULL, NULL, &r));
    bool css = r.status == 200 && !strcmp(header(&r, "Content-Type", v, sizeof v), "text/css; charset=utf-8");
    resp_free(&r);
    CHECK(css);
    CHECK(http(port, "HEAD", "/", NULL, NULL, &r));
    bool head = r.status == 200 && r.body_len == 0;
    resp_free(&r);
    CHECK(head);
    CHECK(http(port, "POST", "/", "Content-Type: application/json\r\n", "{}", &r));
    bool m405 = r.status == 405 && is_error(&r, 405, NULL) && strstr(header(&r, "Allow", v, sizeof v), "GET");
    resp_free(&r);
    CHECK(m405);
    CHECK(http(port, "GET", "/nothing.html", NULL, NULL, &r));
    bool nf = is_error(&r, 404, NULL);
    resp_free(&r);
    CHECK(nf);
    CHECK(http(port, "GET", "/v1/models", NULL, NULL, &r));   /* the API still needs the key */
    bool auth = r.status == 401;
    resp_free(&r);
    CHECK(auth);
}

/* A preflight from origin to port: the Access-Control-Allow-Origin it gets ("" if none). */
static bool preflight(int port, const char *origin, char *acao, size_t cap, resp *r) {
    char extra[400];
    snprintf(extra, sizeof extra,
             "Origin: %s\r\nAccess-Control-Request-Method: POST\r\n"
             "Access-Control-Request-Headers: authorization, content-type\r\n",
             origin);
    if (!http(port, "OPTIONS", "/v1/chat/completions", extra, NULL, r)) return false;
    header(r, "Access-Control-Allow-Origin", acao, cap);
    return true;
}

TEST(cors_headers) {
    REQUIRE_SERVER_FROM(pa, port_a);
    char v[256], h[256];
    resp r = {0};
    /* A: localhost -> a page on 127.0.0.1 is echoed, another origin gets nothing */
    CHECK(preflight(pa, "http://127.0.0.1:5173", v, sizeof v, &r));
    bool ok = r.status == 204 && !strcmp(v, "http://127.0.0.1:5173") &&
              strstr(header(&r, "Access-Control-Allow-Headers", h, sizeof h), "authorization") &&
              strstr(header(&r, "Access-Control-Allow-Methods", h, sizeof h), "POST") &&
              header(&r, "Access-Control-Max-Age", h, sizeof h)[0] && strstr(header(&r, "Vary", h, sizeof h), "Origin");
    if (!ok) printf("%s\n", r.head);
    resp_free(&r);
    CHECK(ok);
    CHECK(preflight(pa, "http://evil.example", v, sizeof v, &r));
    ok = r.status == 204 && !v[0];
    resp_free(&r);
    CHECK_MSG(ok, "evil.example got '%s'", v);
    /* and on plain responses too: a 401 and a 200 */
    CHECK(http(pa, "GET", "/v1/models", "Origin: http://localhost:3000\r\n", NULL, &r));
    ok = r.status == 401 && !strcmp(header(&r, "Access-Control-Allow-Origin", v, sizeof v), "http://localhost:3000");
    resp_free(&r);
    CHECK(ok);
    CHECK(http(pa, "GET", "/v1/models", "Origin: http://evil.example\r\n" AUTH, NULL, &r));
    ok = r.status == 200 && !header(&r, "Access-Control-Allow-Origin", v, sizeof v)[0];
    resp_free(&r);
    CHECK(ok);   /* served (CORS is not access control), but not readable by that page */

    /* B: an explicit list */
    REQUIRE_SERVER_FROM(pb, port_b);
    CHECK(preflight(pb, "http://example.test", v, sizeof v, &r));
    ok = !strcmp(v, "http://example.test");
    resp_free(&r);
    CHECK_MSG(ok, "example.test got '%s'", v);
    CHECK(preflight(pb, "http://127.0.0.1:5173", v, sizeof v, &r));
    ok = !v[0];
    resp_free(&r);
    CHECK_MSG(ok, "127.0.0.1:5173 got '%s'", v);

    /* C: the default, every origin */
    REQUIRE_SERVER_FROM(pc, port_c);
    CHECK(preflight(pc, "http://evil.example", v, sizeof v, &r));
    ok = !strcmp(v, "*");
    resp_free(&r);
    CHECK(ok);
}

TEST(no_webui) {
    REQUIRE_SERVER_FROM(port, port_c);
    resp r = {0};
    CHECK(http(port, "GET", "/", NULL, NULL, &r));
    bool nf = is_error(&r, 404, NULL);
    resp_free(&r);
    CHECK(nf);
    CHECK(http(port, "GET", "/webui.js", NULL, NULL, &r));
    nf = is_error(&r, 404, NULL);
    resp_free(&r);
    CHECK(nf);
    CHECK(http(port, "GET", "/health", NULL, NULL, &r));
    bool up = r.status == 200;
    resp_free(&r);
    CHECK(up);
}

/* Every error body is UTF-8 JSON, even when its message quotes bytes of the request that are
 * not (a URL's %FF) or cuts a quoted field in the middle of a character (%.40s). */
TEST(error_bodies_are_utf8) {
    REQUIRE_SERVER_FROM(port, port_c);
    resp r = {0};
    CHECK(http(port, "GET", "/%FF%C3", NULL, NULL, &r));
    bool ok = is_error(&r, 404, NULL) && srv_utf8_valid(r.body, r.body_len);
    if (!ok) printf("  GET /%%FF%%C3 -> %d %s\n", r.status, r.body);
    resp_free(&r);
    CHECK(ok);
    /* 39 ASCII bytes, then a two-byte character that a 40-byte cut splits */
    const char *body = "{\"max_tokens\": 4, \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
                       "\"tools\": [{\"name\": \"f\", \"type\": \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\u00e9\"}]}";
    CHECK(http(port, "POST", "/v1/messages", NULL, body, &r));
    cJSON *o = cJSON_Parse(r.body);
    ok = r.status == 400 && cJSON_IsObject(o) && srv_utf8_valid(r.body, r.body_len);
    if (!ok) printf("  /v1/messages -> %d %s\n", r.status, r.body);
    cJSON_Delete(o);
    resp_free(&r);
    CHECK(ok);
}

TEST(static_path) {
    REQUIRE_SERVER_FROM(port, port_b);
    char v[256];
    resp r = {0};
    CHECK(http(port, "GET", "/hello.txt", NULL, NULL, &r));
    bool ok = r.status == 200 && !strcmp(r.body, "hello from --path\n") &&
              !strcmp(header(&r, "Content-Type", v, sizeof v), "text/plain; charset=utf-8");
    resp_free(&r);
    CHECK(ok);
    CHECK(http(port, "GET", "/app.js", NULL, NULL, &r));
    ok = r.status == 200 && !strcmp(header(&r, "Content-Type", v, sizeof v), "text/javascript; charset=utf-8");
    resp_free(&r);
    CHECK(ok);
    CHECK(http(port, "GET", "/sub/", NULL, NULL, &r));
    ok = r.status == 200 && !strcmp(r.body, "<p>sub</p>\n");
    resp_free(&r);
    CHECK(ok);
    CHECK(http(port, "GET", "/in.txt", NULL, NULL, &r));   /* a symlink that stays inside */
    ok = r.status == 200 && !strcmp(r.body, "hello from --path\n");
    resp_free(&r);
    CHECK(ok);
    static const char *const out[] = {"/", "/sub", "/out", "/.hidden", "/../secret.txt", "/%2e%2e/secret.txt",
                                      "/sub/../../secret.txt", "/sub/%2e%2e/%2e%2e/secret.txt", "/webui.js",
                                      "//etc/passwd", "/sub%2f..%2f..%2fsecret.txt"};
    for (size_t i = 0; i < sizeof out / sizeof *out; i++) {
        CHECK(http(port, "GET", out[i], NULL, NULL, &r));
        ok = is_error(&r, 404, NULL) && !strstr(r.body, "secret\n");
        if (!ok) printf("  GET %s: %d %s\n", out[i], r.status, r.body);
        resp_free(&r);
        CHECK(ok);
    }
    CHECK(http(port, "POST", "/hello.txt", "Content-Type: text/plain\r\n", "x", &r));
    ok = r.status == 405;
    resp_free(&r);
    CHECK(ok);
}

/* ======================================================================== */
/* Chromium                                                                  */
/* ======================================================================== */

/* prog on PATH (static buffer), or NULL. */
static const char *on_path(const char *prog) {
    static char path[2][4096];
    static int k;
    char *buf = path[k++ % 2];
    const char *env = getenv("PATH");
    while (env && *env) {
        const char *end = strchr(env, ':');
        size_t n = end ? (size_t)(end - env) : strlen(env);
        if (n > 0 && n + strlen(prog) + 2 < sizeof path[0]) {
            snprintf(buf, sizeof path[0], "%.*s/%s", (int)n, env, prog);
            if (access(buf, X_OK) == 0) return buf;
        }
        env += n + (end ? 1 : 0);
    }
    return NULL;
}

static const char *g_node;

/* Why the browser tests cannot run here, or NULL (and SPEX_CHROMIUM set for browser.mjs). */
static const char *browser_skip_reason(void) {
    if (!test_spex_bin()) return "no spex binary next to this test's folder";
    static char node[4096];
    const char *n = on_path("node");
    if (!n) return "no `node` on PATH (Debian: apt-get install nodejs)";
    snprintf(node, sizeof node, "%s", n);
    g_node = node;
    const char *c = on_path("chromium");
    if (!c) c = on_path("chromium-browser");
    if (!c) return "no `chromium` on PATH (Debian: apt-get install chromium)";
    setenv("SPEX_CHROMIUM", c, 1);
    return NULL;
}

#define REQUIRE_BROWSER()                                                      \
    do {                                                                       \
        const char *why_ = browser_skip_reason();                              \
        CHECK_MSG(!why_ || !getenv("SPEX_TEST_REQUIRE_NODE"),                  \
                  "SPEX_TEST_REQUIRE_NODE is set but: %s", why_);              \
        if (why_) SKIP("%s", why_);                                            \
    } while (0)

/* `node tests/node/browser.mjs ARGS...`: its JSON, or NULL (after printing why). */
static cJSON *browser(const char *const *args) {
    const char *a[12] = {"tests/node/browser.mjs"};
    int n = 1;
    for (int i = 0; args[i] && n < 11; i++) a[n++] = args[i];
    a[n] = NULL;
    test_proc p;
    bool ran = test_exec(g_node, a, &p);
    cJSON *o = ran && p.rc == 0 ? cJSON_Parse(p.out) : NULL;
    if (!o) printf("  browser.mjs %s: exit %d\n  stdout: %s\n  stderr: %s\n", args[0], p.rc, p.out ? p.out : "",
                   p.err ? p.err : "");
    test_proc_free(&p);
    return o;
}

static const char *jstr(const cJSON *o, const char *k) { return cJSON_GetStringValue(cJSON_GetObjectItem(o, k)); }

/* A page on http://127.0.0.1:<other port> POSTs to port; its parsed result object. */
static cJSON *cors_probe(int port) {
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    const char *a[] = {"cors", ps, KEY, PROMPT, NULL};
    return browser(a);
}

TEST(browser_cors_allowed) {
    REQUIRE_BROWSER();
    REQUIRE_SERVER_FROM(port, port_a);
    char *want = direct_answer(port, AUTH, NULL);
    CHECK(want);
    cJSON *o = cors_probe(port);
    const cJSON *res = cJSON_GetObjectItem(o, "result");
    const char *got = jstr(res, "content");
    bool ok = cJSON_IsTrue(cJSON_GetObjectItem(res, "ok")) && got && !strcmp(got, want);
    printf("  page %s -> 127.0.0.1:%d: %s\n", o ? jstr(o, "origin") : "?", port, ok ? "read the answer" : "FAILED");
    if (!ok) printf("  want '%s'\n  got  %s\n", want, o ? cJSON_PrintUnformatted(res) : "(none)");
    free(want);
    cJSON_Delete(o);
    CHECK(ok);
}

TEST(browser_cors_blocked) {
    REQUIRE_BROWSER();
    REQUIRE_SERVER_FROM(port, port_b);
    cJSON *o = cors_probe(port);
    const cJSON *res = cJSON_GetObjectItem(o, "result");
    const char *err = jstr(res, "error");
    bool blocked = res && cJSON_IsFalse(cJSON_GetObjectItem(res, "ok")) && err && strstr(err, "Failed to fetch");
    printf("  page %s -> 127.0.0.1:%d (--cors-origins lists others): %s\n", o ? jstr(o, "origin") : "?", port,
           err ? err : "(not blocked)");
    cJSON_Delete(o);
    CHECK(o != NULL);
    CHECK(blocked);
}

TEST(browser_chat_page) {
    REQUIRE_BROWSER();
    REQUIRE_SERVER_FROM(port, port_a);
    int want_tokens = -1;
    char *want = direct_answer(port, AUTH, &want_tokens);
    CHECK(want);
    /* the screenshot goes beside the build's tests: <build>/test-logs/ */
    char shot[4200], ps[16];
    const char *bin = test_spex_bin();
    snprintf(shot, sizeof shot, "%.*s/test-logs", (int)(strrchr(bin, '/') - bin), bin);
    mkdir(shot, 0755);
    strcat(shot, "/webui-chat.png");
    snprintf(ps, sizeof ps, "%d", port);
    const char *a[] = {"chat", ps, KEY, PROMPT, shot, NULL};
    cJSON *o = browser(a);
    const char *state = jstr(o, "state"), *text = jstr(o, "text"), *stats = jstr(o, "stats");
    const cJSON *user = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "user"), 0);
    bool same = text && !strcmp(text, want), done = state && !strcmp(state, "done");
    bool typed = user && cJSON_GetStringValue(user) && !strcmp(cJSON_GetStringValue(user), PROMPT);
    int n_tok = -1, acc = -1, drafted = -1;
    if (stats) sscanf(stats, "%d tokens", &n_tok);
    const char *sp = stats ? strstr(stats, "speculative: ") : NULL;
    bool acceptance = sp && sscanf(sp, "speculative: %d/%d drafted tokens accepted", &acc, &drafted) == 2 &&
                      acc >= 0 && acc <= drafted && drafted > 0;
    bool csp_clean = true;
    const cJSON *line;
    cJSON_ArrayForEach(line, cJSON_GetObjectItem(o, "console")) {
        const char *s = cJSON_GetStringValue(line);
        if (s && (strstr(s, "Content Security Policy") || strstr(s, "exception"))) csp_clean = false;
        if (s) printf("  console: %s\n", s);
    }
    printf("  state %s, reply '%s'\n  stats: %s\n  screenshot: %s\n", state ? state : "?", text ? text : "(none)",
           stats ? stats : "(none)", shot);
    if (!same) printf("  server's own answer: '%s'\n", want);
    free(want);
    cJSON_Delete(o);
    CHECK(done);
    CHECK(typed);
    CHECK(same);
    CHECK_EQ_INT(n_tok, want_tokens);
    CHECK(acceptance);
    CHECK(csp_clean);
    CHECK(access(shot, R_OK) == 0);
}

/* The page's Stop, on a slowed engine (50 ms a step, so 2000 tokens would take 100 s): the
 * reply ends as "stopped" with the text so far, and the server cancels the request (the fetch's
 * abort closes the connection). */
TEST(browser_stop) {
    REQUIRE_BROWSER();
    if (!test_spex_bin()) SKIP("no spex binary next to this test's folder");
    server s;
    const char *args[] = {"-m", TINY_QWEN3, "-np", "1", "-c", "4096", "-t", "1", "--metrics", NULL};
    CHECK_MSG(server_start_slowed(&s, 50, args), "the slowed server did not start");
    char ps[16];
    snprintf(ps, sizeof ps, "%d", s.port);
    const char *a[] = {"stop", ps, "", PROMPT, NULL};
    cJSON *o = browser(a);
    const char *state = jstr(o, "state"), *text = jstr(o, "text"), *stats = jstr(o, "stats");
    bool stopped = state && !strcmp(state, "stopped") && text && text[0] && stats && !strcmp(stats, "stopped") &&
                   cJSON_IsTrue(cJSON_GetObjectItem(o, "stop_enabled")) &&
                   cJSON_IsTrue(cJSON_GetObjectItem(o, "send_enabled"));
    printf("  state %s after %zu bytes of text\n", state ? state : "?", text ? strlen(text) : 0);
    cJSON_Delete(o);
    long cancelled = -1;
    for (int i = 0; i < 50 && cancelled != 1; i++) {   /* the engine sees the closed socket within ~100 ms */
        resp r = {0};
        const char *m = http(s.port, "GET", "/metrics", NULL, NULL, &r) ? strstr(r.body, "\nspex:requests_cancelled_total ") : NULL;
        cancelled = m ? strtol(m + strlen("\nspex:requests_cancelled_total "), NULL, 10) : -1;
        resp_free(&r);
        if (cancelled != 1) usleep(100 * 1000);
    }
    bool clean = false;
    int rc = server_stop(&s, &clean);
    CHECK(stopped);
    CHECK_EQ_INT(cancelled, 1);
    CHECK_EQ_INT(rc, 0);
    CHECK(clean);
}

/* Last: the servers stop cleanly (and, in the ASan build, without a report). */
TEST(shutdown_clean) {
    shared_server *all[] = {&g_a, &g_b, &g_c};
    int stopped = 0;
    for (int i = 0; i < 3; i++) {
        if (!all[i]->started) continue;
        bool clean = false;
        int rc = shared_server_stop(all[i], &clean);
        CHECK_EQ_INT(rc, 0);
        CHECK(clean);
        stopped++;
    }
    if (!stopped) SKIP("no server was started (filtered run)");
}

TEST_MAIN()
