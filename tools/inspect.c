/*
 * inspect.c — `spex inspect FILE [--all]`: what is in a GGUF file and whether spex can use it.
 *
 * Prints the architecture, GGUF version, alignment and data offset, a hyper-parameter
 * summary line, the metadata (long arrays and strings abbreviated unless --all), the tensor
 * table (name, type, shape in ne order, bytes), the parameter count, bytes per type, and a
 * validation verdict. Structure is validated by spex_gguf_open (every count, length and
 * offset); for the architectures spex runs densely (llama, qwen3) the verdict also checks the
 * hyper-parameter keys and the exact tensor set with shapes. For qwen35 the verdict is
 * spex_model_load's (it checks the keys, the layer pattern and every tensor the trunk and the
 * MTP block read, with shapes and types), and inspect also prints the memory plan of
 * targets.md §6.4/§9 computed from the hyper-parameter keys alone (src/model/plan.c): the
 * layer pattern, the MTP block, weight bytes, F16 KV bytes per token, recurrent state per
 * sequence and the snapshot ring for --n-max drafts. Other architectures get a structural
 * verdict only, and say so.
 *
 * Exit status: 0 when the verdict is OK; 1 with exactly one "error: ..." line on stderr when
 * the file cannot be opened or fails validation; 2 for bad usage.
 */
#include "spex.h"
#include "gguf/api.h"
#include "cli.h"
#include "model/api.h"
#include "tensor/api.h"
#include "tok/api.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARRAY_PREVIEW 6    /* elements shown of a long array without --all */
#define STRING_PREVIEW 64  /* bytes shown of a long string without --all   */

static void usage(FILE *f) {
    fprintf(f,
            "usage: spex inspect FILE [--all] [--n-max N]\n"
            "\n"
            "Prints the architecture, metadata, tensor table, parameter count, bytes per type and a\n"
            "validation verdict of a GGUF file. Exits 1 with one 'error:' line if the file is\n"
            "malformed or does not match its architecture.\n"
            "\n"
            "  --all       print every array element and whole strings (default: abbreviated)\n"
            "  --n-max N   qwen35: drafts per verify batch for the snapshot memory, (1 + N) state copies\n"
            "              per sequence (default 7)\n");
}

/* ======================================================================== */
/* Values                                                                    */
/* ======================================================================== */

/* Prints a key or tensor name left-aligned in `width` columns. Names are ASCII by convention;
 * any other byte (a corrupted or hostile file) is shown as \xNN so the terminal stays sane. */
static void print_name(const char *s, int width) {
    int w = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p < 0x20 || *p >= 0x7f) w += printf("\\x%02x", *p);
        else w += (putchar(*p), 1);
    }
    for (; w < width; w++) putchar(' ');
}

static void print_str(const char *p, uint64_t len, bool all) {
    uint64_t n = all || len <= STRING_PREVIEW ? len : STRING_PREVIEW;
    putchar('"');
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
        else putchar(c); /* UTF-8 passes through */
    }
    putchar('"');
    if (n < len) printf("... (%" PRIu64 " bytes)", len);
}

static void print_scalar(const spex_gguf_value *v) {
    const uint8_t *d = v->data;
    switch (v->type) {
    case SPEX_GGUF_U8: printf("%u", d[0]); break;
    case SPEX_GGUF_I8: printf("%d", (int8_t)d[0]); break;
    case SPEX_GGUF_U16: { uint16_t x; memcpy(&x, d, 2); printf("%u", x); break; }
    case SPEX_GGUF_I16: { int16_t x; memcpy(&x, d, 2); printf("%d", x); break; }
    case SPEX_GGUF_U32: { uint32_t x; memcpy(&x, d, 4); printf("%" PRIu32, x); break; }
    case SPEX_GGUF_I32: { int32_t x; memcpy(&x, d, 4); printf("%" PRId32, x); break; }
    case SPEX_GGUF_U64: { uint64_t x; memcpy(&x, d, 8); printf("%" PRIu64, x); break; }
    case SPEX_GGUF_I64: { int64_t x; memcpy(&x, d, 8); printf("%" PRId64, x); break; }
    case SPEX_GGUF_F32: { float x; memcpy(&x, d, 4); printf("%.9g", x); break; }
    case SPEX_GGUF_F64: { double x; memcpy(&x, d, 8); printf("%.17g", x); break; }
    case SPEX_GGUF_BOOL: fputs(d[0] ? "true" : "false", stdout); break;
    default: fputs("?", stdout); break;
    }
}

static void print_value(const spex_gguf *g, const spex_gguf_value *v, bool all, int depth) {
    if (v->type == SPEX_GGUF_STRING) {
        print_str((const char *)v->data, v->size, all);
        return;
    }
    if (v->type != SPEX_GGUF_ARRAY) {
        print_scalar(v);
        return;
    }
    printf("[%s x %" PRIu64 "]", spex_gguf_vtype_name(v->elem_type), v->n);
    if (v->n == 0) return;
    uint64_t shown = all || v->n <= ARRAY_PREVIEW ? v->n : ARRAY_PREVIEW;
    if (v->elem_type == SPEX_GGUF_ARRAY && depth >= 2 && !all) shown = 0;
    fputs(shown ? " " : " ...", stdout);
    for (uint64_t i = 0; i < shown; i++) {
        spex_gguf_value e;
        if (spex_gguf_arr_elem(g, v, i, &e, NULL) != SPEX_OK) break;
        if (i) fputs(", ", stdout);
        if (e.type == SPEX_GGUF_ARRAY) putchar('(');
        print_value(g, &e, all, depth + 1);
        if (e.type == SPEX_GGUF_ARRAY) putchar(')');
    }
    if (shown && shown < v->n) printf(", ... (%" PRIu64 " total)", v->n);
}

/* ======================================================================== */
/* Validation                                                                */
/* ======================================================================== */

typedef struct verdict {
    int n_problems;
    char first[384];
} verdict;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void problem(verdict *vd, const char *fmt, ...) {
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (vd->n_problems++ == 0) snprintf(vd->first, sizeof vd->first, "%s", msg);
    printf("  problem: %s\n", msg);
}

typedef struct hparams {
    char arch[64];
    uint32_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx, head_dim, head_dim_v;
    uint64_t n_vocab;
    bool has_embd, has_layer, has_head, has_head_kv, has_ff, has_ctx;
} hparams;

static bool get_hp(const spex_gguf *g, const char *arch, const char *name, uint32_t *out) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, name);
    return spex_gguf_get_u32(g, key, out, NULL) == SPEX_OK;
}

static void read_hparams(const spex_gguf *g, hparams *hp) {
    memset(hp, 0, sizeof *hp);
    spex_str a;
    if (spex_gguf_get_str(g, "general.architecture", &a, NULL) == SPEX_OK) {
        size_t n = a.len < sizeof hp->arch - 1 ? (size_t)a.len : sizeof hp->arch - 1;
        memcpy(hp->arch, a.ptr, n);
        hp->arch[n] = 0;
        if (strlen(hp->arch) != n) hp->arch[0] = 0; /* embedded NUL: treat as unknown */
    }
    const char *ar = hp->arch;
    hp->has_embd = get_hp(g, ar, "embedding_length", &hp->n_embd);
    hp->has_layer = get_hp(g, ar, "block_count", &hp->n_layer);
    hp->has_head = get_hp(g, ar, "attention.head_count", &hp->n_head);
    hp->has_head_kv = get_hp(g, ar, "attention.head_count_kv", &hp->n_head_kv);
    hp->has_ff = get_hp(g, ar, "feed_forward_length", &hp->n_ff);
    hp->has_ctx = get_hp(g, ar, "context_length", &hp->n_ctx);
    spex_gguf_value tok;
    const spex_tensor_info *emb = spex_gguf_find_tensor(g, "token_embd.weight");
    if (spex_gguf_get_arr(g, "tokenizer.ggml.tokens", &tok, NULL) == SPEX_OK) hp->n_vocab = tok.n;
    else if (emb && emb->n_dims == 2) hp->n_vocab = (uint64_t)emb->ne[1];
    if (!get_hp(g, ar, "attention.key_length", &hp->head_dim))
        hp->head_dim = hp->n_head ? hp->n_embd / hp->n_head : 0;
    if (!get_hp(g, ar, "attention.value_length", &hp->head_dim_v)) hp->head_dim_v = hp->head_dim;
}

static void print_summary(const hparams *hp) {
    if (!hp->has_embd && !hp->has_layer) return;
    printf("%s:", hp->arch[0] ? hp->arch : "model");
    const char *sep = " ";
    if (hp->has_embd) { printf("%sembedding %u", sep, hp->n_embd); sep = ", "; }
    if (hp->has_layer) { printf("%s%u blocks", sep, hp->n_layer); sep = ", "; }
    if (hp->has_head) { printf("%s%u/%u heads", sep, hp->n_head, hp->has_head_kv ? hp->n_head_kv : hp->n_head); sep = ", "; }
    if (hp->has_ff) { printf("%sFFN %u", sep, hp->n_ff); sep = ", "; }
    if (hp->n_vocab) { printf("%svocab %" PRIu64, sep, hp->n_vocab); sep = ", "; }
    if (hp->has_ctx) printf("%scontext %u", sep, hp->n_ctx);
    putchar('\n');
}

typedef struct expect {
    char name[96];
    uint32_t n_dims;
    int64_t ne[2];
    bool optional;
} expect;

static int shape_str(char *buf, size_t cap, uint32_t n_dims, const int64_t *ne) {
    int o = snprintf(buf, cap, "[");
    for (uint32_t d = 0; d < n_dims && o > 0 && (size_t)o < cap; d++)
        o += snprintf(buf + o, cap - (size_t)o, "%s%" PRId64, d ? ", " : "", ne[d]);
    if (o > 0 && (size_t)o < cap) o += snprintf(buf + o, cap - (size_t)o, "]");
    return o;
}

/* Tensors a dense llama / qwen3 model consists of, with their shapes (ne order). */
static expect *expected_tensors(const hparams *hp, bool qwen3, int *n_out) {
    int per_layer = qwen3 ? 11 : 9;
    expect *e = calloc((size_t)hp->n_layer * (size_t)per_layer + 3, sizeof *e);
    if (!e) return NULL;
    int n = 0;
    int64_t E = hp->n_embd, V = (int64_t)hp->n_vocab, F = hp->n_ff;
    int64_t q = (int64_t)hp->n_head * hp->head_dim, k = (int64_t)hp->n_head_kv * hp->head_dim;
    int64_t v = (int64_t)hp->n_head_kv * hp->head_dim_v, o = (int64_t)hp->n_head * hp->head_dim_v;
#define ADD(opt, nd, a, b, ...)                                                   \
    do {                                                                          \
        snprintf(e[n].name, sizeof e[n].name, __VA_ARGS__);                       \
        e[n].n_dims = nd;                                                         \
        e[n].ne[0] = a;                                                           \
        e[n].ne[1] = b;                                                           \
        e[n].optional = opt;                                                      \
        n++;                                                                      \
    } while (0)
    ADD(false, 2, E, V, "token_embd.weight");
    ADD(false, 1, E, 1, "output_norm.weight");
    ADD(true, 2, E, V, "output.weight"); /* absent: tied to token_embd */
    for (uint32_t i = 0; i < hp->n_layer; i++) {
        ADD(false, 1, E, 1, "blk.%u.attn_norm.weight", i);
        ADD(false, 2, E, q, "blk.%u.attn_q.weight", i);
        ADD(false, 2, E, k, "blk.%u.attn_k.weight", i);
        ADD(false, 2, E, v, "blk.%u.attn_v.weight", i);
        ADD(false, 2, o, E, "blk.%u.attn_output.weight", i);
        ADD(false, 1, E, 1, "blk.%u.ffn_norm.weight", i);
        ADD(false, 2, E, F, "blk.%u.ffn_gate.weight", i);
        ADD(false, 2, E, F, "blk.%u.ffn_up.weight", i);
        ADD(false, 2, F, E, "blk.%u.ffn_down.weight", i);
        if (qwen3) {
            ADD(false, 1, hp->head_dim, 1, "blk.%u.attn_q_norm.weight", i);
            ADD(false, 1, hp->head_dim, 1, "blk.%u.attn_k_norm.weight", i);
        }
    }
#undef ADD
    *n_out = n;
    return e;
}

/* Tensors llama.cpp tolerates beside the dense set (it loads or ignores them). */
static bool tolerated_extra(const char *name) {
    if (!strcmp(name, "rope_freqs.weight")) return true;
    const char *suffix = strrchr(name, '.');
    return !strncmp(name, "blk.", 4) && suffix && strstr(name, ".attn_rot_embd") != NULL;
}

static void validate_dense(const spex_gguf *g, const hparams *hp, bool qwen3, verdict *vd) {
    const char *ar = hp->arch;
    struct { const char *key; bool has; uint32_t v; } keys[] = {
        {"embedding_length", hp->has_embd, hp->n_embd},       {"block_count", hp->has_layer, hp->n_layer},
        {"attention.head_count", hp->has_head, hp->n_head},   {"attention.head_count_kv", hp->has_head_kv, hp->n_head_kv},
        {"feed_forward_length", hp->has_ff, hp->n_ff},        {"context_length", hp->has_ctx, hp->n_ctx},
    };
    bool hp_ok = true;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        if (!keys[i].has) {
            problem(vd, "missing or non-integer key %s.%s", ar, keys[i].key);
            hp_ok = false;
        } else if (keys[i].v == 0) {
            problem(vd, "%s.%s is 0", ar, keys[i].key);
            hp_ok = false;
        }
    }
    if (hp_ok && hp->n_head % hp->n_head_kv != 0) {
        problem(vd, "head_count %u is not a multiple of head_count_kv %u", hp->n_head, hp->n_head_kv);
        hp_ok = false;
    }
    if (hp_ok && hp->head_dim == 0) {
        problem(vd, "head dimension is 0 (embedding %u, %u heads)", hp->n_embd, hp->n_head);
        hp_ok = false;
    }
    if (hp_ok && hp->n_vocab == 0) {
        problem(vd, "vocabulary size unknown (no tokenizer.ggml.tokens and no 2-D token_embd.weight)");
        hp_ok = false;
    }
    if (hp_ok && hp->n_layer > 100000) {
        problem(vd, "%s.block_count %u is implausible", ar, hp->n_layer);
        hp_ok = false;
    }
    if (!hp_ok) return; /* shapes cannot be checked without hyper-parameters */

    int n_exp = 0;
    expect *exp = expected_tensors(hp, qwen3, &n_exp);
    if (!exp) {
        problem(vd, "out of memory");
        return;
    }
    int64_t matched = 0;
    for (int i = 0; i < n_exp; i++) {
        const spex_tensor_info *t = spex_gguf_find_tensor(g, exp[i].name);
        if (!t) {
            if (!exp[i].optional) problem(vd, "missing tensor %s", exp[i].name);
            continue;
        }
        matched++;
        bool same = t->n_dims == exp[i].n_dims && t->ne[0] == exp[i].ne[0] && (exp[i].n_dims < 2 || t->ne[1] == exp[i].ne[1]);
        if (!same) {
            char got[96], want[96];
            shape_str(got, sizeof got, t->n_dims, t->ne);
            shape_str(want, sizeof want, exp[i].n_dims, exp[i].ne);
            problem(vd, "tensor %s has shape %s, expected %s", exp[i].name, got, want);
        }
    }
    if (matched < spex_gguf_n_tensors(g)) {
        /* name every tensor that is not part of the expected set */
        for (int64_t i = 0; i < spex_gguf_n_tensors(g); i++) {
            const char *name = spex_gguf_tensor(g, i)->name;
            bool known = tolerated_extra(name);
            for (int j = 0; j < n_exp && !known; j++) known = !strcmp(exp[j].name, name);
            if (!known) problem(vd, "unexpected tensor %s for %s with %u blocks", name, ar, hp->n_layer);
        }
    }
    free(exp);
}

/* ======================================================================== */
/* qwen35: layer pattern and memory plan                                    */
/* ======================================================================== */

/* What the plan needs, read from the raw keys (not from a loaded model), so that a file
 * spex_model_load rejects still gets its plan printed. */
typedef struct q35_keys {
    bool ok;                /* every key below was found            */
    char missing[192];      /* the first key that was not            */
    uint32_t n_nextn;       /* nextn_predict_layers (0 if absent)   */
    uint32_t interval;      /* full_attention_interval, 0 if the per-layer array is used */
    bool *is_attn;          /* [n_trunk], malloc'd                  */
    spex_qwen35_plan_in in;
} q35_keys;

static bool q35_key(const spex_gguf *g, const char *arch, const char *name, uint32_t *out, q35_keys *k) {
    if (get_hp(g, arch, name, out)) return true;
    if (k->ok) snprintf(k->missing, sizeof k->missing, "%s.%s", arch, name);
    k->ok = false;
    return false;
}

/* The trunk's layer pattern (targets.md §6.2): attention.recurrent_layers when present, else
 * layer i is attention iff (i + 1) % full_attention_interval == 0. */
static void q35_read(const spex_gguf *g, const hparams *hp, q35_keys *k) {
    memset(k, 0, sizeof *k);
    k->ok = true;
    const char *ar = hp->arch;
    uint32_t n_all = 0, conv = 0, state = 0, hk = 0, hv = 0;
    /* head_count_kv and key_length take the loader's defaults (read_hparams: head_count, E / H) */
    const uint32_t hkv = hp->has_head_kv ? hp->n_head_kv : hp->n_head, hd = hp->head_dim;
    if (!get_hp(g, ar, "nextn_predict_layers", &k->n_nextn)) k->n_nextn = 0;
    q35_key(g, ar, "block_count", &n_all, k);
    q35_key(g, ar, "ssm.conv_kernel", &conv, k);
    q35_key(g, ar, "ssm.state_size", &state, k);
    q35_key(g, ar, "ssm.group_count", &hk, k);
    q35_key(g, ar, "ssm.time_step_rank", &hv, k);
    if (!k->ok) return;
    if (k->n_nextn > n_all || n_all - k->n_nextn > 100000) {
        snprintf(k->missing, sizeof k->missing, "a plausible block_count (%u, nextn %u)", n_all, k->n_nextn);
        k->ok = false;
        return;
    }
    const uint32_t N = n_all - k->n_nextn;
    k->is_attn = calloc(N ? N : 1, sizeof *k->is_attn);
    if (!k->is_attn) {
        snprintf(k->missing, sizeof k->missing, "memory");
        k->ok = false;
        return;
    }
    char key[160];
    snprintf(key, sizeof key, "%s.attention.recurrent_layers", ar);
    spex_gguf_value a;
    if (spex_gguf_get_arr(g, key, &a, NULL) == SPEX_OK) {
        if (a.n < N) {
            snprintf(k->missing, sizeof k->missing, "%s with %u elements", key, N);
            k->ok = false;
            return;
        }
        for (uint32_t l = 0; l < N; l++) {
            spex_gguf_value e;
            bool rec = false;
            if (spex_gguf_arr_elem(g, &a, l, &e, NULL) == SPEX_OK)
                for (uint64_t b = 0; b < e.size && b < 8; b++) rec |= e.data[b] != 0;
            k->is_attn[l] = !rec;
        }
    } else if (q35_key(g, ar, "full_attention_interval", &k->interval, k) && k->interval > 0) {
        for (uint32_t l = 0; l < N; l++) k->is_attn[l] = (l + 1) % k->interval == 0;
    } else {
        if (k->ok) snprintf(k->missing, sizeof k->missing, "%s.full_attention_interval > 0", ar);
        k->ok = false;
        return;
    }
    int64_t n_attn = 0;
    for (uint32_t l = 0; l < N; l++) n_attn += k->is_attn[l];
    k->in = (spex_qwen35_plan_in){.n_layer = N, .n_attn = n_attn, .n_head_kv = hkv, .head_dim = hd,
                                  .ssm_n_group = hk, .ssm_dt_rank = hv, .ssm_d_state = state, .ssm_d_conv = conv};
}

/* "12.00 KiB", "19.27 MiB", "1.17 GiB": the unit that keeps the number readable. */
static const char *human(uint64_t b, char *buf, size_t cap) {
    if (b < 1024) snprintf(buf, cap, "%" PRIu64 " B", b);
    else if (b < (1ull << 20)) snprintf(buf, cap, "%.2f KiB", (double)b / 1024.0);
    else if (b < (1ull << 30)) snprintf(buf, cap, "%.2f MiB", (double)b / 1048576.0);
    else snprintf(buf, cap, "%.2f GiB", (double)b / 1073741824.0);
    return buf;
}

/* Prints the plan; *plan_out receives it (zeroed when the keys are incomplete). */
static void q35_print_plan(const spex_gguf *g, const q35_keys *k, const spex_model *m, long n_max,
                           spex_qwen35_plan *plan_out) {
    char b1[32], b2[32], b3[32];
    *plan_out = (spex_qwen35_plan){0};
    printf("\nqwen35 memory plan (targets.md §6.4, §9):\n");
    if (!k->ok) {
        printf("  (not computed: no %s)\n", k->missing);
        return;
    }
    spex_qwen35_plan_in in = k->in;
    in.n_max = n_max;
    spex_qwen35_plan p;
    if (spex_qwen35_plan_compute(&in, &p) != 0) {
        printf("  (not computed: inconsistent hyper-parameters)\n");
        return;
    }
    *plan_out = p;
    const int64_t N = in.n_layer;
    printf("  layers:      %" PRId64 " trunk: %" PRId64 " attention, %" PRId64 " Gated DeltaNet", N, in.n_attn, p.n_gdn);
    if (k->interval) printf(" (full_attention_interval %u)", k->interval);
    else printf(" (attention.recurrent_layers)");
    printf("\n  attention:   [");
    const char *sep = "";
    for (int64_t l = 0; l < N; l++) {
        if (!k->is_attn[l]) continue;
        printf("%s%" PRId64, sep, l);
        sep = ", ";
    }
    printf("]\n");

    /* Weights: every tensor of the file, and the share of blk.N.* (N = trunk) the MTP block holds. */
    char prefix[32];
    snprintf(prefix, sizeof prefix, "blk.%" PRId64 ".", N);
    uint64_t total = 0, mtp = 0;
    int64_t n_mtp = 0;
    for (int64_t i = 0; i < spex_gguf_n_tensors(g); i++) {
        const spex_tensor_info *t = spex_gguf_tensor(g, i);
        total += t->nbytes;
        if (!strncmp(t->name, prefix, strlen(prefix))) mtp += t->nbytes, n_mtp++;
    }
    char eh[64];
    snprintf(eh, sizeof eh, "blk.%" PRId64 ".nextn.eh_proj.weight", N);
    bool has_mtp = k->n_nextn > 0 && spex_gguf_find_tensor(g, eh) != NULL;
    if (has_mtp)
        printf("  MTP block:   yes: blk.%" PRId64 " (nextn_predict_layers %u), %" PRId64 " tensors, %s\n", N, k->n_nextn,
               n_mtp, human(mtp, b1, sizeof b1));
    else if (k->n_nextn > 0)
        printf("  MTP block:   declared (nextn_predict_layers %u) but %s is absent\n", k->n_nextn, eh);
    else
        printf("  MTP block:   none (nextn_predict_layers 0)\n");
    printf("  weights:     %" PRIu64 " bytes (%s) in the file", total, human(total, b1, sizeof b1));
    if (has_mtp) printf(", %s without the MTP block", human(total - mtp, b2, sizeof b2));
    if (m) printf("; %s mapped by the loaded model (spex_model_weight_bytes)", human(spex_model_weight_bytes(m), b3, sizeof b3));
    putchar('\n');
    printf("  KV cache:    %" PRIu64 " bytes (%s) per token at F16: %" PRId64 " attention layers x 2 x %" PRId64
           " KV heads x %" PRId64 " x 2 B\n", p.kv_per_token, human(p.kv_per_token, b1, sizeof b1), in.n_attn,
           in.n_head_kv, in.head_dim);
    if (has_mtp)
        printf("  MTP KV:      %" PRId64 " bytes per token at F16 in the MTP context (one attention layer)\n",
               2 * in.n_head_kv * in.head_dim * 2);
    printf("  recurrent:   %" PRIu64 " bytes (%s) per sequence: S %s (%" PRId64 " x %" PRId64 " heads x %" PRId64
           " x %" PRId64 " x 4 B) + conv %s (%" PRId64 " x %" PRId64 " x %" PRId64 " channels x 4 B)\n",
           p.state, human(p.state, b1, sizeof b1), human(p.state_S, b2, sizeof b2), p.n_gdn, in.ssm_dt_rank,
           in.ssm_d_state, in.ssm_d_state, human(p.state_conv, b3, sizeof b3), p.n_gdn, in.ssm_d_conv - 1,
           p.conv_channels);
    printf("  snapshots:   %" PRIu64 " bytes (%s) per sequence for n_max %ld: 1 + %ld state copies (%s beyond the "
           "live one)\n", p.snapshots, human(p.snapshots, b1, sizeof b1), n_max, n_max,
           human(p.snapshots - p.state, b2, sizeof b2));
}

/* ======================================================================== */
/* The command                                                               */
/* ======================================================================== */

static void print_thousands(uint64_t v) {
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%" PRIu64, v);
    for (int i = 0; i < n; i++) {
        putchar(buf[i]);
        if (i < n - 1 && (n - 1 - i) % 3 == 0) putchar(',');
    }
}

int cmd_inspect(int argc, char **argv) {
    const char *path = NULL;
    bool all = false;
    long n_max = 7;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--all")) {
            all = true;
        } else if (!strcmp(argv[i], "--n-max")) {
            if (!cli_parse_int(argv[i], i + 1 < argc ? argv[i + 1] : NULL, 0, 256, &n_max)) return 2;
            i++;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "error: inspect: unknown flag '%s' (see spex inspect --help)\n", argv[i]);
            return 2;
        } else if (!path) {
            path = argv[i];
        } else {
            fprintf(stderr, "error: inspect: one FILE expected, got '%s' too\n", argv[i]);
            return 2;
        }
    }
    if (!path) {
        usage(stderr);
        return 2;
    }
    spex_gguf *g = NULL;
    spex_error err = {0};
    if (spex_gguf_open(path, &g, &err) != SPEX_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 1;
    }
    hparams hp;
    read_hparams(g, &hp);

    printf("file:        %s (%" PRIu64 " bytes)\n", path, spex_gguf_file_size(g));
    printf("arch:        %s\n", hp.arch[0] ? hp.arch : "(none: no general.architecture)");
    printf("gguf:        version %u, alignment %" PRIu64 ", data offset %" PRIu64 ", %" PRId64 " kv, %" PRId64
           " tensors\n", spex_gguf_version(g), spex_gguf_alignment(g), spex_gguf_data_offset(g), spex_gguf_n_kv(g),
           spex_gguf_n_tensors(g));
    print_summary(&hp);

    printf("\nmetadata (%" PRId64 "):\n", spex_gguf_n_kv(g));
    int key_w = 0;
    for (int64_t i = 0; i < spex_gguf_n_kv(g); i++) {
        int l = (int)strlen(spex_gguf_key(g, i));
        if (l > key_w) key_w = l;
    }
    if (key_w > 48) key_w = 48;
    for (int64_t i = 0; i < spex_gguf_n_kv(g); i++) {
        spex_gguf_value v;
        spex_gguf_value_at(g, i, &v);
        fputs("  ", stdout);
        print_name(spex_gguf_key(g, i), key_w);
        printf("  %-6s  ", spex_gguf_vtype_name(v.type));
        print_value(g, &v, all, 0);
        putchar('\n');
    }

    printf("\ntensors (%" PRId64 "):\n", spex_gguf_n_tensors(g));
    int name_w = 4;
    for (int64_t i = 0; i < spex_gguf_n_tensors(g); i++) {
        int l = (int)strlen(spex_gguf_tensor(g, i)->name);
        if (l > name_w) name_w = l;
    }
    if (name_w > 64) name_w = 64;
    printf("  %5s  %-*s  %-5s  %-24s  %12s\n", "#", name_w, "name", "type", "shape", "bytes");
    uint64_t n_params = 0, bytes_by_type[SPEX_TYPE_COUNT] = {0}, count_by_type[SPEX_TYPE_COUNT] = {0}, total = 0;
    for (int64_t i = 0; i < spex_gguf_n_tensors(g); i++) {
        const spex_tensor_info *t = spex_gguf_tensor(g, i);
        char shape[96];
        shape_str(shape, sizeof shape, t->n_dims, t->ne);
        printf("  %5" PRId64 "  ", i);
        print_name(t->name, name_w);
        printf("  %-5s  %-24s  %12" PRIu64 "\n", spex_type_get_info((int)t->type)->name, shape, t->nbytes);
        n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]); /* no overflow: checked at open */
        bytes_by_type[t->type] += t->nbytes;
        count_by_type[t->type]++;
        total += t->nbytes;
    }
    printf("\nparameters:  ");
    print_thousands(n_params);
    printf(" (%.3f M)\n", (double)n_params / 1e6);
    printf("bytes per type:\n");
    for (int t = 0; t < SPEX_TYPE_COUNT; t++) {
        if (!count_by_type[t]) continue;
        printf("  %-5s  %5" PRIu64 " tensors  %14" PRIu64 " bytes  %5.1f%%\n", spex_type_get_info(t)->name,
               count_by_type[t], bytes_by_type[t], total ? 100.0 * (double)bytes_by_type[t] / (double)total : 0.0);
    }
    printf("  total  %5" PRId64 " tensors  %14" PRIu64 " bytes  (%.2f bits per parameter)\n", spex_gguf_n_tensors(g),
           total, n_params ? 8.0 * (double)total / (double)n_params : 0.0);

    /* qwen35: the loader is the tensor-set rule (it checks every tensor the trunk and the MTP
     * block read); load once here so the plan can show what the forward reads. */
    const bool qwen35 = !strcmp(hp.arch, "qwen35") && spex_gguf_n_tensors(g) > 0;
    spex_model *model = NULL;
    spex_error lerr = {0};
    spex_status lstat = SPEX_OK;
    q35_keys qk = {0};
    spex_qwen35_plan plan = {0};
    if (qwen35) {
        spex_model_params mp = spex_model_default_params();
        mp.verbose = false;
        lstat = spex_model_load(path, &mp, &model, &lerr);
        q35_read(g, &hp, &qk);
        q35_print_plan(g, &qk, model, n_max, &plan);
    }

    printf("\nvalidation:\n");
    verdict vd = {0};
    for (int64_t i = 0; i < spex_gguf_n_tensors(g); i++) {
        const spex_tensor_info *t = spex_gguf_tensor(g, i);
        if (!spex_type_get_info((int)t->type)->has_ref)
            problem(&vd, "tensor %s has type %s, which spex cannot compute with", t->name,
                    spex_type_get_info((int)t->type)->name);
    }
    /* The tokenizer is part of the model: load it whenever the file carries one. */
    char tok_desc[128] = "";
    if (spex_gguf_find_key(g, "tokenizer.ggml.model") >= 0) {
        spex_tokenizer *tok = NULL;
        spex_error terr = {0};
        if (spex_tokenizer_load_gguf(g, &tok, &terr) != SPEX_OK) {
            problem(&vd, "tokenizer: %s", terr.msg);
        } else {
            snprintf(tok_desc, sizeof tok_desc, "%s%s%s, %d tokens",
                     spex_tokenizer_get_kind(tok) == SPEX_TOKENIZER_SPM ? "SentencePiece BPE" : "byte-level BPE",
                     spex_tokenizer_pre(tok)[0] ? " pre " : "", spex_tokenizer_pre(tok),
                     (int)spex_tokenizer_n_vocab(tok));
            printf("tokenizer:   %s\n", tok_desc);
            spex_tokenizer_free(tok);
        }
    }
    /* A vocab-only file (spex convert-vocab, llama.cpp's ggml-vocab-*.gguf) has no tensors:
     * the hyper-parameter and tensor-set rules do not apply to it. */
    bool vocab_only = spex_gguf_n_tensors(g) == 0 && tok_desc[0];
    bool dense = !vocab_only && (!strcmp(hp.arch, "llama") || !strcmp(hp.arch, "qwen3"));
    uint32_t n_expert = 0;
    if (dense && get_hp(g, hp.arch, "expert_count", &n_expert) && n_expert > 0) dense = false;
    if (dense) validate_dense(g, &hp, !strcmp(hp.arch, "qwen3"), &vd);
    if (qwen35 && lstat != SPEX_OK) {
        problem(&vd, "spex_model_load: %s", lerr.msg);
    } else if (qwen35) {
        /* the plan reads the raw keys; the loader has its own reading: they must agree */
        const spex_model_hparams *mh = spex_model_get_hparams(model);
        if (!qk.ok || qk.in.n_layer != mh->n_layer || qk.in.n_layer - qk.in.n_attn != mh->n_recurrent ||
            plan.state != spex_model_recurrent_state_bytes(model))
            problem(&vd, "the memory plan (%" PRId64 " trunk layers, %" PRId64 " GDN, %" PRIu64
                         " state bytes) disagrees with the loaded model (%d, %d, %" PRIu64 ")",
                    qk.in.n_layer, qk.in.n_layer - qk.in.n_attn, plan.state, mh->n_layer, mh->n_recurrent,
                    spex_model_recurrent_state_bytes(model));
    }
    int rc = 0;
    if (vd.n_problems == 0) {
        if (vocab_only)
            printf("verdict:     OK: vocab-only file; the tokenizer loads (%s)\n", tok_desc);
        else if (dense)
            printf("verdict:     OK: structure valid; %s hyper-parameters and all %" PRId64 " tensors match\n", hp.arch,
                   spex_gguf_n_tensors(g));
        else if (qwen35)
            printf("verdict:     OK: structure valid; spex_model_load accepts it (qwen35 keys, layer pattern, and "
                   "the shape and type of every tensor %s)\n",
                   spex_model_get_hparams(model)->n_nextn ? "the trunk and the MTP block read" : "the trunk reads");
        else
            printf("verdict:     OK: structure valid (structural check only: no tensor-set rules for arch '%s'%s)\n",
                   hp.arch[0] ? hp.arch : "(none)", n_expert ? ", mixture of experts" : "");
    } else {
        printf("verdict:     INVALID: %d problem%s\n", vd.n_problems, vd.n_problems == 1 ? "" : "s");
        fflush(stdout);
        fprintf(stderr, "error: %s: %d validation problem%s; first: %s\n", path, vd.n_problems,
                vd.n_problems == 1 ? "" : "s", vd.first);
        rc = 1;
    }
    free(qk.is_attn);
    spex_model_free(model);
    spex_gguf_close(g);
    return rc;
}
