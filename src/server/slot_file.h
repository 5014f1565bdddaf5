/*
 * slot_file.h — spex's saved-slot file (POST /slots/{id}?action=save|restore), slot_file.c.
 *
 * What it is: the file layout, its header validator (model-free: fuzz/fuzz_slot_file.c) and
 * the filename rule. What it is not: the engine's part (engine.c copies the cache image in
 * and out between steps) or HTTP (slots_io.c). Not llama.cpp's format: a file saved by
 * llama-server does not restore here, nor the other way round.
 *
 * Layout, little-endian, SRV_SLOT_HDR bytes of header then the payload:
 *    0  magic "SPEXSLOT"         8  u32 version (1)       12  u32 header bytes (96)
 *   16  arch name, NUL-padded [16]
 *   32  u32 n_layer   36 u32 n_embd   40 u32 n_vocab   44 u32 kv_type   48 u32 n_ctx per slot
 *   52  u32 n_tokens  56 u64 shape hash (the model's hyper-parameters and vocabulary)
 *   64  u64 image bytes  72 u64 FNV-1a 64 of the payload  80 .. 95 zero
 *   payload: n_tokens u32 token ids, then the cache image (model/api.h spex_kv_seq_state_*).
 */
#ifndef SPEX_SERVER_SLOT_FILE_H
#define SPEX_SERVER_SLOT_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SRV_SLOT_HDR 96
#define SRV_SLOT_VERSION 1u

/* What a file must match to restore: the model and the context it was saved from. */
typedef struct srv_slot_ident {
    char arch[16];
    uint32_t n_layer, n_embd, n_vocab, kv_type, n_ctx;
    uint64_t shape_hash;
} srv_slot_ident;

typedef struct srv_slot_hdr {
    srv_slot_ident id;
    uint32_t n_tokens;
    uint64_t image_bytes;
    uint64_t checksum;
} srv_slot_hdr;

uint64_t srv_slot_fnv(uint64_t h, const void *p, size_t n);   /* FNV-1a 64 continued from h */
#define SRV_FNV_INIT 0xcbf29ce484222325ull

/* Writes the header for a payload already at buf + SRV_SLOT_HDR (its checksum computed here). */
void srv_slot_write_header(uint8_t *buf, const srv_slot_ident *id, uint32_t n_tokens, uint64_t image_bytes);
/* Validates a whole file buf[0 .. len) against want: size, magic, version, identity (each
 * field named on mismatch), n_tokens < n_ctx, the exact size, the checksum and every token id
 * < n_vocab. 0 and *out, or 400 with msg. */
int srv_slot_check(const uint8_t *buf, size_t len, const srv_slot_ident *want, srv_slot_hdr *out, char *msg,
                   size_t cap);
/* llama-server's rule for a saved slot's filename (fs_validate_filename): 1 .. 255 bytes of
 * valid UTF-8 with no control characters, no '/', '\\' or ':', not "." or "..", no leading
 * or trailing space or dot. */
bool srv_slot_filename_ok(const char *name);

#endif

/* ======================================================================== */
/* POST /slots/{id}?action=save|restore|erase (slots_io.c)                   */
/* ======================================================================== */

#include "spex.h"
struct srv_engine;

/* What the slot actions need of the server; every pointer borrowed. */
typedef struct srv_slots_io {
    const char *dir;          /* --slot-save-path; NULL: save and restore answer 501       */
    const spex_model *model;
    const spex_tokenizer *tok;
    spex_type kv_type;
    int32_t n_ctx_slot;
    int32_t n_slots;
} srv_slots_io;

/* The identity saved files carry (arch, sizes, KV type, context, shape/vocabulary hash). */
void srv_slots_ident(const srv_slots_io *io, srv_slot_ident *out);
/* One action: id_str the path's id, action the query's (NULL when absent), body the JSON.
 * Returns 200 with *out (malloc'd JSON), or an HTTP status (400, 501, 500, 503) with msg. */
int srv_slots_action(struct srv_engine *e, const srv_slots_io *io, const char *id_str, const char *action,
                     const char *body, size_t len, char **out, char *msg, size_t cap);
