/*
 * test_examples.c — the compiled examples of examples/ (the Makefile builds them into
 * <build>/examples/ before the tests), run as an embedder would run them.
 *
 * What it checks: examples/chat_stream on the shipped pair of models/ streams a non-empty reply,
 * exits 0, and prints the same text as `spex run --chat --temp 0` with the target alone (the
 * speculative reply is lossless); bad paths and bad arguments end with a message naming the
 * cause and a non-zero status. Skips the model runs when models/ is absent.
 * What it is not: a test of the API's corners (the module tests do that).
 */
#include "test.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define TARGET "models/target.gguf"
#define DRAFTER "models/drafter.gguf"
#define MESSAGE "Zoe owns 73 rocks. She donates 31 of them. How many rocks does Zoe have now?"

/* <build>/examples/NAME for this test's build (build/tests/test_examples -> build), or NULL. */
static const char *example_bin(const char *name) {
    static char path[1200];
    char self[1024];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return NULL;
    self[n] = 0;
    for (int i = 0; i < 2; i++) {
        char *slash = strrchr(self, '/');
        if (!slash) return NULL;
        *slash = 0;
    }
    snprintf(path, sizeof path, "%s/examples/%s", self, name);
    return access(path, X_OK) == 0 ? path : NULL;
}

/* Runs bin with args (NULL-terminated, without argv[0]), capturing stdout and stderr. */
static bool run_bin(const char *bin, const char *const *args, test_proc *r) {
    memset(r, 0, sizeof *r);
    r->rc = -1;
    char out_path[300], err_path[300];
    snprintf(out_path, sizeof out_path, "%s", test_tmp_path("example_stdout"));
    snprintf(err_path, sizeof err_path, "%s", test_tmp_path("example_stderr"));
    const char *argv[16] = {bin};
    for (int i = 0; args[i] && i < 14; i++) argv[i + 1] = args[i];
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid;
    fflush(stdout);
    bool ok = posix_spawn(&pid, bin, &fa, NULL, (char *const *)argv, environ) == 0;
    posix_spawn_file_actions_destroy(&fa);
    int st;
    if (ok && waitpid(pid, &st, 0) == pid)
        r->rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    else
        ok = false;
    r->out = test_slurp(out_path, &r->out_len);
    r->err = test_slurp(err_path, &r->err_len);
    return ok && r->out && r->err;
}

static bool have_models(void) { return access(TARGET, R_OK) == 0 && access(DRAFTER, R_OK) == 0; }

TEST(chat_stream_is_built) {
    CHECK_MSG(example_bin("chat_stream"), "no examples/chat_stream beside this test (make tests builds it)");
}

TEST(chat_stream_streams_the_target_alone_reply) {
    const char *bin = example_bin("chat_stream");
    CHECK(bin);
    if (!have_models()) SKIP("models/ has no default pair");
    test_proc ex, ar;
    CHECK(run_bin(bin, (const char *const[]){TARGET, DRAFTER, MESSAGE, "96", NULL}, &ex));
    CHECK_MSG(ex.rc == 0, "exit status %d; stderr:\n%s", ex.rc, ex.err);
    CHECK(test_sanitizer_clean(ex.err));
    size_t printable = 0;
    for (size_t i = 0; i < ex.out_len; i++) printable += ex.out[i] > ' ';
    CHECK_MSG(printable > 0, "empty reply; stderr:\n%s", ex.err);
    CHECK_MSG(strstr(ex.err, "mean acceptance length"), "stderr:\n%s", ex.err);

    /* the same reply as the CLI's target-only greedy run (which ends without a newline) */
    const char *args[] = {"run", "-m", TARGET, "--chat", "-p", MESSAGE, "-n", "96", "--temp", "0", NULL};
    if (!test_spex_bin()) {
        test_proc_free(&ex);
        SKIP("no spex binary in this build folder to compare with");
    }
    CHECK(test_spex_exec(args, &ar));
    CHECK_MSG(ar.rc == 0, "spex run exited with %d:\n%s", ar.rc, ar.err);
    CHECK_MSG(ex.out_len == ar.out_len + 1 && ex.out[ar.out_len] == '\n' && !memcmp(ex.out, ar.out, ar.out_len),
              "example:\n%s\nspex run:\n%s", ex.out, ar.out);
    test_proc_free(&ex);
    test_proc_free(&ar);
}

TEST(chat_stream_names_a_bad_path) {
    const char *bin = example_bin("chat_stream");
    CHECK(bin);
    test_proc r;
    CHECK(run_bin(bin, (const char *const[]){"/nonexistent/target.gguf", DRAFTER, "hi", NULL}, &r));
    CHECK_MSG(r.rc == 1 && strstr(r.err, "chat_stream: target: ") && strstr(r.err, "/nonexistent/target.gguf"),
              "exit status %d; stderr:\n%s", r.rc, r.err);
    CHECK(r.out_len == 0);
    test_proc_free(&r);
    if (!have_models()) SKIP("models/ has no default pair (the drafter cases need the target)");
    CHECK(run_bin(bin, (const char *const[]){TARGET, "/nonexistent/drafter.gguf", "hi", NULL}, &r));
    CHECK_MSG(r.rc == 1 && strstr(r.err, "chat_stream: drafter: ") && strstr(r.err, "/nonexistent/drafter.gguf"),
              "exit status %d; stderr:\n%s", r.rc, r.err);
    test_proc_free(&r);
    /* a file that is a model but not a drafter */
    CHECK(run_bin(bin, (const char *const[]){TARGET, TARGET, "hi", NULL}, &r));
    CHECK_MSG(r.rc == 1 && strstr(r.err, "chat_stream: drafter: "), "exit status %d; stderr:\n%s", r.rc, r.err);
    CHECK(test_sanitizer_clean(r.err));
    test_proc_free(&r);
}

TEST(chat_stream_refuses_bad_arguments) {
    const char *bin = example_bin("chat_stream");
    CHECK(bin);
    test_proc r;
    CHECK(run_bin(bin, (const char *const[]){TARGET, DRAFTER, NULL}, &r));
    CHECK_MSG(r.rc == 2 && strstr(r.err, "usage: "), "exit status %d; stderr:\n%s", r.rc, r.err);
    test_proc_free(&r);
    CHECK(run_bin(bin, (const char *const[]){TARGET, DRAFTER, "hi", "0", NULL}, &r));
    CHECK_MSG(r.rc == 2 && strstr(r.err, "usage: "), "exit status %d; stderr:\n%s", r.rc, r.err);
    test_proc_free(&r);
}

TEST_MAIN()
