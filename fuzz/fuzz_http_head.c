/*
 * fuzz_http_head.c — libFuzzer target for the request-head check of `spex serve`'s front door
 * (src/server/head.c): arbitrary bytes as the start of a connection's stream.
 *
 * Byte 0 picks the body limit (0 .. 255 KiB); the rest is the stream. Checked: no crash or
 * sanitizer report; srv_head_end finds a head inside the bytes, the same one in the head alone;
 * srv_head_check answers 0 or one of 400, 413, 501, 505; an accepted head has a method, a
 * Content-Length within the limit, and not both Content-Length and chunked.
 * The same bytes also drive what the server does with a path and an Origin (src/server/webui.c,
 * cors.c): the stream up to its first newline as a --cors-origins value, the rest as an Origin
 * (a refused value says why; `*` allows everything), and an accepted head's path through
 * --path's name check (an accepted name is relative, without `..`, hidden or empty segments).
 * Run: make fuzz && ./build-fuzz/fuzz_http_head -max_total_time=20 fuzz/corpus/http_head
 */
#include "server/server.h"
#include "server/webui.h"
#include "spec/api.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* --path's name check on a path: an accepted name stays inside the folder by construction. */
static void check_rel_path(const char *path) {
    char rel[256];
    if (!srv_webui_rel_path(path, rel, sizeof rel)) return;
    if (!rel[0] || rel[0] == '/' || strstr(rel, "//")) abort();
    for (const char *s = rel; s; s = strchr(s, '/'), s = s ? s + 1 : NULL)
        if (*s == '.' || *s == '/' || !*s) abort();   /* "..", ".x", "" */
    (void)srv_webui_ctype(rel);
}

/* A --cors-origins value and an Origin from the bytes (split at the first newline). */
static void check_cors(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s) return;
    memcpy(s, data, size);
    s[size] = 0;
    char *nl = strchr(s, '\n'), *origin = nl ? nl + 1 : NULL;
    if (nl) *nl = 0;
    char msg[320] = "";
    bool valid = srv_cors_valid(s, msg, sizeof msg);
    if (!valid && !msg[0]) abort();
    if (valid && !strcmp(s, "*") && !srv_cors_allowed(s, origin)) abort();
    if (valid && srv_cors_allowed(s, origin) && strcmp(s, "*") && !origin) abort();
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    check_cors(data, size);
    if (size < 1) return 0;
    size_t body_max = (size_t)data[0] * 1024;
    const char *buf = (const char *)data + 1;
    size_t n = size - 1;
    size_t end = srv_head_end(buf, n);
    if (end > n) abort();
    if (!end) return 0;
    if (srv_head_end(buf, end) != end) abort();
    srv_head h;
    char msg[160];
    int rc = srv_head_check(buf, end, body_max, &h, msg, sizeof msg);
    if (rc != 0 && rc != 400 && rc != 413 && rc != 501 && rc != 505) abort();
    if (rc != 0) {
        if (!msg[0]) abort();   /* every refusal says why */
        return 0;
    }
    if (!h.method[0] || strlen(h.method) >= sizeof h.method || strlen(h.path) >= sizeof h.path) abort();
    if (h.content_length < -1 || (h.content_length >= 0 && (uint64_t)h.content_length > body_max)) abort();
    if (h.chunked && h.content_length >= 0) abort();
    check_rel_path(h.path);
    return 0;
}
