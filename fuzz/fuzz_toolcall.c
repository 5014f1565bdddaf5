/*
 * fuzz_toolcall.c — libFuzzer target for the streaming tool-call splitter of `spex serve`
 * (src/server/toolcall.c): arbitrary generated text, fed in pieces whose lengths come from
 * the input, through srv_toolparse_feed / _finish.
 *
 * Byte 0 seeds the piece lengths (1 .. 16 bytes); the rest is the text. Checked: no crash, leak
 * or sanitizer report; the content released after every piece is a prefix of the final
 * content of the same text fed in one piece (content is never taken back); both ways give
 * the same calls; every call has a non-NULL name and arguments.
 * Run: make fuzz && ./build-fuzz/fuzz_toolcall -max_total_time=20 fuzz/corpus/toolcall
 */
#include "server/server.h"
#include "spec/api.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint32_t seed = data[0] * 2654435761u + 1;
    const char *text = (const char *)data + 1;
    const size_t n = size - 1;

    srv_toolparse whole, parts;
    srv_strbuf out_whole = {0}, out_parts = {0};
    srv_toolparse_init(&whole);
    srv_toolparse_init(&parts);
    srv_toolparse_feed(&whole, text, n, &out_whole);
    srv_toolparse_finish(&whole, &out_whole);

    for (size_t at = 0; at < n;) {
        seed = seed * 1103515245u + 12345u;
        size_t k = 1 + (seed >> 16) % 16;
        if (k > n - at) k = n - at;
        srv_toolparse_feed(&parts, text + at, k, &out_parts);
        at += k;
        if (!whole.oom && !parts.oom && out_parts.len > out_whole.len) abort();
        if (!whole.oom && !parts.oom && out_parts.len && memcmp(out_parts.p, out_whole.p, out_parts.len)) abort();
    }
    srv_toolparse_finish(&parts, &out_parts);
    if (!whole.oom && !parts.oom) {
        if (out_parts.len != out_whole.len || (out_parts.len && memcmp(out_parts.p, out_whole.p, out_parts.len)))
            abort();
        if (parts.n_calls != whole.n_calls) abort();
        for (int i = 0; i < parts.n_calls; i++) {
            if (!parts.calls[i].name || !parts.calls[i].arguments) abort();
            if (strcmp(parts.calls[i].name, whole.calls[i].name) ||
                strcmp(parts.calls[i].arguments, whole.calls[i].arguments))
                abort();
        }
    }
    srv_toolparse_free(&whole);
    srv_toolparse_free(&parts);
    srv_strbuf_free(&out_whole);
    srv_strbuf_free(&out_parts);
    return 0;
}
