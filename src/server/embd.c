/*
 * embd.c — the embeddings endpoints' request parser and response bodies: OpenAI's
 * POST /v1/embeddings (and /embeddings) and llama-server's POST /embedding.
 *
 * What it is: the body rules of llama-server (tools/server/README.md, "POST /embedding" and
 * "POST /v1/embeddings"): the input is "input" (or llama-server's "content", which selects
 * the native response shape) holding a string, an array of token ids, or an array whose
 * elements are strings or arrays of token ids (one embedding each); "encoding_format" float
 * (default) or base64 (the little-endian float32 bytes, base64); "embd_normalize" (-1 none, 0
 * max-abs to int16 range, 1 taxicab, 2 euclidean: the default, p > 2 p-norm). Needs no model,
 * so fuzz/fuzz_server_req.c drives the parser. What it is not: tokenization, the forward
 * pass or pooling (http.c tokenizes; the engine thread runs the model, src/model/embd.c).
 *
 * spex's choice where llama-server is silent or looser: an array mixing strings and token ids
 * at the top level (llama.cpp's "mixed" prompt) is refused with 400; more than
 * SRV_EMBD_MAX_INPUTS inputs (OpenAI's limit) is 400; an empty array is 400.
 */
#include "server/server.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void srv_embd_req_free(srv_embd_req *r) {
    for (int i = 0; r->in && i < r->n_in; i++) {
        free(r->in[i].text);
        free(r->in[i].ids);
    }
    free(r->in);
    free(r->model);
    memset(r, 0, sizeof *r);
}

static bool is_id(const cJSON *v) {
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= 2147483647.0 &&
           v->valuedouble == floor(v->valuedouble);
}

/* An array of token ids into in; 0 or 400. */
static int read_ids(const cJSON *a, srv_embd_input *in, int index, char *msg, size_t cap) {
    int n = cJSON_GetArraySize(a);
    in->ids = malloc(sizeof *in->ids * (size_t)(n > 0 ? n : 1));
    if (!in->ids) return srv_fail(msg, cap, 500, "out of memory");
    const cJSON *v;
    cJSON_ArrayForEach(v, a) {
        if (!is_id(v))
            return srv_fail(msg, cap, 400, "input %d: a token id must be an integer in 0 .. 2147483647", index);
        in->ids[in->n_ids++] = (int32_t)v->valuedouble;
    }
    return 0;
}

static int read_text(const cJSON *s, srv_embd_input *in, char *msg, size_t cap) {
    size_t n = strlen(s->valuestring);
    in->text = malloc(n + 1);
    if (!in->text) return srv_fail(msg, cap, 500, "out of memory");
    memcpy(in->text, s->valuestring, n + 1);
    return 0;
}

/* The input value (string, ids, or an array of strings and id arrays) into r->in. */
static int read_inputs(srv_embd_req *r, const cJSON *p, char *msg, size_t cap) {
    const char *shape = "a string, an array of token ids, or an array of strings and arrays of token ids";
    if (cJSON_IsString(p) || (cJSON_IsArray(p) && is_id(p->child))) {   /* one input */
        r->in = calloc(1, sizeof *r->in);
        if (!r->in) return srv_fail(msg, cap, 500, "out of memory");
        r->n_in = 1;
        return cJSON_IsString(p) ? read_text(p, r->in, msg, cap) : read_ids(p, r->in, 0, msg, cap);
    }
    if (!cJSON_IsArray(p)) return srv_fail(msg, cap, 400, "'input' must be %s", shape);
    int n = cJSON_GetArraySize(p);
    if (n == 0) return srv_fail(msg, cap, 400, "'input' is an empty array");
    if (n > SRV_EMBD_MAX_INPUTS)
        return srv_fail(msg, cap, 400, "'input' holds %d inputs, at most %d are allowed in one request", n,
                    SRV_EMBD_MAX_INPUTS);
    r->in = calloc((size_t)n, sizeof *r->in);
    if (!r->in) return srv_fail(msg, cap, 500, "out of memory");
    const cJSON *v;
    cJSON_ArrayForEach(v, p) {
        srv_embd_input *in = &r->in[r->n_in];
        int rc;
        if (cJSON_IsString(v)) rc = read_text(v, in, msg, cap);
        else if (cJSON_IsArray(v)) rc = read_ids(v, in, r->n_in, msg, cap);
        else if (cJSON_IsNumber(v))
            rc = srv_fail(msg, cap, 400, "'input' mixes strings and token ids at the top level: give one array of token "
                                     "ids, or an array of strings and arrays of token ids");
        else rc = srv_fail(msg, cap, 400, "input %d must be a string or an array of token ids", r->n_in);
        r->n_in++;
        if (rc) return rc;
    }
    return 0;
}

int srv_parse_embd(srv_embd_req *r, const char *body, size_t len, bool oai, char *msg, size_t cap) {
    memset(r, 0, sizeof *r);
    r->oai = oai;
    r->normalize = 2;
    cJSON *o = cJSON_ParseWithLength(body, len);
    if (!o) return srv_fail(msg, cap, 400, "malformed JSON in the request body");
    int rc = 0;
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(o, "input");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(o, "encoding_format");
    const cJSON *nrm = cJSON_GetObjectItemCaseSensitive(o, "embd_normalize");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(o, "model");
    if (!cJSON_IsObject(o)) {
        rc = srv_fail(msg, cap, 400, "the request body must be a JSON object");
    } else if (!in && !(in = cJSON_GetObjectItemCaseSensitive(o, "content"))) {
        rc = srv_fail(msg, cap, 400, "\"input\" or \"content\" must be provided");
    } else {
        if (!cJSON_GetObjectItemCaseSensitive(o, "input")) r->oai = false;   /* "content" is llama-server's */
        if (fmt && !(cJSON_IsString(fmt) && (!strcmp(fmt->valuestring, "float") || !strcmp(fmt->valuestring, "base64"))))
            rc = srv_fail(msg, cap, 400, "'encoding_format' must be \"float\" or \"base64\"");
        else if (nrm && !(cJSON_IsNumber(nrm) && nrm->valuedouble == floor(nrm->valuedouble) &&
                          nrm->valuedouble >= -1e6 && nrm->valuedouble <= 1e6))
            rc = srv_fail(msg, cap, 400, "'embd_normalize' must be an integer (-1 none, 0 max-abs, 1 taxicab, 2 "
                                     "euclidean, > 2 p-norm)");
        else if (model && !cJSON_IsString(model))
            rc = srv_fail(msg, cap, 400, "'model' must be a string");
        else
            rc = read_inputs(r, in, msg, cap);
        r->base64 = fmt && cJSON_IsString(fmt) && !strcmp(fmt->valuestring, "base64");
        if (nrm && cJSON_IsNumber(nrm) && !rc) r->normalize = nrm->valuedouble < -1 ? -1 : (int32_t)nrm->valuedouble;
        if (!rc && cJSON_IsString(model) && !(r->model = malloc(strlen(model->valuestring) + 1)))
            rc = srv_fail(msg, cap, 500, "out of memory");
        else if (!rc && r->model)
            memcpy(r->model, model->valuestring, strlen(model->valuestring) + 1);
    }
    cJSON_Delete(o);
    return rc;
}

/* ======================================================================== */
/* Responses                                                                 */
/* ======================================================================== */

/* base64 (RFC 4648, padded) of x[0..n) as little-endian float32 bytes, malloc'd. */
static char *base64_f32(const float *x, int64_t n) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const size_t nb = (size_t)n * 4;
    char *out = malloc((nb + 2) / 3 * 4 + 1);
    if (!out) return NULL;
    size_t k = 0;
    uint8_t b3[3];
    int fill = 0;
    for (size_t i = 0; i < nb; i++) {
        uint32_t u;
        memcpy(&u, &x[i / 4], 4);
        b3[fill++] = (uint8_t)(u >> (8 * (i % 4)));   /* byte i % 4 of the value, least first */
        if (fill < 3 && i + 1 < nb) continue;
        const uint32_t v = (uint32_t)b3[0] << 16 | (fill > 1 ? (uint32_t)b3[1] << 8 : 0) | (fill > 2 ? b3[2] : 0);
        out[k++] = A[v >> 18 & 63];
        out[k++] = A[v >> 12 & 63];
        out[k++] = fill > 1 ? A[v >> 6 & 63] : '=';
        out[k++] = fill > 2 ? A[v & 63] : '=';
        fill = 0;
    }
    out[k] = 0;
    return out;
}

static cJSON *float_array(const float *x, int64_t n) {
    cJSON *a = cJSON_CreateArray();
    for (int64_t i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)x[i]));
    return a;
}

char *srv_embd_response(const srv_embd_req *r, const float *vecs, const int32_t *n_rows, int64_t E,
                        int64_t n_tokens, const char *model) {
    cJSON *root = r->oai ? cJSON_CreateObject() : cJSON_CreateArray();
    cJSON *data = r->oai ? cJSON_CreateArray() : root;
    const float *v = vecs;
    for (int i = 0; i < r->n_in; i++) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddNumberToObject(d, "index", i);
        if (r->oai) {   /* one pooled vector (pooling none is refused before this) */
            cJSON_AddStringToObject(d, "object", "embedding");
            char *b = r->base64 ? base64_f32(v, E) : NULL;
            cJSON_AddItemToObject(d, "embedding", r->base64 ? cJSON_CreateString(b ? b : "") : float_array(v, E));
            free(b);
        } else {        /* llama-server's shape: the rows, one per token with pooling none */
            cJSON *rows = cJSON_AddArrayToObject(d, "embedding");
            for (int32_t k = 0; k < n_rows[i]; k++) cJSON_AddItemToArray(rows, float_array(v + (int64_t)k * E, E));
        }
        v += (int64_t)n_rows[i] * E;
        cJSON_AddItemToArray(data, d);
    }
    if (r->oai) {
        cJSON_AddStringToObject(root, "object", "list");
        cJSON_AddItemToObject(root, "data", data);
        cJSON_AddStringToObject(root, "model", r->model ? r->model : model);
        cJSON *u = cJSON_AddObjectToObject(root, "usage");
        cJSON_AddNumberToObject(u, "prompt_tokens", (double)n_tokens);
        cJSON_AddNumberToObject(u, "total_tokens", (double)n_tokens);
    }
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}
