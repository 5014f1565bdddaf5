/*
 * convert.c — Hugging Face tokenizer.json (+ tokenizer_config.json) -> tokenizer.ggml.* keys
 * for a byte-level BPE vocabulary (model "gpt2"), laid out as llama.cpp's converter writes it
 * for Qwen2/Qwen3/Llama 3 (targets.md §12).
 *
 * Read from tokenizer.json: model {type "BPE", vocab {token: id}, merges ["a b"] or [["a","b"]]},
 * added_tokens [{id, content, special}], and pre_tokenizer, whose Split regex names the
 * pre-tokenizer (qwen2, qwen35, llama-bpe; a bare ByteLevel with use_regex is gpt-2).
 * From tokenizer_config.json: bos/eos/pad/unk_token (a string or {content}), add_bos_token,
 * add_eos_token, chat_template (a string, or [{name, template}] where "default" wins).
 *
 * What it is not: a converter for WordPiece/Unigram tokenizer.json files or SentencePiece-style
 * ones with byte fallback (convert their tokenizer.model: convert_spm.c); the pre-tokenizer is
 * recognised, never compiled from the file. Ids and sizes from the file are bounds-checked.
 */
#include "gguf/api.h"
#include "tok/convert.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The contraction group both spellings of the HF regexes start with; the rest identifies them. */
static const char contractions_i[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";
static const char contractions_x[] = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";

static const struct {
    const char *name;
    const char *tail;   /* the pattern after the contraction group */
} known_pre[] = {
    {"qwen2", "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    {"qwen35",
     "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    {"llama-bpe",
     "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
};

static bool is_type(const cJSON *node, const char *type) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(node, "type");
    return cJSON_IsString(t) && strcmp(t->valuestring, type) == 0;
}

/* The pre-tokenizer steps: a Sequence's list, or the single step itself. */
static const cJSON *first_step(const cJSON *node, const char *list) {
    if (is_type(node, "Sequence")) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(node, list);
        return cJSON_IsArray(a) ? a->child : NULL;
    }
    return node;
}

static bool has_byte_level(const cJSON *node, const char *list) {
    if (!cJSON_IsObject(node)) return false;
    for (const cJSON *s = first_step(node, list); s; s = s == node ? NULL : s->next)
        if (is_type(s, "ByteLevel")) return true;
    return false;
}

static spex_status detect_pre(const cJSON *root, const char *name, const char **pre, spex_error *err) {
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    if (!cJSON_IsObject(pt))
        return spex_error_set(err, SPEX_ERR_UNSUPPORTED, "%s: no pre_tokenizer object: not a byte-level BPE tokenizer", name);
    const char *regex = NULL;
    bool byte_level_regex = false;
    for (const cJSON *s = first_step(pt, "pretokenizers"); s; s = s == pt ? NULL : s->next) {
        if (is_type(s, "Split")) {
            const cJSON *r = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(s, "pattern"), "Regex");
            if (!cJSON_IsString(r))
                return spex_error_set(err, SPEX_ERR_UNSUPPORTED, "%s: pre_tokenizer Split without a Regex pattern", name);
            if (regex)
                return spex_error_set(err, SPEX_ERR_UNSUPPORTED, "%s: pre_tokenizer has several Split steps", name);
            regex = r->valuestring;
        } else if (is_type(s, "ByteLevel")) {
            const cJSON *u = cJSON_GetObjectItemCaseSensitive(s, "use_regex");
            byte_level_regex = !cJSON_IsFalse(u);   /* the default is true */
        }
    }
    if (!regex) {
        if (byte_level_regex) {
            *pre = "gpt-2";
            return SPEX_OK;
        }
        return spex_error_set(err, SPEX_ERR_UNSUPPORTED, "%s: pre_tokenizer has no Split regex", name);
    }
    const char *tail = NULL;
    if (!strncmp(regex, contractions_i, sizeof contractions_i - 1)) tail = regex + sizeof contractions_i - 1;
    else if (!strncmp(regex, contractions_x, sizeof contractions_x - 1)) tail = regex + sizeof contractions_x - 1;
    for (size_t i = 0; tail && i < sizeof known_pre / sizeof known_pre[0]; i++)
        if (!strcmp(tail, known_pre[i].tail)) {
            *pre = known_pre[i].name;
            return SPEX_OK;
        }
    return spex_error_set(err, SPEX_ERR_UNSUPPORTED,
                          "%s: pre-tokenizer regex \"%.200s\" is not one spex knows (qwen2, qwen35, llama-bpe, gpt-2)",
                          name, regex);
}

/* An id from the file: an integral number in [0, SPEX_CONVERT_MAX_VOCAB). */
static bool valid_id(const cJSON *v, int32_t *id) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d < SPEX_CONVERT_MAX_VOCAB) || d != floor(d)) return false;
    *id = (int32_t)d;
    return true;
}

static int32_t find_token(const spex_str *tokens, int32_t n, const char *s) {
    size_t len = strlen(s);
    for (int32_t i = 0; i < n; i++)
        if (tokens[i].len == len && memcmp(tokens[i].ptr, s, len) == 0) return i;
    return SPEX_TOKEN_NONE;
}

/* Parses a JSON file; the error names the byte where parsing stopped. */
static spex_status parse_json(const char *path, const char *what, cJSON **out, spex_error *err) {
    char *text;
    size_t size;
    *out = NULL;
    spex_status st = spex_convert_read_file(path, what, &text, &size, err);
    if (st != SPEX_OK) return st;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, size, &end, false);
    if (!root) {
        size_t at = end && end >= text && end <= text + size ? (size_t)(end - text) : 0;
        free(text);
        return spex_error_set(err, SPEX_ERR_FORMAT, "%s: %s is not valid JSON (parsing stopped at byte %zu of %zu)", what,
                              path, at, size);
    }
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return spex_error_set(err, SPEX_ERR_TYPE, "%s: %s: the top level is not a JSON object", what, path);
    }
    *out = root;
    return SPEX_OK;
}

/* ---- tokenizer_config.json ----------------------------------------------------------------- */

typedef struct hf_config {
    const char *bos, *eos, *pad, *unk;   /* token text, or NULL when absent / null */
    int add_bos, add_eos;                /* -1: absent */
    const char *chat_template;
} hf_config;

static spex_status config_token(const cJSON *root, const char *field, const char **out, const char *name,
                                spex_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, field);
    if (!v || cJSON_IsNull(v)) return SPEX_OK;
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    if (!cJSON_IsString(v))
        return spex_error_set(err, SPEX_ERR_TYPE, "%s: %s is neither a string nor {\"content\": string}", name, field);
    *out = v->valuestring;
    return SPEX_OK;
}

static spex_status config_bool(const cJSON *root, const char *field, int *out, const char *name, spex_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, field);
    if (!v || cJSON_IsNull(v)) return SPEX_OK;
    if (!cJSON_IsBool(v)) return spex_error_set(err, SPEX_ERR_TYPE, "%s: %s is not true/false", name, field);
    *out = cJSON_IsTrue(v);
    return SPEX_OK;
}

static spex_status parse_config(const cJSON *root, const char *name, hf_config *c, spex_error *err) {
    spex_status st;
    if ((st = config_token(root, "bos_token", &c->bos, name, err)) != SPEX_OK ||
        (st = config_token(root, "eos_token", &c->eos, name, err)) != SPEX_OK ||
        (st = config_token(root, "pad_token", &c->pad, name, err)) != SPEX_OK ||
        (st = config_token(root, "unk_token", &c->unk, name, err)) != SPEX_OK ||
        (st = config_bool(root, "add_bos_token", &c->add_bos, name, err)) != SPEX_OK ||
        (st = config_bool(root, "add_eos_token", &c->add_eos, name, err)) != SPEX_OK)
        return st;
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(root, "chat_template");
    if (!ct || cJSON_IsNull(ct)) return SPEX_OK;
    if (cJSON_IsString(ct)) {
        c->chat_template = ct->valuestring;
        return SPEX_OK;
    }
    if (!cJSON_IsArray(ct))
        return spex_error_set(err, SPEX_ERR_TYPE, "%s: chat_template is neither a string nor a list", name);
    const cJSON *it;
    cJSON_ArrayForEach(it, ct) {   /* [{name, template}]: "default", else the first */
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(it, "name");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(it, "template");
        if (!cJSON_IsString(t))
            return spex_error_set(err, SPEX_ERR_TYPE, "%s: a chat_template entry has no \"template\" string", name);
        if (!c->chat_template || (cJSON_IsString(n) && !strcmp(n->valuestring, "default"))) c->chat_template = t->valuestring;
    }
    return SPEX_OK;
}

/* ---- tokenizer.json ------------------------------------------------------------------------ */

/* llama.cpp's converter rule: an added token is CONTROL when marked special or shaped <|...|>. */
static bool looks_control(const char *s) {
    size_t n = strlen(s);
    return n >= 4 && !strncmp(s, "<|", 2) && !strcmp(s + n - 2, "|>");
}

typedef struct hf_vocab {
    int32_t n;
    spex_str *tokens;
    int32_t *types;
    char *pads;        /* "[PADn]" texts, 16 bytes per id */
    spex_str *merges;
    char *merge_text;
    int64_t n_merges;
} hf_vocab;

static void hf_vocab_free(hf_vocab *v) {
    free(v->tokens);
    free(v->types);
    free(v->pads);
    free(v->merges);
    free(v->merge_text);
}

/* model.vocab, model.merges and added_tokens, checked to be those of a byte-level BPE; the
 * caller has checked nothing. */
static spex_status bpe_model_parts(const cJSON *root, const char *name, const cJSON **vocab, const cJSON **merges,
                                   const cJSON **added, spex_error *err) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) return spex_error_set(err, SPEX_ERR_FORMAT, "%s: no \"model\" object", name);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE")))
        return spex_error_set(err, SPEX_ERR_UNSUPPORTED, "%s: model.type is %s%s%s, spex converts \"BPE\" only", name,
                              cJSON_IsString(type) ? "\"" : "", cJSON_IsString(type) ? type->valuestring : "not a string",
                              cJSON_IsString(type) ? "\"" : "");
    *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (!cJSON_IsObject(*vocab)) return spex_error_set(err, SPEX_ERR_TYPE, "%s: model.vocab is not an object", name);
    if (!cJSON_IsArray(*merges)) return spex_error_set(err, SPEX_ERR_TYPE, "%s: model.merges is not a list", name);
    if (*added && !cJSON_IsArray(*added))
        return spex_error_set(err, SPEX_ERR_TYPE, "%s: added_tokens is not a list", name);
    if (!has_byte_level(cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), "pretokenizers") &&
        !has_byte_level(cJSON_GetObjectItemCaseSensitive(root, "decoder"), "decoders"))
        return spex_error_set(err, SPEX_ERR_UNSUPPORTED,
                              "%s: not a byte-level BPE (no ByteLevel step); for a SentencePiece model convert its "
                              "tokenizer.model instead",
                              name);
    return SPEX_OK;
}

/* The vocabulary size: the largest id + 1, or n_min when asked to pad to the model's rows.
 * Checks every id and added token's content, so that fill_tokens can trust them. */
static spex_status vocab_size(const cJSON *vocab, const cJSON *added, int32_t n_min, const char *name, int32_t *n_out,
                              spex_error *err) {
    int32_t n = 0, id;
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        if (!valid_id(it, &id))
            return spex_error_set(err, SPEX_ERR_RANGE, "%s: model.vocab[\"%.80s\"] is not an id in [0, %d)", name,
                                  it->string, SPEX_CONVERT_MAX_VOCAB);
        if (id >= n) n = id + 1;
    }
    int k = 0;
    cJSON_ArrayForEach(it, added) {
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
        if (!valid_id(cJSON_GetObjectItemCaseSensitive(it, "id"), &id))
            return spex_error_set(err, SPEX_ERR_RANGE, "%s: added_tokens[%d].id is not an id in [0, %d)", name, k,
                                  SPEX_CONVERT_MAX_VOCAB);
        if (!cJSON_IsString(content))
            return spex_error_set(err, SPEX_ERR_TYPE, "%s: added_tokens[%d].content is not a string", name, k);
        if (id >= n) n = id + 1;
        k++;
    }
    if (n == 0) return spex_error_set(err, SPEX_ERR_FORMAT, "%s: the vocabulary is empty", name);
    if (n_min > 0) {
        if (n_min < n)
            return spex_error_set(err, SPEX_ERR_RANGE, "%s: vocabulary size %d asked for, but the file has ids up to %d",
                                  name, n_min, n - 1);
        if (n_min > SPEX_CONVERT_MAX_VOCAB)
            return spex_error_set(err, SPEX_ERR_RANGE, "%s: vocabulary size %d is over the %d accepted", name, n_min,
                                  SPEX_CONVERT_MAX_VOCAB);
        n = n_min;
    }
    *n_out = n;
    return SPEX_OK;
}

/* v->tokens and v->types for v->n ids: the vocab entries, then the added tokens over them,
 * then "[PADi]" in every hole. The ids were checked by vocab_size. */
static spex_status fill_tokens(hf_vocab *v, const cJSON *vocab, const cJSON *added, const char *name, spex_error *err) {
    const int32_t n = v->n;
    v->tokens = calloc((size_t)n, sizeof *v->tokens);
    v->types = calloc((size_t)n, sizeof *v->types);
    v->pads = malloc((size_t)n * 16);
    if (!v->tokens || !v->types || !v->pads)
        return spex_error_set(err, SPEX_ERR_NOMEM, "%s: out of memory for %d tokens", name, n);

    int32_t id = 0;   /* set by valid_id, which cannot fail here */
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        valid_id(it, &id);
        if (v->types[id])
            return spex_error_set(err, SPEX_ERR_FORMAT, "%s: id %d is given to both \"%.80s\" and \"%.80s\"", name, id,
                                  v->tokens[id].ptr, it->string);
        v->tokens[id] = (spex_str){it->string, strlen(it->string)};
        v->types[id] = SPEX_TOKEN_NORMAL;
    }
    cJSON_ArrayForEach(it, added) {   /* an added token replaces a vocab entry of the same id */
        valid_id(cJSON_GetObjectItemCaseSensitive(it, "id"), &id);
        const char *content = cJSON_GetObjectItemCaseSensitive(it, "content")->valuestring;
        if (!content[0]) return spex_error_set(err, SPEX_ERR_FORMAT, "%s: added token %d is empty", name, id);
        v->tokens[id] = (spex_str){content, strlen(content)};
        v->types[id] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "special")) || looks_control(content)
                           ? SPEX_TOKEN_CONTROL
                           : SPEX_TOKEN_USER_DEFINED;
    }
    for (int32_t i = 0; i < n; i++)
        if (v->types[i] == 0) {   /* a hole (or padding up to the model's rows): llama.cpp writes unused "[PADi]" */
            char *p = v->pads + 16 * (size_t)i;
            int len = snprintf(p, 16, "[PAD%d]", (int)i);
            v->tokens[i] = (spex_str){p, (uint64_t)len};
            v->types[i] = SPEX_TOKEN_UNUSED;
        }
    return SPEX_OK;
}

/* v->merges: "a b" strings as they are, ["a", "b"] pairs joined with one space, all in one
 * v->merge_text. A first pass checks every entry and sums the bytes, so the second cannot fail. */
static spex_status fill_merges(hf_vocab *v, const cJSON *merges, const char *name, spex_error *err) {
    int n_merges = cJSON_GetArraySize(merges);
    size_t bytes = 0;
    int k = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, merges) {
        const cJSON *a = cJSON_IsArray(it) ? cJSON_GetArrayItem(it, 0) : NULL;
        const cJSON *b = cJSON_IsArray(it) ? cJSON_GetArrayItem(it, 1) : NULL;
        if (cJSON_IsString(it)) {
            const char *sp = strchr(it->valuestring, ' ');
            if (!sp || sp == it->valuestring || !sp[1])
                return spex_error_set(err, SPEX_ERR_FORMAT, "%s: model.merges[%d] = \"%.80s\" is not \"left right\"", name,
                                      k, it->valuestring);
            bytes += strlen(it->valuestring) + 1;
        } else if (cJSON_GetArraySize(it) == 2 && cJSON_IsString(a) && cJSON_IsString(b) && a->valuestring[0] &&
                   b->valuestring[0]) {
            bytes += strlen(a->valuestring) + strlen(b->valuestring) + 2;
        } else {
            return spex_error_set(err, SPEX_ERR_TYPE, "%s: model.merges[%d] is neither \"a b\" nor [\"a\", \"b\"]", name, k);
        }
        k++;
    }
    v->merges = malloc(((size_t)n_merges + 1) * sizeof *v->merges);
    v->merge_text = malloc(bytes + 1);
    if (!v->merges || !v->merge_text) return spex_error_set(err, SPEX_ERR_NOMEM, "%s: out of memory for merges", name);
    char *p = v->merge_text;
    cJSON_ArrayForEach(it, merges) {
        size_t len;
        if (cJSON_IsString(it)) {
            len = strlen(it->valuestring);
            memcpy(p, it->valuestring, len);
        } else {
            const char *a = cJSON_GetArrayItem(it, 0)->valuestring, *b = cJSON_GetArrayItem(it, 1)->valuestring;
            size_t la = strlen(a), lb = strlen(b);
            memcpy(p, a, la);
            p[la] = ' ';
            memcpy(p + la + 1, b, lb);
            len = la + 1 + lb;
        }
        p[len] = 0;
        v->merges[v->n_merges++] = (spex_str){p, (uint64_t)len};
        p += len + 1;
    }
    return SPEX_OK;
}

static spex_status build_vocab(const cJSON *root, const char *name, int32_t n_min, hf_vocab *v, spex_error *err) {
    const cJSON *vocab, *merges, *added;
    spex_status st;
    if ((st = bpe_model_parts(root, name, &vocab, &merges, &added, err)) != SPEX_OK ||
        (st = vocab_size(vocab, added, n_min, name, &v->n, err)) != SPEX_OK ||
        (st = fill_tokens(v, vocab, added, name, err)) != SPEX_OK)
        return st;
    return fill_merges(v, merges, name, err);
}

/* The id of a token the config names; absent from the vocabulary is an error. */
static spex_status named_id(const hf_vocab *v, const char *text, const char *field, const char *name, int32_t *id,
                            spex_error *err) {
    *id = find_token(v->tokens, v->n, text);
    if (*id == SPEX_TOKEN_NONE)
        return spex_error_set(err, SPEX_ERR_NOT_FOUND, "%s: %s \"%.80s\" is not in the vocabulary", name, field, text);
    return SPEX_OK;
}

static spex_status hf_convert(const char *json_path, const char *config_path, int32_t n_vocab, spex_gguf_writer *w,
                              spex_error *err) {
    if (!w) return spex_error_set(err, SPEX_ERR_INVALID_ARG, "tokenizer.json: no writer");
    cJSON *root = NULL, *cfg_root = NULL;
    hf_vocab v = {0};
    hf_config c = {.add_bos = -1, .add_eos = -1};
    const char *pre = NULL, *key = NULL;
    spex_status st = parse_json(json_path, "tokenizer.json", &root, err);
    if (st == SPEX_OK) st = detect_pre(root, json_path, &pre, err);
    if (st == SPEX_OK) st = build_vocab(root, json_path, n_vocab, &v, err);
    if (st == SPEX_OK && config_path) {
        st = parse_json(config_path, "tokenizer_config.json", &cfg_root, err);
        if (st == SPEX_OK) st = parse_config(cfg_root, config_path, &c, err);
    }
    if (st != SPEX_OK) goto done;

    /* Special ids: the config's when it names them; otherwise llama.cpp's choices for Qwen
     * (bos and pad <|endoftext|>, eos <|im_end|>, else <|endoftext|>). The real Qwen GGUFs
     * have bos = <|endoftext|> although the config's bos_token is null, so that stays. */
    int32_t bos = find_token(v.tokens, v.n, "<|endoftext|>"), pad = bos, unk = SPEX_TOKEN_NONE;
    int32_t eos = find_token(v.tokens, v.n, "<|im_end|>");
    if (eos == SPEX_TOKEN_NONE) eos = bos;
    const char *cfg = config_path;
    if ((c.bos && (st = named_id(&v, c.bos, "bos_token", cfg, &bos, err)) != SPEX_OK) ||
        (c.eos && (st = named_id(&v, c.eos, "eos_token", cfg, &eos, err)) != SPEX_OK) ||
        (c.pad && (st = named_id(&v, c.pad, "pad_token", cfg, &pad, err)) != SPEX_OK) ||
        (c.unk && (st = named_id(&v, c.unk, "unk_token", cfg, &unk, err)) != SPEX_OK))
        goto done;

#define SET(k, call)                                  \
    do {                                              \
        key = (k);                                    \
        if ((st = (call)) != SPEX_OK) goto set_failed; \
    } while (0)
    SET("tokenizer.ggml.model", spex_gguf_writer_set_str(w, key, "gpt2", 4));
    SET("tokenizer.ggml.pre", spex_gguf_writer_set_str(w, key, pre, strlen(pre)));
    SET("tokenizer.ggml.tokens", spex_gguf_writer_set_arr_str(w, key, v.tokens, (uint64_t)v.n));
    SET("tokenizer.ggml.token_type", spex_gguf_writer_set_arr(w, key, SPEX_GGUF_I32, v.types, (uint64_t)v.n));
    SET("tokenizer.ggml.merges", spex_gguf_writer_set_arr_str(w, key, v.merges, (uint64_t)v.n_merges));
    if (bos >= 0) SET("tokenizer.ggml.bos_token_id", spex_gguf_writer_set_u32(w, key, (uint32_t)bos));
    if (eos >= 0) SET("tokenizer.ggml.eos_token_id", spex_gguf_writer_set_u32(w, key, (uint32_t)eos));
    if (pad >= 0) SET("tokenizer.ggml.padding_token_id", spex_gguf_writer_set_u32(w, key, (uint32_t)pad));
    if (unk >= 0) SET("tokenizer.ggml.unknown_token_id", spex_gguf_writer_set_u32(w, key, (uint32_t)unk));
    SET("tokenizer.ggml.add_bos_token", spex_gguf_writer_set_bool(w, key, c.add_bos == 1));
    if (c.add_eos >= 0) SET("tokenizer.ggml.add_eos_token", spex_gguf_writer_set_bool(w, key, c.add_eos == 1));
    if (c.chat_template)
        SET("tokenizer.chat_template", spex_gguf_writer_set_str(w, key, c.chat_template, strlen(c.chat_template)));
#undef SET
    goto done;
set_failed:
    st = spex_convert_set_failed(st, key, err);
done:
    hf_vocab_free(&v);
    cJSON_Delete(root);
    cJSON_Delete(cfg_root);
    return st;
}

spex_status spex_vocab_from_hf_json(const char *tokenizer_json_path, const char *tokenizer_config_json_path,
                                    spex_gguf_writer *w, spex_error *err) {
    return hf_convert(tokenizer_json_path, tokenizer_config_json_path, 0, w, err);
}

spex_status spex_vocab_from_hf_json_padded(const char *tokenizer_json_path, const char *tokenizer_config_json_path,
                                           int32_t n_vocab, spex_gguf_writer *w, spex_error *err) {
    if (n_vocab <= 0)
        return spex_error_set(err, SPEX_ERR_INVALID_ARG, "tokenizer.json: vocabulary size %d is not positive", (int)n_vocab);
    return hf_convert(tokenizer_json_path, tokenizer_config_json_path, n_vocab, w, err);
}
