/*
 * test_gdn.c — the Gated DeltaNet kernels (src/cpu/gdn.h) against a naive float64 reference of
 * targets.md §7.1 step 7 written here, plus the aliasing and batching properties the callers
 * rely on.
 *
 * Inputs: q, k L2-normalised; v ~ N(0, 1); g = −softplus(x)·c with x ~ U(−6, 3) and
 * c ∈ {0.02, 0.5, 1, 3} (g from about −5e-5 to −9); β = sigmoid(N(0, 1)); S_in ~ N(0, 0.5²).
 * Every pointer goes into an interleaved multi-head buffer (3 heads, head 1), so every stride
 * is larger than a row.
 *
 * Bounds (max |got − ref| / max(1, max |ref|) over the whole array; each about 10x the
 * largest value measured over every case below, printed by the tests):
 *   recurrent, every o_t and every snapshot S_after[t]    REC_BOUND
 *   chunked, every o_t and the final state               CHUNK_BOUND
 *   in place, all-same-buffer, S_in NULL vs explicit zero, one token per call vs n at once,
 *   chunked S_out == S_in                                bit-identical
 * Every case runs on every variant this CPU has (src/cpu/gdn_impl.h: scalar, avx2, avx512),
 * each against the float64 reference and each for the bit-identity properties on its own
 * (variants differ from each other by rounding: FMA vs mul + add). gdn_dispatch checks that
 * the public entry points follow spex_cpu_set_isa.
 */
#include "cpu/api.h"
#include "test.h"
#include "cpu/gdn.h"
#include "cpu/gdn_impl.h"

#include <stdbool.h>
#include <stdint.h>

/* ---- variants: CHECK messages name the one under test ---- */

static const char *g_variant = "?";

#undef CHECK_MSG
#define CHECK_MSG(cond, ...)                                                        \
    do {                                                                            \
        if (!(cond)) {                                                              \
            printf("  %s:%d: [%s] ", __FILE__, __LINE__, g_variant);                \
            printf(__VA_ARGS__);                                                    \
            printf("\n");                                                           \
            test_failed_ = 1;                                                       \
            return;                                                                 \
        }                                                                           \
    } while (0)

static const spex_gdn_kernels *variant(int i) {
    const spex_gdn_kernels *k = i <= (int)SPEX_ISA_NEON ? spex_gdn_for((spex_isa)i) : NULL;
    if (k) g_variant = k->name;
    return k;
}

#define FOR_EACH_VARIANT(kv)                                                        \
    for (int vi_ = 0; vi_ <= (int)SPEX_ISA_NEON; vi_++)                             \
        for (const spex_gdn_kernels *kv = variant(vi_); kv; kv = NULL)

#define REC_BOUND 2e-6
#define CHUNK_BOUND 5e-6

/* ---- random inputs -------------------------------------------------------------------------- */

static uint64_t g_rng = 0x243f6a8885a308d3ull;
static double rnd_unit(void) { /* (0, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return ((double)(g_rng >> 11) + 0.5) / 9007199254740992.0;
}
static double rnd_normal(void) { return sqrt(-2.0 * log(rnd_unit())) * cos(6.283185307179586 * rnd_unit()); }

enum { H = 3, HEAD = 1 };

/* One head's problem inside interleaved buffers:
 *   mixed [n][2·H·Dk + H·Dv]  (q heads, k heads, v heads — like the conv output)
 *   gb    [n][H] log-decays, bb [n][H] betas, ob [n][H·Dv] outputs */
typedef struct {
    int Dk, Dv, n;
    float *mixed, *gb, *bb, *ob, *S_in;
    spex_gdn_args a;
} problem;

static void l2norm(float *x, int d) {
    double ss = 0;
    for (int i = 0; i < d; i++) ss += (double)x[i] * x[i];
    const double r = 1.0 / sqrt(ss);
    for (int i = 0; i < d; i++) x[i] = (float)(x[i] * r);
}

static void problem_init(problem *p, int Dk, int Dv, int n) {
    const int64_t W = 2 * H * Dk + H * Dv;
    p->Dk = Dk, p->Dv = Dv, p->n = n;
    p->mixed = malloc(sizeof(float) * (size_t)(n * W));
    p->gb = malloc(sizeof(float) * (size_t)(n * H));
    p->bb = malloc(sizeof(float) * (size_t)(n * H));
    p->ob = malloc(sizeof(float) * (size_t)(n * H * Dv));
    p->S_in = malloc(sizeof(float) * (size_t)(Dk * Dv));
    static const double cs[4] = {0.02, 0.5, 1.0, 3.0};
    for (int64_t i = 0; i < n * W; i++) p->mixed[i] = (float)rnd_normal();
    for (int t = 0; t < n; t++) {
        for (int h = 0; h < H; h++) {
            l2norm(p->mixed + t * W + h * Dk, Dk);
            l2norm(p->mixed + t * W + H * Dk + h * Dk, Dk);
            const double x = -6.0 + 9.0 * rnd_unit(), c = cs[(int)(rnd_unit() * 4) & 3];
            p->gb[t * H + h] = (float)(-log1p(exp(x)) * c);
            p->bb[t * H + h] = (float)(1.0 / (1.0 + exp(-rnd_normal())));
        }
    }
    for (int64_t i = 0; i < (int64_t)Dk * Dv; i++) p->S_in[i] = (float)(0.5 * rnd_normal());
    memset(p->ob, 0xff, sizeof(float) * (size_t)(n * H * Dv)); /* NaN: every o_t must be written */
    p->a = (spex_gdn_args){
        .Dk = Dk, .Dv = Dv, .n = n,
        .q = p->mixed + HEAD * Dk, .k = p->mixed + H * Dk + HEAD * Dk, .v = p->mixed + 2 * H * Dk + HEAD * Dv,
        .g = p->gb + HEAD, .beta = p->bb + HEAD, .o = p->ob + HEAD * Dv,
        .q_stride = W, .k_stride = W, .v_stride = W, .g_stride = H, .beta_stride = H, .o_stride = H * Dv,
        .S_in = p->S_in,
    };
}

static void problem_free(problem *p) {
    free(p->mixed), free(p->gb), free(p->bb), free(p->ob), free(p->S_in);
}

/* ---- float64 reference: §7.1 step 7, one token at a time, one loop per step ------------------ */

/* o_ref [n][Dv]; S_ref [n][Dk][Dv] the state after each token. */
static void reference(const spex_gdn_args *a, double *o_ref, double *S_ref) {
    const int Dk = a->Dk, Dv = a->Dv;
    double *S = calloc((size_t)Dk * Dv, sizeof(double));
    double *q = malloc(sizeof(double) * (size_t)Dk), *err = malloc(sizeof(double) * (size_t)Dv);
    if (a->S_in)
        for (int i = 0; i < Dk * Dv; i++) S[i] = a->S_in[i];
    for (int t = 0; t < a->n; t++) {
        const float *qt = a->q + t * a->q_stride, *k = a->k + t * a->k_stride, *v = a->v + t * a->v_stride;
        const double g = a->g[t * a->g_stride], beta = a->beta[t * a->beta_stride];
        for (int i = 0; i < Dk; i++) q[i] = qt[i] / sqrt((double)Dk);
        for (int i = 0; i < Dk * Dv; i++) S[i] *= exp(g);
        for (int j = 0; j < Dv; j++) {
            double sk = 0;
            for (int i = 0; i < Dk; i++) sk += S[i * Dv + j] * k[i];
            err[j] = beta * (v[j] - sk);
        }
        for (int i = 0; i < Dk; i++)
            for (int j = 0; j < Dv; j++) S[i * Dv + j] += k[i] * err[j];
        for (int j = 0; j < Dv; j++) {
            double o = 0;
            for (int i = 0; i < Dk; i++) o += S[i * Dv + j] * q[i];
            o_ref[t * Dv + j] = o;
        }
        memcpy(S_ref + (size_t)t * Dk * Dv, S, sizeof(double) * (size_t)Dk * Dv);
    }
    free(S), free(q), free(err);
}

/* max |got − ref| / max(1, max |ref|) over rows x cols (got rows at stride gs). NaN -> inf. */
static double rel_err(const float *got, int64_t gs, const double *ref, int rows, int cols) {
    double d = 0, m = 0;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            const double x = got[r * gs + c], y = ref[(int64_t)r * cols + c];
            if (!(fabs(x - y) <= d)) d = isnan(x) ? INFINITY : fabs(x - y);
            if (fabs(y) > m) m = fabs(y);
        }
    return d / (m > 1 ? m : 1);
}

static bool same_floats(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

/* o of all n tokens, rows at stride os, bit-compared. */
static bool same_o(const float *a, const float *b, int n, int64_t os, int Dv) {
    for (int t = 0; t < n; t++)
        if (!same_floats(a + t * os, b + t * os, (size_t)Dv)) return false;
    return true;
}

static float *snapshots(int n, int Dk, int Dv, float **S_after) {
    float *buf = malloc(sizeof(float) * (size_t)n * Dk * Dv);
    for (int t = 0; t < n; t++) S_after[t] = buf + (size_t)t * Dk * Dv;
    return buf;
}

static const int SHAPES[][2] = {{16, 16}, {32, 16}, {128, 128}, {24, 200}};
#define N_SHAPES ((int)(sizeof SHAPES / sizeof SHAPES[0]))
static const int NS[] = {1, 2, 7, 37, 64, 130};
#define N_NS ((int)(sizeof NS / sizeof NS[0]))
static const int CHUNKS[] = {1, 4, 16, 64};
#define N_CHUNKS ((int)(sizeof CHUNKS / sizeof CHUNKS[0]))

/* ---- recurrent vs reference ----------------------------------------------------------------- */

TEST(gdn_recurrent_vs_ref) {
    FOR_EACH_VARIANT(kv) {
        for (int si = 0; si < N_SHAPES; si++) {
            const int Dk = SHAPES[si][0], Dv = SHAPES[si][1];
            double worst_o = 0, worst_s = 0;
            for (int ni = 0; ni < N_NS; ni++) {
                const int n = NS[ni];
                problem p;
                problem_init(&p, Dk, Dv, n);
                double *o_ref = malloc(sizeof(double) * (size_t)n * Dv);
                double *S_ref = malloc(sizeof(double) * (size_t)n * Dk * Dv);
                float *S_after[130];
                float *buf = snapshots(n, Dk, Dv, S_after);
                reference(&p.a, o_ref, S_ref);
                kv->recurrent(&p.a, S_after);
                const double eo = rel_err(p.a.o, p.a.o_stride, o_ref, n, Dv);
                double es = 0;
                for (int t = 0; t < n; t++) {
                    const double e = rel_err(S_after[t], Dv, S_ref + (size_t)t * Dk * Dv, Dk, Dv);
                    if (e > es) es = e;
                }
                free(o_ref), free(S_ref), free(buf);
                problem_free(&p);
                CHECK_MSG(eo <= REC_BOUND, "Dk %d Dv %d n %d: o err %.3g > %.3g", Dk, Dv, n, eo, REC_BOUND);
                CHECK_MSG(es <= REC_BOUND, "Dk %d Dv %d n %d: snapshot err %.3g > %.3g", Dk, Dv, n, es, REC_BOUND);
                if (eo > worst_o) worst_o = eo;
                if (es > worst_s) worst_s = es;
            }
            printf("  %-6s recurrent Dk %3d Dv %3d: max rel err o %.3g, snapshots %.3g (bound %.1g)\n", kv->name,
                   Dk, Dv, worst_o, worst_s, REC_BOUND);
        }
    }
}

/* ---- chunked vs reference ------------------------------------------------------------------- */

TEST(gdn_chunked_vs_ref) {
    FOR_EACH_VARIANT(kv) {
        for (int si = 0; si < N_SHAPES; si++) {
            const int Dk = SHAPES[si][0], Dv = SHAPES[si][1];
            for (int ci = 0; ci < N_CHUNKS; ci++) {
                const int chunk = CHUNKS[ci];
                const size_t ns = spex_gdn_chunked_scratch_floats(Dk, Dv, chunk);
                float *scratch = aligned_alloc(64, (ns * sizeof(float) + 63) & ~(size_t)63);
                float *S_out = malloc(sizeof(float) * (size_t)Dk * Dv);
                double worst_o = 0, worst_s = 0;
                for (int ni = 0; ni < N_NS; ni++) {
                    const int n = NS[ni];
                    problem p;
                    problem_init(&p, Dk, Dv, n);
                    double *o_ref = malloc(sizeof(double) * (size_t)n * Dv);
                    double *S_ref = malloc(sizeof(double) * (size_t)n * Dk * Dv);
                    reference(&p.a, o_ref, S_ref);
                    kv->chunked(&p.a, chunk, S_out, scratch);
                    const double eo = rel_err(p.a.o, p.a.o_stride, o_ref, n, Dv);
                    const double es = rel_err(S_out, Dv, S_ref + (size_t)(n - 1) * Dk * Dv, Dk, Dv);
                    free(o_ref), free(S_ref);
                    problem_free(&p);
                    if (eo > worst_o) worst_o = eo;
                    if (es > worst_s) worst_s = es;
                    if (eo > CHUNK_BOUND || es > CHUNK_BOUND) break;
                }
                free(scratch), free(S_out);
                CHECK_MSG(worst_o <= CHUNK_BOUND, "Dk %d Dv %d chunk %d: o err %.3g > %.3g", Dk, Dv, chunk, worst_o,
                          CHUNK_BOUND);
                CHECK_MSG(worst_s <= CHUNK_BOUND, "Dk %d Dv %d chunk %d: state err %.3g > %.3g", Dk, Dv, chunk, worst_s,
                          CHUNK_BOUND);
                printf("  %-6s chunked Dk %3d Dv %3d chunk %2d: max rel err o %.3g, state %.3g (bound %.1g)\n", kv->name, Dk, Dv, chunk,
                       worst_o, worst_s, CHUNK_BOUND);
            }
        }
    }
}

/* ---- recurrent aliasing: in place and all-same-buffer give the distinct-buffer bits -------- */

TEST(gdn_recurrent_aliasing) {
    FOR_EACH_VARIANT(kv) {
        for (int si = 0; si < N_SHAPES; si++) {
            const int Dk = SHAPES[si][0], Dv = SHAPES[si][1];
            const size_t SZ = (size_t)Dk * Dv;
            for (int ni = 0; ni < N_NS; ni++) {
                const int n = NS[ni];
                problem p;
                problem_init(&p, Dk, Dv, n);
                const int64_t os = p.a.o_stride;
                float *S_after[130], *S_var[130];
                float *ref = snapshots(n, Dk, Dv, S_after);
                float *o_ref = malloc(sizeof(float) * (size_t)n * os);
                kv->recurrent(&p.a, S_after);
                memcpy(o_ref, p.ob, sizeof(float) * (size_t)n * os);

                /* (a) S_in == S_after[0], the rest distinct: every snapshot */
                float *var = snapshots(n, Dk, Dv, S_var);
                memcpy(S_var[0], p.S_in, SZ * sizeof(float));
                spex_gdn_args a = p.a;
                a.S_in = S_var[0];
                kv->recurrent(&a, S_var);
                CHECK_MSG(same_o(o_ref + HEAD * Dv, a.o, n, os, Dv), "Dk %d Dv %d n %d: o differs (S_in == S_after[0])",
                          Dk, Dv, n);
                for (int t = 0; t < n; t++)
                    CHECK_MSG(same_floats(S_after[t], S_var[t], SZ), "Dk %d Dv %d n %d: S_after[%d] differs (in place)",
                              Dk, Dv, n, t);

                /* (b) S_in and every S_after[t] the same buffer */
                float *one = S_var[0];
                memcpy(one, p.S_in, SZ * sizeof(float));
                for (int t = 0; t < n; t++) S_var[t] = one;
                a.S_in = one;
                kv->recurrent(&a, S_var);
                CHECK_MSG(same_o(o_ref + HEAD * Dv, a.o, n, os, Dv), "Dk %d Dv %d n %d: o differs (all one buffer)", Dk,
                          Dv, n);
                CHECK_MSG(same_floats(S_after[n - 1], one, SZ), "Dk %d Dv %d n %d: state differs (all one buffer)", Dk,
                          Dv, n);

                /* (c) every S_after[t] the same buffer, S_in distinct */
                a.S_in = p.S_in;
                kv->recurrent(&a, S_var);
                CHECK_MSG(same_o(o_ref + HEAD * Dv, a.o, n, os, Dv), "Dk %d Dv %d n %d: o differs (one S_after)", Dk, Dv,
                          n);
                CHECK_MSG(same_floats(S_after[n - 1], one, SZ), "Dk %d Dv %d n %d: state differs (one S_after)", Dk, Dv,
                          n);
                CHECK(same_floats(p.S_in, a.S_in, SZ)); /* S_in untouched when distinct */

                free(ref), free(var), free(o_ref);
                problem_free(&p);
            }
        }
    }
}

/* ---- S_in == NULL is the zero state, bit for bit -------------------------------------------- */

TEST(gdn_null_state) {
    FOR_EACH_VARIANT(kv) {
        for (int si = 0; si < N_SHAPES; si++) {
            const int Dk = SHAPES[si][0], Dv = SHAPES[si][1];
            const size_t SZ = (size_t)Dk * Dv;
            const int n = 37;
            problem p;
            problem_init(&p, Dk, Dv, n);
            const int64_t os = p.a.o_stride;
            float *S1[37], *S2[37];
            float *b1 = snapshots(n, Dk, Dv, S1), *b2 = snapshots(n, Dk, Dv, S2);
            float *o1 = malloc(sizeof(float) * (size_t)n * os);

            /* recurrent: explicit zeros (distinct buffers) vs NULL (distinct, then in place) */
            memset(p.S_in, 0, SZ * sizeof(float));
            kv->recurrent(&p.a, S1);
            memcpy(o1, p.ob, sizeof(float) * (size_t)n * os);
            spex_gdn_args a = p.a;
            a.S_in = NULL;
            memset(p.ob, 0xff, sizeof(float) * (size_t)n * os);
            kv->recurrent(&a, S2);
            CHECK(same_o(o1 + HEAD * Dv, a.o, n, os, Dv));
            for (int t = 0; t < n; t++) CHECK_MSG(same_floats(S1[t], S2[t], SZ), "Dk %d Dv %d: S_after[%d]", Dk, Dv, t);
            for (int t = 0; t < n; t++) S2[t] = b2;
            kv->recurrent(&a, S2);
            CHECK(same_o(o1 + HEAD * Dv, a.o, n, os, Dv));
            CHECK(same_floats(S1[n - 1], b2, SZ));

            /* chunked: explicit zeros vs NULL */
            const int chunk = 16;
            float *scratch = aligned_alloc(64, (spex_gdn_chunked_scratch_floats(Dk, Dv, chunk) * sizeof(float) + 63) &
                                                   ~(size_t)63);
            kv->chunked(&p.a, chunk, b1, scratch);
            memcpy(o1, p.ob, sizeof(float) * (size_t)n * os);
            memset(p.ob, 0xff, sizeof(float) * (size_t)n * os);
            kv->chunked(&a, chunk, b2, scratch);
            CHECK(same_o(o1 + HEAD * Dv, a.o, n, os, Dv));
            CHECK(same_floats(b1, b2, SZ));

            free(b1), free(b2), free(o1), free(scratch);
            problem_free(&p);
        }
    }
}

/* ---- a token's result does not depend on the batch it came in ------------------------------- */

/* Speculative verify runs n tokens per call; decode runs one. Both must give the same bits,
 * so that the state after m accepted drafts equals the state one-token decode would reach. */
TEST(gdn_recurrent_batch_independent) {
    FOR_EACH_VARIANT(kv) {
        for (int si = 0; si < N_SHAPES; si++) {
            const int Dk = SHAPES[si][0], Dv = SHAPES[si][1];
            const size_t SZ = (size_t)Dk * Dv;
            for (int ni = 0; ni < N_NS; ni++) {
                const int n = NS[ni];
                problem p;
                problem_init(&p, Dk, Dv, n);
                const int64_t os = p.a.o_stride;
                float *S_all[130];
                float *b_all = snapshots(n, Dk, Dv, S_all);
                float *o_all = malloc(sizeof(float) * (size_t)n * os);
                kv->recurrent(&p.a, S_all);
                memcpy(o_all, p.ob, sizeof(float) * (size_t)n * os);
                memset(p.ob, 0xff, sizeof(float) * (size_t)n * os);

                /* one token per call, chaining the state in one buffer */
                float *S = malloc(SZ * sizeof(float));
                memcpy(S, p.S_in, SZ * sizeof(float));
                for (int t = 0; t < n; t++) {
                    spex_gdn_args a = p.a;
                    a.n = 1;
                    a.q += t * a.q_stride, a.k += t * a.k_stride, a.v += t * a.v_stride;
                    a.g += t * a.g_stride, a.beta += t * a.beta_stride, a.o += t * a.o_stride;
                    a.S_in = S;
                    kv->recurrent(&a, &S);
                    CHECK_MSG(same_floats(S, S_all[t], SZ), "Dk %d Dv %d n %d: state after token %d", Dk, Dv, n, t);
                }
                CHECK_MSG(same_o(o_all + HEAD * Dv, p.a.o, n, os, Dv), "Dk %d Dv %d n %d: o differs", Dk, Dv, n);

                /* uneven batches (1, 2, 3, …) chained through distinct snapshots */
                float *S_b[130];
                float *b_b = snapshots(n, Dk, Dv, S_b);
                memset(p.ob, 0xff, sizeof(float) * (size_t)n * os);
                for (int t0 = 0, len = 1; t0 < n; t0 += len, len++) {
                    spex_gdn_args a = p.a;
                    a.n = t0 + len <= n ? len : n - t0;
                    a.q += t0 * a.q_stride, a.k += t0 * a.k_stride, a.v += t0 * a.v_stride;
                    a.g += t0 * a.g_stride, a.beta += t0 * a.beta_stride, a.o += t0 * a.o_stride;
                    a.S_in = t0 ? S_b[t0 - 1] : p.S_in;
                    kv->recurrent(&a, S_b + t0);
                }
                CHECK_MSG(same_o(o_all + HEAD * Dv, p.a.o, n, os, Dv), "Dk %d Dv %d n %d: o differs (batches)", Dk, Dv, n);
                for (int t = 0; t < n; t++)
                    CHECK_MSG(same_floats(S_b[t], S_all[t], SZ), "Dk %d Dv %d n %d: S_after[%d] (batches)", Dk, Dv, n, t);

                free(b_all), free(o_all), free(S), free(b_b);
                problem_free(&p);
            }
        }
    }
}

/* ---- chunked: S_out == S_in ---------------------------------------------------------------- */

TEST(gdn_chunked_inplace) {
    FOR_EACH_VARIANT(kv) {
        for (int si = 0; si < N_SHAPES; si++) {
            const int Dk = SHAPES[si][0], Dv = SHAPES[si][1];
            const size_t SZ = (size_t)Dk * Dv;
            for (int ci = 0; ci < N_CHUNKS; ci++) {
                const int chunk = CHUNKS[ci], n = 37;
                problem p;
                problem_init(&p, Dk, Dv, n);
                const int64_t os = p.a.o_stride;
                float *scratch = aligned_alloc(
                    64, (spex_gdn_chunked_scratch_floats(Dk, Dv, chunk) * sizeof(float) + 63) & ~(size_t)63);
                float *S_out = malloc(SZ * sizeof(float)), *o1 = malloc(sizeof(float) * (size_t)n * os);
                float *S_in_copy = malloc(SZ * sizeof(float));
                memcpy(S_in_copy, p.S_in, SZ * sizeof(float));
                kv->chunked(&p.a, chunk, S_out, scratch);
                CHECK(same_floats(S_in_copy, p.S_in, SZ)); /* S_in untouched when distinct */
                memcpy(o1, p.ob, sizeof(float) * (size_t)n * os);
                memset(p.ob, 0xff, sizeof(float) * (size_t)n * os);
                kv->chunked(&p.a, chunk, p.S_in, scratch); /* S_out == S_in */
                CHECK_MSG(same_o(o1 + HEAD * Dv, p.a.o, n, os, Dv), "Dk %d Dv %d chunk %d: o differs", Dk, Dv, chunk);
                CHECK_MSG(same_floats(S_out, p.S_in, SZ), "Dk %d Dv %d chunk %d: state differs", Dk, Dv, chunk);
                free(scratch), free(S_out), free(o1), free(S_in_copy);
                problem_free(&p);
            }
        }
    }
}

/* ---- the public entry points run the variant of spex_cpu_isa() ------------------------------ */

TEST(gdn_dispatch) {
    const spex_isa was = spex_cpu_isa();
    CHECK(spex_gdn_for(SPEX_ISA_SCALAR) != NULL);
    CHECK(spex_gdn_for(was) != NULL);
    printf("  default: %s\n", spex_gdn_for(was)->name);
    const int Dk = 24, Dv = 200, n = 7, chunk = 4;
    const size_t SZ = (size_t)Dk * Dv;
    FOR_EACH_VARIANT(kv) {
        printf("  variant %s (isa %s) available\n", kv->name, spex_isa_name(kv->isa));
        CHECK(kv->isa == (spex_isa)vi_);
        CHECK_EQ_INT(spex_cpu_set_isa(kv->isa), SPEX_OK);
        problem p;
        problem_init(&p, Dk, Dv, n);
        const int64_t os = p.a.o_stride;
        float *S1[7], *S2[7];
        float *b1 = snapshots(n, Dk, Dv, S1), *b2 = snapshots(n, Dk, Dv, S2);
        float *o1 = malloc(sizeof(float) * (size_t)n * os);
        float *scratch = aligned_alloc(64, (spex_gdn_chunked_scratch_floats(Dk, Dv, chunk) * sizeof(float) + 63) &
                                               ~(size_t)63);
        kv->recurrent(&p.a, S1);
        memcpy(o1, p.ob, sizeof(float) * (size_t)n * os);
        spex_gdn_recurrent(&p.a, S2);
        const bool rec_same = same_o(o1 + HEAD * Dv, p.a.o, n, os, Dv) && same_floats(b1, b2, SZ * n);
        kv->chunked(&p.a, chunk, b1, scratch);
        memcpy(o1, p.ob, sizeof(float) * (size_t)n * os);
        spex_gdn_chunked(&p.a, chunk, b2, scratch);
        const bool chunk_same = same_o(o1 + HEAD * Dv, p.a.o, n, os, Dv) && same_floats(b1, b2, SZ);
        free(b1), free(b2), free(o1), free(scratch);
        problem_free(&p);
        CHECK_MSG(rec_same, "spex_gdn_recurrent is not the %s variant", kv->name);
        CHECK_MSG(chunk_same, "spex_gdn_chunked is not the %s variant", kv->name);
    }
    CHECK_EQ_INT(spex_cpu_set_isa(was), SPEX_OK);
}

TEST_MAIN()
