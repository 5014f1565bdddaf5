/*
 * demo_real.c — the realistic-compute pair of `spex demo` (contract in demo_real.h).
 */
#include "demo_real.h"
#include "cli.h"
#include "spex.h"
#include "model/api.h"

#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Bumped whenever `spex inflate` writes different bytes for the same inputs, so an old cache
 * entry is never mistaken for a current one. */
#define DEMO_REAL_VERSION 1

demo_real_params demo_real_default_params(void) {
    return (demo_real_params){.shape = {1024, 28, 16, 8, 128, 3072}, .type = "q8_0", .n_threads = 2};
}

bool demo_real_parse_shape(const char *s, demo_real_params *p) {
    long v[6];
    int n = 0;
    const char *q = s;
    while (n < 6) {
        char *end;
        errno = 0;
        long x = strtol(q, &end, 10);
        if (end == q || errno || x < 1 || x > (1L << 20)) break;
        v[n++] = x;
        if (*end != ',' || n == 6) {
            q = end;
            break;
        }
        q = end + 1;
    }
    if (n != 6 || *q) {
        fprintf(stderr, "error: --real-shape '%s': want six positive numbers E,L,H,HKV,HD,FF\n", s);
        return false;
    }
    memcpy(p->shape, v, sizeof v);
    return true;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static bool hash_file(const char *path, uint64_t *h) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    static unsigned char buf[1 << 16];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0) *h = fnv(*h, buf, k);
    bool ok = !ferror(f);
    fclose(f);
    return ok;
}

/* Both files load as a pair (every loader check). */
static bool pair_loads(const char *t, const char *d) {
    if (access(t, R_OK) || access(d, R_OK)) return false;
    spex_model *m = NULL;
    spex_drafter *dr = NULL;
    bool ok = spex_model_load(t, NULL, &m, NULL) == SPEX_OK && spex_drafter_load(d, m, NULL, &dr, NULL) == SPEX_OK;
    spex_drafter_free(dr);
    spex_model_free(m);
    return ok;
}

static void remove_pair(const char *dir) {
    char p[4400];
    snprintf(p, sizeof p, "%s/target.gguf", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/drafter.gguf", dir);
    unlink(p);
    rmdir(dir);
}

int demo_real_prepare(const char *tpath, const char *dpath, const char *cache, const demo_real_params *p, bool force,
                      demo_real_pair *out) {
    memset(out, 0, sizeof *out);
    spex_error e = {0};
    spex_model *m = NULL;
    if (spex_model_load(tpath, NULL, &m, &e) != SPEX_OK) {
        snprintf(out->msg, sizeof out->msg, "%s", e.msg);
        return DEMO_REAL_FAIL;
    }
    int32_t E = spex_model_get_hparams(m)->n_embd;
    spex_model_free(m);
    if (!force && E >= p->shape[0]) return DEMO_REAL_SKIP;

    char self[4096] = "", dir[3950];
    if (!cache) {
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0) {
            snprintf(out->msg, sizeof out->msg, "cannot find the build folder (/proc/self/exe): use --cache DIR");
            return DEMO_REAL_FAIL;
        }
        self[n] = 0;
        cache = dirname(self);
    }
    char settings[256];
    snprintf(settings, sizeof settings, "v%d %ld,%ld,%ld,%ld,%ld,%ld %s", DEMO_REAL_VERSION, p->shape[0], p->shape[1],
             p->shape[2], p->shape[3], p->shape[4], p->shape[5], p->type);
    uint64_t h = 14695981039346656037ull;
    h = fnv(h, settings, strlen(settings));
    if (!hash_file(tpath, &h) || !hash_file(dpath, &h)) {
        snprintf(out->msg, sizeof out->msg, "cannot read %s or %s", tpath, dpath);
        return DEMO_REAL_FAIL;
    }
    snprintf(dir, sizeof dir, "%.3900s/inflated-%016" PRIx64, cache, h);   /* <= 3926 bytes */
    snprintf(out->target, sizeof out->target, "%s/target.gguf", dir);
    snprintf(out->drafter, sizeof out->drafter, "%s/drafter.gguf", dir);
    if (pair_loads(out->target, out->drafter)) {
        printf("realistic-compute pair: cached in %s\n\n", dir);
        return DEMO_REAL_OK;
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", dir, (long)getpid());
    remove_pair(tmp);
    if (mkdir(tmp, 0777) != 0) {
        snprintf(out->msg, sizeof out->msg, "cannot write the inflated pair into %.3000s: %s (choose a writable folder with "
                 "--cache DIR)", cache, strerror(errno));
        return DEMO_REAL_FAIL;
    }
    char sh[6][24], th[16];
    for (int i = 0; i < 6; i++) snprintf(sh[i], sizeof sh[i], "%ld", p->shape[i]);
    snprintf(th, sizeof th, "%d", p->n_threads);
    char *argv[] = {"inflate", "-m", (char *)tpath, "-md", (char *)dpath, "-o", tmp, "--type", (char *)p->type,
                    "--embd", sh[0], "--layers", sh[1], "--heads", sh[2], "--heads-kv", sh[3], "--head-dim", sh[4],
                    "--ff", sh[5], "-t", th, NULL};
    printf("realistic-compute pair: inflating %s and %s once (cached in %s)\n", tpath, dpath, dir);
    fflush(stdout);
    int rc = cmd_inflate((int)(sizeof argv / sizeof *argv) - 1, argv);
    fflush(stdout);
    if (rc != 0) {
        remove_pair(tmp);
        snprintf(out->msg, sizeof out->msg, "spex inflate failed (its error is above)");
        return DEMO_REAL_FAIL;
    }
    if (rename(tmp, dir) != 0) {
        int err = errno;
        remove_pair(tmp);
        if (!pair_loads(out->target, out->drafter)) {   /* else another run put the same pair there first */
            snprintf(out->msg, sizeof out->msg, "cannot move the inflated pair to %.3000s: %s", dir, strerror(err));
            return DEMO_REAL_FAIL;
        }
    }
    printf("\n");
    return DEMO_REAL_OK;
}
