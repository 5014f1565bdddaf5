/*
 * fuzz_server_req.c — libFuzzer target for `spex serve`'s request parsing (src/server/api.c):
 * arbitrary bytes as the JSON body of every endpoint, and through the reasoning split.
 *
 * Input byte 0 picks the endpoint (chat, completions, /completion, /tokenize, /detokenize) and
 * the reasoning-split flags; the rest is the body. Needs no model: api.c depends on cJSON and
 * src/tok only (the Makefile links just those).
 *
 * Checked: no crash, leak or sanitizer report; a parse returns 0 or an HTTP status 400/500/501
 * with a NUL-terminated message; a successful chat parse has >= 1 message with non-NULL
 * content; stop strings are non-empty and fewer than SRV_MAX_STOP; split offsets are ordered
 * and within the text.
 * Run: make fuzz && ./build-fuzz/fuzz_server_req -max_total_time=20 fuzz/corpus/server_req
 */
#include "server/server.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned sel = data[0];
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    char msg[512];
    msg[0] = 0;
    srv_request r;
    int rc;
    switch (sel % 5) {
    case 0: srv_request_init(&r, SRV_EP_CHAT); rc = srv_request_parse(&r, body, len, msg, sizeof msg); break;
    case 1: srv_request_init(&r, SRV_EP_COMPLETIONS); rc = srv_request_parse(&r, body, len, msg, sizeof msg); break;
    case 2: srv_request_init(&r, SRV_EP_COMPLETION); rc = srv_request_parse(&r, body, len, msg, sizeof msg); break;
    case 3: srv_request_init(&r, SRV_EP_COMPLETION); rc = srv_parse_tokenize(&r, body, len, msg, sizeof msg); break;
    default: srv_request_init(&r, SRV_EP_COMPLETION); rc = srv_parse_detokenize(&r, body, len, msg, sizeof msg); break;
    }
    if (rc != 0 && rc != 400 && rc != 500 && rc != 501) __builtin_trap();
    if (rc != 0 && !memchr(msg, 0, sizeof msg)) __builtin_trap();
    if (rc == 0 && sel % 5 == 0) {
        if (r.n_msgs < 1) __builtin_trap();
        for (int i = 0; i < r.n_msgs; i++)
            if (!r.msgs[i].content) __builtin_trap();
    }
    if (r.n_stop > SRV_MAX_STOP) __builtin_trap();
    for (int i = 0; i < r.n_stop; i++)
        if (!r.stop[i][0] || strlen(r.stop[i]) >= SRV_MAX_STOP_LEN) __builtin_trap();
    srv_request_free(&r);

    size_t r0, r1, c0;
    if (srv_split_reasoning(body, len, (sel >> 3) & 1, (sel >> 4) & 1, &r0, &r1, &c0) == SRV_SPLIT_YES)
        if (!(r0 <= r1 && r1 <= c0 && c0 <= len)) __builtin_trap();
    return 0;
}
