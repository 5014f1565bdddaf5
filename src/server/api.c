/*
 * api.c — request JSON of `spex serve` into srv_request, error bodies, the reasoning split.
 *
 * What it is: the OpenAI / llama-server request fields of server-api.md §6.1, §7, §12 read with
 * cJSON, with the rule "unknown fields are ignored, wrong types are errors" (§1, §3). What it is
 * not: tokenization or anything needing a model (so fuzz/fuzz_server_req.c can drive it), nor
 * response building (http.c, which knows the task). Chat requests also carry tools, tool_choice,
 * parallel_tool_calls and assistant tool_calls (§6.1); on the completion endpoints those fields
 * are ignored like any unknown field.
 */
#include "server/server.h"
#include "spec/api.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void srv_request_init(srv_request *r, srv_endpoint ep) {
    memset(r, 0, sizeof *r);
    r->ep = ep;
    r->n_predict = -2;
    r->seed = -1;
    r->enable_thinking = -1;
    r->reasoning_format = SRV_REASONING_DEFAULT;
    r->spec_n_max = -1;
    r->spec_n_min = -1;
    r->spec_p_min = -1.0f;
    r->add_special = false;
    r->parallel_tool_calls = true;
}

void srv_request_free(srv_request *r) {
    for (int i = 0; i < r->n_msgs; i++) {
        free(r->msgs[i].content);
        free(r->msgs[i].reasoning);
        for (int k = 0; k < r->msgs[i].n_tool_calls; k++) {
            free((char *)r->msgs[i].tool_calls[k].name);
            free((char *)r->msgs[i].tool_calls[k].arguments);
        }
        free(r->msgs[i].tool_calls);
    }
    for (int i = 0; i < r->n_tools; i++) free(r->tools[i]);
    free(r->tools);
    srv_infill_free(r->infill);
    free(r->msgs);
    free(r->prompt);
    free(r->prompt_ids);
    free(r->model);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    for (int i = 0; i < r->n_response_fields; i++) free(r->response_fields[i]);
    free(r->response_fields);
    memset(r, 0, sizeof *r);
}

int srv_fail(char *msg, size_t cap, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
    return code;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

/* A JSON number that is an integer in [lo, hi]. */
static bool get_int(const cJSON *v, double lo, double hi, long long *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d) || d < lo || d > hi) return false;
    *out = (long long)d;
    return true;
}

/* Optional number field: 0 absent, 1 read, -1 wrong type (message set). */
static int opt_num(const cJSON *o, const char *key, double *out, char *msg, size_t cap) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
        srv_fail(msg, cap, 400, "'%s' must be a number", key);
        return -1;
    }
    *out = v->valuedouble;
    return 1;
}

static int opt_int(const cJSON *o, const char *key, double lo, double hi, long long *out, char *msg, size_t cap) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!get_int(v, lo, hi, out)) {
        srv_fail(msg, cap, 400, "'%s' must be an integer in [%.0f, %.0f]", key, lo, hi);
        return -1;
    }
    return 1;
}

/* llama-server's per-request speculative.n_max, n_min and p_min. Returns 0 or 400. */
static int parse_spec_fields(const cJSON *o, srv_request *r, char *msg, size_t cap) {
    long long ll;
    int k = opt_int(o, "speculative.n_max", 0, 1e9, &ll, msg, cap);
    if (k < 0) return 400;
    if (k > 0) r->spec_n_max = (int32_t)ll;
    if ((k = opt_int(o, "speculative.n_min", 0, 1e9, &ll, msg, cap)) < 0) return 400;
    if (k > 0) r->spec_n_min = ll > SPEX_DRAFT_MAX_N ? SPEX_DRAFT_MAX_N : (int32_t)ll;
    double p;
    if ((k = opt_num(o, "speculative.p_min", &p, msg, cap)) < 0) return 400;
    if (k > 0 && !(p >= 0 && p <= 1)) return srv_fail(msg, cap, 400, "'speculative.p_min' must be in [0, 1]");
    if (k > 0) r->spec_p_min = (float)p;
    return 0;
}

static int opt_bool(const cJSON *o, const char *key, bool *out, char *msg, size_t cap) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) {
        srv_fail(msg, cap, 400, "'%s' must be a boolean", key);
        return -1;
    }
    *out = cJSON_IsTrue(v);
    return 1;
}

/* Message content: a string, or an array of {"type":"text","text":...} parts joined with "\n"
 * (as llama.cpp and vLLM join them). */
static int read_content(const cJSON *c, char **out, char *msg, size_t cap) {
    if (!c || cJSON_IsNull(c)) {
        *out = dup_str("");
        return *out ? 0 : srv_fail(msg, cap, 500, "out of memory");
    }
    if (cJSON_IsString(c)) {
        *out = dup_str(c->valuestring);
        return *out ? 0 : srv_fail(msg, cap, 500, "out of memory");
    }
    if (!cJSON_IsArray(c)) return srv_fail(msg, cap, 400, "message 'content' must be a string or an array of parts");
    size_t total = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, c) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(p, "type");
        if (!cJSON_IsObject(p) || !cJSON_IsString(ty))
            return srv_fail(msg, cap, 400, "content parts must be objects with a string 'type'");
        if (strcmp(ty->valuestring, "text") != 0)
            return srv_fail(msg, cap, 400, "multimodal input is not supported (content part type '%.40s')",
                       ty->valuestring);
        const cJSON *tx = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (!cJSON_IsString(tx)) return srv_fail(msg, cap, 400, "a text part needs a string 'text'");
        total += strlen(tx->valuestring) + 1;
    }
    char *s = malloc(total + 1);
    if (!s) return srv_fail(msg, cap, 500, "out of memory");
    size_t n = 0;
    cJSON_ArrayForEach(p, c) {
        const char *tx = cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring;
        size_t k = strlen(tx);
        if (n) s[n++] = '\n';
        memcpy(s + n, tx, k);
        n += k;
    }
    s[n] = 0;
    *out = s;
    return 0;
}

/* An assistant message's tool_calls: [{id?, type?: "function", function: {name, arguments}}];
 * arguments is the OpenAI string (an object is accepted and printed compactly). */
static int read_tool_calls(srv_msg *o, const cJSON *tc, char *msg, size_t cap) {
    if (!tc || cJSON_IsNull(tc)) return 0;
    if (!cJSON_IsArray(tc)) return srv_fail(msg, cap, 400, "'tool_calls' must be an array");
    int n = cJSON_GetArraySize(tc);
    if (n == 0) return 0;
    if (o->role != SPEX_CHAT_ASSISTANT) return srv_fail(msg, cap, 400, "only assistant messages may have 'tool_calls'");
    o->tool_calls = calloc((size_t)n, sizeof *o->tool_calls);
    if (!o->tool_calls) return srv_fail(msg, cap, 500, "out of memory");
    const cJSON *c;
    cJSON_ArrayForEach(c, tc) {
        if (!cJSON_IsObject(c)) return srv_fail(msg, cap, 400, "each tool call must be an object");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(c, "type");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
        if (id && !cJSON_IsNull(id) && !cJSON_IsString(id)) return srv_fail(msg, cap, 400, "tool call 'id' must be a string");
        if (ty && !cJSON_IsNull(ty) && (!cJSON_IsString(ty) || strcmp(ty->valuestring, "function")))
            return srv_fail(msg, cap, 400, "tool call 'type' must be \"function\"");
        if (!cJSON_IsObject(fn)) return srv_fail(msg, cap, 400, "a tool call needs a 'function' object");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *ar = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        if (!cJSON_IsString(nm)) return srv_fail(msg, cap, 400, "a tool call's function needs a string 'name'");
        spex_chat_tool_call *d = &o->tool_calls[o->n_tool_calls];
        char *args;
        if (!ar || cJSON_IsNull(ar)) args = dup_str("{}");
        else if (cJSON_IsString(ar)) args = dup_str(ar->valuestring);
        else if (cJSON_IsObject(ar)) args = cJSON_PrintUnformatted(ar);
        else return srv_fail(msg, cap, 400, "a tool call's 'arguments' must be a string");
        char *name = dup_str(nm->valuestring);
        o->n_tool_calls++;
        d->name = name, d->arguments = args;
        if (!name || !args) return srv_fail(msg, cap, 500, "out of memory");
    }
    return 0;
}

/* tools: [{type: "function", function: {name, description?, parameters?}}], each kept as
 * the compact JSON of the whole tool object, which the chat template prints with tojson. */
static int read_tools(srv_request *r, const cJSON *o, char *msg, size_t cap) {
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(o, "tools");
    if (ts && !cJSON_IsNull(ts)) {
        if (!cJSON_IsArray(ts)) return srv_fail(msg, cap, 400, "'tools' must be an array");
        int n = cJSON_GetArraySize(ts);
        r->tools = calloc((size_t)(n > 0 ? n : 1), sizeof *r->tools);
        if (!r->tools) return srv_fail(msg, cap, 500, "out of memory");
        const cJSON *t;
        cJSON_ArrayForEach(t, ts) {
            const cJSON *ty = cJSON_GetObjectItemCaseSensitive(t, "type");
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
            if (!cJSON_IsObject(t) || !cJSON_IsString(ty) || strcmp(ty->valuestring, "function"))
                return srv_fail(msg, cap, 400, "each tool must be an object with \"type\": \"function\"");
            if (!cJSON_IsObject(fn)) return srv_fail(msg, cap, 400, "a tool needs a 'function' object");
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fn, "name");
            const cJSON *ds = cJSON_GetObjectItemCaseSensitive(fn, "description");
            const cJSON *pa = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
            if (!cJSON_IsString(nm) || !nm->valuestring[0])
                return srv_fail(msg, cap, 400, "a tool's function needs a non-empty string 'name'");
            if (ds && !cJSON_IsNull(ds) && !cJSON_IsString(ds))
                return srv_fail(msg, cap, 400, "a tool's 'description' must be a string");
            if (pa && !cJSON_IsNull(pa) && !cJSON_IsObject(pa))
                return srv_fail(msg, cap, 400, "a tool's 'parameters' must be an object");
            if (!(r->tools[r->n_tools] = cJSON_PrintUnformatted(t))) return srv_fail(msg, cap, 500, "out of memory");
            r->n_tools++;
        }
    }
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(o, "tool_choice");
    if (tc && !cJSON_IsNull(tc)) {
        if (cJSON_IsString(tc)) {
            if (!strcmp(tc->valuestring, "auto")) r->tool_choice = SRV_TOOL_CHOICE_AUTO;
            else if (!strcmp(tc->valuestring, "none")) r->tool_choice = SRV_TOOL_CHOICE_NONE;
            else if (!strcmp(tc->valuestring, "required")) r->tool_choice = SRV_TOOL_CHOICE_REQUIRED;
            else return srv_fail(msg, cap, 400, "'tool_choice' must be auto, none, required or a function object");
        } else {
            const cJSON *ty = cJSON_GetObjectItemCaseSensitive(tc, "type");
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
            if (!cJSON_IsObject(tc) || !cJSON_IsString(ty) || strcmp(ty->valuestring, "function") ||
                !cJSON_IsObject(fn) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(fn, "name")))
                return srv_fail(msg, cap, 400, "'tool_choice' must be auto, none, required or a function object");
            r->tool_choice = SRV_TOOL_CHOICE_FUNCTION;
        }
    }
    if (opt_bool(o, "parallel_tool_calls", &r->parallel_tool_calls, msg, cap) < 0) return 400;
    return 0;
}

static int read_messages(srv_request *r, const cJSON *ms, char *msg, size_t cap) {
    if (!ms) return srv_fail(msg, cap, 400, "'messages' is required");
    if (!cJSON_IsArray(ms)) return srv_fail(msg, cap, 400, "'messages' must be an array");
    int n = cJSON_GetArraySize(ms);
    if (n <= 0) return srv_fail(msg, cap, 400, "'messages' must not be empty");
    r->msgs = calloc((size_t)n, sizeof *r->msgs);
    if (!r->msgs) return srv_fail(msg, cap, 500, "out of memory");
    const cJSON *m;
    cJSON_ArrayForEach(m, ms) {
        if (!cJSON_IsObject(m)) return srv_fail(msg, cap, 400, "each message must be an object");
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsString(role)) return srv_fail(msg, cap, 400, "each message needs a string 'role'");
        srv_msg *o = &r->msgs[r->n_msgs];
        if (!spex_chat_role_from_name(role->valuestring, &o->role)) {
            if (!strcmp(role->valuestring, "developer")) o->role = SPEX_CHAT_SYSTEM;
            else return srv_fail(msg, cap, 400, "unknown message role '%.40s'", role->valuestring);
        }
        r->n_msgs++;
        int rc = read_content(cJSON_GetObjectItemCaseSensitive(m, "content"), &o->content, msg, cap);
        if (rc) return rc;
        const cJSON *rc_ = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
        if (rc_ && !cJSON_IsNull(rc_)) {
            if (!cJSON_IsString(rc_)) return srv_fail(msg, cap, 400, "'reasoning_content' must be a string");
            o->reasoning = dup_str(rc_->valuestring);
            if (!o->reasoning) return srv_fail(msg, cap, 500, "out of memory");
        }
        if ((rc = read_tool_calls(o, cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), msg, cap))) return rc;
        const cJSON *tid = cJSON_GetObjectItemCaseSensitive(m, "tool_call_id");
        if (tid && !cJSON_IsNull(tid) && !cJSON_IsString(tid))
            return srv_fail(msg, cap, 400, "'tool_call_id' must be a string");
    }
    return 0;
}

static int read_prompt(srv_request *r, const cJSON *p, char *msg, size_t cap) {
    if (!p) return srv_fail(msg, cap, 400, "'prompt' is required");
    if (cJSON_IsString(p)) {
        r->prompt = dup_str(p->valuestring);
        return r->prompt ? 0 : srv_fail(msg, cap, 500, "out of memory");
    }
    if (!cJSON_IsArray(p)) return srv_fail(msg, cap, 400, "'prompt' must be a string or an array of token ids");
    int n = cJSON_GetArraySize(p);
    if (n == 1 && cJSON_IsString(cJSON_GetArrayItem(p, 0))) {   /* ["text"]: one prompt */
        r->prompt = dup_str(cJSON_GetArrayItem(p, 0)->valuestring);
        return r->prompt ? 0 : srv_fail(msg, cap, 500, "out of memory");
    }
    r->prompt_ids = malloc(sizeof *r->prompt_ids * (size_t)(n > 0 ? n : 1));
    if (!r->prompt_ids) return srv_fail(msg, cap, 500, "out of memory");
    const cJSON *t;
    cJSON_ArrayForEach(t, p) {
        long long id;
        if (cJSON_IsString(t) || cJSON_IsArray(t)) return srv_fail(msg, cap, 501, "only one prompt per request is supported");
        if (!get_int(t, 0, 2147483647.0, &id)) return srv_fail(msg, cap, 400, "'prompt' token ids must be integers >= 0");
        r->prompt_ids[r->n_prompt_ids++] = (int32_t)id;
    }
    return 0;
}

static int read_stop(srv_request *r, const cJSON *s, char *msg, size_t cap) {
    if (!s || cJSON_IsNull(s)) return 0;
    const cJSON *one = cJSON_IsString(s) ? s : NULL;
    if (!one && !cJSON_IsArray(s)) return srv_fail(msg, cap, 400, "'stop' must be a string or an array of strings");
    if (!one && cJSON_GetArraySize(s) > SRV_MAX_STOP) return srv_fail(msg, cap, 400, "at most %d stop strings", SRV_MAX_STOP);
    const cJSON *it = one ? one : s->child;
    for (; it; it = one ? NULL : it->next) {
        if (!cJSON_IsString(it)) return srv_fail(msg, cap, 400, "'stop' must be a string or an array of strings");
        size_t n = strlen(it->valuestring);
        if (n == 0) continue;   /* an empty stop string would stop before the first token */
        if (n >= SRV_MAX_STOP_LEN) return srv_fail(msg, cap, 400, "stop strings are limited to %d bytes", SRV_MAX_STOP_LEN - 1);
        r->stop[r->n_stop] = dup_str(it->valuestring);
        if (!r->stop[r->n_stop]) return srv_fail(msg, cap, 500, "out of memory");
        r->n_stop++;
    }
    return 0;
}

/* response_fields (llama-server's /completion): an array of at most SRV_MAX_FIELDS names, a
 * nested one written "a/b". */
static int read_response_fields(srv_request *r, const cJSON *f, char *msg, size_t cap) {
    if (!f || cJSON_IsNull(f)) return 0;
    if (!cJSON_IsArray(f) || cJSON_GetArraySize(f) > SRV_MAX_FIELDS)
        return srv_fail(msg, cap, 400, "'response_fields' must be an array of at most %d strings", SRV_MAX_FIELDS);
    r->response_fields = calloc((size_t)cJSON_GetArraySize(f) + 1, sizeof *r->response_fields);
    if (!r->response_fields) return srv_fail(msg, cap, 500, "out of memory");
    const cJSON *it;
    cJSON_ArrayForEach(it, f) {
        if (!cJSON_IsString(it) || !it->valuestring[0] || strlen(it->valuestring) > 256)
            return srv_fail(msg, cap, 400, "'response_fields' entries must be field names of 1 to 256 bytes");
        if (!(r->response_fields[r->n_response_fields] = dup_str(it->valuestring))) return srv_fail(msg, cap, 500, "out of memory");
        r->n_response_fields++;
    }
    return 0;
}

/* Fields whose non-default values spex does not implement: 400, never silently ignored (§2.5). */
static int reject_unsupported(const cJSON *o, char *msg, size_t cap) {
    static const char *const keys[] = {"response_format", "json_schema", "grammar", "logprobs",
                                       "top_logprobs", "mirostat", "dry_multiplier", "xtc_probability",
                                       "typical_p", "logit_bias", "n_probs"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, keys[i]);
        if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v)) continue;
        if (cJSON_IsNumber(v) && v->valuedouble == 0 && strcmp(keys[i], "typical_p")) continue;
        if (!strcmp(keys[i], "typical_p") && cJSON_IsNumber(v) && v->valuedouble >= 1) continue;
        if ((cJSON_IsArray(v) || cJSON_IsObject(v)) && !v->child) continue;
        if (cJSON_IsString(v) && !v->valuestring[0]) continue;   /* grammar: "" is no grammar */
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(v, "type");
        if (!strcmp(keys[i], "response_format") && cJSON_IsObject(v) && cJSON_IsString(ty) &&
            !strcmp(ty->valuestring, "text") && cJSON_GetArraySize(v) == 1)
            continue;   /* {"type": "text"}: plain text, what spex writes anyway */
        return srv_fail(msg, cap, 400, "'%s' is not supported by spex", keys[i]);
    }
    long long n = 1;
    if (opt_int(o, "n", 1, 1e9, &n, msg, cap) < 0) return 400;
    if (n != 1) return srv_fail(msg, cap, 501, "only n = 1 is supported");
    const cJSON *echo = cJSON_GetObjectItemCaseSensitive(o, "echo");
    if (cJSON_IsTrue(echo)) return srv_fail(msg, cap, 501, "'echo' is not supported");
    return 0;
}

/* The sequence at s[i] (i < n): its length when it is one valid UTF-8 character, else 0 with
 * *bad the length of its maximal invalid subpart (Unicode §3.9: a lead byte and the
 * continuation bytes that could still have completed it; at least 1). Strict: no overlongs,
 * surrogates or code points past U+10FFFF. */
static size_t utf8_seq(const unsigned char *s, size_t n, size_t i, size_t *bad) {
    unsigned c = s[i];
    *bad = 1;
    if (c < 0x80) return 1;
    size_t k = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!k) return 0;
    for (size_t j = 1; j < k; j++) {
        if (i + j >= n) return 0;
        unsigned b = s[i + j], lo = 0x80, hi = 0xBF;
        if (j == 1 && c == 0xE0) lo = 0xA0;
        if (j == 1 && c == 0xED) hi = 0x9F;
        if (j == 1 && c == 0xF0) lo = 0x90;
        if (j == 1 && c == 0xF4) hi = 0x8F;
        if (b < lo || b > hi) return 0;
        *bad = j + 1;
    }
    return k;
}

/* cJSON passes string bytes through unchecked, and every text that reaches a response must
 * be valid JSON. */
bool srv_utf8_valid(const char *text, size_t n) {
    const unsigned char *s = (const unsigned char *)text;
    size_t bad;
    for (size_t i = 0, k; i < n; i += k)
        if ((k = utf8_seq(s, n, i, &bad)) == 0) return false;
    return true;
}

char *srv_utf8_repair(const char *text, size_t n, size_t *out_len) {
    const unsigned char *s = (const unsigned char *)text;
    char *out = malloc(3 * n + 1);   /* each invalid byte at most one U+FFFD (3 bytes) */
    if (!out) return NULL;
    size_t o = 0, bad;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq(s, n, i, &bad);
        if (k) {
            memcpy(out + o, s + i, k);
            o += k, i += k;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3, i += bad;
        }
    }
    out[o] = 0;
    *out_len = o;
    return out;
}

/* Messages quote request bytes (a URL, a field cut by %.40s): not always UTF-8, and a JSON
 * text must be. */
cJSON *srv_json_utf8(const char *s) {
    size_t n = 0;
    char *fixed = srv_utf8_repair(s ? s : "", s ? strlen(s) : 0, &n);
    cJSON *v = cJSON_CreateString(fixed ? fixed : "");
    free(fixed);
    return v;
}

/* The sampling fields: the token budget, temperature, top-p / top-k / min-p, penalties, seed. */
static int read_sampling(srv_request *r, const cJSON *o, char *msg, size_t cap) {
    double d;
    long long ll;
    /* first present wins: n_predict, max_tokens, max_completion_tokens (§6.1) */
    static const char *const npk[] = {"n_predict", "max_tokens", "max_completion_tokens"};
    for (int i = 2; i >= 0; i--) {
        int k = opt_int(o, npk[i], -1, 1e9, &ll, msg, cap);
        if (k < 0) return 400;
        if (k > 0) r->n_predict = (long)ll;
    }
#define NUM(key, field, flag)                                   \
    do {                                                        \
        int k_ = opt_num(o, key, &d, msg, cap);                 \
        if (k_ < 0) return 400;                                 \
        if (k_ > 0) r->field = (float)d, r->flag = true;        \
    } while (0)
    NUM("temperature", temp, has_temp);
    NUM("top_p", top_p, has_top_p);
    NUM("min_p", min_p, has_min_p);
    NUM("repeat_penalty", repeat_penalty, has_rep);
    NUM("frequency_penalty", freq_penalty, has_freq);
    NUM("presence_penalty", pres_penalty, has_pres);
#undef NUM
    int k = opt_int(o, "top_k", -1e9, 1e9, &ll, msg, cap);
    if (k < 0) return 400;
    if (k > 0) r->top_k = (int32_t)(ll < 0 ? 0 : ll), r->has_top_k = true;
    k = opt_int(o, "repeat_last_n", -1, 1e9, &ll, msg, cap);
    if (k < 0) return 400;
    if (k > 0) r->repeat_last_n = (int32_t)ll, r->has_rep_n = true;
    k = opt_int(o, "seed", -1, 4294967295.0, &ll, msg, cap);
    if (k < 0) return 400;
    if (k > 0) r->seed = ll, r->has_seed = true;
    if (r->has_top_p && (r->top_p < 0 || r->top_p > 1))
        return srv_fail(msg, cap, 400, "'top_p' must be in [0, 1]");
    if (r->has_min_p && (r->min_p < 0 || r->min_p > 1))
        return srv_fail(msg, cap, 400, "'min_p' must be in [0, 1]");
    if (r->has_rep && r->repeat_penalty <= 0)
        return srv_fail(msg, cap, 400, "'repeat_penalty' must be > 0");
    return 0;
}

int srv_request_parse(srv_request *r, const char *body, size_t len, char *msg, size_t cap) {
    if (!srv_utf8_valid(body, len)) return srv_fail(msg, cap, 400, "the request body is not valid UTF-8");
    cJSON *o = cJSON_ParseWithLength(body, len);
    if (!o) return srv_fail(msg, cap, 400, "malformed JSON in the request body");
    int rc = 0;
    bool b;
    if (!cJSON_IsObject(o)) {
        rc = srv_fail(msg, cap, 400, "the request body must be a JSON object");
        goto done;
    }
    if ((rc = reject_unsupported(o, msg, cap))) goto done;
    if (r->ep == SRV_EP_CHAT) rc = read_messages(r, cJSON_GetObjectItemCaseSensitive(o, "messages"), msg, cap);
    else if (r->want_infill) rc = srv_infill_parse(r, o, msg, cap);
    else rc = read_prompt(r, cJSON_GetObjectItemCaseSensitive(o, "prompt"), msg, cap);
    if (rc) goto done;
    if (r->ep == SRV_EP_CHAT && (rc = read_tools(r, o, msg, cap))) goto done;

    const cJSON *model = cJSON_GetObjectItemCaseSensitive(o, "model");
    if (model && !cJSON_IsNull(model)) {
        if (!cJSON_IsString(model)) {
            rc = srv_fail(msg, cap, 400, "'model' must be a string");
            goto done;
        }
        if (!(r->model = dup_str(model->valuestring))) {
            rc = srv_fail(msg, cap, 500, "out of memory");
            goto done;
        }
    }
    if ((rc = read_sampling(r, o, msg, cap))) goto done;
    if ((rc = read_stop(r, cJSON_GetObjectItemCaseSensitive(o, "stop"), msg, cap))) goto done;
    if (opt_bool(o, "stream", &r->stream, msg, cap) < 0 ||
        opt_bool(o, "timings_per_token", &r->timings_per_token, msg, cap) < 0 ||
        opt_bool(o, "return_tokens", &r->return_tokens, msg, cap) < 0) {
        rc = 400;
        goto done;
    }
    if ((rc = read_response_fields(r, cJSON_GetObjectItemCaseSensitive(o, "response_fields"), msg, cap))) goto done;
    if (opt_bool(o, "cache_prompt", &b, msg, cap) < 0) {
        rc = 400;
        goto done;
    }
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(o, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so) || opt_bool(so, "include_usage", &r->include_usage, msg, cap) < 0) {
            if (!cJSON_IsObject(so)) srv_fail(msg, cap, 400, "'stream_options' must be an object");
            rc = 400;
            goto done;
        }
    }
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(o, "chat_template_kwargs");
    if (kw && !cJSON_IsNull(kw)) {
        if (!cJSON_IsObject(kw)) {
            rc = srv_fail(msg, cap, 400, "'chat_template_kwargs' must be an object");
            goto done;
        }
        if (opt_bool(kw, "enable_thinking", &b, msg, cap) < 0) {
            rc = 400;
            goto done;
        }
        if (cJSON_GetObjectItemCaseSensitive(kw, "enable_thinking")) r->enable_thinking = b;
    }
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(o, "reasoning_format");
    if (rf && !cJSON_IsNull(rf)) {
        if (!cJSON_IsString(rf)) {
            rc = srv_fail(msg, cap, 400, "'reasoning_format' must be a string");
            goto done;
        }
        if (!strcmp(rf->valuestring, "none")) r->reasoning_format = SRV_REASONING_NONE;
        else if (!strcmp(rf->valuestring, "deepseek") || !strcmp(rf->valuestring, "auto"))
            r->reasoning_format = SRV_REASONING_DEEPSEEK;
        else if (!strcmp(rf->valuestring, "deepseek-legacy")) r->reasoning_format = SRV_REASONING_LEGACY;
        else {
            rc = srv_fail(msg, cap, 400, "'reasoning_format' must be none, auto, deepseek or deepseek-legacy");
            goto done;
        }
    }
    if ((rc = parse_spec_fields(o, r, msg, cap)) != 0) goto done;
done:
    cJSON_Delete(o);
    return rc;
}

int srv_parse_tokenize(srv_request *r, const char *body, size_t len, char *msg, size_t cap) {
    if (!srv_utf8_valid(body, len)) return srv_fail(msg, cap, 400, "the request body is not valid UTF-8");
    cJSON *o = cJSON_ParseWithLength(body, len);
    if (!o) return srv_fail(msg, cap, 400, "malformed JSON in the request body");
    int rc = 0;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "content");
    if (!cJSON_IsObject(o)) rc = srv_fail(msg, cap, 400, "the request body must be a JSON object");
    else if (!cJSON_IsString(c)) rc = srv_fail(msg, cap, 400, "'content' must be a string");
    else if (opt_bool(o, "add_special", &r->add_special, msg, cap) < 0 ||
             opt_bool(o, "with_pieces", &r->with_pieces, msg, cap) < 0)
        rc = 400;
    else if (!(r->prompt = dup_str(c->valuestring))) rc = srv_fail(msg, cap, 500, "out of memory");
    cJSON_Delete(o);
    return rc;
}

int srv_parse_detokenize(srv_request *r, const char *body, size_t len, char *msg, size_t cap) {
    cJSON *o = cJSON_ParseWithLength(body, len);
    if (!o) return srv_fail(msg, cap, 400, "malformed JSON in the request body");
    int rc = 0;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "tokens");
    if (!cJSON_IsObject(o)) rc = srv_fail(msg, cap, 400, "the request body must be a JSON object");
    else if (!cJSON_IsArray(t)) rc = srv_fail(msg, cap, 400, "'tokens' must be an array of integers");
    else {
        int n = cJSON_GetArraySize(t);
        r->prompt_ids = malloc(sizeof *r->prompt_ids * (size_t)(n > 0 ? n : 1));
        if (!r->prompt_ids) rc = srv_fail(msg, cap, 500, "out of memory");
        const cJSON *it;
        cJSON_ArrayForEach(it, t) {
            long long id;
            if (rc) break;
            if (!get_int(it, 0, 2147483647.0, &id)) rc = srv_fail(msg, cap, 400, "'tokens' must be an array of integers >= 0");
            else r->prompt_ids[r->n_prompt_ids++] = (int32_t)id;
        }
    }
    cJSON_Delete(o);
    return rc;
}

/* ======================================================================== */
/* Errors and reasoning                                                      */
/* ======================================================================== */

const char *srv_error_type(int code) {
    switch (code) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 405: return "invalid_request_error";
    case 413: return "invalid_request_error";
    case 501: return "not_supported_error";
    case 503: return "unavailable_error";
    default: return "server_error";
    }
}

char *srv_error_json(int code, const char *msg) {
    cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddNumberToObject(e, "code", code);
    cJSON_AddItemToObject(e, "message", srv_json_utf8(msg));
    cJSON_AddStringToObject(e, "type", srv_error_type(code));
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static bool starts_with(const char *s, size_t n, const char *p) {
    size_t k = strlen(p);
    return n >= k && !memcmp(s, p, k);
}

int srv_split_reasoning(const char *text, size_t len, bool think_open, bool final, size_t *r0, size_t *r1,
                        size_t *c0) {
    static const char open[] = "<think>", close[] = "</think>";
    size_t i = 0;
    if (!think_open) {
        while (i < len && (text[i] == ' ' || text[i] == '\n')) i++;
        if (!starts_with(text + i, len - i, open)) {
            /* the text may still be a growing "<think>" */
            if (!final && len - i < sizeof open - 1 && !memcmp(text + i, open, len - i)) {
                *r0 = *r1 = *c0 = 0;
                return SRV_SPLIT_WAIT;
            }
            return SRV_SPLIT_NONE;
        }
        i += sizeof open - 1;
    }
    while (i < len && text[i] == '\n') i++;
    *r0 = i;
    for (size_t j = i; j + sizeof close - 1 <= len; j++) {
        if (!memcmp(text + j, close, sizeof close - 1)) {
            size_t e = j;
            while (e > i && text[e - 1] == '\n') e--;
            *r1 = e;
            size_t c = j + sizeof close - 1;
            while (c < len && text[c] == '\n') c++;
            if (!final && c == len) c = len;   /* more newlines may follow: still trimmed */
            *c0 = c;
            return SRV_SPLIT_YES;
        }
    }
    /* no </think> yet: hold back a tail that could start it (and trailing newlines) */
    size_t e = len;
    if (!final) {
        for (size_t k = sizeof close - 2; k > 0; k--)
            if (len - i >= k && !memcmp(text + len - k, close, k)) {
                e = len - k;
                break;
            }
        while (e > i && text[e - 1] == '\n') e--;
    }
    *r1 = e;
    *c0 = len;
    return SRV_SPLIT_YES;
}

cJSON *srv_json_str_n(const char *s, size_t n) {
    char *tmp = malloc(n + 1);
    if (!tmp) return cJSON_CreateString("");
    if (n) memcpy(tmp, s, n);
    tmp[n] = 0;
    cJSON *j = cJSON_CreateString(tmp);
    free(tmp);
    return j;
}
