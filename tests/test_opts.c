/*
 * test_opts.c — the table of options `spex run` and `spex serve` share (tools/opts.c).
 *
 * What it is: argv vectors through cli_common_flag / cli_common_finish, checking each name of
 * a row lands in the same place, the range errors name the flag, the n-min clamp warns, the
 * --chat-template-kwargs JSON is checked; then every common option with one value through both
 * tools' parsers (serve: the serve_flags harness, no model; run: a missing model file, so the
 * error must be about the file, not the flag). What it is not: a test of what a value does
 * (test_run, test_server).
 */
#include "test.h"
#include "opts.h"

#include <fcntl.h>
#include <unistd.h>

/* argv (NULL-terminated) through the table then finish: 0, or -1 at the first error; stderr's
 * lines in err (cap bytes). A flag the table does not know fails the parse too. */
static int parse(cli_common *o, const char *const *argv, char *err, size_t cap) {
    cli_common_init(o);
    fflush(stderr);
    const char *path = test_tmp_path("stderr.txt");
    int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
    int rc = 0;
    for (int i = 0; argv[i] && rc == 0; i++) {
        bool takes = true;
        int r = cli_common_flag(argv[i], argv[i + 1], o, &takes);
        if (r <= 0) rc = -1;
        else if (takes && argv[i + 1]) i++;
    }
    if (rc == 0) rc = cli_common_finish(o);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    size_t len = 0;
    char *s = test_slurp(path, &len);
    snprintf(err, cap, "%s", s ? s : "");
    free(s);
    return rc;
}

#define PARSE_OK(o, ...)                                                             \
    do {                                                                             \
        const char *const av_[] = {__VA_ARGS__, NULL};                               \
        char e_[1024];                                                               \
        CHECK_MSG(parse(&(o), av_, e_, sizeof e_) == 0, "%s: %s", av_[0], e_);       \
    } while (0)
/* The parse fails and stderr names want. */
#define PARSE_ERR(want, ...)                                                         \
    do {                                                                             \
        cli_common o_;                                                               \
        const char *const av_[] = {__VA_ARGS__, NULL};                               \
        char e_[1024];                                                               \
        CHECK_MSG(parse(&o_, av_, e_, sizeof e_) < 0, "%s %s: accepted", av_[0], av_[1] ? av_[1] : ""); \
        CHECK_MSG(strstr(e_, "error:") && strstr(e_, want), "%s: stderr '%s' lacks '%s'", av_[0], e_, want); \
    } while (0)

TEST(every_name_of_a_row) {
    cli_common o;
    static const char *const models[] = {"-m", "--model"}, *const drafts[] = {"-md", "--model-draft", "--spec-draft-model"};
    for (int i = 0; i < 2; i++) { PARSE_OK(o, models[i], "t.gguf"); CHECK(o.model && !strcmp(o.model, "t.gguf")); }
    for (int i = 0; i < 3; i++) { PARSE_OK(o, drafts[i], "d.gguf"); CHECK(o.draft && !strcmp(o.draft, "d.gguf")); }
    static const char *const temps[] = {"--temp", "--temperature"};
    for (int i = 0; i < 2; i++) { PARSE_OK(o, temps[i], "0.25"); CHECK_NEAR(o.sp.temp, 0.25, 1e-6); }
    static const char *const thr[] = {"-t", "--threads"};
    for (int i = 0; i < 2; i++) { PARSE_OK(o, thr[i], "3"); CHECK_EQ_INT(o.n_threads, 3); }
    static const char *const ctx[] = {"-c", "--ctx-size"};
    for (int i = 0; i < 2; i++) { PARSE_OK(o, ctx[i], "1024"); CHECK_EQ_INT(o.n_ctx, 1024); }
    static const char *const bat[] = {"-b", "--batch-size"};
    for (int i = 0; i < 2; i++) { PARSE_OK(o, bat[i], "7"); CHECK_EQ_INT(o.n_batch, 7); }
    static const char *const np[] = {"-n", "--n-predict", "--predict"};
    for (int i = 0; i < 3; i++) { PARSE_OK(o, np[i], "9"); CHECK_EQ_INT(o.n_predict, 9); }
    static const char *const seeds[] = {"-s", "--seed"};
    for (int i = 0; i < 2; i++) { PARSE_OK(o, seeds[i], "42"); CHECK_EQ_INT(o.sp.seed, 42); }
    PARSE_OK(o, "-s", "-1");
    CHECK_EQ_INT(o.sp.seed, SPEX_SEED_RANDOM);
    static const char *const pmin[] = {"--spec-draft-p-min", "--draft-p-min"};
    for (int i = 0; i < 2; i++) { PARSE_OK(o, pmin[i], "0.5"); CHECK_NEAR(o.p_draft_min, 0.5, 1e-6); }
    static const char *const ctk[] = {"-ctk", "--cache-type-k"}, *const ctv[] = {"-ctv", "--cache-type-v"};
    for (int i = 0; i < 2; i++) { PARSE_OK(o, ctk[i], "q8_0", ctv[i], "q8_0"); CHECK_EQ_INT(o.kv_type, SPEX_TYPE_Q8_0); }
    PARSE_OK(o, "-ctk", "f32");
    CHECK_EQ_INT(o.kv_type, SPEX_TYPE_F32);
    static const char *const dk[] = {"-ctkd", "--cache-type-k-draft", "--spec-draft-type-k"},
                      *const dv[] = {"-ctvd", "--cache-type-v-draft", "--spec-draft-type-v"};
    for (int i = 0; i < 3; i++) {
        PARSE_OK(o, dk[i], "q8_0", dv[(i + 1) % 3], "q8_0");
        CHECK_EQ_INT(o.draft_kv, SPEX_TYPE_Q8_0);
        CHECK_EQ_INT(o.kv_type, SPEX_TYPE_F16);
    }
    PARSE_OK(o, "--top-k", "5", "--top-p", "0.5", "--min-p", "0.2", "--repeat-penalty", "1.1", "--repeat-last-n", "-1",
             "--presence-penalty", "0.3", "--frequency-penalty", "0.4");
    CHECK_EQ_INT(o.sp.top_k, 5);
    CHECK_NEAR(o.sp.top_p, 0.5, 1e-6);
    CHECK_NEAR(o.sp.min_p, 0.2, 1e-6);
    CHECK_NEAR(o.sp.repeat_penalty, 1.1, 1e-6);
    CHECK_EQ_INT(o.sp.repeat_last_n, -1);
    CHECK_NEAR(o.sp.presence_penalty, 0.3, 1e-6);
    CHECK_NEAR(o.sp.frequency_penalty, 0.4, 1e-6);
    PARSE_OK(o, "--spec-type", "ngram", "--spec-draft-n-max", "5", "--spec-draft-n-min", "2", "--spec-draft-sampling",
             "greedy", "--spec-draft-cut", "off", "--spec-ngram-size-n", "3");
    CHECK_EQ_INT(o.spec, SPEX_SPEC_NGRAM);
    CHECK_EQ_INT(o.n_draft_max, 5);
    CHECK_EQ_INT(o.n_draft_min, 2);
    CHECK(o.draft_greedy);
    CHECK_EQ_INT(o.draft_cut, 0);
    CHECK_EQ_INT(o.ngram.size_n, 3);
    PARSE_OK(o, "--spec-ngram-simple-size-m", "20", "--spec-ngram-map-k-min-hits", "2");
    CHECK_EQ_INT(o.ngram.size_m, 20);
    CHECK_EQ_INT(o.ngram.min_hits, 2);
    PARSE_OK(o, "--override-kv", "a=int:1", "--override-kv", "b=int:2", "--spec-draft-override-kv", "c=int:3");
    CHECK_EQ_INT(o.n_model_overrides, 2);
    CHECK(!strcmp(o.model_overrides[1], "b=int:2"));
    CHECK_EQ_INT(o.n_overrides, 1);
    PARSE_OK(o, "--jinja", "--no-mmap", "-nr");
    CHECK(o.jinja && o.no_mmap && o.no_repack);
    PARSE_OK(o, "--jinja", "--no-jinja", "--no-mmap", "--mmap", "--no-repack", "--repack");
    CHECK(!o.jinja && !o.no_mmap && !o.no_repack);
    PARSE_OK(o, "-rea", "off");
    CHECK_EQ_INT(o.enable_thinking, 0);
    PARSE_OK(o, "--reasoning", "auto");
    CHECK_EQ_INT(o.enable_thinking, 1);
    PARSE_OK(o, "--chat-template", "chatml");
    CHECK(!strcmp(o.chat_template, "chatml"));
    PARSE_OK(o, "--chat-template-file", "t.jinja");
    CHECK(!strcmp(o.chat_template_file, "t.jinja"));
    PARSE_OK(o, "--samplers", "top_k;temperature");
}

TEST(range_errors_name_the_flag) {
    PARSE_ERR("--top-p", "--top-p", "1.5");
    PARSE_ERR("--min-p", "--min-p", "-0.1");
    PARSE_ERR("--spec-draft-p-min", "--spec-draft-p-min", "2");
    PARSE_ERR("--draft-p-min", "--draft-p-min", "2");
    PARSE_ERR("--repeat-penalty", "--repeat-penalty", "0");
    PARSE_ERR("--spec-draft-n-max", "--spec-draft-n-max", "-1");
    PARSE_ERR("-t", "-t", "-2");
    PARSE_ERR("--ctx-size", "--ctx-size", "x");
    PARSE_ERR("-b", "-b", "0");
    PARSE_ERR("--spec-draft-cut", "--spec-draft-cut", "maybe");
    PARSE_ERR("--spec-type", "--spec-type", "eagle");
    PARSE_ERR("--spec-draft-sampling", "--spec-draft-sampling", "beam");
    PARSE_ERR("-ctk", "-ctk", "q4_0");
    PARSE_ERR("-rea", "-rea", "yes");
    PARSE_ERR("--chat-template", "--chat-template", "llama9");
    PARSE_ERR("-m", "-m");
    /* llama.cpp's removed names: an error in both tools, with llama.cpp's hint */
    static const char *const removed[] = {"--draft", "--draft-n", "--draft-max", "--draft-min", "--draft-n-min"};
    for (int i = 0; i < 5; i++) PARSE_ERR("use --spec-draft-n-max", removed[i], "4");
    PARSE_ERR("K and V", "-ctk", "q8_0", "-ctv", "f16");
    PARSE_ERR("not both", "--chat-template", "chatml", "--chat-template-file", "t.jinja");
}

TEST(n_min_clamped_with_a_warning) {
    cli_common o;
    const char *const av[] = {"--spec-draft-n-max", "3", "--spec-draft-n-min", "5", NULL};
    char err[1024];
    CHECK(parse(&o, av, err, sizeof err) == 0);
    CHECK_EQ_INT(o.n_draft_min, 3);
    CHECK_MSG(strstr(err, "warning:") && strstr(err, "--spec-draft-n-min"), "stderr '%s'", err);
    const char *const ok[] = {"--spec-draft-n-max", "5", "--spec-draft-n-min", "5", NULL};
    CHECK(parse(&o, ok, err, sizeof err) == 0);
    CHECK_MSG(!strstr(err, "warning:"), "stderr '%s'", err);
    const char *const zero[] = {"-md", "d.gguf", "--spec-draft-n-max", "0", NULL};
    CHECK(parse(&o, zero, err, sizeof err) == 0);
    CHECK_MSG(strstr(err, "nothing is drafted") != NULL, "stderr '%s'", err);
    CHECK(o.draft == NULL && o.spec == SPEX_SPEC_NONE && !strcmp(o.spec_type, "none"));
}

TEST(chat_template_kwargs_is_a_json_object) {
    cli_common o;
    PARSE_OK(o, "--chat-template-kwargs", "{\"enable_thinking\": false}");
    CHECK_EQ_INT(o.enable_thinking, 0);
    PARSE_OK(o, "--chat-template-kwargs", "{\"enable_thinking\":true,\"x\":\"false\"}");
    CHECK_EQ_INT(o.enable_thinking, 1);
    /* strstr read this as false before: "false" appears, but not as enable_thinking's value */
    PARSE_OK(o, "--chat-template-kwargs", "{\"note\":\"false\",\"enable_thinking\":true}");
    CHECK_EQ_INT(o.enable_thinking, 1);
    PARSE_OK(o, "--chat-template-kwargs", "{\"other\":1}");
    CHECK_EQ_INT(o.enable_thinking, -1);
    CHECK(!strcmp(o.chat_template_kwargs, "{\"other\":1}"));
    PARSE_ERR("JSON object", "--chat-template-kwargs", "[1,2]");
    PARSE_ERR("JSON object", "--chat-template-kwargs", "{\"enable_thinking\":");
    PARSE_ERR("enable_thinking", "--chat-template-kwargs", "{\"enable_thinking\":\"no\"}");
}

/* cli_common_flag_in: only the rows named (spex bench spec takes -m, -t and -nr). */
TEST(a_subset_of_rows) {
    cli_common o;
    cli_common_init(&o);
    bool takes = false;
    const char *const rows[] = {"-m", "-t", "-nr", NULL};
    CHECK_EQ_INT(cli_common_flag_in("--model", "x.gguf", &o, &takes, rows), 1);
    CHECK(takes && !strcmp(o.model, "x.gguf"));
    CHECK_EQ_INT(cli_common_flag_in("--threads", "2", &o, &takes, rows), 1);
    CHECK_EQ_INT(o.n_threads, 2);
    CHECK_EQ_INT(cli_common_flag_in("--repack", NULL, &o, &takes, rows), 1);
    CHECK(!takes && !o.no_repack);
    CHECK_EQ_INT(cli_common_flag_in("--temp", "0.5", &o, &takes, rows), 0);
    CHECK_EQ_INT(cli_common_flag_in("-md", "d.gguf", &o, &takes, rows), 0);
    const char *spex = test_spex_bin();
    if (!spex) SKIP("no spex binary in this build");
    const char *const bad[] = {"bench", "spec", "--threads", "x", NULL};
    test_proc p;
    CHECK(test_spex_exec(bad, &p));
    bool ok = p.rc == 2 && strstr(p.err, "--threads");
    if (!ok) printf("  bench spec --threads x: exit %d '%s'\n", p.rc, p.err);
    test_proc_free(&p);
    CHECK(ok);
    const char *const good[] = {"bench", "spec", "--model", "/nonexistent/t.gguf", "-nr", "--repack", "--threads",
                                "1", "--mtp", "--prompts", "/nonexistent/p.jsonl", NULL};
    CHECK(test_spex_exec(good, &p));
    ok = p.rc == 1 && strstr(p.err, "/nonexistent/") && !strstr(p.err, "argument");
    if (!ok) printf("  bench spec --model ...: exit %d '%s'\n", p.rc, p.err);
    test_proc_free(&p);
    CHECK(ok);
}

/* Every row of the table has a case below (a new row without one fails here). */
static const char *const g_values[][2] = {
    {"-m", "m.gguf"}, {"-md", "d.gguf"}, {"--spec-type", "none"}, {"--spec-draft-n-max", "4"},
    {"--spec-draft-n-min", "1"}, {"--draft", NULL}, {"--spec-draft-p-min", "0.5"},
    {"--spec-draft-sampling", "greedy"}, {"--spec-draft-cut", "auto"}, {"--spec-draft-override-kv", "a=int:1"},
    {"--spec-ngram-size-n", "3"}, {"--spec-ngram-size-m", "20"}, {"--spec-ngram-min-hits", "2"},
    {"--override-kv", "a=int:1"}, {"-ctk", "q8_0"}, {"-ctv", "q8_0"}, {"-ctkd", "q8_0"}, {"-ctvd", "q8_0"},
    {"--temp", "0.5"}, {"--top-k", "5"}, {"--top-p", "0.5"}, {"--min-p", "0.1"}, {"--repeat-penalty", "1.1"},
    {"--repeat-last-n", "32"}, {"--presence-penalty", "0.2"}, {"--frequency-penalty", "0.2"},
    {"--samplers", "top_k;temperature"}, {"-s", "3"}, {"-t", "1"}, {"-c", "256"}, {"-b", "16"}, {"-n", "8"},
    {"--chat-template", "chatml"}, {"--chat-template-file", "t.jinja"},
    {"--chat-template-kwargs", "{\"enable_thinking\":false}"}, {"-rea", "off"}, {"--jinja", ""}, {"--no-mmap", ""},
    {"-nr", ""},
};
#define N_VALUES (int)(sizeof g_values / sizeof g_values[0])

static const char *value_of(const char *name) {
    for (int i = 0; i < N_VALUES; i++)
        if (!strcmp(g_values[i][0], name)) return g_values[i][1] ? g_values[i][1] : "\x01";
    return NULL;
}

/* Each name of each row, with one value, through `spex serve`'s parser (the harness) and
 * `spex run`'s (a missing model): both accept it, or both refuse it the same way. */
TEST(run_and_serve_accept_the_same_names) {
    const char *spex = test_spex_bin();
    if (!spex) SKIP("no spex binary in this build");
    char harness[4200], names[512];
    snprintf(harness, sizeof harness, "%.*s/tests/harness/serve_flags", (int)(strrchr(spex, '/') - spex), spex);
    bool takes;
    int n_names = 0;
    for (int i = 0; cli_common_row(i, names, sizeof names, &takes); i++) {
        char *save = NULL, *first = strtok_r(names, " ", &save);
        const char *v = value_of(first);
        CHECK_MSG(v != NULL, "row '%s' has no value in g_values", first);
        for (char *nm = first; nm; nm = strtok_r(NULL, " ", &save)) {
            const bool removed = !strcmp(v, "\x01");
            const char *val = takes && !removed ? v : removed ? "4" : NULL;
            /* -m's own row replaces the model; --chat-template-file is run's Jinja, with --chat */
            const char *serve[] = {"-m", "m.gguf", nm, val, NULL};
            const char *run[] = {"run", "-m", "/nonexistent/m.gguf", "--chat", nm, val, NULL};
            if (!strcmp(first, "-m")) serve[0] = "--alias", serve[1] = "x", run[1] = "--chat", run[2] = "--chat";
            if (!strcmp(first, "-m")) run[5] = "/nonexistent/m.gguf";
            test_proc s, r;
            CHECK(test_exec(harness, serve, &s));
            CHECK(test_spex_exec(run, &r));
            if (removed) {
                CHECK_MSG(s.rc == 2 && r.rc == 2 && strstr(s.err, "removed") && strstr(r.err, "removed"),
                          "%s: serve %d '%s', run %d '%s'", nm, s.rc, s.err, r.rc, r.err);
            } else {
                CHECK_MSG(s.rc == 0 && strstr(s.out, "parsed") && !strstr(s.err, "error"), "serve %s %s: exit %d '%s'",
                          nm, val ? val : "", s.rc, s.err);
                CHECK_MSG(r.rc == 1 && strstr(r.err, "/nonexistent/m.gguf") && !strstr(r.err, "flag") &&
                              !strstr(r.err, "expects"),
                          "run %s %s: exit %d '%s'", nm, val ? val : "", r.rc, r.err);
            }
            test_proc_free(&s);
            test_proc_free(&r);
            n_names++;
        }
    }
    printf("  %d names through both tools\n", n_names);
    CHECK(n_names > 60);
}

TEST_MAIN()
