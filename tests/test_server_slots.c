/*
 * test_server_slots.c — `spex serve` slot persistence (POST /slots/{id}?action=save|restore|
 * erase with --slot-save-path) and fill-in-the-middle (POST /infill), end to end over raw HTTP.
 *
 * What it checks: a slot saved after a greedy completion, erased, and restored into another
 * slot gives the same greedy text to the same request, which now reuses the restored prefix
 * (tokens_cached); on tiny-qwen3 with its DFlash2 drafter (the restored slot steps without
 * drafts) and on the recurrent tiny-qwen35; the file's size is n_written; corrupt files (cut
 * short, a flipped magic, another model's shape hash, a token outside the vocabulary, more
 * tokens than the context, a flipped payload byte, a cache image 4 bytes short) are 400s naming the fault and leave the slot
 * empty and serving; bad filenames, ids and actions are 400s; without --slot-save-path save and
 * restore are 501 and erase works; a save of a slot with a running request waits for its end
 * and saves all of it. /infill on a
 * copy of tiny-qwen3 given FIM token ids (fim_pre/suf/mid/rep/sep keys): the prompt length
 * equals the layout the test builds from /tokenize pieces, and the greedy text equals
 * /completion's on that layout's ids (PSM, and SPM on a server with --spm-infill); the model without FIM tokens and malformed input_extra
 * are 400s. The slot-file validator itself is also fuzzed (fuzz/fuzz_slot_file.c).
 */
#include "gguf_fixtures.h"
#include "server/slot_file.h"
#include "srv_client.h"
#include "test.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TINY_QWEN3 "tests/data/models/tiny-qwen3.gguf"
#define TINY_DRAFT2 "tests/data/dflash/tiny-qwen3.dflash2.gguf"
#define TINY_QWEN35 "tests/data/qwen35/tiny-qwen35.gguf"

static shared_server g_pair, g_q35, g_plain, g_fim;

static int pair_port(void) {
    const char *a[] = {"-m", TINY_QWEN3, "-md", TINY_DRAFT2, "-np", "2", "-c", "1024", "-t", "1",
                       "--slot-save-path", test_tmp_dir(), NULL};
    return shared_server_port(&g_pair, a);
}
static int q35_port(void) {
    const char *a[] = {"-m", TINY_QWEN35, "-np", "2", "-c", "1024", "-t", "1", "--slot-save-path", test_tmp_dir(), NULL};
    return shared_server_port(&g_q35, a);
}
static int plain_port(void) {
    const char *a[] = {"-m", TINY_QWEN3, "-np", "1", "-t", "1", NULL};
    return shared_server_port(&g_plain, a);
}

/* ---- helpers ---------------------------------------------------------------------------- */

static cJSON *post_status(int port, const char *path, const char *body, int *status) {
    resp r;
    if (!http(port, "POST", path, NULL, body, &r)) return *status = -1, NULL;
    *status = r.status;
    cJSON *o = cJSON_Parse(r.body);
    resp_free(&r);
    return o;
}

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItem(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* A greedy /completion; its content (malloc'd), slot, tokens_cached. */
static char *complete(int port, const char *prompt_json, int n_predict, int *slot, int *cached) {
    char body[8192];
    snprintf(body, sizeof body, "{\"prompt\": %s, \"n_predict\": %d, \"temperature\": 0}", prompt_json, n_predict);
    int st = 0;
    cJSON *o = post_status(port, "/completion", body, &st);
    char *c = NULL;
    if (st == 200 && cJSON_IsString(cJSON_GetObjectItem(o, "content"))) {
        c = strdup(cJSON_GetObjectItem(o, "content")->valuestring);
        if (slot) *slot = (int)num(o, "id_slot");
        if (cached) *cached = (int)num(o, "tokens_cached");
    } else {
        printf("  /completion -> %d\n", st);
    }
    cJSON_Delete(o);
    return c;
}

/* POST /slots/{id}?action=ACT {"filename": NAME}; the parsed answer and *status. */
static cJSON *slot_act(int port, int id, const char *act, const char *name, int *status) {
    char path[128], body[512];
    snprintf(path, sizeof path, "/slots/%d?action=%s", id, act);
    snprintf(body, sizeof body, "{\"filename\": \"%s\"}", name ? name : "");
    return post_status(port, path, name ? body : "{}", status);
}

/* An error answer of status code whose message contains needle. */
static bool slot_err(int port, const char *path, const char *body, int code, const char *needle) {
    resp r;
    if (!http(port, "POST", path, NULL, body, &r)) return false;
    bool ok = is_error(&r, code, NULL) && (!needle || strstr(r.body, needle));
    if (!ok) printf("  %s %s: want %d '%s', got %d %s\n", path, body, code, needle ? needle : "", r.status, r.body);
    resp_free(&r);
    return ok;
}

static int n_cached(int port, int id) {
    resp r;
    if (!http(port, "GET", "/slots", NULL, NULL, &r)) return -2;
    cJSON *a = cJSON_Parse(r.body);
    int n = (int)num(cJSON_GetArrayItem(a, id), "n_cached");
    cJSON_Delete(a);
    resp_free(&r);
    return n;
}

#define PROMPT "\"The quick brown fox jumps over the lazy dog and then\""

/* The round trip on one server: generate in some slot, save, erase both, restore into the
 * other slot, generate again. */
static void round_trip(int port, const char *file) {
    int slot = -1, cached = -1, st = 0;
    for (int s = 0; s < 2; s++) cJSON_Delete(slot_act(port, s, "erase", NULL, &st));
    char *a = complete(port, PROMPT, 16, &slot, &cached);
    CHECK(a && slot >= 0 && slot < 2);
    if (!a || slot < 0 || slot > 1) return free(a);
    cJSON *o = slot_act(port, slot, "save", file, &st);
    CHECK_EQ_INT(st, 200);
    int saved = (int)num(o, "n_saved");
    CHECK(saved > 16);
    CHECK_EQ_INT((int)num(o, "id_slot"), slot);
    CHECK(cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "timings"), "save_ms")));
    struct stat sb;
    CHECK(stat(test_tmp_path(file), &sb) == 0 && (double)sb.st_size == num(o, "n_written"));
    cJSON_Delete(o);
    CHECK_EQ_INT(n_cached(port, slot), saved);

    o = slot_act(port, slot, "erase", NULL, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT((int)num(o, "n_erased"), saved);
    cJSON_Delete(o);
    CHECK_EQ_INT(n_cached(port, slot), 0);

    int other = 1 - slot;
    o = slot_act(port, other, "restore", file, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT((int)num(o, "n_restored"), saved);
    CHECK((double)sb.st_size == num(o, "n_read"));
    CHECK(cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "timings"), "restore_ms")));
    cJSON_Delete(o);
    CHECK_EQ_INT(n_cached(port, other), saved);

    int slot2 = -1, cached2 = -1;
    char *b = complete(port, PROMPT, 16, &slot2, &cached2);
    CHECK_MSG(b && !strcmp(a, b), "after restore '%s', before '%s'", b ? b : "(null)", a);
    CHECK_EQ_INT(slot2, other);
    CHECK_MSG(cached2 > 0, "tokens_cached %d: the restored prefix was not reused", cached2);
    free(a);
    free(b);
}

/* ---- slots ------------------------------------------------------------------------------ */

TEST(save_erase_restore_pair) {
    REQUIRE_SERVER_FROM(port, pair_port);
    round_trip(port, "pair.bin");
}

TEST(save_erase_restore_qwen35) {
    REQUIRE_SERVER_FROM(port, q35_port);
    round_trip(port, "q35.bin");
}

/* A mutated copy of src under name: bytes [0 .. keep) (all when keep is 0), then f applied. */
static bool write_variant(const char *src, const char *name, size_t keep, void (*f)(uint8_t *, size_t)) {
    size_t len = 0;
    uint8_t *b = (uint8_t *)test_slurp(test_tmp_path(src), &len);
    if (!b) return false;
    if (keep) len = keep;
    if (f) f(b, len);
    FILE *fp = fopen(test_tmp_path(name), "wb");
    bool ok = fp && fwrite(b, 1, len, fp) == len;
    if (fp) fclose(fp);
    free(b);
    return ok;
}

static void rehash(uint8_t *b, size_t len) {   /* a valid checksum again (offset 72) */
    uint64_t h = srv_slot_fnv(SRV_FNV_INIT, b + SRV_SLOT_HDR, len - SRV_SLOT_HDR);
    for (int i = 0; i < 8; i++) b[72 + i] = (uint8_t)(h >> (8 * i));
}
static void flip_magic(uint8_t *b, size_t len) { (void)len, b[0] ^= 0x20; }
static void other_shape(uint8_t *b, size_t len) { b[56] ^= 1, rehash(b, len); }
static void bad_token(uint8_t *b, size_t len) {
    b[SRV_SLOT_HDR + 7] = 0x7f;   /* token 1 := a huge id */
    rehash(b, len);
}
static void too_many(uint8_t *b, size_t len) { b[52] = 0xff, b[53] = 0xff, rehash(b, len); }
static void flip_payload(uint8_t *b, size_t len) { b[len - 1] ^= 0x55; }
static void other_version(uint8_t *b, size_t len) { (void)len, b[8] = 9; }
static void short_image(uint8_t *b, size_t len) {   /* 4 bytes cut: a header that agrees, a bad image */
    uint64_t img = 0;
    for (int i = 0; i < 8; i++) img |= (uint64_t)b[64 + i] << (8 * i);
    img -= 4;
    for (int i = 0; i < 8; i++) b[64 + i] = (uint8_t)(img >> (8 * i));
    rehash(b, len);
}

TEST(restore_rejects_corrupt_files) {
    REQUIRE_SERVER_FROM(port, pair_port);
    int st = 0;
    for (int s = 0; s < 2; s++) cJSON_Delete(slot_act(port, s, "erase", NULL, &st));
    int slot = -1;
    char *a = complete(port, PROMPT, 8, &slot, NULL);
    CHECK(a != NULL);
    cJSON_Delete(slot_act(port, slot, "save", "good.bin", &st));
    CHECK_EQ_INT(st, 200);
    struct stat sb;
    CHECK(stat(test_tmp_path("good.bin"), &sb) == 0);
    const struct {
        const char *name;
        size_t keep;
        void (*f)(uint8_t *, size_t);
        const char *needle;
    } cases[] = {
        {"cut.bin", (size_t)sb.st_size - 5, NULL, "truncated"},
        {"head.bin", 40, NULL, "shorter than its header"},
        {"magic.bin", 0, flip_magic, "magic"},
        {"version.bin", 0, other_version, "version 9"},
        {"shape.bin", 0, other_shape, "another model"},
        {"token.bin", 0, bad_token, "outside the vocabulary"},
        {"many.bin", 0, too_many, "do not fit"},
        {"payload.bin", 0, flip_payload, "checksum"},
        {"image.bin", (size_t)sb.st_size - 4, short_image, "no image of"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        CHECK(write_variant("good.bin", cases[i].name, cases[i].keep, cases[i].f));
        /* restore into the slot that holds the good prefix: on failure it is left empty */
        char body[128];
        snprintf(body, sizeof body, "{\"filename\": \"%s\"}", cases[i].name);
        char path[64];
        snprintf(path, sizeof path, "/slots/%d?action=restore", slot);
        CHECK_MSG(slot_err(port, path, body, 400, cases[i].needle), "case %s", cases[i].name);
        CHECK_EQ_INT(n_cached(port, slot), 0);
    }
    /* the server still serves, with the same greedy text */
    char *b = complete(port, PROMPT, 8, NULL, NULL);
    CHECK(b && a && !strcmp(a, b));
    free(a);
    free(b);
}

TEST(bad_requests) {
    REQUIRE_SERVER_FROM(port, pair_port);
    CHECK(slot_err(port, "/slots/0?action=save", "{\"filename\": \"../x\"}", 400, "Invalid filename"));
    CHECK(slot_err(port, "/slots/0?action=restore", "{\"filename\": \"a/b\"}", 400, "Invalid filename"));
    CHECK(slot_err(port, "/slots/0?action=save", "{\"filename\": \"..\"}", 400, "Invalid filename"));
    CHECK(slot_err(port, "/slots/0?action=save", "{\"filename\": \"\"}", 400, "Invalid filename"));
    CHECK(slot_err(port, "/slots/0?action=save", "{}", 400, "filename"));
    CHECK(slot_err(port, "/slots/0?action=save", "not json", 400, NULL));
    CHECK(slot_err(port, "/slots/0?action=restore", "{\"filename\": \"absent.bin\"}", 400, "cannot open"));
    CHECK(slot_err(port, "/slots/0?action=fly", "{}", 400, "Invalid action"));
    CHECK(slot_err(port, "/slots/0", "{}", 400, "Invalid action"));
    CHECK(slot_err(port, "/slots/2?action=erase", "{}", 400, "Invalid slot ID"));
    CHECK(slot_err(port, "/slots/-1?action=erase", "{}", 400, "Invalid slot ID"));
    CHECK(slot_err(port, "/slots/x?action=erase", "{}", 400, "Invalid slot ID"));
    resp r;
    CHECK(http(port, "GET", "/slots/0?action=erase", NULL, NULL, &r) && r.status == 405);
    resp_free(&r);
}

/* A link planted at the save's temporary name is not followed: the file it points to keeps
 * its bytes and the saved file is a regular file of its own. */
TEST(save_ignores_planted_link) {
    REQUIRE_SERVER_FROM(port, pair_port);
    char victim[512], link_at[512];
    snprintf(victim, sizeof victim, "%s", test_tmp_path("victim.txt"));
    FILE *fp = fopen(victim, "w");
    CHECK(fp && fputs("keep\n", fp) >= 0);
    if (fp) fclose(fp);
    for (int s = 0; s < 2; s++) {   /* every temporary name a save of slot 0 or 1 could use */
        char nm[64];
        snprintf(nm, sizeof nm, "planted.bin.tmp%d", s);
        snprintf(link_at, sizeof link_at, "%s", test_tmp_path(nm));
        unlink(link_at);
        CHECK(symlink(victim, link_at) == 0);
    }
    int st = 0;
    cJSON_Delete(slot_act(port, 0, "save", "planted.bin", &st));
    CHECK_EQ_INT(st, 200);
    size_t n = 0;
    char *v = test_slurp(victim, &n);
    CHECK_MSG(v && n == 5 && !memcmp(v, "keep\n", 5), "the link's target was written (%zu bytes)", n);
    free(v);
    struct stat sb;
    CHECK(lstat(test_tmp_path("planted.bin"), &sb) == 0 && S_ISREG(sb.st_mode));
}

/* A restore from a FIFO (or any file that is not regular) is a prompt 400, not a connection
 * thread blocked in open() until something writes to it. */
TEST(restore_refuses_fifo) {
    REQUIRE_SERVER_FROM(port, pair_port);
    unlink(test_tmp_path("fifo.bin"));
    CHECK(mkfifo(test_tmp_path("fifo.bin"), 0600) == 0);
    time_t t0 = time(NULL);
    CHECK(slot_err(port, "/slots/0?action=restore", "{\"filename\": \"fifo.bin\"}", 400, "regular"));
    CHECK(time(NULL) - t0 < 10);
}

/* A --slot-save-path so long that DIR/NAME passes PATH_MAX: the save is refused, not written
 * under a cut name that another NAME with the same beginning would also get. */
static shared_server g_deep;
static char g_deep_dir[4200];
static int deep_port(void) {
    if (!g_deep_dir[0]) {
        size_t n = (size_t)snprintf(g_deep_dir, sizeof g_deep_dir, "%s", test_tmp_path("deep"));
        mkdir(g_deep_dir, 0755);
        while (n < 3900) {   /* components of 200 bytes */
            g_deep_dir[n++] = '/';
            memset(g_deep_dir + n, 'd', 200);
            n += 200;
            g_deep_dir[n] = 0;
            mkdir(g_deep_dir, 0755);
        }
    }
    const char *a[] = {"-m", TINY_QWEN3, "-np", "1", "-t", "1", "--slot-save-path", g_deep_dir, NULL};
    return shared_server_port(&g_deep, a);
}

TEST(save_path_too_long) {
    REQUIRE_SERVER_FROM(port, deep_port);
    char name[251], body[400];
    memset(name, 'n', 250);
    name[250] = 0;
    snprintf(body, sizeof body, "{\"filename\": \"%s\"}", name);
    CHECK(slot_err(port, "/slots/0?action=save", body, 400, "too long"));
    CHECK(slot_err(port, "/slots/0?action=restore", body, 400, "too long"));
    bool clean = false;
    CHECK_EQ_INT(shared_server_stop(&g_deep, &clean), 0);
}

TEST(without_save_path) {
    REQUIRE_SERVER_FROM(port, plain_port);
    CHECK(slot_err(port, "/slots/0?action=save", "{\"filename\": \"x.bin\"}", 501, "--slot-save-path"));
    CHECK(slot_err(port, "/slots/0?action=restore", "{\"filename\": \"x.bin\"}", 501, "--slot-save-path"));
    int st = 0;
    cJSON *o = slot_act(port, 0, "erase", NULL, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT((int)num(o, "id_slot"), 0);
    CHECK(cJSON_IsNumber(cJSON_GetObjectItem(o, "n_erased")));
    cJSON_Delete(o);
}

TEST(busy_slot_waits) {
    if (!test_spex_bin()) SKIP("no spex binary");
    server s;
    const char *a[] = {"-m", TINY_QWEN3, "-np", "1", "-t", "1", "--slot-save-path", test_tmp_dir(), NULL};
    CHECK_MSG(server_start_slowed(&s, 40, a), "the server did not start");
    /* 30 tokens at >= 40 ms a step: over a second in the slot, unless an end of text comes first */
    int fd = open_request(s.port, "POST", "/completion", NULL,
                          "{\"prompt\": \"hello there\", \"n_predict\": 30, \"temperature\": 0, \"return_tokens\": true}");
    CHECK(fd >= 0);
    bool busy = false;
    for (int i = 0; i < 200 && !busy; i++) {   /* until the request is in its slot */
        resp r;
        if (http(s.port, "GET", "/slots", NULL, NULL, &r) && strstr(r.body, "\"is_processing\":true")) busy = true;
        resp_free(&r);
        if (!busy) usleep(10000);
    }
    CHECK(busy);
    int st = 0;
    cJSON *o = slot_act(s.port, 0, "save", "busy.bin", &st);   /* waits for the request */
    CHECK_EQ_INT(st, 200);
    int saved = (int)num(o, "n_saved");
    cJSON_Delete(o);
    resp r;
    CHECK(fd >= 0 && read_response(fd, &r) && r.status == 200);
    cJSON *c = cJSON_Parse(r.body);
    int n_prompt = (int)num(c, "tokens_evaluated"), n_gen = (int)num(c, "tokens_predicted");
    CHECK_MSG(n_prompt > 0 && n_gen > 0 && saved >= n_prompt + n_gen - 1,
              "saved %d tokens of a request of %d + %d: the save did not wait for its end", saved, n_prompt, n_gen);
    cJSON_Delete(c);
    resp_free(&r);
    bool clean = false;
    CHECK_EQ_INT(server_stop(&s, &clean), 0);
    CHECK(clean);
}

/* ---- /infill ----------------------------------------------------------------------------- */

enum { FIM_PRE = 11, FIM_SUF = 12, FIM_MID = 13, FIM_REP = 14, FIM_SEP = 15 };

static shared_server g_fim_spm;
static char g_fim_model[256];

/* A copy of tiny-qwen3 with FIM token ids (in the test's temporary folder); false on error. */
static bool fim_model(void) {
    char *model = g_fim_model;
    const size_t cap = sizeof g_fim_model;
    if (!model[0]) {
        const char *keys[] = {"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id",
                              "tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.fim_rep_token_id",
                              "tokenizer.ggml.fim_sep_token_id"};
        const uint32_t ids[] = {FIM_PRE, FIM_SUF, FIM_MID, FIM_REP, FIM_SEP};
        char prev[256];
        snprintf(prev, sizeof prev, "%s", TINY_QWEN3);
        for (int i = 0; i < 5; i++) {
            char name[32];
            snprintf(name, sizeof name, "fim%d.gguf", i);
            snprintf(model, cap, "%s", test_tmp_path(name));
            if (!test_write_with_u32(prev, model, keys[i], ids[i])) return model[0] = 0, false;
            snprintf(prev, sizeof prev, "%s", model);
        }
    }
    return true;
}

static int fim_port(void) {
    if (!fim_model()) return -1;
    const char *a[] = {"-m", g_fim_model, "-np", "1", "-c", "2048", "-b", "256", "-t", "1", NULL};
    return shared_server_port(&g_fim, a);
}

static int fim_spm_port(void) {
    if (!fim_model()) return -1;
    const char *a[] = {"-m", g_fim_model, "-np", "1", "-c", "2048", "-b", "256", "-t", "1", "--spm-infill", NULL};
    return shared_server_port(&g_fim_spm, a);
}

/* /tokenize of text without special tokens, appended to ids. */
static bool tok_add(int port, const char *text, int *ids, int *n) {
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "content", text);
    cJSON_AddBoolToObject(req, "add_special", false);
    char *body = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    int st = 0;
    cJSON *o = post_status(port, "/tokenize", body, &st);
    free(body);
    const cJSON *t, *arr = cJSON_GetObjectItem(o, "tokens");
    cJSON_ArrayForEach(t, arr) ids[(*n)++] = t->valueint;
    cJSON_Delete(o);
    return st == 200;
}

/* /infill against the layout built here (PSM, or SPM with --spm-infill). */
static void infill_case(int port, bool spm) {
    const char *prefix = "def add(a, b):\n    ", *suffix = "\n    return c\n", *prompt = "c =";
    /* the layout, built here from /tokenize pieces (docs/server.md "Fill-in-the-middle") */
    int ids[4096], n = 0;
    ids[n++] = FIM_REP;
    CHECK(tok_add(port, "myproject\n", ids, &n));
    ids[n++] = FIM_SEP;
    CHECK(tok_add(port, "util.py\n", ids, &n));
    CHECK(tok_add(port, "def one():\n    return 1\n", ids, &n));
    ids[n++] = FIM_SEP;
    CHECK(tok_add(port, "filename\n", ids, &n));
    int with_bos[8], nb = 0, without[8], nw = 0;   /* does the tokenizer add a BOS? */
    cJSON *o;
    int st = 0;
    o = post_status(port, "/tokenize", "{\"content\": \"a\", \"add_special\": true}", &st);
    const cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItem(o, "tokens")) if (nb < 8) with_bos[nb++] = t->valueint;
    cJSON_Delete(o);
    CHECK(tok_add(port, "a", without, &nw));
    if (nb > nw) ids[n++] = with_bos[0];
    for (int part = 0; part < 2; part++) {
        if ((part == 0) != spm) {   /* PSM: prefix part first */
            ids[n++] = FIM_PRE;
            CHECK(tok_add(port, prefix, ids, &n));
            CHECK(tok_add(port, prompt, ids, &n));
        } else {
            ids[n++] = FIM_SUF;
            CHECK(tok_add(port, suffix, ids, &n));
        }
    }
    ids[n++] = FIM_MID;

    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "input_prefix", prefix);
    cJSON_AddStringToObject(req, "input_suffix", suffix);
    cJSON_AddStringToObject(req, "prompt", prompt);
    cJSON *x = cJSON_AddArrayToObject(req, "input_extra"), *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "filename", "util.py");
    cJSON_AddStringToObject(c, "text", "def one():\n    return 1\n");
    cJSON_AddItemToArray(x, c);
    cJSON_AddNumberToObject(req, "n_predict", 12);
    cJSON_AddNumberToObject(req, "temperature", 0);
    char *body = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    o = post_status(port, "/infill", body, &st);
    free(body);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT((int)num(o, "tokens_evaluated"), n);
    const char *got = cJSON_GetStringValue(cJSON_GetObjectItem(o, "content"));
    CHECK(got != NULL);

    /* /completion on the same ids: the same greedy text */
    char pj[8192];
    size_t k = 0;
    k += (size_t)snprintf(pj + k, sizeof pj - k, "[");
    for (int i = 0; i < n && k < sizeof pj - 16; i++) k += (size_t)snprintf(pj + k, sizeof pj - k, "%s%d", i ? "," : "", ids[i]);
    snprintf(pj + k, sizeof pj - k, "]");
    char *want = complete(port, pj, 12, NULL, NULL);
    CHECK_MSG(want && got && !strcmp(want, got), "/infill '%s', /completion '%s'", got ? got : "", want ? want : "");
    free(want);
    cJSON_Delete(o);
}

TEST(infill_layout) {
    REQUIRE_SERVER_FROM(port, fim_port);
    infill_case(port, false);
}

TEST(infill_layout_spm) {
    REQUIRE_SERVER_FROM(port, fim_spm_port);
    infill_case(port, true);
}

TEST(infill_errors) {
    REQUIRE_SERVER_FROM(port, fim_port);
    CHECK(slot_err(port, "/infill", "{\"input_extra\": \"x\"}", 400, "input_extra"));
    CHECK(slot_err(port, "/infill", "{\"input_extra\": [1]}", 400, "input_extra[0]"));
    CHECK(slot_err(port, "/infill", "{\"input_extra\": [{\"filename\": 3}]}", 400, "filename"));
    CHECK(slot_err(port, "/infill", "{\"input_extra\": [{\"text\": []}]}", 400, "text"));
    CHECK(slot_err(port, "/infill", "{\"input_extra\": [{\"filename\": \"a.c\"}]}", 400, "text"));
    CHECK(slot_err(port, "/infill", "{\"input_prefix\": 5}", 400, "input_prefix"));
    CHECK(slot_err(port, "/infill", "{\"input_suffix\": {}}", 400, "input_suffix"));
    CHECK(slot_err(port, "/infill", "{\"prompt\": [1, 2]}", 400, "prompt"));
    CHECK(slot_err(port, "/infill", "[]", 400, NULL));
}

TEST(infill_without_fim_tokens) {
    REQUIRE_SERVER_FROM(port, plain_port);
    CHECK(slot_err(port, "/infill", "{\"input_prefix\": \"a\", \"input_suffix\": \"b\"}", 400, "no FIM tokens"));
}

/* ---- last: the shared servers stop cleanly ------------------------------------------------ */

TEST(servers_stop_clean) {
    shared_server *all[] = {&g_pair, &g_q35, &g_plain, &g_fim, &g_fim_spm};
    for (int i = 0; i < 5; i++) {
        if (!all[i]->started) continue;
        bool clean = false;
        CHECK_EQ_INT(shared_server_stop(all[i], &clean), 0);
        CHECK(clean);
    }
}

TEST_MAIN()
