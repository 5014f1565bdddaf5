/*
 * test_includes.c — the one-way dependencies between spex's modules (README.md, Layout), as
 * scripts/check-includes.sh checks them.
 *
 * What it checks: the tree's includes and the link-level edges of this build's objects go
 * core ← tensor ← gguf ← cpu ← {model, tok, sample, quant} ← spec ← server (with the rules for
 * include/, tools/, tests/ and examples/ that the script states); and, on copies of the tree
 * with bad edges put in on purpose, that the script fails naming each file, line and edge — so
 * a check that passes everything would fail here. Beside it, the size rule of the same layout:
 * scripts/func-lengths.sh finds no function in src/ over 120 lines, and finds one made long on
 * purpose.
 * What it is not: the rules themselves (they live in the script, with its allow-list).
 */
#include "test.h"

#include <sys/wait.h>
#include <unistd.h>

#define SCRIPT "scripts/check-includes.sh"

/* Runs cmd with sh (stderr into stdout); its exit status, the output malloc'd in *out. */
static int sh(const char *cmd, char **out) {
    char full[8192];
    snprintf(full, sizeof full, "(%s) 2>&1", cmd);
    fflush(stdout);
    FILE *p = popen(full, "r");
    if (!p) {
        *out = strdup("popen failed");
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    for (size_t k; b && (k = fread(b + n, 1, cap - n - 1, p)) > 0;) {
        n += k;
        if (n + 1 == cap) b = realloc(b, cap *= 2);
    }
    if (b) b[n] = 0;
    int st = pclose(p);
    *out = b ? b : strdup("");
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

/* This build's folder (build/tests/test_includes -> build), or "" if unknown. */
static const char *build_dir(void) {
    static char dir[1024];
    ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
    if (n <= 0) return "";
    dir[n] = 0;
    for (int i = 0; i < 2; i++) {
        char *slash = strrchr(dir, '/');
        if (!slash) return "";
        *slash = 0;
    }
    return dir;
}

/* A copy of the tree's sources (the files the script reads) in a fresh folder of the run's
 * temporary directory; false after printing why. */
static bool copy_tree(const char *dst) {
    char cmd[4096], *out;
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s' && find src include tools tests examples -type f -name '*.[ch]' "
             "-not -path 'tests/node/*' -not -path 'tests/data/*' | xargs cp --parents -t '%s'",
             dst, dst);
    int rc = sh(cmd, &out);
    if (rc != 0) printf("  copy to %s failed (%d): %s\n", dst, rc, out);
    free(out);
    return rc == 0;
}

/* Appends one line to dst/rel; the line number it got (0 after printing why it could not). */
static int append_line(const char *dst, const char *rel, const char *line) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dst, rel);
    FILE *f = fopen(path, "a+");
    if (!f) {
        printf("  cannot open %s\n", path);
        return 0;
    }
    rewind(f);
    int n = 1, c, last = '\n';
    while ((c = fgetc(f)) != EOF) n += c == '\n', last = c;
    fprintf(f, "%s%s\n", last == '\n' ? "" : "\n", line);
    fclose(f);
    return n + (last != '\n');
}

TEST(include_direction_holds) {
    char *out;
    int rc = sh(SCRIPT, &out);
    if (rc != 0) printf("%s", out);
    CHECK_MSG(rc == 0, "%s exited with %d (edges above)", SCRIPT, rc);
    CHECK(strstr(out, "every include edge goes"));
    free(out);
}

TEST(link_direction_holds) {
    char objs[1100], cmd[4096], *out;
    snprintf(objs, sizeof objs, "%s/obj", build_dir());
    snprintf(cmd, sizeof cmd, "%s/src/core", objs);
    if (access(cmd, R_OK) != 0) SKIP("no objects of src/ in this build folder");
    if (sh("command -v nm", &out) != 0) {
        free(out);
        SKIP("nm (binutils) is not installed");
    }
    free(out);
    snprintf(cmd, sizeof cmd, "%s --objects '%s'", SCRIPT, objs);
    int rc = sh(cmd, &out);
    if (rc != 0) printf("%s", out);
    CHECK_MSG(rc == 0, "%s exited with %d (edges above)", cmd, rc);
    CHECK(strstr(out, "every include and link-level edge goes"));
    free(out);
}

TEST(check_names_each_bad_include) {
    const char *dst = test_tmp_path("tree-includes");
    CHECK(copy_tree(dst));
    char cmd[4096], *out;
    snprintf(cmd, sizeof cmd, "%s --root '%s'", SCRIPT, dst);
    int rc = sh(cmd, &out);
    if (rc != 0) printf("%s", out);
    CHECK_MSG(rc == 0, "the unchanged copy fails (%d)", rc);
    free(out);

    /* one bad edge of each kind, and where the script must say it is */
    static const struct { const char *file, *line, *edge; } bad[] = {
        {"src/core/mem.c", "#include \"spec/verify.h\"", "core -> spec"},
        {"src/model/model.c", "#include \"tok/tok.h\"", "model -> tok"},
        {"src/tok/vocab.c", "  #  include \"cpu/kquants_internal.h\"", "tok -> cpu"},
        {"src/newmod/x.c", "#include \"core/mem.h\"", "has no place in the layer order"},
        {"include/spex.h", "#include \"core/mem.h\"", "api -> core"},
        {"tools/smoke.c", "#include \"cpu/isa.h\"", "tools -> cpu"},
        {"tests/test_core.c", "#include \"../tools/cli.h\"", "tests -> tools"},
        {"examples/chat_stream.c", "#include \"model/model.h\"", "examples -> model"},
    };
    const int n_bad = (int)(sizeof bad / sizeof bad[0]);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/src/newmod'", dst);
    CHECK(sh(cmd, &out) == 0);
    free(out);
    char where[16][256];
    for (int i = 0; i < n_bad; i++) {
        int ln = append_line(dst, bad[i].file, bad[i].line);
        CHECK(ln > 0);
        snprintf(where[i], sizeof where[i], "%s:%d: ", bad[i].file, ln);
    }
    snprintf(cmd, sizeof cmd, "%s --root '%s'", SCRIPT, dst);
    rc = sh(cmd, &out);
    CHECK_MSG(rc == 1, "exit status %d, expected 1; output:\n%s", rc, out);
    for (int i = 0; i < n_bad; i++) {
        const char *at = strstr(out, where[i]);
        CHECK_MSG(at, "no line for %s; output:\n%s", where[i], out);
        const char *eol = strchr(at, '\n');
        CHECK_MSG(eol && strstr(at, bad[i].edge) && strstr(at, bad[i].edge) < eol,
                  "%s... does not name '%s'; output:\n%s", where[i], bad[i].edge, out);
    }
    char total[64];
    snprintf(total, sizeof total, "%d include(s) against the direction", n_bad);
    CHECK_MSG(strstr(out, total), "no '%s' in:\n%s", total, out);
    free(out);
}

TEST(check_names_a_bad_link_edge) {
    char objs[1100], probe[1200], cmd[16384], *out;
    snprintf(objs, sizeof objs, "%s/obj/src", build_dir());
    snprintf(probe, sizeof probe, "%s/spec/spec.o", objs);
    if (access(probe, R_OK) != 0) SKIP("no objects of src/ in this build folder");
    if (sh("command -v nm", &out) != 0) {
        free(out);
        SKIP("nm (binutils) is not installed");
    }
    free(out);
    /* core "defines" what spec.o does: a core object that calls the model layer */
    const char *dst = test_tmp_path("tree-link");
    CHECK(copy_tree(dst));
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s/obj/src/core' '%s/obj/src/model' && cp '%s' '%s/obj/src/core/fake.o' && "
             "touch '%s/src/core/fake.c' && cp '%s'/model/*.o '%s/obj/src/model/'",
             dst, dst, probe, dst, dst, objs, dst);
    CHECK(sh(cmd, &out) == 0);
    free(out);
    snprintf(cmd, sizeof cmd, "%s --root '%s' --objects '%s/obj'", SCRIPT, dst, dst);
    int rc = sh(cmd, &out);
    CHECK_MSG(rc == 1, "exit status %d, expected 1; output:\n%s", rc, out);
    CHECK_MSG(strstr(out, "link: core -> model: model sits above core"), "output:\n%s", out);
    CHECK_MSG(strstr(out, "src/core/fake.o uses spex_"), "output:\n%s", out);
    free(out);
}

TEST(check_refuses_bad_arguments) {
    char *out;
    int rc = sh(SCRIPT " --no-such-flag", &out);
    CHECK_MSG(rc == 2 && strstr(out, "unknown argument '--no-such-flag'"), "rc %d: %s", rc, out);
    free(out);
    rc = sh(SCRIPT " --root /nonexistent-spex-root", &out);
    CHECK_MSG(rc == 2 && strstr(out, "/nonexistent-spex-root has no src/"), "rc %d: %s", rc, out);
    free(out);
}

TEST(no_function_in_src_over_120_lines) {
    char *out;
    int rc = sh("bash scripts/func-lengths.sh --max 120 src", &out);
    CHECK_MSG(rc == 0 && out[0] == 0, "rc %d, functions over 120 lines:\n%s", rc, out);
    free(out);
    /* a function of 130 lines is listed with its length and name, and the status says so */
    char dir[600], cmd[2200];
    snprintf(dir, sizeof dir, "%s", test_tmp_path("func_lengths"));
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s' && { echo 'int long_one(void) {'; for i in $(seq 128); do echo '    x();'; done; "
             "echo '}'; } > '%s/f.c' && bash scripts/func-lengths.sh --max 120 '%s'",
             dir, dir, dir);
    rc = sh(cmd, &out);
    CHECK_MSG(rc == 1 && strstr(out, "130 ") && strstr(out, "long_one"), "rc %d:\n%s", rc, out);
    free(out);
}

TEST_MAIN()
