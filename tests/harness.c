/*
 * harness.c — the harness behind test.h: case registry, filtering, result lines.
 *
 * Usage of any test program: test_x [substring]  (runs the cases whose name contains it).
 */
#include "test.h"

#include <fcntl.h>
#include <ftw.h>
#include <spawn.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

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

bool test_spex_exec(const char *const *args, test_proc *r) {
    const char *bin = test_spex_bin();
    if (!bin) {
        memset(r, 0, sizeof *r);
        r->rc = -1;
        return false;
    }
    return test_exec(bin, args, r);
}

bool test_exec(const char *bin, const char *const *args, test_proc *r) {
    memset(r, 0, sizeof *r);
    r->rc = -1;
    char out_path[512], err_path[512];
    snprintf(out_path, sizeof out_path, "%s", test_tmp_path("exec_stdout"));
    snprintf(err_path, sizeof err_path, "%s", test_tmp_path("exec_stderr"));
    const char *argv[64];
    int n = 0;
    argv[n++] = bin;
    for (int i = 0; args[i] && n < 63; i++) argv[n++] = args[i];
    argv[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid;
    fflush(stdout);
    int e = posix_spawn(&pid, bin, &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    bool ok = e == 0;
    if (ok) {
        int st;
        if (waitpid(pid, &st, 0) != pid) ok = false;
        else r->rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    }
    r->out = test_slurp(out_path, &r->out_len);
    r->err = test_slurp(err_path, &r->err_len);
    unlink(out_path);
    unlink(err_path);
    return ok && r->out && r->err;
}

void test_proc_free(test_proc *r) {
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

bool test_sanitizer_clean(const char *err) {
    return !strstr(err, "Sanitizer") && !strstr(err, "runtime error") && !strstr(err, "LeakSanitizer");
}
