/*
 * test_bench_spec.c — `spex bench spec` end to end: drives the build's own spex binary (the
 * sibling of this program's folder, as test_run.c does) and checks its exit status, tables,
 * greedy-identity line and --json file.
 *
 * What it checks: on the default pair (models/) with 2 demo problems and -n 24 the seed's
 * table has its header and an AR and a DFlash2 row per temperature, the cost and verify(k)
 * tables are there for k = 1..4 and no further, "greedy output identical: yes", exit 0, and
 * the JSON holds the same rows; on the tiny qwen35 target (byte tokenizer, plain "prompt"
 * lines) the MTP row and DFlash2 rows for --draft-quant Q8_0,Q4_K_M appear, greedy identical,
 * and the temporary quantized files are gone afterwards; bad flags exit 2 and a missing
 * prompt file exits 1, each with an "error: " line; `bench attn` and `bench model` tables and
 * bad flags likewise, and `bench kernels`' --n and --rows. What it is not: a check of the speed
 * numbers (they depend on the machine), nor of spex_spec itself (test_spec, test_spec_qwen35).
 */
#include "spex.h"
#include "cpu/api.h"
#include "test.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdbool.h>
#include <unistd.h>


#define DEF_TARGET "models/target.gguf"
#define DEF_DRAFTER "models/drafter.gguf"
#define Q35 "tests/data/qwen35/tiny-qwen35.gguf"
#define Q35_DRAFT "tests/data/qwen35/tiny-qwen35.dflash2.gguf"

typedef test_proc bs_result;

/* Runs `spex bench spec ARGS...`; false if it could not be started. */
static bool run_bench_spec(const char *const *args, bs_result *r) {
    const char *a[64];
    int n = 0;
    a[n++] = "bench";
    a[n++] = "spec";
    for (int i = 0; args[i] && n < 63; i++) a[n++] = args[i];
    a[n] = NULL;
    return test_spex_exec(a, r);
}

static void bs_free(bs_result *r) { test_proc_free(r); }

static bool sanitizer_clean(const char *err) {
    return !strstr(err, "Sanitizer") && !strstr(err, "runtime error");
}

#define RUN(r, ...)                                                                   \
    do {                                                                              \
        const char *const a_[] = {__VA_ARGS__, NULL};                                 \
        CHECK_MSG(run_bench_spec(a_, &(r)), "could not run %s", test_spex_bin());     \
    } while (0)

#define REQUIRE_BIN()                                                                 \
    do {                                                                              \
        if (!test_spex_bin()) SKIP("no spex binary next to this test's folder");      \
    } while (0)

/* Writes the first n lines of src to dst; false if src has fewer. */
static bool head_lines(const char *src, const char *dst, int n) {
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    bool ok = in && out;
    static char line[1 << 16];
    int k = 0;
    while (ok && k < n && fgets(line, sizeof line, in)) {
        fputs(line, out);
        k++;
    }
    if (in) fclose(in);
    if (out) fclose(out);
    return ok && k == n;
}

static bool write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

/* The verify(k) table has rows exactly for k = 1..k_max. */
static bool verify_rows(const char *out, int k_max) {
    const char *t = strstr(out, "| k | best ms | ratio to k=1 | ms per token |");
    if (!t) return false;
    for (int k = 1; k <= k_max + 1; k++) {
        char row[32];
        snprintf(row, sizeof row, "\n| %d | ", k);
        const char *p = strstr(t, row);
        if ((p != NULL) != (k <= k_max)) return false;
    }
    /* k = 1 is the reference */
    return strstr(t, "\n| 1 | ") && strstr(strstr(t, "\n| 1 | ") + 6, "| 1.00 |");
}

static const char *const TABLE_HEAD =
    "| Method | Draft quant | Block | Temp | Decode TPS | Decode speedup | Acceptance (mean length) | Normal stops |";

/* The first two prompts of models/demo.jsonl in a temporary file, and a path for --json. */
static bool two_prompts_and_json(const char *ptag, const char *jtag, char prompts[512], char json[512]) {
    snprintf(prompts, 512, "%s", test_tmp_path(ptag));
    snprintf(json, 512, "%s", test_tmp_path(jtag));
    return head_lines("models/demo.jsonl", prompts, 2);
}

/* The parsed --json file (NULL if unreadable or not JSON). */
static cJSON *read_json(const char *path) {
    size_t len;
    char *js = test_slurp(path, &len);
    cJSON *j = js ? cJSON_Parse(js) : NULL;
    free(js);
    return j;
}

TEST(default_pair_table_and_json) {
    REQUIRE_BIN();
    if (access(DEF_TARGET, R_OK) || access(DEF_DRAFTER, R_OK)) SKIP("no default models in models/");
    char prompts[512], json[512];
    CHECK(two_prompts_and_json("demo2.jsonl", "bs.json", prompts, json));
    bs_result r;
    RUN(r, "-m", DEF_TARGET, "-md", DEF_DRAFTER, "--prompts", prompts, "-n", "24", "-t", "1", "--verify-k", "4",
        "--reps", "2", "--json", json);
    CHECK_MSG(r.rc == 0 && sanitizer_clean(r.err), "rc %d, stderr: %s", r.rc, r.err);
    CHECK_MSG(strstr(r.out, TABLE_HEAD), "no table header in:\n%s", r.out);
    CHECK(strstr(r.out, "| AR | - | - | 0 | "));
    CHECK(strstr(r.out, "| AR | - | - | 1 | "));
    CHECK(strstr(r.out, "| DFlash2 | Q8_0 | 8 | 0 | "));   /* the shipped drafter is Q8_0 */
    CHECK(strstr(r.out, "| DFlash2 | Q8_0 | 8 | 1 | "));
    CHECK(strstr(r.out, "| 1.00x | - | "));   /* AR is its own reference */
    CHECK(strstr(r.out, "| Method | Draft quant | Temp | Steps | Draft ms | Verify ms | Other ms | Step ms |"));
    CHECK_MSG(verify_rows(r.out, 4), "verify(k) table for k = 1..4 missing in:\n%s", r.out);
    /* the default target streams < 64 MiB a step: no probe under --probe auto; no k = 8 */
    CHECK(!strstr(r.out, "decode(1) against a probe"));
    CHECK(!strstr(r.out, "verify(8)/decode(1) within a round"));
    CHECK(strstr(r.out, "greedy output identical: yes"));
    bs_free(&r);

    cJSON *j = read_json(json);
    CHECK(j);
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(j, "methods");
    const cJSON *vf = cJSON_GetObjectItemCaseSensitive(j, "verify");
    bool ok = cJSON_GetArraySize(ms) == 2 && cJSON_GetArraySize(vf) == 4 &&
              cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "greedy_identical"));
    /* whether the verify and prompt passes ran on AMX tiles: what the CPU (and SPEX_AMX) allow */
    const cJSON *amx = cJSON_GetObjectItemCaseSensitive(j, "amx_int8");
    CHECK(cJSON_IsBool(amx) && cJSON_IsTrue(amx) == (spex_cpu_isa() == SPEX_ISA_AVX512 &&
                                                      spex_cpu_get_features()->amx_int8));
    const cJSON *ar = cJSON_GetArrayItem(ms, 0), *df = cJSON_GetArrayItem(ms, 1);
    ok = ok && !strcmp(cJSON_GetObjectItemCaseSensitive(ar, "method")->valuestring, "AR") &&
         !strcmp(cJSON_GetObjectItemCaseSensitive(df, "method")->valuestring, "DFlash2") &&
         cJSON_GetObjectItemCaseSensitive(df, "block")->valueint == 8 &&
         cJSON_GetObjectItemCaseSensitive(df, "greedy_identical_prompts")->valueint == 2;
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(df, "rows");
    ok = ok && cJSON_GetArraySize(rows) == 2;
    for (int i = 0; ok && i < 2; i++) {
        const cJSON *row = cJSON_GetArrayItem(rows, i);
        double ml = cJSON_GetObjectItemCaseSensitive(row, "mean_len")->valuedouble;
        double ar_speed = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(ar, "rows"), i),
                                                           "decode_speedup")->valuedouble;
        ok = ml >= 1.0 && ml <= 8.0 && fabs(ar_speed - 1.0) < 1e-9 &&
             cJSON_GetObjectItemCaseSensitive(row, "runs")->valueint == 2 &&
             cJSON_GetObjectItemCaseSensitive(row, "verify_ms_per_step")->valuedouble > 0 &&
             /* one thread never waits for another */
             cJSON_GetObjectItemCaseSensitive(row, "wait_share_caller")->valuedouble == 0.0 &&
             cJSON_GetObjectItemCaseSensitive(row, "wait_share_worker")->valuedouble == 0.0;
    }
    ok = ok && cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "decode_probe_share"));
    cJSON_Delete(j);
    CHECK_MSG(ok, "unexpected --json content");
}

/* verify(k)'s per-round ratios and decode(1)'s probe (--probe on: the default target's few MiB
 * sit in the cache, so only the mechanics are checked, not the share): the table's median
 * column (1.00 for k = 1, each round's decode(1) over itself), the decode(1) and verify(8)
 * lines, and the same numbers in the JSON. --probe takes auto, on or off only. */
TEST(verify_rounds_paired_and_probe) {
    REQUIRE_BIN();
    if (access(DEF_TARGET, R_OK) || access(DEF_DRAFTER, R_OK)) SKIP("no default models in models/");
    char prompts[512], json[512];
    CHECK(two_prompts_and_json("demo2p.jsonl", "bsp.json", prompts, json));
    bs_result r;
    RUN(r, "-m", DEF_TARGET, "-md", DEF_DRAFTER, "--prompts", prompts, "-n", "8", "-t", "1", "--temps", "0",
        "--verify-k", "8", "--reps", "3", "--probe", "on", "--json", json);
    CHECK_MSG(r.rc == 0 && sanitizer_clean(r.err), "rc %d, stderr: %s", r.rc, r.err);
    CHECK_MSG(strstr(r.out, "| k | best ms | ratio to k=1 | ms per token | ratio within a round (median) |"),
              "no verify(k) header in:\n%s", r.out);
    CHECK(verify_rows(r.out, 8));
    const char *k1 = strstr(r.out, "\n| 1 | ");
    CHECK_MSG(k1 && strstr(k1, " | 1.00 |\n") && strstr(k1, " | 1.00 |\n") < strstr(k1 + 1, "\n| 2 | "),
              "k = 1 row's median ratio is not 1.00:\n%s", r.out);
    CHECK_MSG(strstr(r.out, "\ndecode(1) against a probe of its ") && strstr(r.out, "% of the probe (medians over ") &&
                  strstr(r.out, "\nverify(8)/decode(1) within a round, median: "),
              "no decode(1) / verify(8) lines in:\n%s", r.out);
    bs_free(&r);
    cJSON *j = read_json(json);
    CHECK(j);
    const cJSON *vf = cJSON_GetObjectItemCaseSensitive(j, "verify");
    bool ok = cJSON_GetArraySize(vf) == 8 &&
              cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(vf, 0), "ratio_paired")->valuedouble == 1.0;
    for (int k = 1; ok && k < 8; k++)
        ok = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(vf, k), "ratio_paired")->valuedouble > 0;
    const cJSON *share = cJSON_GetObjectItemCaseSensitive(j, "decode_probe_share");
    const cJSON *rounds = cJSON_GetObjectItemCaseSensitive(j, "decode_probe_rounds");
    ok = ok && cJSON_IsNumber(share) && share->valuedouble > 0 && cJSON_IsNumber(rounds) && rounds->valueint >= 1 &&
         rounds->valueint <= 3 && cJSON_GetObjectItemCaseSensitive(j, "decode_gbs")->valuedouble > 0;
    cJSON_Delete(j);
    CHECK_MSG(ok, "unexpected verify / probe numbers in the --json file");
    const char *const bad[] = {"x", "yes", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        RUN(r, "--probe", bad[i]);
        CHECK_MSG(r.rc == 2 && strstr(r.err, "error: --probe expects auto, on or off") && sanitizer_clean(r.err),
                  "--probe %s: rc %d, stderr: %s", bad[i], r.rc, r.err);
        bs_free(&r);
    }
}

/* The cost table's Waits column with two threads: the calling thread waits for the worker at
 * the end of every pool run and the worker for the next run, so both shares lie in (0, 1). */
TEST(cost_table_waits_two_threads) {
    REQUIRE_BIN();
    if (access(DEF_TARGET, R_OK) || access(DEF_DRAFTER, R_OK)) SKIP("no default models in models/");
    char prompts[512], json[512];
    CHECK(two_prompts_and_json("demo2w.jsonl", "bsw.json", prompts, json));
    bs_result r;
    RUN(r, "-m", DEF_TARGET, "-md", DEF_DRAFTER, "--prompts", prompts, "-n", "16", "-t", "2", "--temps", "0",
        "--verify-k", "1", "--reps", "1", "--json", json);
    CHECK_MSG(r.rc == 0 && sanitizer_clean(r.err), "rc %d, stderr: %s", r.rc, r.err);
    CHECK_MSG(strstr(r.out, "| Other % | Verified / cut per step | Waits caller / worker |"), "no Waits column:\n%s",
              r.out);
    CHECK_MSG(strstr(r.out, "| Method | Draft quant | Temp | Q/K/V | attention, W_o | gate/up | down | head | drafter | "
                            "other |"), "no waits-by-site table:\n%s", r.out);
    bs_free(&r);
    cJSON *j = read_json(json);
    CHECK(j);
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(j, "methods");
    bool ok = cJSON_GetArraySize(ms) == 2;
    for (int i = 0; ok && i < 2; i++) {
        const cJSON *row = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(ms, i), "rows"), 0);
        const double wc = cJSON_GetObjectItemCaseSensitive(row, "wait_share_caller")->valuedouble;
        const double ww = cJSON_GetObjectItemCaseSensitive(row, "wait_share_worker")->valuedouble;
        ok = wc > 0.0 && wc < 1.0 && ww > 0.0 && ww < 1.0;
        if (!ok) printf("  method %d: wait shares %g / %g\n", i, wc, ww);
        /* by site: they add up to the total (the bench splits the workers' waits in progress at
         * the decode's start and end, spex_pool_wait_split; before that, a wait begun before the
         * decode was counted by site in full, and the sum came out 35 % over the total once),
         * the layers' phases have some, and only DFlash2 has drafter runs */
        const cJSON *bs = cJSON_GetObjectItemCaseSensitive(row, "wait_share_by_site");
        double sum = 0.0, qkv = -1.0, draft = -1.0;
        const cJSON *it;
        cJSON_ArrayForEach(it, bs) {
            const double v = cJSON_GetArrayItem(it, 0)->valuedouble + cJSON_GetArrayItem(it, 1)->valuedouble;
            sum += v;
            if (!strcmp(it->string, "qkv")) qkv = v;
            if (!strcmp(it->string, "drafter")) draft = v;
        }
        const bool site_ok = cJSON_GetArraySize(bs) == 7 && fabs(sum - (wc + ww) / 2) <= 0.1 * (wc + ww) / 2 &&
                             qkv > 0.0 && (i == 0 ? draft == 0.0 : draft > 0.0);
        if (!site_ok) printf("  method %d: by site sum %g (total %g), qkv %g, drafter %g\n", i, sum, (wc + ww) / 2, qkv, draft);
        ok = ok && site_ok;
    }
    cJSON_Delete(j);
    CHECK_MSG(ok, "wait shares not in (0, 1), or the shares by site do not match them");
}

static int count_bench_tmp_dirs(void) {
    DIR *d = opendir("/tmp");
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));)
        if (!strncmp(e->d_name, "spex_bench_spec_", 16)) n++;
    closedir(d);
    return n;
}

TEST(qwen35_mtp_and_quantized_dflash2) {
    REQUIRE_BIN();
    char prompts[512];
    snprintf(prompts, sizeof prompts, "%s", test_tmp_path("plain.jsonl"));
    CHECK(write_text(prompts, "{\"prompt\": \"Once upon a time\"}\n{\"prompt\": \"The cat sat on the\"}\n"));
    int tmp_before = count_bench_tmp_dirs();
    bs_result r;
    RUN(r, "-m", Q35, "--mtp", "-md", Q35_DRAFT, "--draft-quant", "Q8_0,Q4_K_M", "--prompts", prompts, "-n", "24",
        "-t", "1", "--verify-k", "4", "--reps", "1");
    CHECK_MSG(r.rc == 0 && sanitizer_clean(r.err), "rc %d, stderr: %s", r.rc, r.err);
    CHECK_MSG(strstr(r.out, TABLE_HEAD), "no table header in:\n%s", r.out);
    CHECK(strstr(r.out, "| AR | - | - | 0 | "));
    CHECK(strstr(r.out, "| DFlash2 | Q8_0 | 8 | 0 | "));
    CHECK(strstr(r.out, "| DFlash2 | Q4_K_M | 8 | 1 | "));
    CHECK(strstr(r.out, "| MTP | F32 | 4 | 0 | "));
    CHECK(strstr(r.out, "| MTP | F32 | 4 | 1 | "));
    CHECK_MSG(verify_rows(r.out, 4), "verify(k) table for k = 1..4 missing in:\n%s", r.out);
    CHECK_MSG(strstr(r.out, "greedy output identical: yes (DFlash2 Q8_0 2/2, DFlash2 Q4_K_M 2/2, MTP F32 2/2)"),
              "in:\n%s", r.out);
    bs_free(&r);
    CHECK_EQ_INT(count_bench_tmp_dirs(), tmp_before);
}

/* --ngram: a prompt-lookup row on a target whose greedy text repeats itself (the random-weight
 * tiny qwen3): drafts accepted (mean length above 1) and the output identical to AR's. */
TEST(ngram_row) {
    REQUIRE_BIN();
    const char *tgt = "tests/data/models/tiny-qwen3.gguf";
    if (access(tgt, R_OK)) SKIP("tests/data/models fixtures missing");
    char prompts[512];
    snprintf(prompts, sizeof prompts, "%s", test_tmp_path("ngram.jsonl"));
    CHECK(write_text(prompts, "{\"prompt\": \"Once upon a time\"}\n{\"prompt\": \"abc abc abc\"}\n"));
    bs_result r;
    RUN(r, "-m", tgt, "--ngram", "--ngram-n", "2", "--prompts", prompts, "-n", "96", "-t", "1", "--verify-k", "2",
        "--reps", "1");
    CHECK_MSG(r.rc == 0 && sanitizer_clean(r.err), "rc %d, stderr: %s", r.rc, r.err);
    CHECK(strstr(r.out, "drafter n-gram: prompt lookup, key 2 tokens, n_max 16"));
    const char *row = strstr(r.out, "| n-gram | n 2 | 17 | 0 | ");
    double tps = 0, speedup = 0, acc = 0;
    CHECK_MSG(row && sscanf(row, "| n-gram | n 2 | 17 | 0 | %lf | %lfx | %lf |", &tps, &speedup, &acc) == 3,
              "no n-gram row in:\n%s", r.out);
    printf("  n-gram at T = 0: mean acceptance length %.2f, %.2fx AR\n", acc, speedup);
    CHECK(acc > 1.0);
    CHECK_MSG(strstr(r.out, "greedy output identical: yes (n-gram n 2 2/2)"), "in:\n%s", r.out);
    bs_free(&r);
}

/* draft-simple: a small model of the target's vocabulary drafts in a row of its own, with
 * greedy output identical to AR's. */
TEST(draft_model_row) {
    REQUIRE_BIN();
    const char *tgt = "tests/data/models/tiny-qwen3.gguf", *small = "tests/data/models/tiny-qwen3-q8_0.gguf";
    if (access(tgt, R_OK) || access(small, R_OK)) SKIP("tests/data/models fixtures missing");
    char prompts[512];
    snprintf(prompts, sizeof prompts, "%s", test_tmp_path("draft_model.jsonl"));
    CHECK(write_text(prompts, "{\"prompt\": \"Once upon a time\"}\n{\"prompt\": \"The cat\"}\n"));
    bs_result r;
    RUN(r, "-m", tgt, "--draft-model", small, "--prompts", prompts, "-n", "96", "-t", "1", "--verify-k", "2",
        "--reps", "1");
    CHECK_MSG(r.rc == 0 && sanitizer_clean(r.err), "rc %d, stderr: %s", r.rc, r.err);
    CHECK_MSG(strstr(r.out, "drafter draft-simple: tests/data/models/tiny-qwen3-q8_0.gguf (Q8_0), autoregressive, "
                            "n_max 16"),
              "in:\n%s", r.out);
    const char *row = strstr(r.out, "| draft-simple | Q8_0 | 17 | 0 | ");
    double tps = 0, speedup = 0, acc = 0;
    CHECK_MSG(row && sscanf(row, "| draft-simple | Q8_0 | 17 | 0 | %lf | %lfx | %lf |", &tps, &speedup, &acc) == 3,
              "no draft-simple row in:\n%s", r.out);
    printf("  draft-simple at T = 0: mean acceptance length %.2f, %.2fx AR\n", acc, speedup);
    CHECK(acc > 2.0);
    CHECK_MSG(strstr(r.out, "greedy output identical: yes"), "in:\n%s", r.out);
    bs_free(&r);
}

/* hybrid: the first -md drafter with n-gram lookup, in a row of its own next to the drafter's. */
TEST(hybrid_row) {
    REQUIRE_BIN();
    const char *tgt = "tests/data/models/tiny-qwen3.gguf", *dr = "tests/data/dflash/tiny-qwen3.dflash2.gguf";
    if (access(tgt, R_OK) || access(dr, R_OK)) SKIP("tests/data fixtures missing");
    char prompts[512];
    snprintf(prompts, sizeof prompts, "%s", test_tmp_path("hybrid.jsonl"));
    CHECK(write_text(prompts, "{\"prompt\": \"abc abc abc\"}\n{\"prompt\": \"The cat\"}\n"));
    bs_result r;
    RUN(r, "-m", tgt, "-md", dr, "--hybrid", "--ngram-n", "2", "--prompts", prompts, "-n", "96", "-t", "1",
        "--verify-k", "2", "--reps", "1");
    CHECK_MSG(r.rc == 0 && sanitizer_clean(r.err), "rc %d, stderr: %s", r.rc, r.err);
    CHECK_MSG(strstr(r.out, "+ n-gram lookup (key 2 tokens), the better draft per step, n_max 16"), "in:\n%s", r.out);
    CHECK_MSG(strstr(r.out, "| DFlash2 | F32 | 8 | 0 | ") && strstr(r.out, "| DFlash2+ngram | F32 | 17 | 0 | "),
              "in:\n%s", r.out);
    CHECK_MSG(strstr(r.out, "greedy output identical: yes"), "in:\n%s", r.out);
    bs_free(&r);
}

TEST(mtp_absent_is_a_note) {
    REQUIRE_BIN();
    if (access(DEF_TARGET, R_OK)) SKIP("no default models in models/");
    char prompts[512];
    snprintf(prompts, sizeof prompts, "%s", test_tmp_path("demo1.jsonl"));
    CHECK(head_lines("models/demo.jsonl", prompts, 1));
    bs_result r;
    RUN(r, "-m", DEF_TARGET, "--mtp", "--prompts", prompts, "-n", "4", "-t", "1", "--temps", "0", "--verify-k", "1",
        "--reps", "1");
    CHECK_MSG(r.rc == 0, "rc %d, stderr: %s", r.rc, r.err);
    CHECK(strstr(r.err, "no MTP block"));
    CHECK(strstr(r.out, "| AR | - | - | 0 | "));
    CHECK(!strstr(r.out, "| MTP |"));
    CHECK(strstr(r.out, "greedy output identical: not checked"));
    bs_free(&r);
}

/* Exit status want and an "error: " line on stderr. */
static bool expect_error(const char *const *args, int want) {
    bs_result r;
    if (!run_bench_spec(args, &r)) return false;
    bool ok = r.rc == want && strstr(r.err, "error: ") && sanitizer_clean(r.err);
    if (!ok) printf("  rc %d (want %d), stderr: %s\n", r.rc, want, r.err);
    bs_free(&r);
    return ok;
}

TEST(bad_flags_and_files) {
    REQUIRE_BIN();
    const char *const a1[] = {"--verify-k", "17", NULL};
    const char *const a2[] = {"--draft-quant", "q3_weird", NULL};
    const char *const a3[] = {"--bogus", NULL};
    const char *const a4[] = {"--temps", "0,x", NULL};
    const char *const a5[] = {"-n", NULL};
    const char *const a6[] = {"-m", Q35, "--prompts", "/nonexistent/prompts.jsonl", NULL};
    CHECK(expect_error(a1, 2));
    CHECK(expect_error(a2, 2));
    CHECK(expect_error(a3, 2));
    CHECK(expect_error(a4, 2));
    CHECK(expect_error(a5, 2));
    CHECK(expect_error(a6, 1));
    bs_result r;
    RUN(r, "--help");
    CHECK(r.rc == 0);
    const char *flags[] = {"-m TARGET", "-md DRAFTER", "--mtp", "--prompts", "-n N", "-t THREADS", "--temps",
                           "--verify-k", "--reps", "--draft-quant", "--draft-stop", "--json"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) CHECK_MSG(strstr(r.out, flags[i]), "%s", flags[i]);
    bs_free(&r);
}

/* --draft-stop: one DFlash row per entry (p_min values and the draft cut) sharing one drafter,
 * a Draft stop column, every row greedy-identical to AR, and the JSON naming each row's stop. */
TEST(draft_stop_rows) {
    REQUIRE_BIN();
    if (access(DEF_TARGET, R_OK) || access(DEF_DRAFTER, R_OK)) SKIP("no default models in models/");
    char prompts[512], json[512];
    CHECK(two_prompts_and_json("demo2s.jsonl", "bss.json", prompts, json));
    bs_result r;
    RUN(r, "-m", DEF_TARGET, "-md", DEF_DRAFTER, "--prompts", prompts, "-n", "48", "-t", "1", "--verify-k", "2",
        "--reps", "1", "--temps", "0", "--draft-stop", "0,0.5,cut", "--json", json);
    CHECK_MSG(r.rc == 0 && sanitizer_clean(r.err), "rc %d, stderr: %s", r.rc, r.err);
    CHECK_MSG(strstr(r.out, "| Method | Draft quant | Block | Draft stop | Temp |"), "no Draft stop column:\n%s", r.out);
    CHECK(strstr(r.out, "| AR | - | - | - | 0 | "));
    CHECK(strstr(r.out, "| DFlash2 | Q8_0 | 8 | none | 0 | "));
    CHECK(strstr(r.out, "| DFlash2 | Q8_0 | 8 | p_min 0.5 | 0 | "));
    CHECK(strstr(r.out, "| DFlash2 | Q8_0 | 8 | cut | 0 | "));
    CHECK(strstr(r.out, "greedy output identical: yes (DFlash2 Q8_0 none 2/2, DFlash2 Q8_0 p_min 0.5 2/2, "
                        "DFlash2 Q8_0 cut 2/2)"));
    CHECK(strstr(r.out, "| Verified / cut per step |"));
    bs_free(&r);
    cJSON *j = read_json(json);
    CHECK(j);
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(j, "methods");
    bool ok = cJSON_GetArraySize(ms) == 4;
    for (int i = 1; ok && i < 4; i++) {
        const cJSON *m = cJSON_GetArrayItem(ms, i);
        ok = cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(m, "draft_cut")) &&
             cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "draft_cut")) == (i == 3) &&
             fabs(cJSON_GetObjectItemCaseSensitive(m, "p_min")->valuedouble - (i == 2 ? 0.5 : 0.0)) < 1e-6;
        /* tokens cut: none without the cut; some with it (its warm-up halves every other draft) */
        const cJSON *row = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(m, "rows"), 0);
        const double cut = cJSON_GetObjectItemCaseSensitive(row, "cut")->valuedouble;
        ok = ok && (i == 3 ? cut > 0 : cut == 0);
    }
    cJSON_Delete(j);
    CHECK_MSG(ok, "unexpected draft stops in --json");
    const char *const b1[] = {"--draft-stop", "1.5", NULL};
    const char *const b2[] = {"--draft-stop", "0,never", NULL};
    const char *const b3[] = {"--draft-stop", "0,0.1,0.2,0.3,cut", NULL};
    CHECK(expect_error(b1, 2));
    CHECK(expect_error(b2, 2));
    CHECK(expect_error(b3, 2));
}

/* `spex bench attn` (tools/bench_attn.c): one table row per (n_q, n_kv) with n_q <= n_kv, in
 * both cache types; bad flags are a usage error (exit 2), not a crash. */
TEST(bench_attn_table_and_bad_flags) {
    REQUIRE_BIN();
    /* each cache type, head-major (a context's layout) and, for f32, heads side by side */
    const char *const types[] = {"f16", "f32", "q8_0"}, *const names[] = {"f16 cache (head-major)",
                                                                        "f32 cache (heads side by side)",
                                                                        "q8_0 cache (head-major)"};
    for (int i = 0; i < 3; i++) {
        bs_result r;
        const char *const a[] = {"bench", "attn", "--nq", "1,3,64", "--nkv", "40", "--heads", "4/2", "--hd",
                                 i == 2 ? "32" : "24", "--kv", types[i], "--layout", i == 1 ? "rows" : "heads",
                                 "--reps", "2", NULL};
        CHECK_MSG(test_spex_exec(a, &r), "could not run %s", test_spex_bin());
        CHECK_MSG(r.rc == 0 && sanitizer_clean(r.err), "rc %d, stderr: %s", r.rc, r.err);
        CHECK_MSG(strstr(r.out, "| n_q | n_kv | µs | GFLOP/s | K/V GB/s |"), "no table in:\n%s", r.out);
        CHECK(strstr(r.out, "\n| 1 | 40 | "));
        CHECK(strstr(r.out, "\n| 3 | 40 | "));
        CHECK(!strstr(r.out, "\n| 64 | 40 | ")); /* more queries than cache rows: skipped */
        CHECK_MSG(strstr(r.out, names[i]), "%s:\n%s", names[i], r.out);
        bs_free(&r);
    }
    /* q8_0 needs whole 32-element blocks per head */
    {
        bs_result r;
        const char *const a[] = {"bench", "attn", "--kv", "q8_0", "--hd", "24", NULL};
        CHECK_MSG(test_spex_exec(a, &r), "could not run %s", test_spex_bin());
        CHECK_MSG(r.rc == 2 && strstr(r.err, "multiple of 32"), "rc %d, stderr: %s", r.rc, r.err);
        bs_free(&r);
    }
    const char *const bad[][4] = {{"--nq", "0"}, {"--nkv", "1,x"}, {"--heads", "5/2"}, {"--kv", "q4_0"},
                                  {"--layout", "cols"}, {"--reps"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        bs_result r;
        const char *const a[] = {"bench", "attn", bad[i][0], bad[i][1], NULL};
        CHECK_MSG(test_spex_exec(a, &r), "could not run %s", test_spex_bin());
        CHECK_MSG(r.rc == 2 && strstr(r.err, "error: bad or incomplete argument") && sanitizer_clean(r.err),
                  "%s %s: rc %d, stderr: %s", bad[i][0], bad[i][1] ? bad[i][1] : "", r.rc, r.err);
        bs_free(&r);
    }
}

/* `spex bench model` (tools/bench_model.c): a prefill and a decode row, the decode against both
 * probes (sustained and one pass), each probe's own row; bad flags exit 2 and a missing model
 * exits 1, each with an "error: " line. */
TEST(bench_model_table_and_probes) {
    REQUIRE_BIN();
    bs_result r;
    const char *const a[] = {"bench", "model", "-m", DEF_TARGET, "--pp", "8", "--tg", "4", "--reps", "1", "-t", "1", NULL};
    CHECK_MSG(test_spex_exec(a, &r), "could not run %s", test_spex_bin());
    CHECK_MSG(r.rc == 0 && sanitizer_clean(r.err), "rc %d, stderr: %s", r.rc, r.err);
    CHECK_MSG(strstr(r.out, "| test | tokens | best ms | t/s | weights GB/s | % probe (sustained) | % probe (one pass) |"),
              "no table in:\n%s", r.out);
    CHECK(strstr(r.out, "\n| pp8 | 8 | "));
    CHECK(strstr(r.out, "\n| tg4 | 4 | "));
    CHECK(strstr(r.out, "\n| probe, sustained (1 passes) | "));
    CHECK(strstr(r.out, "\n| probe, one pass | "));
    CHECK(!strstr(r.out, "pp64 / decode")); /* no pp64 asked for */
    /* the one decode run against its own two probes: one share, and the median over it */
    CHECK_MSG(strstr(r.out, "\ndecode paired with its own probes (") && strstr(r.out, "; median ") &&
                  strstr(r.out, " run (target >= 85%)"),
              "no paired decode line in:\n%s", r.out);
    bs_free(&r);
    /* --depth: the same rows after a context, which the header states (with its cache type) */
    const char *const d[] = {"bench", "model", "-m", DEF_TARGET, "--pp", "8", "--tg", "4", "--depth", "700",
                             "-ctk", "q8_0", "--reps", "1", "-t", "1", NULL};
    CHECK_MSG(test_spex_exec(d, &r), "could not run %s", test_spex_bin());
    CHECK_MSG(r.rc == 0 && sanitizer_clean(r.err), "rc %d, stderr: %s", r.rc, r.err);
    CHECK_MSG(strstr(r.out, "depth: 700 tokens of context before each test") && strstr(r.out, "of q8_0 K/V") &&
                  strstr(r.out, "\n| pp8 | 8 | ") &&
                  strstr(r.out, "\n| tg4 | 4 | "),
              "depth run:\n%s", r.out);
    bs_free(&r);
    const char *const bad[][6] = {{"-m", DEF_TARGET, "--reps", "0"}, {"-m", DEF_TARGET, "--tg", "x"}, {"--pp", "8"},
                                  {"-m", DEF_TARGET, "--depth", "-1"}, {"-m", DEF_TARGET, "-ctk", "q4_0"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *const b[] = {"bench", "model", bad[i][0], bad[i][1], bad[i][2], bad[i][3], NULL};
        CHECK_MSG(test_spex_exec(b, &r), "could not run %s", test_spex_bin());
        CHECK_MSG(r.rc == 2 && strstr(r.err, "error: ") && sanitizer_clean(r.err), "case %zu: rc %d, stderr: %s", i, r.rc,
                  r.err);
        bs_free(&r);
    }
    const char *const missing[] = {"bench", "model", "-m", "/nonexistent/x.gguf", NULL};
    CHECK_MSG(test_spex_exec(missing, &r), "could not run %s", test_spex_bin());
    CHECK_MSG(r.rc == 1 && strstr(r.err, "error: ") && sanitizer_clean(r.err), "rc %d, stderr: %s", r.rc, r.err);
    bs_free(&r);
}

/* `spex bench kernels` (tools/bench.c): --n sets the matrix's columns, which the header states;
 * an --n that is not a whole number of super-blocks, or too wide for 16 rows of the matrix, or
 * a --rows outside 2..16, exits 2 with an "error: " line. */
TEST(bench_kernels_width_and_bad_flags) {
    REQUIRE_BIN();
    bs_result r;
    const char *const a[] = {"bench", "kernels", "--cached", "--n", "512", "--types", "q4_K,f32", "-t", "1",
                             "--reps", "1", "--passes", "1", NULL};
    CHECK_MSG(test_spex_exec(a, &r), "could not run %s", test_spex_bin());
    CHECK_MSG(r.rc == 0 && sanitizer_clean(r.err), "rc %d, stderr: %s", r.rc, r.err);
    CHECK_MSG(strstr(r.out, "(n = 512), cache-resident"), "no width in:\n%s", r.out);
    CHECK_MSG(strstr(r.out, "\nq4_K      1 | ") && strstr(r.out, "\nf32       1 | "), "rows missing in:\n%s", r.out);
    /* with the int8 ceiling (AVX-512 VNNI), the integer rows also give the tiles' rate without
     * the activation quantization; f32 has none */
    if (strstr(r.out, "int8 multiply-add ceiling")) {
        const char *q = strstr(r.out, "\n  q4_K ");
        CHECK_MSG(q && strstr(q, "| quantize ") && strstr(q, " us (") && strstr(q, "tiles "), "no quantize column in:\n%s", r.out);
        CHECK_MSG(!strstr(r.out, "\n  f32 "), "f32 in the int8 table:\n%s", r.out);
    }
    bs_free(&r);
    /* --rows R: the second column's block of activation rows, in its heading and the --cached
     * table's; issue 2's 8-row target line only for 8 rows */
    const char *const a4[] = {"bench", "kernels", "--cached", "--n", "512", "--types", "q4_K", "-t", "1",
                              "--reps", "1", "--passes", "1", "--rows", "4", NULL};
    CHECK_MSG(test_spex_exec(a4, &r), "could not run %s", test_spex_bin());
    CHECK_MSG(r.rc == 0 && sanitizer_clean(r.err), "rc %d, stderr: %s", r.rc, r.err);
    CHECK_MSG(strstr(r.out, "4-row GB/s") && strstr(r.out, "4-row/1-row") && !strstr(r.out, "8-row"),
              "no 4-row column (or an 8-row one) in:\n%s", r.out);
    CHECK_MSG(!strstr(r.out, "int8 multiply-add ceiling") || strstr(r.out, "quantizes its 4 activation rows"),
              "the ceiling table is not about 4 rows:\n%s", r.out);
    bs_free(&r);
    const char *const bad[][6] = {{"--n", "100"}, {"--n", "300"}, {"--n", "65536", "--cached", "--types", "f32"},
                                  {"--rows", "1"}, {"--rows", "17"}};
    const char *const why[] = {"expects an integer in [256, 65536]", "multiple of 256", "16 rows of f32",
                               "expects an integer in [2, 16]", "expects an integer in [2, 16]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *const b[] = {"bench", "kernels", bad[i][0], bad[i][1], bad[i][2], bad[i][3], bad[i][4], NULL};
        CHECK_MSG(test_spex_exec(b, &r), "could not run %s", test_spex_bin());
        CHECK_MSG(r.rc == 2 && strstr(r.err, "error: ") && strstr(r.err, why[i]) && sanitizer_clean(r.err),
                  "case %zu: rc %d, stderr: %s", i, r.rc, r.err);
        bs_free(&r);
    }
}

TEST_MAIN()
