/*
 * test_grammar.c — the GBNF engine (src/sample/grammar*.c): accept/reject lists for each of
 * llama.cpp's constructs, a JSON grammar (tests/data/grammars/json.gbnf) on valid and invalid
 * texts, characters split across calls, copies, the token mask against a brute-force check of
 * every token on a fresh copy, the cache, parse errors with line and column, and limits.
 * Also prints (never asserts) the mask's time on a 151936-token synthetic vocabulary.
 * What it is not: sampler or server tests (nothing is wired there yet).
 */
#include "test.h"
#include "core/clock.h"
#include "sample/grammar.h"

static spex_grammar *parse(const char *src) {
    spex_grammar *g = NULL;
    spex_error e = {0};
    if (spex_grammar_parse(src, strlen(src), NULL, &g, &e) != SPEX_OK) printf("  parse failed: %s\n", e.msg);
    return g;
}

/* Whole text accepted and the root complete after it. */
static bool matches(spex_grammar *g, const char *text, size_t n) {
    spex_grammar_state *st = spex_grammar_state_new(g);
    bool ok = st && spex_grammar_accept_bytes(st, text, n) && spex_grammar_is_complete(st);
    spex_grammar_state_free(st);
    return ok;
}

/* Every good string matches, no bad one does; prints the first disagreement. */
static bool check_lists(const char *src, const char *const *good, const char *const *bad) {
    spex_grammar *g = parse(src);
    if (!g) return false;
    bool ok = true;
    for (; good && *good; good++)
        if (!matches(g, *good, strlen(*good))) printf("  %s: should accept \"%s\"\n", src, *good), ok = false;
    for (; bad && *bad; bad++)
        if (matches(g, *bad, strlen(*bad))) printf("  %s: should reject \"%s\"\n", src, *bad), ok = false;
    spex_grammar_free(g);
    return ok;
}

#define LIST(...) ((const char *const[]){__VA_ARGS__, NULL})

TEST(literal_alternation_group) {
    CHECK(check_lists("root ::= \"hello\"", LIST("hello"), LIST("", "hell", "hello!", "Hello")));
    CHECK(check_lists("root ::= \"a\" | \"bc\" | \"\"", LIST("a", "bc", ""), LIST("b", "abc", "c")));
    CHECK(check_lists("root ::= \"x\" ( \"a\" | \"b\" ( \"c\" | \"d\" ) ) \"y\"", LIST("xay", "xbcy", "xbdy"),
                      LIST("xy", "xby", "xcy", "xbcdy")));
    CHECK(check_lists("root ::= greet \" \" name\ngreet ::= \"hi\" | \"yo\"\nname ::= [a-z]+", LIST("hi bob", "yo x"),
                      LIST("hi", "hi Bob", "hey bob")));
    CHECK(check_lists("root ::= \"\\n\\t\\\\\\\"\\x41\\u00e9\\U0001F600\"", LIST("\n\t\\\"A\xc3\xa9\xf0\x9f\x98\x80"),
                      LIST("ntA")));
}

TEST(classes_and_any) {
    CHECK(check_lists("root ::= [a-cx]", LIST("a", "b", "c", "x"), LIST("d", "w", "", "ab")));
    CHECK(check_lists("root ::= [^a-c\\n]", LIST("d", "z", "\xc3\xa9", " "), LIST("a", "b", "\n", "")));
    CHECK(check_lists("root ::= . .", LIST("ab", "\n\xe2\x82\xac", "\xf0\x9f\x98\x80x"), LIST("a", "abc")));
    CHECK(check_lists("root ::= [-+]", LIST("-", "+"), LIST("a")));
    CHECK(check_lists("root ::= [\\]\\[]", LIST("]", "["), LIST("\\")));
}

TEST(repetition) {
    CHECK(check_lists("root ::= \"a\"*", LIST("", "a", "aaaa"), LIST("b", "aab")));
    CHECK(check_lists("root ::= \"ab\"+", LIST("ab", "abab"), LIST("", "a", "aba")));
    CHECK(check_lists("root ::= \"a\"? \"b\"", LIST("b", "ab"), LIST("aab", "a")));
    CHECK(check_lists("root ::= [0-9]{3}", LIST("123"), LIST("12", "1234", "")));
    CHECK(check_lists("root ::= [0-9]{2,}", LIST("12", "123456"), LIST("1", "")));
    CHECK(check_lists("root ::= [0-9]{2,4}", LIST("12", "123", "1234"), LIST("1", "12345")));
    CHECK(check_lists("root ::= \"a\"{0,2} \"b\"", LIST("b", "ab", "aab"), LIST("aaab")));
    CHECK(check_lists("root ::= ( \"x\" [0-9]? ){1,3}", LIST("x", "x1x", "x1x2x3"), LIST("", "x1x2x3x")));
    CHECK(check_lists("root ::= \"a\"{0}", LIST(""), LIST("a")));
    CHECK(check_lists("root ::= \"a\"{,2}", LIST("", "a", "aa"), LIST("aaa")));
}

TEST(recursion_and_comments) {
    const char *parens = "# balanced parentheses\nroot ::= item*   # any number\nitem ::= \"(\" item* \")\"\n";
    CHECK(check_lists(parens, LIST("", "()", "(())()", "((()())())"), LIST("(", ")", "(()", "())(")));
    const char *arith = "root ::= expr\n"
                        "expr ::= term ( [-+] term )*\n"
                        "term ::= factor ( [*/] factor )*\n"
                        "factor ::= num | \"(\" expr \")\"\n"
                        "num ::= [0-9]+\n";
    CHECK(check_lists(arith, LIST("1", "1+2*3", "(1+2)*3", "((4))/2-7"), LIST("", "1+", "(1", "1)", "+1", "1**2")));
    /* a rule over several lines: after ::=, after |, inside parentheses */
    CHECK(check_lists("root ::=\n  \"a\" |\n  ( \"b\"\n    \"c\" )\n", LIST("a", "bc"), LIST("b", "ac")));
}

TEST(utf8_classes) {
    CHECK(check_lists("root ::= [α-ω]+", LIST("αβγ", "ω"), LIST("Α", "a", "")));
    CHECK(check_lists("root ::= [😀-🙏] \"!\"", LIST("😀!", "🙏!"), LIST("☺!", "😀")));
    CHECK(check_lists("root ::= \"日本\" [^日]", LIST("日本語", "日本a"), LIST("日本日", "日本")));
}

static char *slurp_json(void) {
    size_t n;
    char *s = test_slurp("tests/data/grammars/json.gbnf", &n);
    if (!s) printf("  cannot read tests/data/grammars/json.gbnf\n");
    return s;
}

TEST(json) {
    char *src = slurp_json();
    CHECK(src);
    CHECK(check_lists(src,
                      LIST("{}", "[]", "0", "-12.5e+3", "\"a\\u00e9\\n\"", "true", " null ",
                           "{\"a\": [1, 2, {\"b\": null}], \"c\": \"d\"}", "[[[]], {}, \"\xce\xb1\"]",
                           "{\n  \"k\" : -0.0E9\n}"),
                      LIST("", "{", "[1,]", "{\"a\"}", "01", "1.", "\"\\x\"", "tru", "{'a': 1}", "[1 2]",
                           "\"a\nb\"", "{\"a\":1,}")));
    free(src);
}

TEST(partial_utf8_across_calls) {
    spex_grammar *g = parse("root ::= \"a\" [α-ω] \"b\"");
    CHECK(g);
    spex_grammar_state *st = spex_grammar_state_new(g);
    CHECK(st);
    CHECK(spex_grammar_accept_bytes(st, "a\xce", 2)); /* α is CE B1: split after its first byte */
    CHECK(!spex_grammar_is_complete(st));
    CHECK(!spex_grammar_accept_bytes(st, "\x41", 1)); /* not a continuation byte: refused, unchanged */
    CHECK(spex_grammar_accept_bytes(st, "\xb1", 1));
    CHECK(spex_grammar_accept_bytes(st, "b", 1) && spex_grammar_is_complete(st));
    spex_grammar_state_free(st);
    /* a lead byte whose code points the class cannot hold is refused at once */
    st = spex_grammar_state_new(g);
    CHECK(st && spex_grammar_accept_bytes(st, "a", 1));
    CHECK(!spex_grammar_accept_bytes(st, "\xe2", 1));
    CHECK(!spex_grammar_accept_bytes(st, "\xff", 1));
    spex_grammar_state_free(st);
    spex_grammar_free(g);
    /* a prefix that can only become an overlong form or a value beyond U+10FFFF is refused */
    g = parse("root ::= .*");
    CHECK(g);
    st = spex_grammar_state_new(g);
    CHECK(st);
    CHECK(!spex_grammar_accept_bytes(st, "\xe0\x80", 2) && !spex_grammar_accept_bytes(st, "\xf4\x90", 2));
    CHECK(spex_grammar_accept_bytes(st, "\xe0\xa0", 2) && !spex_grammar_is_complete(st));
    CHECK(spex_grammar_accept_bytes(st, "\x80", 1) && spex_grammar_is_complete(st));
    spex_grammar_state_free(st);
    spex_grammar_free(g);
}

TEST(copy_independence) {
    spex_grammar *g = parse("root ::= \"ab\" | \"ac\"");
    CHECK(g);
    spex_grammar_state *a = spex_grammar_state_new(g), *b = NULL;
    CHECK(a && spex_grammar_accept_bytes(a, "a", 1));
    b = spex_grammar_state_clone(a);
    CHECK(b && spex_grammar_accept_bytes(b, "b", 1) && spex_grammar_is_complete(b));
    CHECK(!spex_grammar_is_complete(a));
    CHECK(spex_grammar_accept_bytes(a, "c", 1) && spex_grammar_is_complete(a)); /* a still at "a" */
    CHECK(!spex_grammar_accept_bytes(b, "c", 1) && spex_grammar_is_done(b));
    CHECK(spex_grammar_state_copy(b, a) && spex_grammar_is_complete(b));
    spex_grammar_state_free(a);
    spex_grammar_state_free(b);
    spex_grammar_free(g);
}

/* ---- masks ---------------------------------------------------------------------------------- */

static uint64_t rng_state = 0x1234567;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

/* A token like a BPE piece: mostly ASCII words and punctuation, some whole multibyte
 * characters, some fragments of them; len 1..16 skewed short. */
static uint32_t random_piece(char *out) {
    static const char punct[] = " {}[]:,\"\\-+.0123456789eEtruefalsn\n\t";
    uint32_t len = 1 + (rnd() % 4) + (rnd() % 4 == 0 ? rnd() % 12 : 0), n = 0;
    uint32_t kind = rnd() % 20;
    while (n < len) {
        if (kind < 10) {
            out[n] = (char)(n == 0 && rnd() % 2 ? ' ' : 'a' + rnd() % 26);
            n++;
        }
        else if (kind < 15) out[n++] = punct[rnd() % (sizeof punct - 1)];
        else if (kind < 18 && n + 3 <= 16) { /* α..ω or an emoji, whole */
            if (rnd() % 2) out[n++] = (char)0xce, out[n++] = (char)(0xb1 + rnd() % 8);
            else out[n++] = (char)0xf0, out[n++] = (char)0x9f, out[n++] = (char)0x98, out[n++] = (char)(0x80 + rnd() % 16);
        } else out[n++] = (char)(0x80 + rnd() % 0x78); /* fragments and stray bytes */
    }
    return n > 16 ? 16 : n;
}

typedef struct fake_vocab {
    int32_t n;
    char **pieces;
    uint32_t *lens;
    uint8_t *flags;
    spex_grammar_vocab *v;
} fake_vocab;

static bool fake_vocab_make(fake_vocab *fv, int32_t n) {
    fv->n = n;
    fv->pieces = calloc((size_t)n, sizeof *fv->pieces);
    fv->lens = calloc((size_t)n, sizeof *fv->lens);
    fv->flags = calloc((size_t)n, 1);
    if (!fv->pieces || !fv->lens || !fv->flags) return false;
    for (int32_t i = 0; i < n; i++) {
        fv->pieces[i] = malloc(17);
        if (!fv->pieces[i]) return false;
        fv->lens[i] = random_piece(fv->pieces[i]);
    }
    fv->flags[0] = SPEX_GRAMMAR_TOKEN_EOG;
    fv->flags[1] = SPEX_GRAMMAR_TOKEN_CONTROL;
    fv->lens[2] = 0; /* an empty piece */
    memcpy(fv->pieces[3], fv->pieces[4], 17), fv->lens[3] = fv->lens[4]; /* a duplicate */
    spex_error e = {0};
    return spex_grammar_vocab_build((const char *const *)fv->pieces, fv->lens, fv->flags, n, &fv->v, &e) == SPEX_OK;
}

static void fake_vocab_free(fake_vocab *fv) {
    for (int32_t i = 0; fv->pieces && i < fv->n; i++) free(fv->pieces[i]);
    free(fv->pieces);
    free(fv->lens);
    free(fv->flags);
    spex_grammar_vocab_free(fv->v);
}

/* The mask by brute force: each token on a fresh copy of st. */
static void brute_mask(const spex_grammar_state *st, const fake_vocab *fv, uint32_t *m) {
    memset(m, 0, spex_grammar_mask_words(fv->v) * sizeof *m);
    spex_grammar_state *c = spex_grammar_state_clone(st);
    for (int32_t t = 0; c && t < fv->n; t++) {
        bool ok;
        if (fv->flags[t] & SPEX_GRAMMAR_TOKEN_EOG) ok = spex_grammar_is_complete(st);
        else if ((fv->flags[t] & SPEX_GRAMMAR_TOKEN_CONTROL) || fv->lens[t] == 0) ok = false;
        else ok = spex_grammar_state_copy(c, st) && spex_grammar_accept_bytes(c, fv->pieces[t], fv->lens[t]);
        if (ok) m[t >> 5] |= 1u << (t & 31);
    }
    spex_grammar_state_free(c);
}

TEST(mask_equals_brute_force) {
    char *src = slurp_json();
    CHECK(src);
    spex_grammar *g = parse(src);
    free(src);
    CHECK(g);
    fake_vocab fv = {0};
    CHECK(fake_vocab_make(&fv, 300));
    size_t w = spex_grammar_mask_words(fv.v);
    uint32_t *m1 = calloc(w, 4), *m2 = calloc(w, 4), *m3 = calloc(w, 4);
    CHECK(m1 && m2 && m3);
    const char *text = "{\"k\xce\xb1y\": [1, -2.5e3, true, \"\xf0\x9f\x98\x80 x\"], \"n\": null}";
    spex_grammar_state *st = spex_grammar_state_new(g);
    CHECK(st);
    int states = 0, allowed_total = 0;
    /* every byte boundary, mid-character ones included */
    for (size_t i = 0; i <= strlen(text); i++) {
        if (i > 0) CHECK(spex_grammar_accept_bytes(st, text + i - 1, 1));
        spex_error e = {0};
        bool cached = true;
        CHECK(spex_grammar_mask(st, fv.v, m1, &cached, &e) == SPEX_OK);
        brute_mask(st, &fv, m2);
        for (int32_t t = 0; t < fv.n; t++) {
            if (spex_grammar_mask_test(m1, t) != spex_grammar_mask_test(m2, t)) {
                printf("  after %zu bytes: token %d (\"%.*s\") trie %d brute %d\n", i, t, (int)fv.lens[t], fv.pieces[t],
                       spex_grammar_mask_test(m1, t), spex_grammar_mask_test(m2, t));
                CHECK(false);
            }
            allowed_total += spex_grammar_mask_test(m1, t);
        }
        CHECK(spex_grammar_mask(st, fv.v, m3, &cached, &e) == SPEX_OK && cached); /* the same state: a hit */
        CHECK(memcmp(m1, m3, w * 4) == 0);
        states++;
    }
    CHECK(spex_grammar_is_complete(st) && spex_grammar_mask_test(m1, 0)); /* EOG once complete */
    CHECK(!spex_grammar_mask_test(m1, 1) && !spex_grammar_mask_test(m1, 2));
    printf("  %d states, %d allowed token bits in all\n", states, allowed_total);
    CHECK(allowed_total > states); /* the masks are not trivially empty */
    spex_grammar_state_free(st);
    free(m1), free(m2), free(m3);
    fake_vocab_free(&fv);
    spex_grammar_free(g);
}

TEST(mask_speed_152k) {
    char *src = slurp_json();
    CHECK(src);
    spex_grammar *g = parse(src);
    free(src);
    CHECK(g);
    fake_vocab fv = {0};
    CHECK(fake_vocab_make(&fv, 151936));
    uint32_t *m = calloc(spex_grammar_mask_words(fv.v), 4);
    spex_grammar_state *st = spex_grammar_state_new(g);
    CHECK(m && st);
    static const char *const prefixes[] = {"", "{", "{\"ke", "{\"key\": ", "{\"key\": -12", "{\"key\": [true, "};
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) {
        spex_grammar_state *s = spex_grammar_state_clone(st);
        CHECK(s && spex_grammar_accept_bytes(s, prefixes[i], strlen(prefixes[i])));
        spex_error e = {0};
        bool cached;
        double t0 = spex_now_s();
        CHECK(spex_grammar_mask(s, fv.v, m, &cached, &e) == SPEX_OK && !cached);
        double t1 = spex_now_s();
        CHECK(spex_grammar_mask(s, fv.v, m, &cached, &e) == SPEX_OK && cached);
        double t2 = spex_now_s();
        int n = 0;
        for (int32_t t = 0; t < fv.n; t++) n += spex_grammar_mask_test(m, t);
        printf("  after %-18s %6d allowed: first %.2f ms, cached %.3f ms\n", prefixes[i], n, (t1 - t0) * 1e3,
               (t2 - t1) * 1e3);
        spex_grammar_state_free(s);
    }
    spex_grammar_state_free(st);
    free(m);
    fake_vocab_free(&fv);
    spex_grammar_free(g);
}

/* ---- errors and limits ---------------------------------------------------------------------- */

TEST(parse_errors) {
    static const struct { const char *src, *want; } cases[] = {
        {"root ::= foo", "line 1 col 10: undefined rule 'foo'"},
        {"root ::= \"abc", "line 1 col 10: unterminated string literal"},
        {"root ::= [a-z", "line 1 col 10: unterminated character class"},
        {"root ::= ( \"a\"", "line 1 col 10: expected ')'"},
        {"root ::= \"a\" )", "line 1 col 14: unexpected ')'"},
        {"root = \"a\"", "line 1 col 6: expected '::='"},
        {"root ::= *", "line 1 col 10: '*' with nothing before it"},
        {"root ::= \"a\"{3,1}", "max below min"},
        {"root ::= \"a\"{2000}", "repetition count over 1000"},
        {"root ::= \"a\"{2", "expected '}'"},
        {"root ::= \"\\q\"", "line 1 col 11: unknown escape '\\q'"},
        {"root ::= \"\\xZZ\"", "expected 2 hex digits"},
        {"root ::= [z-a]", "before its start"},
        {"root ::= a\na ::= a \"x\" | \"y\"", "line 2 col 1: rule 'a' is left-recursive"},
        {"root ::= b \"x\"\nb ::= c\nc ::= \"\" | root", "left-recursive"},
        {"root ::= \"a\"\nroot ::= \"b\"", "line 2 col 1: rule 'root' defined twice"},
        {"other ::= \"a\"", "no start rule 'root'"},
        {"root ::= ( \"a\"? )*", "left-recursive"}, /* an open repetition of what can be empty */
        {"root ::= \"\xff\"", "malformed UTF-8"},
        {"::= \"a\"", "line 1 col 1: expected a rule name"},
        {"root ::= \"a\"\n  | \"b\"", "line 2 col 3: expected a rule name"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        spex_grammar *g = NULL;
        spex_error e = {0};
        spex_status s = spex_grammar_parse(cases[i].src, strlen(cases[i].src), NULL, &g, &e);
        if (s == SPEX_OK || g || strncmp(e.msg, "grammar: ", 9) != 0 || !strstr(e.msg, cases[i].want) ||
            strchr(e.msg, '\n')) {
            printf("  \"%s\": status %d, \"%s\", want \"%s\"\n", cases[i].src, s, e.msg, cases[i].want);
            CHECK(false);
        }
        spex_grammar_free(g);
    }
}

TEST(limits) {
    spex_grammar *g = NULL;
    spex_error e = {0};
    /* nesting */
    char deep[512] = "root ::= ";
    for (int i = 0; i < 100; i++) strcat(deep, "(");
    CHECK(spex_grammar_parse(deep, strlen(deep), NULL, &g, &e) == SPEX_ERR_RANGE && strstr(e.msg, "nested"));
    /* repetition blow-up bounded by the element limit */
    char big[4096] = "root ::=";
    for (int i = 0; i < 50; i++) strcat(big, " \"abcdefghijklmnopqrstuvwxyz\"{1000}");
    CHECK(spex_grammar_parse(big, strlen(big), NULL, &g, &e) == SPEX_ERR_RANGE && strstr(e.msg, "too large"));
    /* nested repetition multiplies only references, not the text: small */
    const char *nest = "root ::= ( ( \"abcdefgh\"{1000} ){1000} ){1000}";
    CHECK(spex_grammar_parse(nest, strlen(nest), NULL, &g, &e) == SPEX_OK && g);
    spex_grammar_free(g);
    /* another start rule */
    const char *two = "root ::= \"a\"\nother ::= \"b\"";
    CHECK(spex_grammar_parse(two, strlen(two), "other", &g, &e) == SPEX_OK && g);
    CHECK(matches(g, "b", 1) && !matches(g, "a", 1));
    spex_grammar_free(g);
    /* an ambiguous grammar hits the stack bound and refuses, never grows without end */
    g = parse("root ::= x*\nx ::= \"a\" | \"a\" \"a\" | y\ny ::= \"a\"+");
    CHECK(g);
    spex_grammar_state *st = spex_grammar_state_new(g);
    CHECK(st);
    int n_ok = 0;
    for (int i = 0; i < 200; i++) n_ok += spex_grammar_accept_bytes(st, "a", 1);
    printf("  ambiguous grammar: %d of 200 bytes accepted\n", n_ok);
    CHECK(n_ok > 0);
    spex_grammar_state_free(st);
    spex_grammar_free(g);
}

TEST_MAIN()
