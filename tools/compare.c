/*
 * compare.c — reads another engine's autoregressive decode figure (contract in compare.h).
 *
 * llama-bench's JSON output is an array of test objects; its JSON-lines output one object a
 * line. A token-generation test has n_prompt 0 and n_gen > 0 (`-p 0 -n 128` gives exactly one);
 * its avg_ts is the mean tokens per second over the repetitions. Anything that is not JSON is
 * read as plain text: the first decimal number (digits, an optional fraction) that starts the
 * text or follows a blank, ':' or '=' is the figure, and the text before it names the engine.
 */
#include "compare.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COMPARE_FILE_MAX (1 << 20)   /* llama-bench output is a few KiB */

/* A llama-bench test object that is a generation test: fills out. */
static bool from_object(const cJSON *o, compare_ar *out) {
    const cJSON *np = cJSON_GetObjectItemCaseSensitive(o, "n_prompt");
    const cJSON *ng = cJSON_GetObjectItemCaseSensitive(o, "n_gen");
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(o, "avg_ts");
    if (!cJSON_IsNumber(ng) || !cJSON_IsNumber(ts) || ng->valuedouble <= 0) return false;
    if (cJSON_IsNumber(np) && np->valuedouble != 0) return false;
    if (!(ts->valuedouble > 0) || !isfinite(ts->valuedouble)) return false;
    const char *model = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "model_type"));
    const char *commit = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "build_commit"));
    size_t cap = sizeof out->name;
    int k = snprintf(out->name, cap, "llama-bench tg%d", (int)ng->valuedouble);
    if (model && k > 0 && (size_t)k < cap) k += snprintf(out->name + k, cap - (size_t)k, " %.48s", model);
    if (commit && k > 0 && (size_t)k < cap) snprintf(out->name + k, cap - (size_t)k, " build %.16s", commit);
    out->tps = ts->valuedouble;
    return true;
}

static bool from_json(const cJSON *j, compare_ar *out) {
    if (cJSON_IsObject(j)) return from_object(j, out);
    const cJSON *it;
    cJSON_ArrayForEach(it, j) if (cJSON_IsObject(it) && from_object(it, out)) return true;
    return false;
}

static bool from_text(const char *t, size_t n, compare_ar *out) {
    for (size_t i = 0; i < n; i++) {
        /* a number standing alone ("b4500" is a name, not a figure) */
        if (t[i] < '0' || t[i] > '9' || (i > 0 && !strchr(" \t\r\n:=", t[i - 1]))) continue;
        char num[64];
        size_t k = 0;
        bool dot = false;
        while (i + k < n && k + 1 < sizeof num && ((t[i + k] >= '0' && t[i + k] <= '9') || (t[i + k] == '.' && !dot))) {
            dot = dot || t[i + k] == '.';
            num[k] = t[i + k];
            k++;
        }
        num[k] = 0;
        double v = strtod(num, NULL);
        if (!(v > 0) || !isfinite(v)) return false;
        size_t a = 0, b = i;   /* the name: the text before the number, trimmed, without a ':' */
        while (a < b && (t[a] == ' ' || t[a] == '\t' || t[a] == '\n' || t[a] == '\r')) a++;
        while (b > a && (t[b - 1] == ' ' || t[b - 1] == '\t' || t[b - 1] == ':' || t[b - 1] == '=')) b--;
        size_t nl = b - a < sizeof out->name - 1 ? b - a : sizeof out->name - 1;
        for (size_t c = 0; c < nl; c++) out->name[c] = (unsigned char)t[a + c] < ' ' ? ' ' : t[a + c];
        out->name[nl] = 0;
        if (!nl) snprintf(out->name, sizeof out->name, "other engine");
        out->tps = v;
        return true;
    }
    return false;
}

bool compare_ar_parse(const char *text, size_t len, compare_ar *out, char *msg, size_t msg_cap) {
    memset(out, 0, sizeof *out);
    char *s = malloc(len + 1);
    if (!s) return snprintf(msg, msg_cap, "out of memory"), false;
    memcpy(s, text, len);
    s[len] = 0;
    bool ok = false, json = false;
    cJSON *j = cJSON_ParseWithLength(s, len);
    if (j && !cJSON_IsObject(j) && !cJSON_IsArray(j)) {   /* a bare number is plain text */
        cJSON_Delete(j);
        j = NULL;
    } else if (j) {
        json = true;
        ok = from_json(j, out);
        cJSON_Delete(j);
    }
    if (!ok && len && (s[0] == '{' || s[0] == '[')) {   /* JSON lines: cJSON read only the first */
        json = true;
        for (char *line = s, *next; line && !ok; line = next) {
            next = strchr(line, '\n');
            if (next) *next++ = 0;
            cJSON *o = cJSON_Parse(line);
            ok = o && from_json(o, out);
            cJSON_Delete(o);
        }
    }
    if (!ok && !json) ok = from_text(s, len, out);
    free(s);
    if (!ok)
        snprintf(msg, msg_cap, json ? "no generation test (n_prompt 0, n_gen > 0, avg_ts > 0) in the llama-bench output"
                                    : "no tokens-per-second figure (a positive number) in the text");
    return ok;
}

bool compare_ar_load(const char *path, compare_ar *out, char *msg, size_t msg_cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return snprintf(msg, msg_cap, "%s: cannot open", path), false;
    char *buf = malloc(COMPARE_FILE_MAX + 1);
    size_t n = buf ? fread(buf, 1, COMPARE_FILE_MAX + 1, f) : 0;
    fclose(f);
    if (!buf) return snprintf(msg, msg_cap, "out of memory"), false;
    char inner[200];
    bool ok = n <= COMPARE_FILE_MAX && compare_ar_parse(buf, n, out, inner, sizeof inner);
    if (!ok) snprintf(msg, msg_cap, "%s: %s", path, n > COMPARE_FILE_MAX ? "larger than 1 MiB" : inner);
    free(buf);
    return ok;
}
