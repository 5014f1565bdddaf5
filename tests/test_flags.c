/*
 * test_flags.c — docs/server.md's table of llama-server flags is true of `spex serve`.
 *
 * What it checks: every name of every row of the table (between the `flags-table` markers) is
 * given, with the row's value, to serve's flag parser — the harness build/tests/harness/
 * serve_flags, tools/serve.c's serve_parse without a model or a port, so ~400 command lines
 * take seconds: an applied or spex-only flag parses with no "note:" line, a no-effect flag
 * parses with its "note: FLAG ...: no effect" line, an error flag exits 2 with an "error:" line
 * that is not "unknown flag"; no name is in two rows; the same for the llama-cli table and
 * `spex run` (whose flags are parsed before the model is opened, so a missing model file makes
 * it cheap); every flag `spex serve --help` names, and every llama.cpp flag `spex run --help`
 * lists as accepted or refused, has a row; a flag that neither has is still an error. What it
 * is not: a test of what an applied flag does (test_server, test_run).
 */
#include "test.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DOC "docs/server.md"
#define MAX_ROWS 400
#define MAX_NAMES 6

typedef struct flag_row {
    char names[MAX_NAMES][64];
    int n_names;
    char value[128];
    char status[16];
} flag_row;

static flag_row g_rows[MAX_ROWS], g_run[MAX_ROWS];   /* llama-server's table; llama-cli's for spex run */
static int g_n_rows, g_n_run;

/* s without the blanks and backticks around it, into out. */
static void cell(const char *s, size_t n, char *out, size_t cap) {
    while (n && (isspace((unsigned char)*s) || *s == '`')) s++, n--;
    while (n && (isspace((unsigned char)s[n - 1]) || s[n - 1] == '`')) n--;
    snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), s);
}

/* One table line "| `-a, --bb` | `V` | status | why |" into *r; false for anything else. */
static bool parse_row(const char *line, flag_row *r) {
    const char *c[5];
    int n = 0;
    for (const char *p = line; *p && *p != '\n' && n < 5; p++)
        if (*p == '|') c[n++] = p;
    if (n < 5 || strncmp(line, "| `-", 4)) return false;
    char names[512];
    memset(r, 0, sizeof *r);
    cell(c[0] + 1, (size_t)(c[1] - c[0] - 1), names, sizeof names);
    cell(c[1] + 1, (size_t)(c[2] - c[1] - 1), r->value, sizeof r->value);
    cell(c[2] + 1, (size_t)(c[3] - c[2] - 1), r->status, sizeof r->status);
    for (char *tok = strtok(names, ", "); tok && r->n_names < MAX_NAMES; tok = strtok(NULL, ", "))
        snprintf(r->names[r->n_names++], sizeof r->names[0], "%s", tok);
    return r->n_names > 0;
}

/* The rows between "<!-- NAME:" and "<!-- NAME-end" into rows[0..*n). */
static void load_rows(const char *doc, const char *name, flag_row *rows, int *n) {
    char open_tag[64], close_tag[64];
    snprintf(open_tag, sizeof open_tag, "<!-- %s:", name);
    snprintf(close_tag, sizeof close_tag, "<!-- %s-end", name);
    const char *p = strstr(doc, open_tag), *end = p ? strstr(p, close_tag) : NULL;
    *n = 0;
    for (; p && p < end && *n < MAX_ROWS; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (parse_row(p, &rows[*n])) (*n)++;
}

static bool load_table(void) {
    size_t len;
    char *doc = test_slurp(DOC, &len);
    if (!doc) return false;
    load_rows(doc, "flags-table", g_rows, &g_n_rows);
    load_rows(doc, "run-flags-table", g_run, &g_n_run);
    free(doc);
    return g_n_rows > 0 && g_n_run > 0;
}

static const flag_row *find_in(const flag_row *rows, int n, const char *name) {
    for (int i = 0; i < n; i++)
        for (int k = 0; k < rows[i].n_names; k++)
            if (!strcmp(rows[i].names[k], name)) return &rows[i];
    return NULL;
}

static const flag_row *find_name(const char *name) { return find_in(g_rows, g_n_rows, name); }

static const char *harness(void) {
    static char path[4200];
    const char *spex = test_spex_bin();
    if (!spex) return NULL;
    snprintf(path, sizeof path, "%.*s/tests/harness/serve_flags", (int)(strrchr(spex, '/') - spex), spex);
    return path;
}

/* Whether `serve -m m.gguf NAME [VALUE]` (run: NULL bin, `spex run -m MISSING --chat NAME
 * [VALUE]`) does what the row's status says; prints why not. */
static bool row_holds(const char *bin, const flag_row *r, const char *name) {
    const char *serve[] = {"-m", "m.gguf", name, r->value[0] ? r->value : NULL, NULL};
    const char *run[] = {"run", "-m", "/nonexistent/m.gguf", "--chat", name, r->value[0] ? r->value : NULL, NULL};
    test_proc p;
    if (!(bin ? test_exec(bin, serve, &p) : test_spex_exec(run, &p))) {
        printf("  %s: the harness did not run\n", name);
        test_proc_free(&p);
        return false;
    }
    char note[128];
    snprintf(note, sizeof note, "note: %.63s", name);
    /* run: the flags are parsed before the model is opened, which fails (exit 1) */
    bool parsed = bin ? p.rc == 0 && strstr(p.out, "parsed") : p.rc == 1 && strstr(p.err, "cannot open"), ok;
    if (!strcmp(name, "-h") || !strcmp(name, "--help") || !strcmp(name, "--usage"))
        ok = p.rc == 0 && strstr(p.out, "usage: spex serve");
    else if (!strcmp(r->status, "applied") || !strcmp(r->status, "spex only"))
        ok = parsed && !strstr(p.err, "note:");
    else if (!strcmp(r->status, "no effect"))
        ok = parsed && strstr(p.err, note) && strstr(p.err, "no effect");
    else if (!strcmp(r->status, "error"))
        ok = p.rc == 2 && strstr(p.err, "error:") && !strstr(p.err, "unknown flag");
    else
        ok = false;
    if (!ok) printf("  %s %s (%s): exit %d, stdout '%.40s', stderr '%s'\n", name, r->value, r->status, p.rc, p.out, p.err);
    test_proc_free(&p);
    return ok;
}

/* Each name of each row, as its status says; and no name in two rows. */
TEST(table_rows_hold) {
    CHECK_MSG(load_table(), "no flags tables in " DOC);
    const char *bin = harness();
    if (!bin || !test_spex_bin()) SKIP("no spex binary or serve_flags harness in this build");
    int n = 0, bad = 0, dup = 0, counts[4] = {0};
    static const char *kinds[4] = {"applied", "no effect", "error", "spex only"};
    for (int i = 0; i < g_n_rows; i++) {
        for (int k = 0; k < 4; k++) counts[k] += !strcmp(g_rows[i].status, kinds[k]);
        for (int k = 0; k < g_rows[i].n_names; k++, n++) {
            if (find_name(g_rows[i].names[k]) != &g_rows[i]) printf("  %s: in two rows\n", g_rows[i].names[k]), dup++;
            bad += !row_holds(bin, &g_rows[i], g_rows[i].names[k]);
        }
    }
    printf("  %d rows (%d applied, %d no effect, %d error, %d spex only), %d names\n", g_n_rows, counts[0], counts[1],
           counts[2], counts[3], n);
    CHECK_EQ_INT(counts[0] + counts[1] + counts[2] + counts[3], g_n_rows);
    CHECK_EQ_INT(dup, 0);
    CHECK_EQ_INT(bad, 0);
}

/* The same for the llama-cli table and `spex run`. */
TEST(run_table_rows_hold) {
    CHECK_MSG(load_table(), "no flags tables in " DOC);
    if (!test_spex_bin()) SKIP("no spex binary next to this test's folder");
    int n = 0, bad = 0, dup = 0;
    for (int i = 0; i < g_n_run; i++)
        for (int k = 0; k < g_run[i].n_names; k++, n++) {
            if (find_in(g_run, g_n_run, g_run[i].names[k]) != &g_run[i]) printf("  %s: in two rows\n", g_run[i].names[k]), dup++;
            bad += !row_holds(NULL, &g_run[i], g_run[i].names[k]);
        }
    printf("  %d rows, %d names\n", g_n_run, n);
    CHECK_EQ_INT(dup, 0);
    CHECK_EQ_INT(bad, 0);
}

/* The flags a --help text names from its first line starting with `from` on (NULL: all):
 * every word that starts with '-' and a letter, or "--", after a blank, '(', '/' or ','. Each
 * must have a row. Returns how many were found; *missing counts those without a row. */
static int help_names(const char *text, const char *from, int *missing) {
    const char *p = from ? strstr(text, from) : text;
    int n = 0;
    *missing = 0;
    for (; p && *p; p++) {
        bool start = p == text || strchr(" \t\n(/,", p[-1]);
        if (!start || p[0] != '-' || !(isalpha((unsigned char)p[1]) || p[1] == '-')) continue;
        char name[64];
        size_t k = 0;
        while (k < sizeof name - 1 && (isalnum((unsigned char)p[k]) || p[k] == '-' || p[k] == '.' || p[k] == '_'))
            name[k] = p[k], k++;
        while (k && name[k - 1] == '.') k--;
        name[k] = 0;
        p += k ? k - 1 : 0;
        n++;
        if (!find_name(name) && !(from && find_in(g_run, g_n_run, name)))
            printf("  '%s' is in --help but not in " DOC "'s table\n", name), (*missing)++;
    }
    return n;
}

TEST(help_flags_have_rows) {
    CHECK_MSG(load_table(), "no flags tables in " DOC);
    if (!test_spex_bin()) SKIP("no spex binary next to this test's folder");
    const char *serve[] = {"serve", "--help", NULL}, *run[] = {"run", "--help", NULL};
    test_proc p;
    int missing = 0, n;
    CHECK(test_spex_exec(serve, &p) && p.rc == 0);
    n = help_names(p.out, NULL, &missing);
    printf("  spex serve --help: %d flag names\n", n);
    CHECK_MSG(n > 300 && missing == 0, "%d names, %d without a row", n, missing);
    CHECK_MSG(strstr(p.out, "accepted without effect") && strstr(p.out, "--lora"), "--help lists no llama.cpp flags");
    test_proc_free(&p);
    CHECK(test_spex_exec(run, &p) && p.rc == 0);
    n = help_names(p.out, "llama.cpp flags accepted", &missing);
    printf("  spex run --help: %d llama.cpp flag names\n", n);
    CHECK_MSG(n > 100 && missing == 0, "%d names, %d without a row", n, missing);
    test_proc_free(&p);
}

/* A flag in neither llama-server nor spex is an error; llama-server's own flags are unknown to
 * `spex run`, as to llama-cli; the value rules of llama.cpp hold (an integer flag, a sampler
 * accepted only when off). */
TEST(unknown_and_bad_values) {
    const char *bin = harness();
    if (!bin || !test_spex_bin()) SKIP("no spex binary or serve_flags harness in this build");
    static const char *const cases[][5] = {
        {"-m", "m.gguf", "--no-such-flag", NULL},    {"-m", "m.gguf", "-ngl", "lots", NULL},
        {"-m", "m.gguf", "--mirostat", "2", NULL},   {"-m", "m.gguf", "--cors-methods", "GET", NULL},
        {"-m", "m.gguf", "--dry-base", "x", NULL},
    };
    static const char *const want[] = {"unknown flag '--no-such-flag'", "-ngl needs an integer",
                                       "Mirostat sampling is not supported", "only *, off, is accepted",
                                       "--dry-base needs a number"};
    test_proc p;
    for (int i = 0; i < 5; i++) {
        CHECK(test_exec(bin, cases[i], &p));
        CHECK_MSG(p.rc == 2 && strstr(p.err, want[i]), "%s: exit %d %s", cases[i][2], p.rc, p.err);
        test_proc_free(&p);
    }
    const char *run[] = {"run", "-m", "m.gguf", "--cors-origins", "*", NULL};
    CHECK(test_spex_exec(run, &p));
    CHECK_MSG(p.rc == 2 && strstr(p.err, "unknown flag '--cors-origins'"), "run: exit %d %s", p.rc, p.err);
    test_proc_free(&p);
}

TEST_MAIN()
