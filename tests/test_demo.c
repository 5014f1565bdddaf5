/*
 * test_demo.c — `spex demo`, the README's main job: its two tables and its bad input.
 *
 * What it checks, running the build's spex binary on the shipped pair (models/):
 *  - the realistic-compute table: the pair is inflated once into the cache folder (a second
 *    run finds it there), its greedy texts with and without the drafter are identical, and —
 *    with the draft cut off, so that acceptance depends on the drafts alone — its mean
 *    acceptance length at T = 0 equals the shipped pair's within float rounding (the inflated
 *    pair computes the same drafts; docs/inflate.md). A smaller shape than the main job's
 *    (E 512, 10 layers) keeps the test quick; the main job runs the full one;
 *  - a cache folder that cannot be written and a failed inflate: a clear error, exit 1, and
 *    the first table printed all the same; no half-written pair left behind;
 *  - --compare-ar: llama-bench JSON and JSON-lines output and plain text give the side-by-side
 *    table with the right ratios; a file without a figure is refused before anything runs.
 * Skips (with a message) when models/ is absent.
 */
#include "test.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TARGET "models/target.gguf"
#define DRAFTER "models/drafter.gguf"

#define REQUIRE_MODELS()                                                                        \
    do {                                                                                        \
        if (!test_spex_bin()) SKIP("no spex binary next to this test's folder");                \
        if (access(TARGET, R_OK) || access(DRAFTER, R_OK)) SKIP("models/ has no default pair"); \
    } while (0)

/* The k-th (0-based) DFlash2 row at temperature temp in text: its acceptance, -1 if absent. */
static double acceptance(const char *text, int k, int temp) {
    for (const char *p = text; (p = strstr(p, "\n| DFlash2 |")) != NULL; p++) {
        char quant[16];
        int block, t;
        double tps, speedup, acc;
        if (sscanf(p, "\n| DFlash2 | %15s | %d | %d | %lf | %lfx | %lf |", quant, &block, &t, &tps, &speedup, &acc) == 6 &&
            t == temp && k-- == 0)
            return acc;
    }
    return -1;
}

static int count(const char *text, const char *what) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)) != NULL; p += strlen(what)) n++;
    return n;
}

/* Entries of dir whose name contains part. */
static int entries_with(const char *dir, const char *part) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) n += strstr(e->d_name, part) != NULL;
    closedir(d);
    return n;
}

static void make_tmpdir(char *path, size_t cap) {
    snprintf(path, cap, "/tmp/spex_test_demo_XXXXXX");
    if (!mkdtemp(path)) path[0] = 0;
}

static void remove_tree(const char *path) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) printf("  could not remove %s\n", path);
}

TEST(realistic_table_has_the_same_drafts) {
    REQUIRE_MODELS();
    char dir[64];
    make_tmpdir(dir, sizeof dir);
    CHECK(dir[0]);
    const char *args[] = {"demo", "-t", "2", "--draft-cut", "off", "--cache", dir, "--real-shape", "512,10,8,4,128,1280",
                          "--problems", "4", "-n", "64", NULL};
    test_proc r1, r2;
    CHECK(test_spex_exec(args, &r1));
    CHECK(test_spex_exec(args, &r2));
    printf("%s", r1.out);
    CHECK_MSG(r1.rc == 0, "exit %d: %s", r1.rc, r1.err);
    CHECK_MSG(r2.rc == 0, "exit %d: %s", r2.rc, r2.err);
    CHECK(test_sanitizer_clean(r1.err) && test_sanitizer_clean(r2.err));
    CHECK_EQ_INT(count(r1.out, "\n| target only |"), 4);   /* two tables of two temperatures */
    CHECK_EQ_INT(count(r1.out, "greedy (T = 0) texts identical with and without the drafter: 4/4"), 2);
    CHECK_EQ_INT(count(r1.out, "\ncontext: qwen3 E 320, 8 layers"), 1);
    CHECK_EQ_INT(count(r1.out, "\ncontext: qwen3 E 512, 10 layers, 8/4 heads of 128, FFN 1280, q8_0"), 1);
    CHECK(strstr(r1.out, "realistic-compute pair: inflating") && !strstr(r2.out, "inflating"));
    CHECK(strstr(r2.out, "realistic-compute pair: cached in"));
    double tiny = acceptance(r1.out, 0, 0), real = acceptance(r1.out, 1, 0);
    printf("  acceptance at T = 0: shipped %.2f, inflated %.2f\n", tiny, real);
    CHECK(tiny > 1.0 && real > 1.0);
    CHECK_MSG(fabs(tiny - real) <= 0.05, "acceptance %.2f (shipped) vs %.2f (inflated)", tiny, real);
    CHECK_EQ_INT(entries_with(dir, ".tmp"), 0);
    CHECK_EQ_INT(entries_with(dir, "inflated-"), 1);
    test_proc_free(&r1);
    test_proc_free(&r2);
    remove_tree(dir);
}

TEST(unwritable_cache_and_failed_inflate) {
    REQUIRE_MODELS();
    char dir[64], file[96], cache[128];
    make_tmpdir(dir, sizeof dir);
    CHECK(dir[0]);
    /* a "folder" that is a file: no one, root included, can write into it */
    snprintf(file, sizeof file, "%s/not-a-folder", dir);
    FILE *f = fopen(file, "w");
    CHECK(f != NULL);
    fclose(f);
    const char *a1[] = {"demo", "-t", "2", "--cache", file, "--problems", "2", "-n", "16", NULL};
    test_proc r;
    CHECK(test_spex_exec(a1, &r));
    CHECK_MSG(r.rc == 1, "exit %d", r.rc);
    CHECK_EQ_INT(count(r.out, "\n| target only |"), 2);   /* the first table */
    CHECK_MSG(strstr(r.err, "no realistic-compute table") && strstr(r.err, "cannot write the inflated pair into") &&
                  strstr(r.err, "--cache DIR"),
              "%s", r.err);
    test_proc_free(&r);
    if (geteuid() != 0) {   /* a read-only folder stops only a user that is not root */
        snprintf(cache, sizeof cache, "%s/ro", dir);
        CHECK(mkdir(cache, 0555) == 0);
        const char *a2[] = {"demo", "-t", "2", "--cache", cache, "--problems", "2", "-n", "16", NULL};
        CHECK(test_spex_exec(a2, &r));
        CHECK(r.rc == 1 && count(r.out, "\n| target only |") == 2 && strstr(r.err, "Permission denied"));
        test_proc_free(&r);
    }
    /* an inflate that fails: a width the drafter's Q8_0 blocks do not divide */
    const char *a3[] = {"demo", "-t", "2", "--cache", dir, "--real-shape", "1000,4,8,4,128,1280", "--problems", "2", "-n",
                        "16", NULL};
    CHECK(test_spex_exec(a3, &r));
    CHECK_MSG(r.rc == 1, "exit %d", r.rc);
    CHECK_EQ_INT(count(r.out, "\n| target only |"), 2);
    CHECK_MSG(strstr(r.err, "error: inflate:") && strstr(r.err, "spex inflate failed"), "%s", r.err);
    CHECK(test_sanitizer_clean(r.err));
    test_proc_free(&r);
    CHECK_EQ_INT(entries_with(dir, "inflated-"), 0);   /* nothing half-written left */
    remove_tree(dir);
}

TEST(compare_ar_side_by_side) {
    REQUIRE_MODELS();
    char dir[64], path[128];
    make_tmpdir(dir, sizeof dir);
    CHECK(dir[0]);
    static const struct {
        const char *what, *text, *name;
        double tps;   /* 0: refused */
    } cases[] = {
        {"llama-bench json",
         "[{\"model_type\":\"qwen3 ?B Q8_0\",\"build_commit\":\"abc1234\",\"n_prompt\":512,\"n_gen\":0,\"avg_ts\":900.5},\n"
         " {\"model_type\":\"qwen3 ?B Q8_0\",\"build_commit\":\"abc1234\",\"n_prompt\":0,\"n_gen\":128,\"avg_ts\":40}]\n",
         "llama-bench tg128 qwen3 ?B Q8_0 build abc1234", 40},
        {"llama-bench jsonl", "{\"n_prompt\":512,\"n_gen\":0,\"avg_ts\":900}\n{\"n_prompt\":0,\"n_gen\":64,\"avg_ts\":25}\n",
         "llama-bench tg64", 25},
        {"plain text", "llama.cpp b4500: 50.0 t/s\n", "llama.cpp b4500", 50},
        {"bare number", "80\n", "other engine", 80},
        {"no figure", "nothing here\n", NULL, 0},
        {"prompt tests only", "[{\"n_prompt\":512,\"n_gen\":0,\"avg_ts\":900}]", NULL, 0},
        {"zero", "0 t/s", NULL, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(path, sizeof path, "%s/other-%zu.txt", dir, i);
        FILE *f = fopen(path, "w");
        CHECK(f != NULL);
        fputs(cases[i].text, f);
        fclose(f);
        const char *a[] = {"demo", "-t", "2", "--no-realistic", "--problems", "2", "-n", "16", "--compare-ar", path, NULL};
        test_proc r;
        CHECK(test_spex_exec(a, &r));
        if (!cases[i].tps) {
            CHECK_MSG(r.rc == 2 && strstr(r.err, "error: --compare-ar") && !strstr(r.out, "| target only |"),
                      "%s: exit %d, %s", cases[i].what, r.rc, r.err);
            test_proc_free(&r);
            continue;
        }
        char row[256];
        snprintf(row, sizeof row, "| %s | autoregressive | %.1f | 1.00x |", cases[i].name, cases[i].tps);
        const char *spex_row = strstr(r.out, "| spex | target only | ");
        double tps = 0, ratio = 0;
        bool parsed = spex_row && sscanf(spex_row, "| spex | target only | %lf | %lfx |", &tps, &ratio) == 2;
        CHECK_MSG(r.rc == 0 && strstr(r.out, row) && parsed, "%s: exit %d, want '%s' in:\n%s", cases[i].what, r.rc, row,
                  r.out);
        CHECK_MSG(fabs(ratio - tps / cases[i].tps) <= 0.01 + 0.005 * ratio, "%s: %.1f t/s shown as %.2fx", cases[i].what,
                  tps, ratio);
        test_proc_free(&r);
    }
    remove_tree(dir);
}

TEST_MAIN()
