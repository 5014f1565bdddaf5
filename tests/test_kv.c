/*
 * test_kv.c — the KV cache API of a spex_context: spex_kv_seq_len / truncate / copy / clear.
 *
 * What is checked: the length semantics and their errors; that truncation is O(1) — it moves
 * no data (every byte of the cache, in every layer, is the same before and after, rows beyond
 * the new length included) and a later forward rewrites only the rows it owns; that a copy
 * gives the destination exactly the source's prefix rows, leaves the source alone, and stays
 * independent afterwards; that sequences never write into each other's regions; and that
 * truncate / copy / clear compose with spex_forward (the logits after a rollback equal those
 * of a fresh run). Model: tests/data/models/tiny-qwen3.gguf (3 layers, H_kv 2, hd 32, V 256).
 * The row addresses come from the internal spex_kv_seg (src/model/model.h).
 */
#include "spex.h"
#include "model/api.h"
#include "test.h"
#include "model/model.h"
#include "tensor/api.h"

#include <stdint.h>
#include <unistd.h>

static const char *model_path(void) {
    const char *p = "tests/data/models/tiny-qwen3.gguf";
    return access(p, R_OK) == 0 ? p : NULL;
}

static spex_model *g_model;

static spex_context *make_ctx(spex_type kv, int n_seq, int n_ctx) {
    if (!g_model && model_path()) spex_model_load(model_path(), NULL, &g_model, NULL);
    if (!g_model) return NULL;
    spex_context_params p = spex_context_default_params();
    p.kv_type = kv;
    p.n_seq_max = n_seq;
    p.n_ctx_per_seq = n_ctx;
    p.n_batch_max = 32;
    p.n_outputs_max = 32;
    spex_context *c = NULL;
    spex_error e = {0};
    if (spex_context_init(g_model, &p, &c, &e) != SPEX_OK) printf("  context: %s\n", e.msg);
    return c;
}

#define NEED_CTX(c, kv, n_seq, n_ctx)                                                          \
    if (!model_path()) SKIP("tests/data/models/tiny-qwen3.gguf missing");                 \
    spex_context *c = make_ctx(kv, n_seq, n_ctx);                                              \
    CHECK(c != NULL)

/* Feeds tokens[0..n) to seq from its current length; all logits wanted. */
static spex_status feed(spex_context *c, int32_t seq, const int32_t *tokens, int n, spex_error *e) {
    spex_batch_token bt[32];
    const int32_t L = spex_kv_seq_len(c, seq);
    for (int i = 0; i < n; i++) bt[i] = (spex_batch_token){tokens[i], L + i, seq, true};
    return spex_forward(c, &(spex_batch){bt, n}, e);
}

static const int32_t toks[16] = {1, 40, 77, 120, 3, 200, 9, 180, 66, 251, 17, 33, 140, 7, 99, 230};

/* Bytes of (layer, seq) rows [0, n) of K and V, concatenated over layers. */
static size_t region_bytes(const spex_context *c, int n) {
    const spex_model *m = spex_context_model(c);
    return 2u * (size_t)spex_model_get_hparams(m)->n_layer * (size_t)n * c->kv_row_bytes;
}

static void snapshot(const spex_context *c, int32_t seq, int n, uint8_t *out) {
    const int N = spex_model_get_hparams(spex_context_model(c))->n_layer;
    const size_t rb = (size_t)n * c->kv_seg_bytes;
    for (int l = 0; l < N; l++)
        for (int v = 0; v < 2; v++)
            for (int g = 0; g < c->kv_nseg; g++) {
                memcpy(out, spex_kv_seg(c, v, l, seq, g, 0), rb);
                out += rb;
            }
}

/* Caches are head-major (a kv head's rows of a sequence are one stream, what attention
 * reads; Q8_0 too, hd 32 being whole blocks); sequences and layers follow each other. The
 * whole-row Q8_0 layout (hd not a multiple of 32) is test_model's stories_greedy_q8kv. */
TEST(layout_head_major) {
    const spex_type types[3] = {SPEX_TYPE_F32, SPEX_TYPE_F16, SPEX_TYPE_Q8_0};
    for (int i = 0; i < 3; i++) {
        NEED_CTX(c, types[i], 2, 16);
        const size_t row = spex_type_row_size(types[i], 64); /* H_kv 2 x hd 32 */
        CHECK_EQ_INT(c->kv_nseg, 2);
        CHECK_EQ_INT(c->kv_seg_bytes, row / 2);
        const uint8_t *r0 = spex_kv_seg(c, false, 0, 0, 0, 0);
        CHECK_EQ_INT((const uint8_t *)spex_kv_seg(c, false, 0, 0, 0, 1) - r0, (int64_t)c->kv_seg_bytes);
        CHECK_EQ_INT((const uint8_t *)spex_kv_seg(c, false, 0, 0, c->kv_nseg - 1, 15) - r0,
                     (int64_t)((c->kv_nseg - 1) * 16 + 15) * (int64_t)c->kv_seg_bytes);
        CHECK_EQ_INT((const uint8_t *)spex_kv_seg(c, false, 0, 1, 0, 0) - r0, 16 * (int64_t)row);
        CHECK_EQ_INT((const uint8_t *)spex_kv_seg(c, false, 1, 0, 0, 0) - r0, 2 * 16 * (int64_t)row);
        spex_context_free(c);
    }
}

TEST(len_and_errors) {
    NEED_CTX(c, SPEX_TYPE_F16, 2, 16);
    spex_error e = {0};
    CHECK_EQ_INT(spex_kv_seq_len(c, 0), 0);
    CHECK_EQ_INT(spex_kv_seq_len(c, 2), -1);
    CHECK_EQ_INT(spex_kv_seq_len(c, -1), -1);
    CHECK_EQ_INT(spex_kv_seq_len(NULL, 0), -1);
    CHECK_OK(feed(c, 0, toks, 5, &e));
    CHECK_EQ_INT(spex_kv_seq_len(c, 0), 5);
    CHECK_EQ_INT(spex_kv_seq_len(c, 1), 0);
    CHECK(spex_kv_seq_truncate(c, 0, 6, &e) == SPEX_ERR_RANGE && strstr(e.msg, "holds 5"));
    CHECK(spex_kv_seq_truncate(c, 0, -1, &e) == SPEX_ERR_RANGE);
    CHECK(spex_kv_seq_truncate(c, 2, 0, &e) == SPEX_ERR_INVALID_ARG);
    CHECK(spex_kv_seq_copy(c, 0, 1, 6, &e) == SPEX_ERR_RANGE);
    CHECK(spex_kv_seq_copy(c, 0, 5, 1, &e) == SPEX_ERR_INVALID_ARG);
    CHECK(spex_kv_seq_clear(c, 7, &e) == SPEX_ERR_INVALID_ARG);
    CHECK_EQ_INT(spex_kv_seq_len(c, 0), 5); /* failed calls changed nothing */
    CHECK_OK(spex_kv_seq_truncate(c, 0, 5, &e)); /* to the current length: a no-op */
    CHECK_EQ_INT(spex_kv_seq_len(c, 0), 5);
    CHECK_OK(spex_kv_seq_truncate(c, 0, 0, &e));
    CHECK_EQ_INT(spex_kv_seq_len(c, 0), 0);
    spex_context_free(c);
}

/* Truncation moves no data: the whole cache is byte-identical before and after, and the
 * next forward rewrites exactly the rows at its positions. */
TEST(truncate_is_o1) {
    NEED_CTX(c, SPEX_TYPE_F16, 2, 16);
    spex_error e = {0};
    CHECK_OK(feed(c, 0, toks, 12, &e));
    CHECK_OK(feed(c, 1, toks + 4, 7, &e));
    const size_t n0 = region_bytes(c, 16);
    uint8_t *a0 = malloc(n0), *a1 = malloc(n0), *b0 = malloc(n0), *b1 = malloc(n0);
    snapshot(c, 0, 16, a0);
    snapshot(c, 1, 16, a1);
    CHECK_OK(spex_kv_seq_truncate(c, 0, 5, &e));
    snapshot(c, 0, 16, b0);
    snapshot(c, 1, 16, b1);
    bool same = !memcmp(a0, b0, n0) && !memcmp(a1, b1, n0);
    /* decode one token at position 5: rows 0..4 and 6.. of seq 0 keep their bytes, row 5
     * changes (a different token than before), seq 1 is untouched */
    const int32_t t = 2;
    CHECK_OK(feed(c, 0, &t, 1, &e));
    snapshot(c, 0, 16, b0);
    snapshot(c, 1, 16, b1);
    const int N = spex_model_get_hparams(spex_context_model(c))->n_layer;
    const size_t rb = c->kv_seg_bytes; /* the snapshot is [layer][K, V][segment][16 rows] */
    bool only_row5 = !memcmp(a1, b1, n0);
    bool row5_changed = false;
    for (int r = 0; r < 2 * N * c->kv_nseg; r++)
        for (int p = 0; p < 16; p++) {
            const size_t off = ((size_t)r * 16 + (size_t)p) * rb;
            const bool eq = !memcmp(a0 + off, b0 + off, rb);
            if (p == 5) row5_changed |= !eq;
            else only_row5 &= eq;
        }
    free(a0), free(a1), free(b0), free(b1);
    spex_context_free(c);
    CHECK_MSG(same, "truncate changed cache bytes");
    CHECK_MSG(only_row5, "a forward at position 5 touched other rows");
    CHECK(row5_changed);
}

TEST(copy_semantics) {
    NEED_CTX(c, SPEX_TYPE_F32, 3, 16);
    spex_error e = {0};
    CHECK_OK(feed(c, 0, toks, 10, &e));
    CHECK_OK(feed(c, 2, toks + 3, 13, &e)); /* dst holds more than will be copied */
    const size_t nb = region_bytes(c, 16);
    uint8_t *src_before = malloc(nb), *src_after = malloc(nb), *dst = malloc(nb);
    snapshot(c, 0, 16, src_before);
    CHECK_OK(spex_kv_seq_copy(c, 0, 2, 6, &e));
    CHECK_EQ_INT(spex_kv_seq_len(c, 2), 6);
    CHECK_EQ_INT(spex_kv_seq_len(c, 0), 10);
    snapshot(c, 0, 16, src_after);
    bool src_same = !memcmp(src_before, src_after, nb);
    /* dst rows 0..5 equal src rows 0..5 in every layer */
    bool prefix_eq = true;
    const int N = spex_model_get_hparams(spex_context_model(c))->n_layer;
    for (int l = 0; l < N; l++)
        for (int v = 0; v < 2; v++)
            for (int g = 0; g < c->kv_nseg; g++)
                prefix_eq &= !memcmp(spex_kv_seg(c, v, l, 2, g, 0), spex_kv_seg(c, v, l, 0, g, 0), 6 * c->kv_seg_bytes);
    /* continuing dst does not disturb src, and gives the logits src gave at those positions */
    float want[256], got[256];
    CHECK_OK(spex_kv_seq_truncate(c, 0, 6, &e));
    CHECK_OK(feed(c, 0, toks + 6, 1, &e));
    memcpy(want, spex_logits(c, 0), sizeof want);
    snapshot(c, 0, 16, src_before);
    CHECK_OK(feed(c, 2, toks + 6, 1, &e));
    memcpy(got, spex_logits(c, 0), sizeof got);
    snapshot(c, 0, 16, src_after);
    bool src_same2 = !memcmp(src_before, src_after, nb);
    bool logits_eq = !memcmp(want, got, sizeof want);
    /* len < 0 copies all; src == dst truncates */
    CHECK_OK(spex_kv_seq_copy(c, 0, 1, -1, &e));
    CHECK_EQ_INT(spex_kv_seq_len(c, 1), 7);
    CHECK_OK(spex_kv_seq_copy(c, 1, 1, 3, &e));
    CHECK_EQ_INT(spex_kv_seq_len(c, 1), 3);
    snapshot(c, 1, 16, dst);
    free(src_before), free(src_after), free(dst);
    spex_context_free(c);
    CHECK(src_same && prefix_eq && src_same2);
    CHECK_MSG(logits_eq, "copied prefix gives other logits");
}

TEST(clear_semantics) {
    NEED_CTX(c, SPEX_TYPE_Q8_0, 3, 16);
    spex_error e = {0};
    for (int s = 0; s < 3; s++) CHECK_OK(feed(c, s, toks + s, 4 + s, &e));
    CHECK_OK(spex_kv_seq_clear(c, 1, &e));
    CHECK_EQ_INT(spex_kv_seq_len(c, 0), 4);
    CHECK_EQ_INT(spex_kv_seq_len(c, 1), 0);
    CHECK_EQ_INT(spex_kv_seq_len(c, 2), 6);
    /* a cleared sequence restarts at position 0 */
    spex_batch_token bad = {5, 5, 1, true};
    CHECK(spex_forward(c, &(spex_batch){&bad, 1}, &e) == SPEX_ERR_INVALID_ARG);
    CHECK_OK(feed(c, 1, toks, 2, &e));
    CHECK_EQ_INT(spex_kv_seq_len(c, 1), 2);
    CHECK_OK(spex_kv_seq_clear(c, -1, &e));
    for (int s = 0; s < 3; s++) CHECK_EQ_INT(spex_kv_seq_len(c, s), 0);
    spex_context_free(c);
}

/* Rollback for every cache type: decode, truncate, decode other tokens == a fresh run. */
TEST(rollback_every_kv_type) {
    const spex_type types[3] = {SPEX_TYPE_F32, SPEX_TYPE_F16, SPEX_TYPE_Q8_0};
    for (int i = 0; i < 3; i++) {
        NEED_CTX(c, types[i], 2, 16);
        spex_error e = {0};
        CHECK_OK(feed(c, 0, toks, 9, &e));          /* prompt 0..8 */
        CHECK_OK(spex_kv_seq_truncate(c, 0, 4, &e)); /* keep 0..3  */
        CHECK_OK(feed(c, 0, toks + 10, 5, &e));     /* 4..8 other tokens */
        float got[5][256];
        for (int k = 0; k < 5; k++) memcpy(got[k], spex_logits(c, k), sizeof got[k]);
        int32_t fresh[9];
        for (int k = 0; k < 9; k++) fresh[k] = k < 4 ? toks[k] : toks[10 + k - 4];
        CHECK_OK(feed(c, 1, fresh, 9, &e));
        double d = 0;
        for (int k = 0; k < 5; k++)
            for (int v = 0; v < 256; v++) d = fmax(d, fabs((double)got[k][v] - spex_logits(c, 4 + k)[v]));
        spex_context_free(c);
        CHECK_MSG(d == 0.0, "kv %s: rollback vs fresh differ by %.3g", spex_type_get_info(types[i])->name, d);
    }
}

/* n_ctx_per_seq is per sequence: each of 3 sequences holds its full capacity. */
TEST(capacity_per_sequence) {
    NEED_CTX(c, SPEX_TYPE_F16, 3, 8);
    spex_error e = {0};
    for (int s = 0; s < 3; s++) CHECK_OK(feed(c, s, toks, 8, &e));
    CHECK(feed(c, 1, toks, 1, &e) == SPEX_ERR_RANGE);
    CHECK_OK(spex_kv_seq_truncate(c, 1, 7, &e));
    CHECK_OK(feed(c, 1, toks, 1, &e));
    CHECK_EQ_INT(spex_kv_seq_len(c, 1), 8);
    spex_memory_usage mu = spex_context_memory(c);
    /* 2 (K, V) x 3 layers x 3 seqs x 8 rows x (2 heads x 32) x 2 bytes */
    CHECK_EQ_INT(mu.kv, 2ull * 3 * 3 * 8 * 64 * 2);
    spex_context_free(c);
}

TEST(cleanup) {
    spex_model_free(g_model);
    g_model = NULL;
}

TEST_MAIN()
