/*
 * repack_weights.c — moves a loaded model's (or drafter's) matmul weights into the R16
 * layout when the active kernels read that faster (cpu/matmul.h; today the AVX-512 kernels of
 * Q4_K, Q5_K, Q6_K, Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1: per-block transposes of 16 rows become plain
 * loads, and 16 rows read side by side become one stream).
 *
 * What it is: a load-time step. Each chosen matrix is copied once into an owned, 64-byte
 * aligned buffer in the new layout (the same number of bytes), the weight's data pointer
 * and its r16 flag are switched, and the original pages of a file mapping are given back
 * to the kernel, so resident memory stays about the model's size (the file stays in the
 * page cache until the kernel needs the memory). Tables that are also read row by row
 * (embeddings) are read through spex_model_weight_row, which understands both layouts, so a
 * tied LM head can be repacked with its embedding; callers list in `keep` what must stay in
 * the mapping untouched.
 */
#include "model/model.h"
#include "gguf/gguf.h"

#include <stdlib.h>
#include <string.h>

static bool in_list(const void *p, const void *const *list, int n) {
    for (int i = 0; i < n; i++)
        if (list[i] == p) return true;
    return false;
}

spex_status spex_model_repack(model_weight *const *ws, int n, const void *const *keep, int n_keep,
                              const spex_gguf *g, model_repack *r, spex_error *err) {
    const spex_matmul_kernels *k = spex_matmul_kernels_get();
    for (int i = 0; i < n; i++) {
        model_weight *w = ws[i];
        if (!w || !w->t || !w->data || w->r16) continue;
        if (!spex_r16_supported(w->type) || !k->r16_fast[w->type] || w->n_out % 16 != 0) continue;
        if (in_list(w->data, keep, n_keep)) continue;
        int found = -1;
        for (int j = 0; j < r->n; j++)
            if (r->src[j] == w->data) found = j;
        if (found < 0) {
            const size_t bytes = spex_type_row_size(w->type, w->n_in) * (size_t)w->n_out;
            if (r->n == r->cap) {
                const int cap = r->cap ? 2 * r->cap : 32;
                void **nb = realloc(r->bufs, sizeof *nb * (size_t)cap);
                if (!nb) return spex_error_set(err, SPEX_ERR_NOMEM, "repacking weights: out of memory");
                r->bufs = nb;
                const void **ns = realloc(r->src, sizeof *ns * (size_t)cap);
                if (!ns) return spex_error_set(err, SPEX_ERR_NOMEM, "repacking weights: out of memory");
                r->src = ns;
                r->cap = cap;
            }
            void *buf = aligned_alloc(64, (bytes + 63) / 64 * 64);
            if (!buf)
                return spex_error_set(err, SPEX_ERR_NOMEM, "repacking %s: cannot allocate %zu bytes", w->t->name,
                                      bytes);
            spex_r16_pack(w->type, w->data, buf, w->n_out, w->n_in);
            spex_gguf_release_data(g, w->data, bytes);
            r->bufs[r->n] = buf;
            r->src[r->n] = w->data;
            r->bytes += bytes;
            found = r->n++;
        }
        w->data = r->bufs[found];
        w->r16 = true;
    }
    return SPEX_OK;
}

void spex_model_repack_free(model_repack *r) {
    for (int i = 0; i < r->n; i++) free(r->bufs[i]);
    free(r->bufs);
    free(r->src);
    memset(r, 0, sizeof *r);
}

void spex_model_weight_row(const model_weight *w, int64_t row, float *out) {
    const size_t rb = spex_type_row_size(w->type, w->n_in);
    if (!w->r16) {
        const void *src = (const uint8_t *)w->data + (size_t)row * rb;
        if (w->type == SPEX_TYPE_F32) memcpy(out, src, (size_t)w->n_in * sizeof(float));
        else spex_dequantize_row_ref(w->type, src, out, w->n_in);
        return;
    }
    /* R16: block b of row `row` sits in lane row % 16 of unit b of its 16-row group */
    const spex_type_info *ti = spex_type_get_info((int)w->type);
    const int64_t bs = ti->block_size, nb = w->n_in / bs;
    const uint8_t *g16 = (const uint8_t *)w->data + (size_t)(row / 16 * 16) * rb;
    _Alignas(16) uint8_t blk[256]; /* one block of an R16 type (Q6_K's 210 bytes the largest) */
    for (int64_t b = 0; b < nb; b++) {
        spex_r16_get_block(w->type, g16, (int)(row % 16), b, blk);
        spex_dequantize_row_ref(w->type, blk, out + b * bs, bs);
    }
}
