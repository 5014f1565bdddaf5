/*
 * repack_weights.c — moves a loaded model's (or drafter's) matmul weights into the R16
 * layout when the active kernels read that faster (cpu/matmul.h; today the AVX-512 kernels of
 * Q4_K, Q5_K, Q6_K, Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1: per-block transposes of 16 rows become plain
 * loads, and 16 rows read side by side become one stream).
 *
 * What it is: a load-time step. Each chosen matrix is copied once, in the new layout (the
 * same number of bytes), into a 64-byte aligned slice of one owned arena per call (on huge
 * pages where the system offers them, core/mem.h; the copies are made by a few short-lived
 * threads, in pieces of whole 16-row groups), the weight's data pointer
 * and its r16 flag are switched, and the original pages of a file mapping are given back
 * to the kernel, so resident memory stays about the model's size (the file stays in the
 * page cache until the kernel needs the memory). Tables that are also read row by row
 * (embeddings) are read through spex_model_weight_row, which understands both layouts, so a
 * tied LM head can be repacked with its embedding; callers list in `keep` what must stay in
 * the mapping untouched.
 */
#include "model/model.h"
#include "gguf/gguf.h"
#include "core/mem.h"
#include "tensor/api.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool in_list(const void *p, const void *const *list, int n) {
    for (int i = 0; i < n; i++)
        if (list[i] == p) return true;
    return false;
}

/* Whether w is repacked by this call (see spex_model_repack). */
static bool repackable(const model_weight *w, const spex_matmul_kernels *k, const void *const *keep, int n_keep) {
    if (!w || !w->t || !w->data || w->r16) return false;
    if (!spex_r16_supported(w->type) || !k->r16_fast[w->type] || w->n_out % 16 != 0) return false;
    return !in_list(w->data, keep, n_keep);
}

static size_t weight_bytes(const model_weight *w) {
    return spex_type_row_size(w->type, w->n_in) * (size_t)w->n_out;
}

static int find_src(const model_repack *r, const void *data) {
    for (int j = 0; j < r->n; j++)
        if (r->src[j] == data) return j;
    return -1;
}

/* Room for `need` entries in r's bufs and src (one capacity: they run side by side). */
static spex_status grow_copies(model_repack *r, int need, spex_error *err) {
    if (need <= r->cap) return SPEX_OK;
    int c = r->cap ? r->cap : 32;
    while (c < need) c *= 2;
    void **nb = realloc(r->bufs, sizeof *nb * (size_t)c);
    if (!nb) return spex_error_set(err, SPEX_ERR_NOMEM, "repacking weights: out of memory");
    r->bufs = nb;
    const void **ns = realloc(r->src, sizeof *ns * (size_t)c);
    if (!ns) return spex_error_set(err, SPEX_ERR_NOMEM, "repacking weights: out of memory");
    r->src = ns;
    r->cap = c;
    return SPEX_OK;
}

/* ---- packing on several threads --------------------------------------------------------- */

/* One matrix to pack: src (ggml layout, rows `row` bytes apart) into dst (R16). */
typedef struct {
    spex_type t;
    const uint8_t *src;
    uint8_t *dst;
    size_t off; /* dst's offset in the call's arena */
    int64_t n_out, n;
    size_t row;
    int64_t piece_rows, n_pieces; /* set by pack_all */
    _Atomic int64_t left;         /* pieces not packed yet */
} pack_job;

#define PACK_PIECE_BYTES ((size_t)2 << 20) /* rows per piece: about this many bytes, 16-row groups */
#define PACK_MAX_THREADS 8                 /* a copy: more threads than this add no bandwidth  */

typedef struct {
    pack_job *jobs;
    int n_jobs;
    const spex_gguf *g;   /* the sources' file, whose pages are given back job by job */
    _Atomic int64_t next; /* the next piece, numbered job after job */
} pack_work;

/* Takes pieces until none is left. A piece is a run of whole 16-row groups, which the R16
 * layout stores where the same rows are in the ggml layout (cpu/repack.c), so pieces of one
 * matrix pack independently. */
static void *pack_worker(void *arg) {
    pack_work *pw = arg;
    for (;;) {
        int64_t p = atomic_fetch_add_explicit(&pw->next, 1, memory_order_relaxed);
        int j = 0;
        for (; j < pw->n_jobs; j++) {
            pack_job *jb = &pw->jobs[j];
            if (p < jb->n_pieces) {
                const int64_t rows = jb->piece_rows, r0 = p * rows, nr = jb->n_out - r0 < rows ? jb->n_out - r0 : rows;
                spex_r16_pack(jb->t, jb->src + (size_t)r0 * jb->row, jb->dst + (size_t)r0 * jb->row, nr, jb->n);
                /* the last piece of a matrix gives its source's pages back at once, so the
                 * resident size stays about the model's (pieces go out matrix by matrix) */
                if (atomic_fetch_sub_explicit(&jb->left, 1, memory_order_acq_rel) == 1)
                    spex_gguf_release_data(pw->g, jb->src, jb->row * (size_t)jb->n_out);
                break;
            }
            p -= jb->n_pieces;
        }
        if (j == pw->n_jobs) return NULL;
    }
}

/* Packs every job: the calling thread and up to PACK_MAX_THREADS - 1 short-lived helpers
 * (fewer when threads cannot be started: the caller alone still does all of it): packing is
 * a copy, which one core cannot run at the memory's speed. */
static void pack_all(pack_job *jobs, int n_jobs, const spex_gguf *g) {
    pack_work pw = {.jobs = jobs, .n_jobs = n_jobs, .g = g};
    atomic_init(&pw.next, 0);
    int64_t pieces = 0;
    for (int j = 0; j < n_jobs; j++) {
        pack_job *jb = &jobs[j];
        const int64_t rows = (int64_t)(PACK_PIECE_BYTES / jb->row) / 16 * 16;
        jb->piece_rows = rows < 16 ? 16 : rows;
        jb->n_pieces = (jb->n_out + jb->piece_rows - 1) / jb->piece_rows;
        atomic_init(&jb->left, jb->n_pieces);
        pieces += jb->n_pieces;
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = ncpu < 1 ? 1 : ncpu > PACK_MAX_THREADS ? PACK_MAX_THREADS : (int)ncpu;
    if (pieces < nt) nt = (int)pieces;
    pthread_t tid[PACK_MAX_THREADS];
    int started = 0;
    for (int t = 1; t < nt; t++)
        if (pthread_create(&tid[started], NULL, pack_worker, &pw) == 0) started++;
    pack_worker(&pw);
    for (int t = 0; t < started; t++) pthread_join(tid[t], NULL);
}

spex_status spex_model_repack(model_weight *const *ws, int n, const void *const *keep, int n_keep,
                              const spex_gguf *g, model_repack *r, spex_error *err) {
    const spex_matmul_kernels *k = spex_matmul_kernels_get();
    /* Pass 1: the distinct matrices not copied yet, each at a 64-byte aligned offset of one
     * arena for the whole call (core/mem.h: huge pages where offered — a decode streams them
     * all every token). */
    pack_job *jobs = malloc(sizeof *jobs * (size_t)(n > 0 ? n : 1));
    if (!jobs) return spex_error_set(err, SPEX_ERR_NOMEM, "repacking weights: out of memory");
    int n_new = 0;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        const model_weight *w = ws[i];
        if (!repackable(w, k, keep, n_keep) || find_src(r, w->data) >= 0) continue;
        bool seen = false;
        for (int j = 0; j < n_new && !seen; j++) seen = jobs[j].src == w->data;
        if (seen) continue;
        const size_t bytes = weight_bytes(w);
        jobs[n_new++] = (pack_job){.t = w->type, .src = w->data, .off = total, .n_out = w->n_out, .n = w->n_in,
                                   .row = bytes / (size_t)w->n_out};
        total += (bytes + 63) / 64 * 64;
    }
    if (n_new == 0) {
        free(jobs);
        return SPEX_OK;
    }
    spex_status s = grow_copies(r, r->n + n_new, err);
    if (s != SPEX_OK) goto fail;
    if (r->n_arena == r->cap_arena) {
        const int c = r->cap_arena ? 2 * r->cap_arena : 4;
        void **na = realloc(r->arenas, sizeof *na * (size_t)c);
        if (!na) {
            s = spex_error_set(err, SPEX_ERR_NOMEM, "repacking weights: out of memory");
            goto fail;
        }
        r->arenas = na;
        r->cap_arena = c;
    }
    uint8_t *arena = spex_alloc_large(total);
    if (!arena) {
        s = spex_error_set(err, SPEX_ERR_NOMEM, "repacking weights: cannot allocate %zu bytes", total);
        goto fail;
    }
    r->arenas[r->n_arena++] = arena;

    /* Pass 2: the slices recorded as the copies. */
    for (int j = 0; j < n_new; j++) {
        jobs[j].dst = arena + jobs[j].off;
        r->bufs[r->n] = jobs[j].dst;
        r->src[r->n] = jobs[j].src;
        r->bytes += jobs[j].row * (uint64_t)jobs[j].n_out;
        r->n++;
    }
    /* Pass 3: pack them all (on several threads; each source's pages given back as soon as
     * its matrix is done), then switch every weight on a copied matrix. */
    pack_all(jobs, n_new, g);
    free(jobs);
    for (int i = 0; i < n; i++) {
        model_weight *w = ws[i];
        if (!repackable(w, k, keep, n_keep)) continue;
        const int found = find_src(r, w->data);
        if (found < 0) continue; /* cannot happen: every repackable matrix has a copy now */
        w->data = r->bufs[found];
        w->r16 = true;
    }
    return SPEX_OK;
fail:
    free(jobs);
    return s;
}

void spex_model_repack_free(model_repack *r) {
    for (int i = 0; i < r->n_arena; i++) free(r->arenas[i]);
    free(r->arenas);
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
