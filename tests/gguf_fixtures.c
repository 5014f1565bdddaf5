/*
 * gguf_fixtures.c — GGUF helpers shared by the model tests (linked into every test program).
 */
#include "gguf/api.h"
#include "gguf_fixtures.h"
#include "tensor/api.h"

#include <stdlib.h>
#include <string.h>

/* Writes dst = src with every tensor dequantized to F32 by spex's reference dequantizer
 * (metadata copied verbatim): the same model on the exact weights a quantized file holds, so a
 * quantized run can be compared with an F32 run of its own weights or with a reference that
 * used the dequantized weights (what remains is the matmul's activation quantization). */
bool test_write_dequantized(const char *src, const char *dst) {
    spex_gguf *g = NULL;
    if (spex_gguf_open(src, &g, NULL) != SPEX_OK) return false;
    spex_gguf_writer *w = NULL;
    bool ok = spex_gguf_writer_init(&w, NULL) == SPEX_OK;
    for (int64_t i = 0; ok && i < spex_gguf_n_kv(g); i++) {
        spex_gguf_value v;
        ok = spex_gguf_value_at(g, i, &v) == SPEX_OK && spex_gguf_writer_set_value(w, spex_gguf_key(g, i), &v) == SPEX_OK;
    }
    const int64_t nt = spex_gguf_n_tensors(g);
    float **bufs = calloc((size_t)nt, sizeof *bufs);
    for (int64_t i = 0; ok && i < nt; i++) {
        const spex_tensor_info *t = spex_gguf_tensor(g, i);
        const int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
        const size_t rb = spex_type_row_size(t->type, t->ne[0]);
        bufs[i] = malloc(sizeof(float) * (size_t)(rows * t->ne[0]));
        for (int64_t r = 0; ok && r < rows; r++)
            ok = spex_dequantize_row_ref(t->type, (const uint8_t *)t->data + (size_t)r * rb, bufs[i] + r * t->ne[0],
                                         t->ne[0]) == SPEX_OK;
        ok = ok && spex_gguf_writer_add_tensor(w, t->name, SPEX_TYPE_F32, t->n_dims, t->ne, bufs[i],
                                               sizeof(float) * (uint64_t)(rows * t->ne[0]), NULL) == SPEX_OK;
    }
    ok = ok && spex_gguf_writer_write(w, dst, NULL) == SPEX_OK;
    for (int64_t i = 0; i < nt; i++) free(bufs[i]);
    free(bufs);
    spex_gguf_writer_free(w);
    spex_gguf_close(g);
    return ok;
}

bool test_write_with_u32(const char *src, const char *dst, const char *key, uint32_t v) {
    spex_gguf *g = NULL;
    if (spex_gguf_open(src, &g, NULL) != SPEX_OK) return false;
    spex_gguf_writer *w = NULL;
    bool ok = spex_gguf_writer_init(&w, NULL) == SPEX_OK;
    for (int64_t i = 0; ok && i < spex_gguf_n_kv(g); i++) {
        spex_gguf_value kv;
        if (!strcmp(spex_gguf_key(g, i), key)) continue;
        ok = spex_gguf_value_at(g, i, &kv) == SPEX_OK && spex_gguf_writer_set_value(w, spex_gguf_key(g, i), &kv) == SPEX_OK;
    }
    ok = ok && spex_gguf_writer_set_u32(w, key, v) == SPEX_OK;
    for (int64_t i = 0; ok && i < spex_gguf_n_tensors(g); i++) {
        const spex_tensor_info *t = spex_gguf_tensor(g, i);
        const uint64_t rows = (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
        ok = spex_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data,
                                         rows * spex_type_row_size(t->type, t->ne[0]), NULL) == SPEX_OK;
    }
    ok = ok && spex_gguf_writer_write(w, dst, NULL) == SPEX_OK;
    spex_gguf_writer_free(w);
    spex_gguf_close(g);
    return ok;
}
