/*
 * harness.c — the harness behind test.h: case registry, filtering, result lines.
 *
 * Usage of any test program: test_x [substring]  (runs the cases whose name contains it).
 */
#include "test.h"

#include <ftw.h>
#include <stdint.h>
#include <unistd.h>

#define MAX_CASES 512
static test_case cases[MAX_CASES];
static int n_cases;
int test_failed_;
char test_skip_[256];

void test_register_(const char *name, test_fn fn) {
    if (n_cases < MAX_CASES) cases[n_cases++] = (test_case){name, fn};
}

const char *test_shared_path(const char *rel) {
    static char buf[8][1024];
    static int k;
    const char *roots[] = {getenv("SPEX_SHARED"), "../shared", "../../shared", NULL};
    for (int i = 0; i < 4; i++) {
        if (i < 3 && !roots[i]) continue;
        if (i == 3) break;
        char *b = buf[k++ % 8];
        snprintf(b, sizeof buf[0], "%s/%s", roots[i], rel);
        if (access(b, R_OK) == 0) return b;
    }
    return NULL;
}

static char tmp_dir[64];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void remove_tmp_dir(void) {
    if (tmp_dir[0] && nftw(tmp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        fprintf(stderr, "warning: could not remove %s\n", tmp_dir);
}

const char *test_tmp_dir(void) {
    if (!tmp_dir[0]) {
        snprintf(tmp_dir, sizeof tmp_dir, "/tmp/spex-test-XXXXXX");
        if (!mkdtemp(tmp_dir)) {
            perror("mkdtemp");
            exit(1);
        }
        atexit(remove_tmp_dir);
    }
    return tmp_dir;
}

const char *test_tmp_path(const char *name) {
    static char buf[8][256];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, sizeof buf[0], "%s/%s", test_tmp_dir(), name);
    return b;
}

int test_main_(int argc, char **argv) {
    const char *filter = argc > 1 ? argv[1] : NULL;
    int pass = 0, fail = 0, skip = 0;
    for (int i = 0; i < n_cases; i++) {
        if (filter && !strstr(cases[i].name, filter)) continue;
        test_failed_ = 0;
        test_skip_[0] = 0;
        cases[i].fn();
        if (test_failed_) {
            printf("FAIL %s\n", cases[i].name);
            fail++;
        } else if (test_skip_[0]) {
            printf("SKIP %s: %s\n", cases[i].name, test_skip_);
            skip++;
        } else {
            printf("PASS %s\n", cases[i].name);
            pass++;
        }
        fflush(stdout);
    }
    return fail ? 1 : 0;
}

const char *test_spex_bin(void) {
    static char path[4096];
    if (path[0]) return path;
    char self[4000];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return NULL;
    self[n] = 0;
    char *slash = strrchr(self, '/');   /* .../build/tests/test_x -> .../build/tests */
    if (!slash) return NULL;
    *slash = 0;
    slash = strrchr(self, '/');         /* -> .../build */
    if (!slash) return NULL;
    *slash = 0;
    snprintf(path, sizeof path, "%s/spex", self);
    if (access(path, X_OK) != 0) path[0] = 0;
    return path[0] ? path : NULL;
}

char *test_slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)(n > 0 ? n : 0) + 1);
    if (b && n > 0 && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) b[n > 0 ? n : 0] = 0, *len = (size_t)(n > 0 ? n : 0);
    return b;
}
