/*
 * slot_file.c — the saved-slot file's header, checksum and filename rule (slot_file.h has the
 * layout). Model-free and allocation-free, so the validator is fuzzed on its own
 * (fuzz/fuzz_slot_file.c). What it is not: file I/O (slots_io.c) or the cache image.
 */
#include "server/slot_file.h"
#include "server/server.h"

#include <stdio.h>
#include <string.h>

static const char MAGIC[8] = {'S', 'P', 'E', 'X', 'S', 'L', 'O', 'T'};

uint64_t srv_slot_fnv(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }

void srv_slot_write_header(uint8_t *buf, const srv_slot_ident *id, uint32_t n_tokens, uint64_t image_bytes) {
    memset(buf, 0, SRV_SLOT_HDR);
    memcpy(buf, MAGIC, 8);
    put32(buf + 8, SRV_SLOT_VERSION);
    put32(buf + 12, SRV_SLOT_HDR);
    memcpy(buf + 16, id->arch, sizeof id->arch);
    put32(buf + 32, id->n_layer);
    put32(buf + 36, id->n_embd);
    put32(buf + 40, id->n_vocab);
    put32(buf + 44, id->kv_type);
    put32(buf + 48, id->n_ctx);
    put32(buf + 52, n_tokens);
    put64(buf + 56, id->shape_hash);
    put64(buf + 64, image_bytes);
    size_t payload = (size_t)n_tokens * 4 + (size_t)image_bytes;
    put64(buf + 72, srv_slot_fnv(SRV_FNV_INIT, buf + SRV_SLOT_HDR, payload));
}

static int fail(char *msg, size_t cap, const char *what) {
    snprintf(msg, cap, "invalid slot file: %s", what);
    return 400;
}

static int differ(char *msg, size_t cap, const char *field, uint64_t have, uint64_t want) {
    snprintf(msg, cap, "the slot file was saved from another model or context: %s %llu, this server's %llu", field,
             (unsigned long long)have, (unsigned long long)want);
    return 400;
}

int srv_slot_check(const uint8_t *buf, size_t len, const srv_slot_ident *want, srv_slot_hdr *out, char *msg,
                   size_t cap) {
    if (len < SRV_SLOT_HDR) return fail(msg, cap, "shorter than its header (truncated?)");
    if (memcmp(buf, MAGIC, 8)) return fail(msg, cap, "bad magic (not a spex slot file)");
    uint32_t ver = get32(buf + 8);
    if (ver != SRV_SLOT_VERSION) {
        snprintf(msg, cap, "invalid slot file: version %u, this server reads %u", ver, SRV_SLOT_VERSION);
        return 400;
    }
    if (get32(buf + 12) != SRV_SLOT_HDR) return fail(msg, cap, "bad header size");
    srv_slot_hdr h;
    memset(&h, 0, sizeof h);
    memcpy(h.id.arch, buf + 16, sizeof h.id.arch);
    for (size_t i = strnlen(h.id.arch, sizeof h.id.arch); i < sizeof h.id.arch; i++)
        if (h.id.arch[i]) return fail(msg, cap, "architecture name not NUL-padded");
    h.id.n_layer = get32(buf + 32);
    h.id.n_embd = get32(buf + 36);
    h.id.n_vocab = get32(buf + 40);
    h.id.kv_type = get32(buf + 44);
    h.id.n_ctx = get32(buf + 48);
    h.n_tokens = get32(buf + 52);
    h.id.shape_hash = get64(buf + 56);
    h.image_bytes = get64(buf + 64);
    h.checksum = get64(buf + 72);
    for (int i = 80; i < SRV_SLOT_HDR; i++)
        if (buf[i]) return fail(msg, cap, "reserved header bytes are not zero");
    if (strcmp(h.id.arch, want->arch)) {
        snprintf(msg, cap, "the slot file was saved from another model: architecture '%s', this server's '%s'",
                 h.id.arch, want->arch);
        return 400;
    }
    if (h.id.n_layer != want->n_layer) return differ(msg, cap, "n_layer", h.id.n_layer, want->n_layer);
    if (h.id.n_embd != want->n_embd) return differ(msg, cap, "n_embd", h.id.n_embd, want->n_embd);
    if (h.id.n_vocab != want->n_vocab) return differ(msg, cap, "n_vocab", h.id.n_vocab, want->n_vocab);
    if (h.id.kv_type != want->kv_type) return differ(msg, cap, "KV type", h.id.kv_type, want->kv_type);
    if (h.id.n_ctx != want->n_ctx) return differ(msg, cap, "n_ctx per slot", h.id.n_ctx, want->n_ctx);
    if (h.id.shape_hash != want->shape_hash)
        return differ(msg, cap, "model shape/vocabulary hash", h.id.shape_hash, want->shape_hash);
    if (h.n_tokens >= want->n_ctx) {
        snprintf(msg, cap, "invalid slot file: %u tokens do not fit the slot's context of %u", h.n_tokens, want->n_ctx);
        return 400;
    }
    uint64_t need = (uint64_t)SRV_SLOT_HDR + 4u * (uint64_t)h.n_tokens;
    if (h.image_bytes > UINT64_MAX - need || need + h.image_bytes != (uint64_t)len) {
        snprintf(msg, cap, "invalid slot file: %zu bytes, its header describes %llu (truncated?)", len,
                 (unsigned long long)(h.image_bytes > UINT64_MAX - need ? UINT64_MAX : need + h.image_bytes));
        return 400;
    }
    if (srv_slot_fnv(SRV_FNV_INIT, buf + SRV_SLOT_HDR, len - SRV_SLOT_HDR) != h.checksum)
        return fail(msg, cap, "checksum mismatch (the file is corrupt)");
    for (uint32_t i = 0; i < h.n_tokens; i++) {
        uint32_t t = get32(buf + SRV_SLOT_HDR + 4u * i);
        if (t >= want->n_vocab) {
            snprintf(msg, cap, "invalid slot file: token %u at %u is outside the vocabulary (%u)", t, i, want->n_vocab);
            return 400;
        }
    }
    *out = h;
    return 0;
}

bool srv_slot_filename_ok(const char *name) {
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > 255 || !srv_utf8_valid(name, n)) return false;
    if (!strcmp(name, ".") || !strcmp(name, "..")) return false;
    if (name[0] == ' ' || name[n - 1] == ' ' || name[n - 1] == '.') return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c < 0x20 || c == 0x7f || c == '/' || c == '\\' || c == ':') return false;
    }
    return !strstr(name, "..");   /* stricter than needed without separators: never a parent step */
}
