/*
 * cli.c — the flag-parsing helpers the subcommands share (contract in cli.h). Apart from the
 * entry point (spex.c), so that a test harness can link the subcommands with its own main.
 */
#include "cpu/api.h"
#include "cli.h"
#include "tensor/api.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool cli_parse_int(const char *flag, const char *s, long min, long max, long *out) {
    if (!s) {
        fprintf(stderr, "error: %s needs a value\n", flag);
        return false;
    }
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) {
        fprintf(stderr, "error: %s expects an integer in [%ld, %ld], got '%s'\n", flag, min, max, s);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_int_list(const char *flag, const char *s, long min, long max, long *out, int max_n, int *n) {
    *n = 0;
    if (!s) {
        fprintf(stderr, "error: %s needs a value\n", flag);
        return false;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (*n == max_n) {
            fprintf(stderr, "error: %s takes at most %d values\n", flag, max_n);
            return false;
        }
        if (!cli_parse_int(flag, tok, min, max, &out[*n])) return false;
        (*n)++;
    }
    return *n > 0;
}

bool cli_parse_kv_type(const char *flag, const char *s, spex_type *out) {
    if (!s) {
        fprintf(stderr, "error: %s needs a value\n", flag);
        return false;
    }
    if (!strcmp(s, "f16")) *out = SPEX_TYPE_F16;
    else if (!strcmp(s, "f32")) *out = SPEX_TYPE_F32;
    else if (!strcmp(s, "q8_0")) *out = SPEX_TYPE_Q8_0;
    else {
        fprintf(stderr, "error: %s expects f16, f32 or q8_0, got '%s'\n", flag, s);
        return false;
    }
    return true;
}

bool cli_kv_pair(const char *what, bool has_k, spex_type k, bool has_v, spex_type v, spex_type *kv) {
    if (has_k && has_v && k != v) {
        fprintf(stderr, "error: %s K and V cache types differ (%s, %s): spex keeps K and V in one type\n", what,
                spex_type_get_info(k)->name, spex_type_get_info(v)->name);
        return false;
    }
    if (has_k) *kv = k;
    else if (has_v) *kv = v;
    return true;
}

bool cli_amx_on(void) { return spex_cpu_isa() == SPEX_ISA_AVX512 && spex_cpu_get_features()->amx_int8; }

bool cli_parse_float(const char *flag, const char *s, float *out) {
    if (!s) {
        fprintf(stderr, "error: %s needs a value\n", flag);
        return false;
    }
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !isfinite(v)) {
        fprintf(stderr, "error: %s expects a finite number, got '%s'\n", flag, s);
        return false;
    }
    *out = v;
    return true;
}

bool cli_is_ngram_type(const char *v) {
    return v && (!strcmp(v, "ngram") || !strcmp(v, "ngram-simple") || !strcmp(v, "ngram-map-k"));
}

int cli_ngram_flag(const char *a, const char *v, spex_ngram_params *p) {
    long n;
    /* llama.cpp's older names, and its newer per-type ones for the two types spex_ngram_lookup covers */
    static const char *const pre[] = {"--spec-ngram-", "--spec-ngram-simple-", "--spec-ngram-map-k-"};
    const char *rest = NULL;
    for (int i = 0; i < 3 && !rest; i++) {
        size_t len = strlen(pre[i]);
        const char *r = strncmp(a, pre[i], len) ? NULL : a + len;
        if (r && (!strcmp(r, "size-n") || !strcmp(r, "size-m") || !strcmp(r, "min-hits"))) rest = r;
    }
    if (!rest) return 0;
    int32_t *dst = !strcmp(rest, "size-n") ? &p->size_n : !strcmp(rest, "size-m") ? &p->size_m : &p->min_hits;
    if (!cli_parse_int(a, v, 1, dst == &p->size_n ? 1024 : 1L << 20, &n)) return -1;
    *dst = (int32_t)n;
    return 1;
}
