/*
 * fuzz_http_head.c — libFuzzer target for the request-head check of `spex serve`'s front door
 * (src/server/head.c): arbitrary bytes as the start of a connection's stream.
 *
 * Byte 0 picks the body limit (0 .. 255 KiB); the rest is the stream. Checked: no crash or
 * sanitizer report; srv_head_end finds a head inside the bytes, the same one in the head alone;
 * srv_head_check answers 0 or one of 400, 413, 501, 505; an accepted head has a method, a
 * Content-Length within the limit, and not both Content-Length and chunked.
 * Run: make fuzz && ./build-fuzz/fuzz_http_head -max_total_time=20 fuzz/corpus/http_head
 */
#include "server/server.h"
#include "spec/api.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
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
    return 0;
}
