/*
 * slots_io.c — POST /slots/{id}?action=save|restore|erase (llama-server's slot persistence;
 * docs/server.md "Saving and restoring slots").
 *
 * What it is: the request's checks, the file I/O and the responses. The file is read, written
 * and validated on the connection's thread; the engine thread only copies the slot's cache
 * image out or in between steps (engine.c slot_action_one), so a large file never stalls the
 * running streams. Files are written to a temporary name and renamed, so a crash mid-write
 * leaves no half file under the requested name. What it is not: the file layout (slot_file.c)
 * or the cache image (model/kv_state.c). Token ids are stored as the host's int32, which is the
 * file's little-endian u32 on every target spex builds for (x86-64, arm64).
 */
#include "server/server.h"
#include "server/slot_file.h"
#include "tok/api.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "slot files store tokens as the host's int32: little-endian hosts only"
#endif

void srv_slots_ident(const srv_slots_io *io, srv_slot_ident *out) {
    memset(out, 0, sizeof *out);
    const spex_model_hparams *hp = spex_model_get_hparams(io->model);
    snprintf(out->arch, sizeof out->arch, "%s", spex_arch_name(hp->arch));
    out->n_layer = (uint32_t)hp->n_layer;
    out->n_embd = (uint32_t)hp->n_embd;
    out->n_vocab = (uint32_t)hp->n_vocab;
    out->kv_type = (uint32_t)io->kv_type;
    out->n_ctx = (uint32_t)io->n_ctx_slot;
    const int32_t shape[] = {hp->n_vocab,   hp->n_embd,      hp->n_layer,     hp->n_head,      hp->n_head_kv,
                             hp->head_dim,  hp->n_ff,        hp->n_rot,       hp->rope_mode,   hp->n_recurrent,
                             hp->ssm_d_conv, hp->ssm_d_state, hp->ssm_n_group, hp->ssm_dt_rank, hp->ssm_d_inner,
                             hp->attn_gated, hp->qk_norm};
    uint64_t h = srv_slot_fnv(SRV_FNV_INIT, shape, sizeof shape);
    h = srv_slot_fnv(h, &hp->rope_freq_base, sizeof hp->rope_freq_base);
    int32_t nv = spex_tokenizer_n_vocab(io->tok);
    for (int32_t i = 0; i < nv; i++) {
        spex_str t = spex_token_text(io->tok, i);
        h = srv_slot_fnv(h, t.ptr, t.len);
        h = srv_slot_fnv(h, "", 1);   /* a separator: "ab","c" differs from "a","bc" */
    }
    out->shape_hash = h;
}

/* The body's "filename", checked by llama-server's rule; NULL with msg set on error. */
static const char *body_filename(const cJSON *o, char *msg, size_t cap) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, "filename");
    if (!cJSON_IsString(f)) return srv_fail(msg, cap, 400, "%s", "'filename' (a string) is required"), NULL;
    if (!srv_slot_filename_ok(f->valuestring)) return srv_fail(msg, cap, 400, "%s", "Invalid filename"), NULL;
    return f->valuestring;
}

static bool write_all(int fd, const uint8_t *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w, n -= (size_t)w;
    }
    return true;
}

static int do_save(srv_engine *e, const srv_slots_io *io, int id, const char *name, cJSON *res, char *msg, size_t cap) {
    srv_slot_job j;
    memset(&j, 0, sizeof j);
    j.action = SRV_SLOT_SAVE, j.slot = id, j.hdr_room = SRV_SLOT_HDR;
    if (!srv_engine_slot_action(e, &j)) return srv_fail(msg, cap, 503, "%s", "the server is shutting down");
    if (j.err_code) return srv_fail(msg, cap, j.err_code, "%s", j.err_msg);
    double t0 = spex_now_s();
    srv_slot_ident ident;
    srv_slots_ident(io, &ident);
    srv_slot_write_header(j.buf, &ident, (uint32_t)j.n, j.len - SRV_SLOT_HDR - 4u * (size_t)j.n);
    char path[4096], tmp[4096 + 48];
    snprintf(path, sizeof path, "%s/%s", io->dir, name);
    /* A name no other save uses (two saves to one name each write their own file) and created
     * here (O_EXCL): a link planted at it is never followed, so no file outside is written. */
    static unsigned tmp_seq;
    snprintf(tmp, sizeof tmp, "%s.tmp%ld.%u", path, (long)getpid(), __atomic_fetch_add(&tmp_seq, 1u, __ATOMIC_RELAXED));
    (void)mkdir(io->dir, 0755);   /* llama-server creates the folder too; an error shows at open */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    bool ok = fd >= 0 && write_all(fd, j.buf, j.len);
    if (fd >= 0 && close(fd) != 0) ok = false;
    if (ok && rename(tmp, path) != 0) ok = false;
    int saved_errno = errno;
    free(j.buf);
    if (!ok) {
        unlink(tmp);
        return srv_fail(msg, cap, 500, "cannot write the slot file: %s", strerror(saved_errno));
    }
    cJSON_AddNumberToObject(res, "n_saved", j.n);
    cJSON_AddNumberToObject(res, "n_written", (double)j.len);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(res, "timings"), "save_ms", j.ms + (spex_now_s() - t0) * 1e3);
    return 0;
}

/* Empties slot id (erase); 0, or 503 when the engine stopped. */
static int erase(srv_engine *e, int id, int32_t *n_erased, char *msg, size_t cap) {
    srv_slot_job j;
    memset(&j, 0, sizeof j);
    j.action = SRV_SLOT_ERASE, j.slot = id;
    if (!srv_engine_slot_action(e, &j)) return srv_fail(msg, cap, 503, "%s", "the server is shutting down");
    if (j.err_code) return srv_fail(msg, cap, j.err_code, "%s", j.err_msg);
    *n_erased = j.n;
    return 0;
}

static int read_file_checked(srv_engine *e, const srv_slots_io *io, const char *name, uint8_t **out, size_t *out_len,
                             srv_slot_hdr *h, char *msg, size_t cap);

/* A restore that fails for its file leaves the slot empty, as llama-server's does (its cache
 * may be half written there): the erase, like every action, waits for a running request. */
static int do_restore(srv_engine *e, const srv_slots_io *io, int id, const char *name, cJSON *res, char *msg,
                      size_t cap) {
    double t0 = spex_now_s();
    uint8_t *buf = NULL;
    size_t got = 0;
    srv_slot_hdr h = {0};
    int rc = read_file_checked(e, io, name, &buf, &got, &h, msg, cap);
    if (rc) {
        char m2[256];
        int32_t n = 0;
        int rc2 = erase(e, id, &n, m2, sizeof m2);
        if (rc2) snprintf(msg, cap, "%s", m2);
        return rc2 ? rc2 : rc;
    }
    srv_slot_job j;
    memset(&j, 0, sizeof j);
    j.action = SRV_SLOT_RESTORE, j.slot = id;
    j.tokens = (const int32_t *)(const void *)(buf + SRV_SLOT_HDR);   /* 4-aligned: malloc + 96 */
    j.n = (int32_t)h.n_tokens;
    j.image = buf + SRV_SLOT_HDR + 4u * (size_t)h.n_tokens;
    j.image_bytes = h.image_bytes;
    bool ran = srv_engine_slot_action(e, &j);
    free(buf);
    if (!ran) return srv_fail(msg, cap, 503, "%s", "the server is shutting down");
    if (j.err_code) return srv_fail(msg, cap, j.err_code, "%s", j.err_msg);
    cJSON_AddNumberToObject(res, "n_restored", j.n);
    cJSON_AddNumberToObject(res, "n_read", (double)got);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(res, "timings"), "restore_ms", (spex_now_s() - t0) * 1e3);
    return 0;
}

/* Reads DIR/name whole and validates it for this server: 0 with *out (malloc'd), or 400/500. */
static int read_file_checked(srv_engine *e, const srv_slots_io *io, const char *name, uint8_t **out, size_t *out_len,
                             srv_slot_hdr *hp, char *msg, size_t cap) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", io->dir, name);
    /* O_NONBLOCK: opening a FIFO (or a device) must not wait for a writer; fstat refuses it */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return srv_fail(msg, cap, 400, "cannot open the slot file: %s", strerror(errno));
    struct stat stt;
    /* the largest file this server could have written: a full slot (n_ctx - 1 tokens) */
    uint64_t max = SRV_SLOT_HDR + 4u * (uint64_t)io->n_ctx_slot + srv_engine_image_max(e, io->n_ctx_slot - 1);
    if (fstat(fd, &stt) != 0 || !S_ISREG(stt.st_mode) || (uint64_t)stt.st_size > max) {
        close(fd);
        return srv_fail(msg, cap, 400, "%s", "invalid slot file: not a regular file, or larger than a full slot's file");
    }
    size_t len = (size_t)stt.st_size;
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) {
        close(fd);
        return srv_fail(msg, cap, 500, "%s", "out of memory");
    }
    size_t got = 0;
    while (got < len) {
        ssize_t r = read(fd, buf + got, len - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    srv_slot_ident want;
    srv_slots_ident(io, &want);
    srv_slot_hdr h;
    int rc = srv_slot_check(buf, got, &want, &h, msg, cap);
    /* the exact layout is the engine's check (spex_kv_seq_state_load); this bounds it */
    if (!rc && h.image_bytes > srv_engine_image_max(e, (int32_t)h.n_tokens)) {
        snprintf(msg, cap, "invalid slot file: a cache image of %llu bytes, %u tokens take at most %llu",
                 (unsigned long long)h.image_bytes, h.n_tokens,
                 (unsigned long long)srv_engine_image_max(e, (int32_t)h.n_tokens));
        rc = 400;
    }
    if (rc) {
        free(buf);
        return rc;
    }
    *out = buf, *out_len = got, *hp = h;
    return 0;
}

int srv_slots_action(struct srv_engine *e, const srv_slots_io *io, const char *id_str, const char *action,
                     const char *body, size_t len, char **out, char *msg, size_t cap) {
    *out = NULL;
    char *end = NULL;
    errno = 0;
    long id = id_str && *id_str >= '0' && *id_str <= '9' ? strtol(id_str, &end, 10) : -1;
    if (id < 0 || errno || !end || *end || id >= io->n_slots) return srv_fail(msg, cap, 400, "%s", "Invalid slot ID");
    int a = !action                  ? 0
                        : !strcmp(action, "save")    ? SRV_SLOT_SAVE
                        : !strcmp(action, "restore") ? SRV_SLOT_RESTORE
                        : !strcmp(action, "erase")   ? SRV_SLOT_ERASE
                                                     : 0;
    if (!a) return srv_fail(msg, cap, 400, "%s", "Invalid action");
    if (a != SRV_SLOT_ERASE && !io->dir)
        return srv_fail(msg, cap, 501, "%s", "This server does not support slots action. Start it with `--slot-save-path`");
    cJSON *o = NULL;
    const char *name = NULL;
    if (a != SRV_SLOT_ERASE) {
        if (!srv_utf8_valid(body, len) || !(o = cJSON_ParseWithLength(body ? body : "", len)) || !cJSON_IsObject(o)) {
            cJSON_Delete(o);
            return srv_fail(msg, cap, 400, "%s", "the request body must be a JSON object with 'filename'");
        }
        if (!(name = body_filename(o, msg, cap))) {
            cJSON_Delete(o);
            return 400;
        }
        /* DIR/NAME and the save's temporary name (32 bytes more) fit the path buffers: a cut
         * path would name another file (the one with NAME's first bytes) */
        if (strlen(io->dir) + 1 + strlen(name) + 32 >= 4096) {
            cJSON_Delete(o);
            return srv_fail(msg, cap, 400, "%s", "Invalid filename: the slot file's path is too long");
        }
    }
    cJSON *res = cJSON_CreateObject();
    cJSON_AddNumberToObject(res, "id_slot", (double)id);
    if (name) cJSON_AddStringToObject(res, "filename", name);
    int rc = 0;
    if (a == SRV_SLOT_SAVE) rc = do_save(e, io, (int)id, name, res, msg, cap);
    else if (a == SRV_SLOT_RESTORE) rc = do_restore(e, io, (int)id, name, res, msg, cap);
    else {
        int32_t n = 0;
        if (!(rc = erase(e, (int)id, &n, msg, cap))) cJSON_AddNumberToObject(res, "n_erased", n);
    }
    cJSON_Delete(o);
    if (!rc && !(*out = cJSON_PrintUnformatted(res))) rc = srv_fail(msg, cap, 500, "%s", "out of memory");
    cJSON_Delete(res);
    return rc;
}
