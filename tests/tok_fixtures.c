/*
 * tok_fixtures.c — builds vocab-only GGUFs from the shared tokenizer data the way
 * llama.cpp's converters lay them out (targets.md §12), and reads llama.cpp's tokenizer
 * test vectors. See tok_fixtures.h for what each GGUF holds.
 *
 * Formats read here:
 *  - SentencePiece tokenizer.model: a protobuf ModelProto. Field 1 (repeated, bytes) is a
 *    SentencePiece {1: piece string, 2: score float, 3: type enum, default NORMAL = 1};
 *    field 2 is the TrainerSpec {40: unk_id, 41: bos_id, 42: eos_id} and field 3 the
 *    NormalizerSpec {3: add_dummy_prefix, default true}. Wire types: 0 varint, 1 fixed64,
 *    2 length-delimited, 5 fixed32.
 *  - Hugging Face tokenizer.json: model.vocab {token: id}, model.merges (["a", "b"] pairs
 *    or "a b" strings), added_tokens [{id, content, special}].
 * Not a general converter: only what the tokenizer tests need.
 */
#include "tok_fixtures.h"

#include "spex.h"
#include "test.h"

#include <cjson/cJSON.h>
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

/* ---- protobuf ------------------------------------------------------------------------------ */

typedef struct pb {
    const uint8_t *p, *end;
} pb;

static bool pb_varint(pb *r, uint64_t *v) {
    *v = 0;
    for (int shift = 0; shift < 64 && r->p < r->end; shift += 7) {
        uint8_t b = *r->p++;
        *v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) return true;
    }
    return false;
}

/* Next field: number, wire type, and for wire type 2 the payload; false at the end or on
 * malformed input. */
static bool pb_field(pb *r, uint32_t *field, uint32_t *wt, uint64_t *val, pb *sub) {
    uint64_t key;
    if (r->p >= r->end || !pb_varint(r, &key)) return false;
    *field = (uint32_t)(key >> 3);
    *wt = (uint32_t)(key & 7);
    switch (*wt) {
    case 0: return pb_varint(r, val);
    case 1:
        if (r->end - r->p < 8) return false;
        memcpy(val, r->p, 8);
        r->p += 8;
        return true;
    case 5: {
        if (r->end - r->p < 4) return false;
        uint32_t v32;
        memcpy(&v32, r->p, 4);
        *val = v32;
        r->p += 4;
        return true;
    }
    case 2: {
        uint64_t len;
        if (!pb_varint(r, &len) || len > (uint64_t)(r->end - r->p)) return false;
        sub->p = r->p;
        sub->end = r->p + len;
        r->p += len;
        return true;
    }
    default: return false;
    }
}

static const char *build_llama2(char *why, size_t why_len) {
    const char *src = test_shared_path("data/llama2-tokenizer/tokenizer.model");
    if (!src) {
        snprintf(why, why_len, "../shared/data/llama2-tokenizer/tokenizer.model not found");
        return NULL;
    }
    size_t size;
    uint8_t *buf = (uint8_t *)tok_read_file(src, &size);
    if (!buf) {
        snprintf(why, why_len, "cannot read %s", src);
        return NULL;
    }
    size_t cap = 1024, n = 0;
    spex_str *tokens = malloc(cap * sizeof *tokens);
    float *scores = malloc(cap * sizeof *scores);
    int32_t *types = malloc(cap * sizeof *types);
    int64_t unk = 0, bos = 1, eos = 2;
    bool dummy_prefix = true, ok = tokens && scores && types;
    pb r = {buf, buf + size}, sub;
    uint32_t field, wt;
    uint64_t val;
    while (ok && pb_field(&r, &field, &wt, &val, &sub)) {
        if (field == 1 && wt == 2) {
            if (n == cap) {
                cap *= 2;
                tokens = realloc(tokens, cap * sizeof *tokens);
                scores = realloc(scores, cap * sizeof *scores);
                types = realloc(types, cap * sizeof *types);
                if (!tokens || !scores || !types) {
                    ok = false;
                    break;
                }
            }
            tokens[n] = (spex_str){"", 0};
            scores[n] = 0;
            types[n] = 1;
            pb f;
            while (pb_field(&sub, &field, &wt, &val, &f)) {
                if (field == 1 && wt == 2) tokens[n] = (spex_str){(const char *)f.p, (uint64_t)(f.end - f.p)};
                else if (field == 2 && wt == 5) {
                    uint32_t v32 = (uint32_t)val;
                    memcpy(&scores[n], &v32, 4);
                } else if (field == 3 && wt == 0) types[n] = (int32_t)val;
            }
            n++;
        } else if (field == 2 && wt == 2) {   /* TrainerSpec */
            pb f;
            while (pb_field(&sub, &field, &wt, &val, &f)) {
                if (wt != 0) continue;
                if (field == 40) unk = (int32_t)val;
                else if (field == 41) bos = (int32_t)val;
                else if (field == 42) eos = (int32_t)val;
            }
        } else if (field == 3 && wt == 2) {   /* NormalizerSpec */
            pb f;
            while (pb_field(&sub, &field, &wt, &val, &f))
                if (field == 3 && wt == 0) dummy_prefix = val != 0;
        }
    }
    const char *out = NULL;
    spex_gguf_writer *w = NULL;
    spex_error err = {0};
    if (ok && n > 0 && spex_gguf_writer_init(&w, &err) == SPEX_OK) {
        spex_gguf_writer_set_str(w, "general.architecture", "llama", 5);
        spex_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama", 5);
        spex_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, n);
        spex_gguf_writer_set_arr(w, "tokenizer.ggml.scores", SPEX_GGUF_F32, scores, n);
        spex_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", SPEX_GGUF_I32, types, n);
        spex_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)unk);
        spex_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
        spex_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
        spex_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
        spex_gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", dummy_prefix);
        const char *path = fx_path("llama2-vocab.gguf");
        if (path && spex_gguf_writer_write(w, path, &err) == SPEX_OK) out = path;
        else snprintf(why, why_len, "writing the llama2 vocab GGUF failed: %s", err.msg);
    } else if (!out) {
        snprintf(why, why_len, "%s: not a SentencePiece model (%zu pieces)", src, n);
    }
    spex_gguf_writer_free(w);
    free(tokens);
    free(scores);
    free(types);
    free(buf);
    return out;
}

/* ---- tokenizer.json ------------------------------------------------------------------------ */

#define QWEN3_VOCAB 151936

static bool looks_special(const char *s) {
    size_t n = strlen(s);
    return n >= 4 && strncmp(s, "<|", 2) == 0 && strcmp(s + n - 2, "|>") == 0;
}

static const char *build_qwen3(char *why, size_t why_len) {
    const char *src = test_shared_path("data/qwen3-tokenizer/tokenizer.json");
    if (!src) {
        snprintf(why, why_len, "../shared/data/qwen3-tokenizer/tokenizer.json not found");
        return NULL;
    }
    size_t size;
    char *json = tok_read_file(src, &size);
    cJSON *root = json ? cJSON_ParseWithLength(json, size) : NULL;
    free(json);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges) || !cJSON_IsArray(added)) {
        snprintf(why, why_len, "%s: not a BPE tokenizer.json", src);
        cJSON_Delete(root);
        return NULL;
    }
    int n = QWEN3_VOCAB;
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) if (cJSON_IsNumber(it) && it->valueint >= n) n = it->valueint + 1;
    cJSON_ArrayForEach(it, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        if (cJSON_IsNumber(id) && id->valueint >= n) n = id->valueint + 1;
    }
    spex_str *tokens = calloc((size_t)n, sizeof *tokens);
    int32_t *types = calloc((size_t)n, sizeof *types);
    char *pads = malloc((size_t)n * 16);
    int n_merges = cJSON_GetArraySize(merges);
    spex_str *mstr = calloc((size_t)n_merges + 1, sizeof *mstr);
    const char *out = NULL;
    if (!tokens || !types || !pads || !mstr) {
        snprintf(why, why_len, "out of memory");
        goto done;
    }
    cJSON_ArrayForEach(it, vocab) {
        if (!cJSON_IsNumber(it) || it->valueint < 0) continue;
        tokens[it->valueint] = (spex_str){it->string, strlen(it->string)};
        types[it->valueint] = SPEX_TOKEN_NORMAL;
    }
    cJSON_ArrayForEach(it, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
        const cJSON *special = cJSON_GetObjectItemCaseSensitive(it, "special");
        if (!cJSON_IsNumber(id) || id->valueint < 0 || !cJSON_IsString(content)) continue;
        tokens[id->valueint] = (spex_str){content->valuestring, strlen(content->valuestring)};
        types[id->valueint] =
            cJSON_IsTrue(special) || looks_special(content->valuestring) ? SPEX_TOKEN_CONTROL : SPEX_TOKEN_USER_DEFINED;
    }
    for (int i = 0; i < n; i++)
        if (types[i] == 0) {   /* a hole: llama.cpp's converter writes "[PADi]" as unused */
            int len = snprintf(pads + 16 * (size_t)i, 16, "[PAD%d]", i);
            tokens[i] = (spex_str){pads + 16 * (size_t)i, (uint64_t)len};
            types[i] = SPEX_TOKEN_UNUSED;
        }
    /* merges: "a b" strings are used as they are; pairs are joined with a space */
    size_t mbytes = 0;
    cJSON_ArrayForEach(it, merges) {
        if (cJSON_IsString(it)) mbytes += strlen(it->valuestring) + 1;
        else if (cJSON_GetArraySize(it) == 2) {
            const cJSON *a = cJSON_GetArrayItem(it, 0), *b = cJSON_GetArrayItem(it, 1);
            if (cJSON_IsString(a) && cJSON_IsString(b)) mbytes += strlen(a->valuestring) + strlen(b->valuestring) + 2;
        }
    }
    char *mbuf = malloc(mbytes + 1), *mp = mbuf;
    int m = 0;
    if (!mbuf) {
        snprintf(why, why_len, "out of memory");
        goto done;
    }
    cJSON_ArrayForEach(it, merges) {
        const char *a = NULL, *b = NULL;
        if (cJSON_IsString(it)) a = it->valuestring;
        else if (cJSON_GetArraySize(it) == 2 && cJSON_IsString(cJSON_GetArrayItem(it, 0)) &&
                 cJSON_IsString(cJSON_GetArrayItem(it, 1))) {
            a = cJSON_GetArrayItem(it, 0)->valuestring;
            b = cJSON_GetArrayItem(it, 1)->valuestring;
        }
        if (!a) continue;
        int len = b ? sprintf(mp, "%s %s", a, b) : sprintf(mp, "%s", a);
        mstr[m++] = (spex_str){mp, (uint64_t)len};
        mp += len + 1;
    }
    int32_t endoftext = -1, im_end = -1;
    for (int i = 0; i < n; i++) {
        if (tokens[i].len == 13 && memcmp(tokens[i].ptr, "<|endoftext|>", 13) == 0) endoftext = i;
        if (tokens[i].len == 10 && memcmp(tokens[i].ptr, "<|im_end|>", 10) == 0) im_end = i;
    }
    spex_gguf_writer *w = NULL;
    spex_error err = {0};
    if (spex_gguf_writer_init(&w, &err) == SPEX_OK) {
        spex_gguf_writer_set_str(w, "general.architecture", "qwen3", 5);
        spex_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2", 4);
        spex_gguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen2", 5);
        spex_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, (uint64_t)n);
        spex_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", SPEX_GGUF_I32, types, (uint64_t)n);
        spex_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", mstr, (uint64_t)m);
        if (endoftext >= 0) {
            spex_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)endoftext);
            spex_gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)endoftext);
        }
        if (im_end >= 0) spex_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)im_end);
        spex_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false);
        const char *path = fx_path("qwen3-vocab.gguf");
        if (path && spex_gguf_writer_write(w, path, &err) == SPEX_OK) out = path;
        else snprintf(why, why_len, "writing the qwen3 vocab GGUF failed: %s", err.msg);
    }
    spex_gguf_writer_free(w);
    free(mbuf);
done:
    free(tokens);
    free(types);
    free(pads);
    free(mstr);
    cJSON_Delete(root);
    return out;
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
