/*
 * fuzz_slot_file.c — libFuzzer target for the saved-slot file validator of `spex serve`
 * (src/server/slot_file.c): arbitrary bytes as a file for POST /slots/{id}?action=restore, and
 * as a filename.
 *
 * Byte 0 selects how the bytes are used: bit 0 set, the rest is framed by a valid header made
 * for a fixed identity (so the payload checks are reached too; bit 1 then flips one header
 * byte chosen by byte 1); else the bytes are the whole file. Checked: no crash or sanitizer
 * report; srv_slot_check answers 0 or 400 with a message; an accepted file matches the identity,
 * has n_tokens < n_ctx, exactly the size its header describes and tokens inside the
 * vocabulary; an untouched framed file is accepted. The bytes as a filename: an accepted name
 * has no '/', '\\', no ".." and is not empty.
 * Run: make fuzz && ./build-fuzz/fuzz_slot_file -max_total_time=20
 */
#include "server/server.h"
#include "server/slot_file.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const srv_slot_ident ID = {"qwen3", 2, 64, 256, 1, 512, 0x1234567890abcdefull};

static void check(const uint8_t *buf, size_t len, bool must_pass) {
    srv_slot_hdr h;
    char msg[256];
    msg[0] = 0;
    int rc = srv_slot_check(buf, len, &ID, &h, msg, sizeof msg);
    if (rc != 0 && rc != 400) __builtin_trap();
    if (rc != 0 && (!msg[0] || !memchr(msg, 0, sizeof msg))) __builtin_trap();
    if (must_pass && rc != 0) __builtin_trap();
    if (rc != 0) return;
    if (memcmp(&h.id, &ID, sizeof ID) || h.n_tokens >= ID.n_ctx) __builtin_trap();
    if ((uint64_t)SRV_SLOT_HDR + 4u * (uint64_t)h.n_tokens + h.image_bytes != len) __builtin_trap();
    for (uint32_t i = 0; i < h.n_tokens; i++) {
        uint32_t t;
        memcpy(&t, buf + SRV_SLOT_HDR + 4u * i, 4);
        if (t >= ID.n_vocab) __builtin_trap();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    unsigned sel = data[0];
    const uint8_t *p = data + 2;
    size_t n = size - 2;
    /* as a filename */
    char *name = malloc(n + 1);
    if (!name) return 0;
    memcpy(name, p, n);
    name[n] = 0;
    if (srv_slot_filename_ok(name) && (!name[0] || strchr(name, '/') || strchr(name, '\\') || strstr(name, "..")))
        __builtin_trap();
    free(name);
    if (!(sel & 1)) {
        check(p, n, false);
        return 0;
    }
    /* framed: tokens (each byte a token id < 256) then the rest as the image */
    uint32_t nt = n / 2 < 100 ? (uint32_t)(n / 2) : 100;
    uint8_t *buf = malloc(SRV_SLOT_HDR + 4u * nt + (n - nt) + 1);
    if (!buf) return 0;
    for (uint32_t i = 0; i < nt; i++) {
        uint32_t t = p[i];
        memcpy(buf + SRV_SLOT_HDR + 4u * i, &t, 4);
    }
    memcpy(buf + SRV_SLOT_HDR + 4u * nt, p + nt, n - nt);
    srv_slot_write_header(buf, &ID, nt, n - nt);
    size_t len = SRV_SLOT_HDR + 4u * nt + (n - nt);
    bool flip = sel & 2;
    if (flip) buf[data[1] % SRV_SLOT_HDR] ^= (uint8_t)(1u << (sel >> 5));
    check(buf, len, !flip);
    free(buf);
    return 0;
}
