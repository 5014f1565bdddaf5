/*
 * test.h — the minimal test harness every tests/test_*.c program uses.
 *
 * A test program defines cases with TEST(name) { ... } and ends with TEST_MAIN(). Each case
 * prints one line: "PASS name", "FAIL name: file:line: what" or "SKIP name: why".
 * tests/run.sh runs every program and sums those lines into "N passed, N failed".
 * CHECK* macros record a failure and return from the case (later cases still run).
 */
#ifndef SPEX_TEST_H
#define SPEX_TEST_H

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*test_fn)(void);
typedef struct { const char *name; test_fn fn; } test_case;

extern int test_failed_;       /* set by CHECK in the running case */
extern char test_skip_[256];   /* set by SKIP */
void test_register_(const char *name, test_fn fn);
int test_main_(int argc, char **argv);
/* Path of a file in ../shared/data (relative to the repo root), or NULL if absent. */
const char *test_shared_path(const char *rel);
/* This run's private temporary directory (created on first use, removed at exit), and a
 * path inside it (one of 8 rotating buffers, so a few may be held at once). */
const char *test_tmp_dir(void);
const char *test_tmp_path(const char *name);
/* The spex binary of the build this test belongs to (build/tests/test_x -> build/spex), or
 * NULL if it is not there. */
const char *test_spex_bin(void);
/* A whole file, malloc'd with a NUL appended; *len its size. NULL if unreadable. */
char *test_slurp(const char *path, size_t *len);
/* One run of the spex binary: exit status (128 + signal if killed) and the captured stdout and
 * stderr, NUL-terminated and malloc'd. */
typedef struct test_proc {
    int rc;
    char *out, *err;
    size_t out_len, err_len;
} test_proc;
/* Runs `spex ARGS...` (args NULL-terminated, without argv[0]) and waits for it; false if it could
 * not be started or its output not read (r->rc is then -1 or the status). */
bool test_spex_exec(const char *const *args, test_proc *r);
/* The same for any program (bin: its path; args without argv[0]). */
bool test_exec(const char *bin, const char *const *args, test_proc *r);
void test_proc_free(test_proc *r);
/* No AddressSanitizer / UBSan / LeakSanitizer report in a captured stderr. */
bool test_sanitizer_clean(const char *err);

#define TEST(name)                                                                  \
    static void test_##name(void);                                                  \
    __attribute__((constructor)) static void test_reg_##name(void) {                \
        test_register_(#name, test_##name);                                         \
    }                                                                               \
    static void test_##name(void)

#define TEST_MAIN() \
    int main(int argc, char **argv) { return test_main_(argc, argv); }

#define CHECK_MSG(cond, ...)                                                        \
    do {                                                                            \
        if (!(cond)) {                                                              \
            printf("  %s:%d: ", __FILE__, __LINE__);                                \
            printf(__VA_ARGS__);                                                    \
            printf("\n");                                                           \
            test_failed_ = 1;                                                       \
            return;                                                                 \
        }                                                                           \
    } while (0)

#define CHECK(cond) CHECK_MSG(cond, "check failed: %s", #cond)
#define CHECK_EQ_INT(a, b)                                                          \
    CHECK_MSG((long long)(a) == (long long)(b), "%s == %s: %lld vs %lld", #a, #b,   \
              (long long)(a), (long long)(b))
#define CHECK_NEAR(a, b, tol)                                                       \
    CHECK_MSG(fabs((double)(a) - (double)(b)) <= (double)(tol),                     \
              "%s ~ %s: %.9g vs %.9g (tol %.3g)", #a, #b, (double)(a), (double)(b), \
              (double)(tol))
#define CHECK_OK(expr)                                                              \
    do {                                                                            \
        spex_error e_ = {0};                                                        \
        (void)e_;                                                                   \
        spex_status s_ = (expr);                                                    \
        CHECK_MSG(s_ == SPEX_OK, "%s -> %s", #expr, spex_status_str(s_));           \
    } while (0)
#define SKIP(...)                                                                   \
    do {                                                                            \
        snprintf(test_skip_, sizeof test_skip_, __VA_ARGS__);                       \
        return;                                                                     \
    } while (0)

/* Largest |a[i] - b[i]| (NaN counts as infinitely far), and the first index of the maximum:
 * the comparisons every model test makes. */
static inline double test_max_diff(const float *a, const float *b, long long n) {
    double d = 0;
    for (long long i = 0; i < n; i++) {
        double x = fabs((double)a[i] - (double)b[i]);
        if (!(x <= d)) d = x;
    }
    return d;
}
static inline int test_argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

#endif
