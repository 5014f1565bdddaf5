/*
 * tok_fixtures.c — builds vocab-only GGUFs from the shared tokenizer data with the library's
 * converters (spex_vocab_from_spm_model, spex_vocab_from_hf_json_padded: src/tok/convert*.c,
 * the code behind `spex convert-vocab`), and reads llama.cpp's tokenizer test vectors. See
 * tok_fixtures.h for what each GGUF holds.
 *
 * Not a converter itself: a thin wrapper that writes each GGUF once into a temporary directory.
 */
#include "tok_fixtures.h"
#include "tok/api.h"

#include "spex.h"
#include "gguf/api.h"
#include "test.h"

#include <stdbool.h>
#include <unistd.h>

char *tok_read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *p = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (p = malloc((size_t)n + 1)) != NULL) {
        if (fread(p, 1, (size_t)n, f) != (size_t)n) {
            free(p);
            p = NULL;
        } else {
            p[n] = 0;
            if (size) *size = (size_t)n;
        }
    }
    fclose(f);
    return p;
}

/* ---- temporary directory ------------------------------------------------------------------ */

static char fx_dir[64];

static void fx_cleanup(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fx_dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", fx_dir);
}

static const char *fx_path(const char *name) {
    static char buf[4][256];
    static int k;
    if (!fx_dir[0]) {
        snprintf(fx_dir, sizeof fx_dir, "/tmp/spex-test-tok-XXXXXX");
        if (!mkdtemp(fx_dir)) {
            fx_dir[0] = 0;
            return NULL;
        }
        atexit(fx_cleanup);
    }
    char *b = buf[k++ % 4];
    snprintf(b, sizeof buf[0], "%s/%s", fx_dir, name);
    return b;
}

/* ---- the converters (src/tok/convert.c, convert_spm.c) ------------------------------------ */

/* Runs one converter into a fresh writer, sets the architecture and writes name in the
 * temporary directory. */
static const char *convert(const char *src, const char *cfg, int32_t n_vocab, const char *arch, const char *name,
                           char *why, size_t why_len) {
    spex_gguf_writer *w = NULL;
    spex_error err = {0};
    const char *out = NULL, *path = fx_path(name);
    spex_status st = path ? spex_gguf_writer_init(&w, &err) : SPEX_ERR_IO;
    if (st == SPEX_OK) st = spex_gguf_writer_set_str(w, "general.architecture", arch, strlen(arch));
    if (st == SPEX_OK) {
        if (!strcmp(arch, "llama")) st = spex_vocab_from_spm_model(src, w, &err);
        else if (n_vocab > 0) st = spex_vocab_from_hf_json_padded(src, cfg, n_vocab, w, &err);
        else st = spex_vocab_from_hf_json(src, cfg, w, &err);
    }
    if (st == SPEX_OK) st = spex_gguf_writer_write(w, path, &err);
    if (st == SPEX_OK) out = path;
    else snprintf(why, why_len, "building %s from %s failed: %s", name, src, err.msg[0] ? err.msg : spex_status_str(st));
    spex_gguf_writer_free(w);
    return out;
}

static const char *build_llama2(char *why, size_t why_len) {
    const char *src = test_shared_path("data/llama2-tokenizer/tokenizer.model");
    if (!src) {
        snprintf(why, why_len, "../shared/data/llama2-tokenizer/tokenizer.model not found");
        return NULL;
    }
    return convert(src, NULL, 0, "llama", "llama2-vocab.gguf", why, why_len);
}

/* Qwen3's config.json vocab_size: the embedding has rows beyond the last token. */
#define QWEN3_VOCAB 151936

static const char *build_qwen3(char *why, size_t why_len) {
    const char *src = test_shared_path("data/qwen3-tokenizer/tokenizer.json");
    if (!src) {
        snprintf(why, why_len, "../shared/data/qwen3-tokenizer/tokenizer.json not found");
        return NULL;
    }
    return convert(src, NULL, QWEN3_VOCAB, "qwen3", "qwen3-vocab.gguf", why, why_len);
}

/* Built once; a failure is remembered too, with its reason. */
typedef struct fixture {
    bool tried;
    const char *path;
    char why[300];
} fixture;

static const char *cached(fixture *f, const char *(*build)(char *, size_t), char *why, size_t why_len) {
    if (!f->tried) {
        f->tried = true;
        f->path = build(f->why, sizeof f->why);
    }
    if (!f->path) snprintf(why, why_len, "%s", f->why);
    return f->path;
}

const char *tok_fixture_llama2_gguf(char *why, size_t why_len) {
    static fixture f;
    return cached(&f, build_llama2, why, why_len);
}

const char *tok_fixture_qwen3_gguf(char *why, size_t why_len) {
    static fixture f;
    return cached(&f, build_qwen3, why, why_len);
}

/* ---- test vectors -------------------------------------------------------------------------- */

int tok_vectors_load(const char *inp_path, const char *out_path, tok_vectors *v) {
    memset(v, 0, sizeof *v);
    if (!inp_path || !out_path) return -1;
    size_t ni, no;
    char *inp = tok_read_file(inp_path, &ni), *outs = tok_read_file(out_path, &no);
    int rc = -1;
    if (!inp || !outs) goto done;
    static const char sep[] = "\n__ggml_vocab_test__\n";
    int n = 0;
    for (char *p = inp; (p = strstr(p, sep)) != NULL; p += sizeof sep - 1) n++;
    int lines = 0;
    for (size_t i = 0; i < no; i++) lines += outs[i] == '\n';
    if (no && outs[no - 1] != '\n') lines++;
    if (n == 0 || lines != n) goto done;
    v->text = calloc((size_t)n, sizeof *v->text);
    v->len = calloc((size_t)n, sizeof *v->len);
    v->ids = calloc((size_t)n, sizeof *v->ids);
    v->n_ids = calloc((size_t)n, sizeof *v->n_ids);
    if (!v->text || !v->len || !v->ids || !v->n_ids) goto done;
    v->n = n;
    char *p = inp, *o = outs;
    for (int i = 0; i < n; i++) {
        char *e = strstr(p, sep);
        size_t len = (size_t)(e - p);
        v->text[i] = malloc(len + 1);
        if (!v->text[i]) goto done;
        memcpy(v->text[i], p, len);
        v->text[i][len] = 0;
        v->len[i] = len;
        p = e + sizeof sep - 1;
        char *eol = strchr(o, '\n');
        if (!eol) eol = o + strlen(o);
        int cnt = 0;
        for (char *q = o; q < eol; q++)
            if (*q != ' ' && (q == o || q[-1] == ' ')) cnt++;
        v->ids[i] = malloc(((size_t)cnt + 1) * sizeof(int32_t));
        if (!v->ids[i]) goto done;
        char *q = o;
        for (int k = 0; k < cnt; k++) v->ids[i][k] = (int32_t)strtol(q, &q, 10);
        v->n_ids[i] = cnt;
        o = *eol ? eol + 1 : eol;
    }
    rc = 0;
done:
    free(inp);
    free(outs);
    if (rc != 0) tok_vectors_free(v);
    return rc;
}

void tok_vectors_free(tok_vectors *v) {
    for (int i = 0; i < v->n; i++) {
        if (v->text) free(v->text[i]);
        if (v->ids) free(v->ids[i]);
    }
    free(v->text);
    free(v->len);
    free(v->ids);
    free(v->n_ids);
    memset(v, 0, sizeof *v);
}
