/*
 * bench_spec.c — `spex bench spec`: end-to-end speculative decoding on a target + drafter
 * pair: the demo's table (Method | Draft quant | Block | Decode TPS | Decode
 * speedup | Acceptance (mean length) | Normal stops) per temperature, the cost of a step split
 * into draft / verify / other, and verify(k) / decode(1) for k = 1..16 on the target alone.
 *
 * What it is: a tool that runs every prompt of a JSON-lines set (models/demo.jsonl's format,
 * tools/genset.h) at concurrency 1 with each method — AR (the target alone: spex_spec without
 * a drafter, one verify row per step), one DFlash row per drafter file (or per --draft-quant
 * type, quantized into a temporary directory with spex_quantize_file), and MTP (the target's
 * own nextn block) — at each temperature (T = 0 greedy; T > 0 with top-p 0.95 / top-k 20 /
 * min-p off, seed 1000 + prompt index, the same for every method). Methods are interleaved
 * prompt by prompt, so a burst of load on a shared machine hits every method alike, and the
 * speedups are ratios within one run. Decode time runs from the first emitted token to the
 * last (the prompt excluded); the step costs come from spex_spec_stats (the prompt's last
 * token, which seq_begin counts as "other", subtracted). At T = 0 every speculative row must
 * emit exactly the AR row's tokens for every prompt (docs/speculative.md): the command says so
 * and exits 1 otherwise.
 * verify(k): a separate target context (no taps; n_rs_seq = k_max on recurrent targets, so the
 * rollback is a free ring step), the first prompt run once, then one forward of k tokens of
 * the same sequence with logits on every row (what a verify batch asks) truncated back after
 * each timed run; best of --reps rounds over k = 1..K after one warm-up round.
 * What it is not: a kernel or prefill benchmark (`spex bench kernels`, `spex bench model`),
 * nor a concurrency benchmark (bench/server_concurrency.sh). Every table row is one pass.
 */
#include "spex.h"
#include "gguf/api.h"
#include "cpu/api.h"
#include "quant/api.h"
#include "model/api.h"
#include "cli.h"
#include "opts.h"
#include "genset.h"
#include "probe.h"
#include "spec/api.h"
#include "tensor/api.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BS_MAX_PROMPTS 256
#define BS_MAX_PROMPT_TOKENS 4096
#define BS_MAX_GEN 8192
#define BS_MAX_DRAFTERS 8
/* verify(k) probes decode(1) when a step streams at least this much (beyond the cache) */
#define BS_PROBE_MIN_BYTES (64ull << 20)
#define BS_MAX_QUANTS 8
#define BS_MAX_STOPS 4
#define BS_MAX_METHODS (1 + BS_MAX_DRAFTERS * BS_MAX_QUANTS * BS_MAX_STOPS + 1)
#define BS_MAX_TEMPS 8
#define BS_MAX_K 16
#define BS_WARM_TOKENS 32

typedef enum { BS_AR, BS_DFLASH, BS_MTP, BS_NGRAM, BS_DRAFT_MODEL, BS_HYBRID } bs_kind;

typedef struct bs_method {
    bs_kind kind;
    char name[24];      /* "AR", "DFlash2", "DFlash v1", "MTP", "DFlash2+ngram" */
    char quant[32];     /* the drafter's weight format, "-" for AR           */
    char path[1024];    /* the drafter file run (a temporary one with -q)    */
    const char *src;    /* the -md file it comes from (NULL: AR, MTP)        */
    int32_t n_max;      /* drafts per step (0: AR)                           */
    float p_min;        /* the walk's confidence stop (0: off)                */
    bool cut;           /* the cost-aware draft cut (spex_spec_params)        */
    spex_drafter *d;
    bool owns_d;        /* rows differing only in draft stop share one drafter */
    spex_session *ses;  /* its drafter's contexts and loop (spex_session_create) */
    spex_spec *spec;
    genset_row rows[BS_MAX_TEMPS];
    int identical;      /* T = 0 prompts whose tokens equal AR's             */
} bs_method;

typedef struct bs_opts {
    const char *target, *prompts, *json;
    const char *drafters[BS_MAX_DRAFTERS];
    int n_drafters;
    bool mtp;
    bool ngram;                /* the n-gram (prompt lookup) row                 */
    const char *draft_model;   /* the draft-simple row's model (--draft-model)   */
    bool hybrid;               /* the hybrid row: the first -md + n-gram lookup  */
    long ngram_n;              /* its key length (--ngram-n)                     */
    long n_predict, n_threads, k_max, reps;
    float temps[BS_MAX_TEMPS];
    int n_temps;
    spex_ftype quants[BS_MAX_QUANTS];
    int n_quants;
    float pmins[BS_MAX_STOPS]; /* one DFlash row per --draft-stop entry: p_min  */
    bool cuts[BS_MAX_STOPS];   /* ... or the draft cut (default: one, p_min 0)  */
    int n_stops;
    bool stop_given;           /* print the Draft stop column                  */
    bool no_repack;   /* no R16 copies of the target's and drafters' weights */
    int probe;        /* verify(k)'s decode(1) probe: -1 auto, 0 off, 1 on */
} bs_opts;

static void bs_usage(FILE *f) {
    fprintf(f,
            "usage: spex bench spec [-m TARGET] [-md DRAFTER ...] [--mtp] [--ngram [--ngram-n N]] [--hybrid]\n"
            "                       [--draft-model FILE]\n"
            "                       [--prompts FILE.jsonl]\n"
            "                       [-n N] [-t THREADS]\n"
            "                       [--temps LIST] [--verify-k K] [--reps R] [--draft-quant LIST] [--json OUT]\n"
            "                       [--draft-stop LIST] [--probe auto|on|off] [-nr, --no-repack]\n"
            "\n"
            "End-to-end speculative decoding, concurrency 1: for each temperature, every prompt with each method\n"
            "  AR       the target alone (spex_spec without a drafter)\n"
            "  DFlash   one row per -md file (repeatable), or per --draft-quant type of each\n"
            "  MTP      the target's own nextn block (--mtp; skipped when the target has none), n_max 3\n"
            "  n-gram   prompt lookup in each prompt's own tokens (--ngram; key --ngram-n, default 12), n_max 16\n"
            "  draft-simple  a small model of the target's vocabulary (--draft-model FILE), n_max 16\n"
            "  hybrid   the first -md drafter and n-gram lookup (--hybrid; key --ngram-n), the better draft per step\n"
            "and prints: the table (Method | Draft quant | Block | Temp | Decode TPS | Decode speedup vs AR at the\n"
            "same T | Acceptance (mean length) | Normal stops = ended by EOS/EOT, not by -n); the cost per step\n"
            "(draft, verify, other: ms and %% of the step; the share of the decode each thread spent waiting\n"
            "for the others); verify(k)/decode(1), one forward of k tokens with\n"
            "logits on every row on the target alone, k = 1..K, best of R and the median of each round's own\n"
            "ratio; decode(1) against a streaming probe of its weight bytes just before and after it; and\n"
            "'greedy output identical: yes/no'\n"
            "(every speculative row equals AR token for token at T = 0; 'no' exits 1).\n"
            "\n"
            "  -m, --model TARGET  target GGUF (default models/target.gguf; then -md defaults to\n"
            "                      models/drafter.gguf unless -md, --mtp or --ngram is given without --hybrid)\n"
            "  -md DRAFTER         a DFlash drafter GGUF (up to %d)\n"
            "  --mtp               add the MTP row\n"
            "  --ngram             add the n-gram row (docs/speculative.md); --ngram-n N its key length\n"
            "  --prompts FILE      JSON lines: {\"user\": ..., \"system\": ...} (chat template applied) or\n"
            "                      {\"prompt\": ...} (plain text); default models/demo.jsonl\n"
            "  -n N                most new tokens per prompt (default 256)\n"
            "  -t, --threads THREADS  threads (default, 0 or -1: every CPU)\n"
            "  --temps LIST        temperatures (default 0,1; T > 0 uses top-p 0.95, top-k 20, min-p off)\n"
            "  --verify-k K        verify(k) for k = 1..K (1..16, default 16)\n"
            "  --reps R            verify(k) timed rounds over k = 1..K after a warm-up round (default 5)\n"
            "  --draft-quant LIST  quantize every drafter to these types first (e.g. BF16,Q8_0,Q4_K_M)\n"
            "  --draft-stop LIST   one DFlash row per entry: a number P = p_min P (the walk stops at a\n"
            "                      slot whose confidence is below P; 0 = never), 'cut' = the cost-aware\n"
            "                      draft cut (docs/speculative.md); default cut, as spex run and serve.\n"
            "                      The MTP row takes the first entry\n"
            "  --probe MODE        decode(1) against a streaming-read probe of the same bytes in each\n"
            "                      verify(k) round: auto (default: when a step streams >= 64 MiB, more\n"
            "                      than a cache holds), on, off\n"
            "  --json OUT          also write every number to OUT\n"
            "  -nr, --no-repack    keep every weight in the files' layout (no R16 copies at load; --repack:\n"
            "                      the default)\n"
            "-m, -t and -nr take the names and values of spex run and spex serve (tools/opts.c)\n",
            BS_MAX_DRAFTERS);
}

/* ---- flags ---------------------------------------------------------------------------- */

static bool parse_temps(const char *s, bs_opts *o) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    o->n_temps = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (o->n_temps == BS_MAX_TEMPS || !cli_parse_float("--temps", tok, &o->temps[o->n_temps])) return false;
        if (o->temps[o->n_temps] < 0) {
            fprintf(stderr, "error: --temps: %s is negative\n", tok);
            return false;
        }
        o->n_temps++;
    }
    return o->n_temps > 0;
}

static bool parse_stops(const char *s, bs_opts *o) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    o->n_stops = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (o->n_stops == BS_MAX_STOPS) return false;
        o->cuts[o->n_stops] = !strcmp(tok, "cut");
        o->pmins[o->n_stops] = 0.0f;
        if (!o->cuts[o->n_stops]) {
            if (!cli_parse_float("--draft-stop", tok, &o->pmins[o->n_stops])) return false;
            if (!(o->pmins[o->n_stops] >= 0.0f && o->pmins[o->n_stops] <= 1.0f)) {
                fprintf(stderr, "error: --draft-stop: %s is not in [0, 1]\n", tok);
                return false;
            }
        }
        o->n_stops++;
    }
    return o->n_stops > 0;
}

static bool parse_quants(const char *s, bs_opts *o) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    o->n_quants = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (o->n_quants == BS_MAX_QUANTS || !spex_ftype_from_name(tok, &o->quants[o->n_quants])) {
            fprintf(stderr, "error: --draft-quant: '%s' is not one of f32 f16 bf16 q8_0 q4_0 q4_K_M q5_K_M q6_K "
                            "(at most %d)\n", tok, BS_MAX_QUANTS);
            return false;
        }
        o->n_quants++;
    }
    return o->n_quants > 0;
}

/* 0: parsed; otherwise the exit status (help: 0 after printing, returned as -1). */
static int parse_flags(int argc, char **argv, bs_opts *o) {
    *o = (bs_opts){.prompts = "models/demo.jsonl", .n_predict = 256, .k_max = BS_MAX_K, .reps = 5,
                   .temps = {0.0f, 1.0f}, .n_temps = 2, .n_stops = 1,
                   .cuts = {true}, .probe = -1, .ngram_n = 12};
    /* the options it shares with spex run and serve, under their names (tools/opts.c); -md (a
     * list here), -n (at least 1: tokens per prompt) and the rest are the benchmark's own */
    static const char *const common[] = {"-m", "-t", "-nr", NULL};
    cli_common com;
    cli_common_init(&com);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes = true;
        const int r = cli_common_flag_in(a, v, &com, &takes, common);
        if (r < 0) return 2;
        if (r > 0) {
            i += takes;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bs_usage(stdout);
            return -1;
        } else if (!strcmp(a, "--mtp")) {
            o->mtp = true;
            continue;
        } else if (!strcmp(a, "--ngram")) {
            o->ngram = true;
            continue;
        } else if (!strcmp(a, "--hybrid")) {
            o->hybrid = true;
            continue;
        }
        bool ok = v != NULL;
        if (!strcmp(a, "-md") && v) {
            if (o->n_drafters == BS_MAX_DRAFTERS) {
                fprintf(stderr, "error: at most %d -md files\n", BS_MAX_DRAFTERS);
                return 2;
            }
            o->drafters[o->n_drafters++] = v;
        } else if (!strcmp(a, "--prompts") && v) o->prompts = v;
        else if (!strcmp(a, "--draft-model") && v) o->draft_model = v;
        else if (!strcmp(a, "--json") && v) o->json = v;
        else if (!strcmp(a, "-n")) ok = cli_parse_int(a, v, 1, BS_MAX_GEN, &o->n_predict);
        else if (!strcmp(a, "--verify-k")) ok = cli_parse_int(a, v, 1, BS_MAX_K, &o->k_max);
        else if (!strcmp(a, "--ngram-n")) ok = cli_parse_int(a, v, 1, 1024, &o->ngram_n);
        else if (!strcmp(a, "--reps")) ok = cli_parse_int(a, v, 1, 1000, &o->reps);
        else if (!strcmp(a, "--temps") && v) {
            if (!(ok = parse_temps(v, o))) fprintf(stderr, "error: --temps expects a list like 0,1 (at most %d)\n",
                                                   BS_MAX_TEMPS);
        } else if (!strcmp(a, "--draft-quant") && v) ok = parse_quants(v, o);
        else if (!strcmp(a, "--probe") && v) {
            o->probe = !strcmp(v, "auto") ? -1 : !strcmp(v, "on") ? 1 : !strcmp(v, "off") ? 0 : -2;
            if (!(ok = o->probe != -2)) fprintf(stderr, "error: --probe expects auto, on or off, not '%s'\n", v);
        }
        else if (!strcmp(a, "--draft-stop") && v) {
            if (!(ok = o->stop_given = parse_stops(v, o)))
                fprintf(stderr, "error: --draft-stop expects a list like 0,0.5,cut (at most %d)\n", BS_MAX_STOPS);
        }
        else {
            fprintf(stderr, "error: bench spec: unknown or incomplete argument '%s' (see 'spex bench spec --help')\n",
                    a);
            return 2;
        }
        if (!ok) return 2;
        i++;
    }
    o->target = com.model;
    o->n_threads = com.n_threads < 0 ? 0 : com.n_threads;
    o->no_repack = com.no_repack;
    if (!o->target) {
        o->target = "models/target.gguf";
        if (o->n_drafters == 0 && (o->hybrid || (!o->mtp && !o->ngram))) o->drafters[o->n_drafters++] = "models/drafter.gguf";
    }
    if (o->n_threads == 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        o->n_threads = c > 0 ? c : 1;
    }
    return 0;
}

/* ---- labels ----------------------------------------------------------------------------- */

/* The weight format of a file: general.file_type when it names one of spex's types
 * ("Q4_K_M"), else the type holding the most bytes among the 2-D+ tensors ("F32"). */
static void quant_label(const spex_gguf *g, char *buf, size_t cap) {
    uint32_t ft;
    const char *name = NULL;
    if (spex_gguf_get_u32(g, "general.file_type", &ft, NULL) == SPEX_OK) name = spex_ftype_name((spex_ftype)ft);
    if (name) {
        snprintf(buf, cap, "%s", name);
        return;
    }
    uint64_t bytes[64] = {0};
    for (int64_t i = 0; i < spex_gguf_n_tensors(g); i++) {
        const spex_tensor_info *t = spex_gguf_tensor(g, i);
        if (t->n_dims >= 2 && (unsigned)t->type < 64) bytes[t->type] += t->nbytes;
    }
    int best = -1;
    for (int t = 0; t < 64; t++)
        if (bytes[t] && (best < 0 || bytes[t] > bytes[best])) best = t;
    const spex_type_info *ti = best >= 0 ? spex_type_get_info(best) : NULL;
    snprintf(buf, cap, "%s", ti && ti->name ? ti->name : "?");
    for (char *p = buf; *p; p++) *p = (char)toupper((unsigned char)*p);
}

/* The 1-minute load average (Linux), -1 if unknown: other processes slow every row, and on a
 * machine with as many busy threads as cores a spinning pool loses whole time slices. */
static double load_avg(void) {
    FILE *f = fopen("/proc/loadavg", "r");
    double l = -1;
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1;
        fclose(f);
    }
    return l;
}

static void temp_label(float t, char *buf, size_t cap) {
    snprintf(buf, cap, "%g", (double)t);
}

/* ---- set-up --------------------------------------------------------------------------- */

typedef struct bs_run {
    bs_opts o;
    spex_model *m;
    spex_tokenizer *tok;
    spex_pool *pool;
    const spex_model_hparams *hp;
    int n_prompts;
    genset_prompt prompts[BS_MAX_PROMPTS];
    int32_t *ids[BS_MAX_PROMPTS];
    int n_ids[BS_MAX_PROMPTS];
    int max_ids;
    bs_method meth[BS_MAX_METHODS];
    int n_meth;
    char tmpdir[256];   /* "" when --draft-quant made no files */
    /* verify(k): best seconds per k (index k - 1); the median over the rounds of each
     * round's own verify(k)/decode(1); decode(1) against its probes (0: no probe) */
    double verify_s[BS_MAX_K];
    double verify_paired[BS_MAX_K];
    double decode_probe, decode_gbs; /* median share of the probe, median GB/s of weights */
    int decode_probe_n;              /* rounds that median is over                      */
    uint64_t decode_bytes;           /* weight bytes one decode step streams            */
    bool decode_probe_steady;        /* ... the steady ones (else all)                   */
    int verify_prefix;
    bool greedy_checked, greedy_ok;
} bs_run;

/* The session of one method (target and drafter contexts, loop), on the run's pool. */
static spex_status method_init(bs_run *r, bs_method *me, spex_error *e) {
    spex_session_params pp = spex_session_default_params();
    pp.type = me->kind == BS_DFLASH ? SPEX_SPEC_DFLASH
            : me->kind == BS_MTP ? SPEX_SPEC_MTP
            : me->kind == BS_NGRAM ? SPEX_SPEC_NGRAM
            : me->kind == BS_DRAFT_MODEL ? SPEX_SPEC_DRAFT_MODEL
            : me->kind == BS_HYBRID ? SPEX_SPEC_HYBRID
                                          : SPEX_SPEC_NONE;
    pp.drafter = me->d;
    pp.draft_path = me->kind == BS_DRAFT_MODEL ? me->path : NULL;
    pp.no_repack = r->o.no_repack;
    pp.n_ctx_per_seq = r->max_ids + (int32_t)r->o.n_predict + SPEX_DRAFT_MAX_N + 8;
    pp.pool = r->pool;
    pp.n_draft_max = me->n_max;
    pp.p_min = me->p_min;
    pp.draft_cut = me->cut;
    pp.ngram.size_n = (int32_t)r->o.ngram_n;
    pp.log = genset_quiet;
    spex_status st = spex_session_create(r->m, &pp, &me->ses, e);
    if (st != SPEX_OK) return st;
    me->spec = spex_session_spec(me->ses);
    me->n_max = spex_session_get_info(me->ses)->n_max;
    return SPEX_OK;
}

static bs_method *add_method(bs_run *r, bs_kind kind) {
    bs_method *me = &r->meth[r->n_meth++];
    memset(me, 0, sizeof *me);
    me->kind = kind;
    return me;
}

/* AR, then a DFlash row per drafter (per --draft-quant type), then MTP. */
static spex_status methods_build(bs_run *r, spex_error *e) {
    const bs_opts *o = &r->o;
    bs_method *ar = add_method(r, BS_AR);
    snprintf(ar->name, sizeof ar->name, "AR");
    snprintf(ar->quant, sizeof ar->quant, "-");
    if (o->n_quants > 0) {
        snprintf(r->tmpdir, sizeof r->tmpdir, "/tmp/spex_bench_spec_XXXXXX");
        if (!mkdtemp(r->tmpdir)) {
            r->tmpdir[0] = 0;
            return spex_error_set(e, SPEX_ERR_IO, "cannot create a temporary directory under /tmp");
        }
    }
    for (int di = 0; di < o->n_drafters; di++) {
        for (int qi = 0; qi < (o->n_quants > 0 ? o->n_quants : 1); qi++) {
            bs_method *me = add_method(r, BS_DFLASH);
            me->src = o->drafters[di];
            if (o->n_quants > 0) {
                snprintf(me->path, sizeof me->path, "%s/drafter%d-%s.gguf", r->tmpdir, di,
                         spex_ftype_name(o->quants[qi]));
                spex_quantize_params qp = spex_quantize_default_params();
                qp.ftype = o->quants[qi];
                qp.n_threads = (int)o->n_threads;
                fprintf(stderr, "quantizing %s to %s ...\n", me->src, spex_ftype_name(qp.ftype));
                spex_status st = spex_quantize_file(me->src, me->path, &qp, e);
                if (st != SPEX_OK) return st;
            } else {
                snprintf(me->path, sizeof me->path, "%s", me->src);
            }
            spex_drafter_params dp = spex_drafter_default_params();
            dp.no_repack = r->o.no_repack;
            spex_status st = spex_drafter_load(me->path, r->m, &dp, &me->d, e);
            if (st != SPEX_OK) return st;
            me->owns_d = true;
            const spex_drafter_hparams *dh = spex_drafter_get_hparams(me->d);
            snprintf(me->name, sizeof me->name, "%s", dh->variant == SPEX_DFLASH2 ? "DFlash2" : "DFlash v1");
            if (o->n_quants > 0) snprintf(me->quant, sizeof me->quant, "%s", spex_ftype_name(o->quants[qi]));
            else quant_label(spex_drafter_gguf(me->d), me->quant, sizeof me->quant);
            me->n_max = 0;   /* the session's: block_size - 1 */
            me->p_min = o->pmins[0];
            me->cut = o->cuts[0];
            /* the other draft stops: the same drafter (and file) in rows of their own */
            const bs_method first = *me;
            for (int si = 1; si < o->n_stops; si++) {
                bs_method *ms = add_method(r, BS_DFLASH);
                *ms = first;
                ms->owns_d = false;
                ms->p_min = o->pmins[si];
                ms->cut = o->cuts[si];
            }
        }
    }
    if (o->mtp) {
        if (r->hp->n_nextn > 0) {
            bs_method *me = add_method(r, BS_MTP);
            snprintf(me->name, sizeof me->name, "MTP");
            quant_label(spex_model_gguf(r->m), me->quant, sizeof me->quant);
            me->n_max = 0;   /* the session's: 3 */
            me->p_min = o->pmins[0]; /* the first --draft-stop entry (default: the cut) */
            me->cut = o->cuts[0];
        } else {
            fprintf(stderr, "note: %s has no MTP block: --mtp ignored\n", o->target);
        }
    }
    if (o->hybrid) {
        if (r->n_meth < 2 || r->meth[1].kind != BS_DFLASH)
            return spex_error_set(e, SPEX_ERR_INVALID_ARG, "--hybrid pairs the first -md drafter with n-gram lookup");
        bs_method *me = add_method(r, BS_HYBRID);
        const bs_method *df = &r->meth[1];
        snprintf(me->name, sizeof me->name, "%.16s+ngram", df->name);
        snprintf(me->quant, sizeof me->quant, "%s", df->quant);
        snprintf(me->path, sizeof me->path, "%s", df->path);
        me->src = df->src;
        me->d = df->d;   /* shared: the DFlash row owns it */
        me->n_max = 0;   /* the session's: max(block_size - 1, 16) */
        me->p_min = o->pmins[0];
        me->cut = o->cuts[0];
    }
    if (o->draft_model) {
        bs_method *me = add_method(r, BS_DRAFT_MODEL);
        snprintf(me->name, sizeof me->name, "draft-simple");
        snprintf(me->path, sizeof me->path, "%s", o->draft_model);
        spex_gguf *g = NULL;
        spex_status st = spex_gguf_open(o->draft_model, &g, e);
        if (st != SPEX_OK) return st;
        quant_label(g, me->quant, sizeof me->quant);
        spex_gguf_close(g);
        me->n_max = 0;   /* the session's default (16) */
        me->p_min = o->pmins[0];
        me->cut = o->cuts[0];
    }
    if (o->ngram) {
        bs_method *me = add_method(r, BS_NGRAM);
        snprintf(me->name, sizeof me->name, "n-gram");
        snprintf(me->quant, sizeof me->quant, "n %ld", o->ngram_n);
        me->n_max = 0;   /* the session's: 16 */
        me->p_min = o->pmins[0];
        me->cut = o->cuts[0];
    }
    for (int i = 0; i < r->n_meth; i++) {
        spex_status st = method_init(r, &r->meth[i], e);
        if (st != SPEX_OK) return st;
    }
    return SPEX_OK;
}

/* ---- the runs --------------------------------------------------------------------------- */

static spex_sampler_params sampler_params(float temp, int prompt) {
    spex_sampler_params sp = spex_sampler_default_params();
    sp.temp = temp;
    if (temp > 0) {
        sp.top_p = 0.95f;
        sp.top_k = 20;
        sp.min_p = 0.0f;
    }
    sp.seed = 1000 + (uint64_t)prompt; /* the same per prompt for every method */
    return sp;
}

/* The share of a row's decode time the caller and (on average) each worker spent waiting. */
static void row_waits(const bs_run *r, const genset_row *w, double *caller, double *worker) {
    const int nw = spex_pool_n_threads(r->pool) - 1;
    *caller = w->t_decode > 0 ? w->t_wait_caller / w->t_decode : 0.0;
    *worker = w->t_decode > 0 && nw > 0 ? w->t_wait_workers / (w->t_decode * nw) : 0.0;
}

/* One generation of prompt i with method me at temperature t, added to row. */
static int run_one(bs_run *r, bs_method *me, int i, float t, int n_predict, int32_t *out, genset_row *row) {
    spex_error e = {0};
    spex_sampler *smp = NULL;
    spex_sampler_params sp = sampler_params(t, i);
    if (spex_sampler_init(&sp, r->hp->n_vocab, &smp, &e) != SPEX_OK) {
        fprintf(stderr, "error: %s\n", e.msg);
        return -1;
    }
    int n = genset_generate(me->spec, r->tok, r->ids[i], r->n_ids[i], n_predict, smp, out, row, r->pool);
    spex_sampler_free(smp);
    return n;
}

static bool run_table(bs_run *r) {
    const int np = (int)r->o.n_predict;
    int32_t *ref = malloc(sizeof(int32_t) * (size_t)np), *got = malloc(sizeof(int32_t) * (size_t)np);
    bool ok = ref && got;
    if (!ok) fprintf(stderr, "error: out of memory\n");
    /* Warm-up, not counted: the first passes over the mapped weights fault pages in. */
    for (int mi = 0; ok && mi < r->n_meth; mi++) {
        genset_row scratch = {0};
        ok = run_one(r, &r->meth[mi], 0, 0.0f, np < BS_WARM_TOKENS ? np : BS_WARM_TOKENS, got, &scratch) >= 0;
    }
    r->greedy_ok = true;
    for (int ti = 0; ok && ti < r->o.n_temps; ti++) {
        const float t = r->o.temps[ti];
        for (int i = 0; ok && i < r->n_prompts; i++) {
            int n_ref = 0;
            for (int mi = 0; ok && mi < r->n_meth; mi++) {
                bs_method *me = &r->meth[mi];
                int n = run_one(r, me, i, t, np, mi == 0 ? ref : got, &me->rows[ti]);
                if (n < 0) ok = false;
                else if (mi == 0) n_ref = n;
                else if (t <= 0) {
                    r->greedy_checked = true;
                    if (n == n_ref && !memcmp(got, ref, sizeof(int32_t) * (size_t)n)) me->identical++;
                    else r->greedy_ok = false;
                }
            }
        }
    }
    free(ref);
    free(got);
    return ok;
}

/* verify(k): see the opening comment. */
static bool run_verify(bs_run *r) {
    const int K = (int)r->o.k_max;
    spex_error e = {0};
    spex_context *ctx = NULL;
    spex_batch_token toks[BS_MAX_K];
    const int32_t *pids = r->ids[0];
    const int L = r->n_ids[0];
    bool ok = false;
    double *t = NULL;
    bool *steady = NULL;
    probe_buf probe = {0};
    spex_context_params cp = spex_context_default_params();
    cp.n_ctx_per_seq = L + K + 8;
    cp.n_batch_max = 512;
    cp.n_outputs_max = K;
    cp.n_rs_seq = r->hp->n_recurrent > 0 ? K : 0;
    cp.pool = r->pool;
    if (spex_context_init(r->m, &cp, &ctx, &e) != SPEX_OK) goto fail;
    for (int p = 0; p < L; p += cp.n_batch_max) {
        int n = L - p < cp.n_batch_max ? L - p : cp.n_batch_max;
        spex_batch_token *bt = malloc(sizeof *bt * (size_t)n);
        if (!bt) {
            spex_error_set(&e, SPEX_ERR_NOMEM, "out of memory");
            goto fail;
        }
        for (int j = 0; j < n; j++)
            bt[j] = (spex_batch_token){.token = pids[p + j], .pos = p + j, .seq = 0, .logits = p + j == L - 1};
        spex_batch b = {bt, n};
        spex_status st = spex_forward(ctx, &b, &e);
        free(bt);
        if (st != SPEX_OK) goto fail;
    }
    /* the prompt's own tokens again: ordinary ids, as a draft would be */
    for (int j = 0; j < K; j++)
        toks[j] = (spex_batch_token){.token = pids[j % L], .pos = L + j, .seq = 0, .logits = true};
    for (int k = 1; k <= K; k++) r->verify_s[k - 1] = 1e30;
    const int R = (int)r->o.reps;
    /* per round: verify(k) seconds (R x K), decode(1)'s share of its probes and GB/s, whether
     * its two probes agreed; sel: scratch for medians */
    t = malloc(sizeof *t * (size_t)R * (size_t)(K + 3));
    steady = malloc(sizeof *steady * (size_t)R);
    if (!t || !steady) {
        spex_error_set(&e, SPEX_ERR_NOMEM, "out of memory");
        goto fail;
    }
    double *dec_pct = t + (size_t)R * (size_t)K, *dec_gbs = dec_pct + R, *sel = dec_gbs + R;
    /* decode(1) against the memory of its moment: a probe of one decode step's weight bytes
     * just before and just after it, for targets whose weights do not fit in the cache */
    const uint64_t wbytes = r->decode_bytes = probe_decode_bytes(r->m);
    const bool probing = r->o.probe == 1 || (r->o.probe == -1 && wbytes >= BS_PROBE_MIN_BYTES);
    if (probing && !probe_init(&probe, r->pool, (size_t)wbytes, &e)) goto fail;
    /* Rounds over k = 1..K (round 0 the warm-up), so every k's best comes from the same
     * stretch of time: a burst of other load on the shared machine then slows all k alike
     * instead of the few k measured during it, and verify(k)/decode(1) is a ratio of
     * numbers taken side by side; each round's own ratios are kept too, since the best
     * decode(1) and the best verify(8) can come from different memory moments. */
    for (long rep = 0; rep <= r->o.reps; rep++) {
        double before = 0;
        for (int k = 1; k <= K; k++) {
            spex_batch b = {toks, k};
            if (probing && k == 1) before = probe_run(&probe, 1);
            double t0 = genset_now_s();
            if (spex_forward(ctx, &b, &e) != SPEX_OK) goto fail;
            double dt = genset_now_s() - t0;
            if (rep > 0 && dt < r->verify_s[k - 1]) r->verify_s[k - 1] = dt;
            if (rep > 0) t[(size_t)(rep - 1) * (size_t)K + (size_t)(k - 1)] = dt;
            if (probing && k == 1) {
                const double after = probe_run(&probe, 1);
                if (rep > 0) {
                    dec_gbs[rep - 1] = (double)wbytes / dt * 1e-9;
                    dec_pct[rep - 1] = probe_paired_share(&probe, dec_gbs[rep - 1], before, after, &steady[rep - 1]);
                }
            }
            if (spex_kv_seq_truncate(ctx, 0, L, &e) != SPEX_OK) goto fail;
        }
    }
    for (int k = 1; k <= K; k++) {
        for (int q = 0; q < R; q++) sel[q] = t[(size_t)q * (size_t)K + (size_t)(k - 1)] / t[(size_t)q * (size_t)K];
        r->verify_paired[k - 1] = probe_median(sel, R);
    }
    r->decode_probe = 0;
    if (probing) { /* the median over the steady rounds (all rounds when none was) */
        bool all;
        r->decode_probe = probe_steady_median(dec_pct, steady, R, sel, &r->decode_probe_n, &all);
        r->decode_probe_steady = !all;
        for (int q = 0; q < R; q++) sel[q] = dec_gbs[q];
        r->decode_gbs = probe_median(sel, R);
    }
    r->verify_prefix = L;
    ok = true;
    goto done;
fail:
    fprintf(stderr, "error: verify(k): %s\n", e.msg);
done:
    free(t);
    free(steady);
    probe_free(&probe);
    spex_context_free(ctx);
    return ok;
}

/* ---- output ------------------------------------------------------------------------------ */

static double row_tps(const genset_row *w) {
    return w->t_decode > 0 ? (double)w->n_gen / w->t_decode : 0;
}

/* A DFlash row's draft stop: "cut", "p_min 0.5" or "none". */
static void stop_label(const bs_method *me, char *buf, size_t cap) {
    if (me->cut) snprintf(buf, cap, "cut");
    else if (me->p_min > 0) snprintf(buf, cap, "p_min %g", (double)me->p_min);
    else snprintf(buf, cap, "none");
}

/* The Draft stop cell of a row with its separator, " cut |" ("-" for AR); empty without
 * --draft-stop, where the column is left out. */
static void stop_cell(const bs_run *r, const bs_method *me, char *buf, size_t cap) {
    char l[24];
    stop_label(me, l, sizeof l);
    if (!r->o.stop_given) buf[0] = 0;
    else snprintf(buf, cap, " %s |", me->kind != BS_AR ? l : "-");
}

/* The sites' column heads and JSON names, in spex_pool_site order. */
static const char *const site_head[SPEX_SITE_COUNT] = {"other", "Q/K/V", "attention, W_o", "gate/up", "down",
                                                       "head", "drafter"};
static const char *const site_json[SPEX_SITE_COUNT] = {"other", "qkv", "attention", "ffn_up", "ffn_down",
                                                       "head", "drafter"};

/* w's waits at site st, kind k (0: run boundaries, 1: barriers) as each thread's average share
 * of the decode. */
static double site_share(const bs_run *r, const genset_row *w, int st, int k) {
    const int nth = spex_pool_n_threads(r->pool);
    return w->t_decode > 0 ? w->t_wait_site[st][k] / (w->t_decode * nth) : 0.0;
}

/* A per-step table's numbers for row w, after its leading cells. */
typedef void (*row_cells_fn)(const bs_run *r, const genset_row *w);

/* Every (temperature, method) row of a per-step table: "| Method | Draft quant |[ Draft stop |]
 * Temp |", then fn's cells. */
static void print_rows(const bs_run *r, row_cells_fn fn) {
    for (int ti = 0; ti < r->o.n_temps; ti++) {
        char tl[32];
        temp_label(r->o.temps[ti], tl, sizeof tl);
        for (int mi = 0; mi < r->n_meth; mi++) {
            const bs_method *me = &r->meth[mi];
            char pm[40];
            stop_cell(r, me, pm, sizeof pm);
            printf("| %s | %s |%s %s |", me->name, me->quant, pm, tl);
            fn(r, &me->rows[ti]);
            printf("\n");
        }
    }
}

/* The cost table's cells: steps, draft / verify / other per step, shares, cut, waits. */
static void cost_cells(const bs_run *r, const genset_row *w) {
    const double n = w->steps ? (double)w->steps : 1, tot = w->t_draft + w->t_verify + w->t_other;
    const double pc = tot > 0 ? 100.0 / tot : 0;
    double wc, ww;
    row_waits(r, w, &wc, &ww);
    printf(" %llu | %.3f | %.3f | %.3f | %.3f | %.0f%% | %.0f%% | %.0f%% | %.2f / %.2f | %.1f%% / %.1f%% |",
           (unsigned long long)w->steps, 1e3 * w->t_draft / n, 1e3 * w->t_verify / n, 1e3 * w->t_other / n,
           1e3 * tot / n, w->t_draft * pc, w->t_verify * pc, w->t_other * pc, (double)w->drafted / n,
           (double)w->cut / n, 100.0 * wc, 100.0 * ww);
}

/* The waits-by-site table's cells: boundaries + barriers per site, the layer's sites first. */
static void site_cells(const bs_run *r, const genset_row *w) {
    for (int st = 1; st <= SPEX_SITE_COUNT; st++)
        printf(" %.1f + %.1f%% |", 100.0 * site_share(r, w, st % SPEX_SITE_COUNT, 0),
               100.0 * site_share(r, w, st % SPEX_SITE_COUNT, 1));
}

/* The waits column split by where they happened (with several threads). */
static void print_site_waits(const bs_run *r, bool sc) {
    if (spex_pool_n_threads(r->pool) < 2) return;
    printf("\nwaits by site (spex_pool_wait_site): each thread's average share of the decode, at the runs' "
           "boundaries + at barriers, by the part of the step the run belongs to (a dense layer's Q/K/V phase; its "
           "attention and W_o; gate/up; down; the output head; the drafter's forward; anything else); a worker's "
           "wait for a run counts under that run:\n\n");
    printf("| Method | Draft quant |%s Temp |", sc ? " Draft stop |" : "");
    for (int st = 1; st <= SPEX_SITE_COUNT; st++) printf(" %s |", site_head[st % SPEX_SITE_COUNT]);
    printf("\n| --- | --- |%s ---: |", sc ? " --- |" : "");
    for (int st = 0; st < SPEX_SITE_COUNT; st++) printf(" ---: |");
    printf("\n");
    print_rows(r, site_cells);
}

static void print_results(const bs_run *r) {
    const bs_opts *o = &r->o;
    const bool sc = o->stop_given;
    printf("| Method | Draft quant | Block |%s Temp | Decode TPS | Decode speedup | Acceptance (mean length) | Normal "
           "stops |\n", sc ? " Draft stop |" : "");
    printf("| --- | --- | ---: |%s ---: | ---: | ---: | ---: | ---: |\n", sc ? " --- |" : "");
    for (int ti = 0; ti < o->n_temps; ti++) {
        char tl[32];
        temp_label(o->temps[ti], tl, sizeof tl);
        const double tps0 = row_tps(&r->meth[0].rows[ti]);
        for (int mi = 0; mi < r->n_meth; mi++) {
            const bs_method *me = &r->meth[mi];
            const genset_row *w = &me->rows[ti];
            char block[16] = "-", acc[32] = "-", pm[40];
            stop_cell(r, me, pm, sizeof pm);
            if (me->kind != BS_AR) {
                snprintf(block, sizeof block, "%d", me->n_max + 1);
                if (w->steps) snprintf(acc, sizeof acc, "%.2f", 1.0 + (double)w->accepted / (double)w->steps);
            }
            printf("| %s | %s | %s |%s %s | %.1f | %.2fx | %s | %d/%d |\n", me->name, me->quant, block, pm, tl,
                   row_tps(w), tps0 > 0 ? row_tps(w) / tps0 : 0, acc, w->normal_stops, w->n_runs);
        }
    }
    printf("\ncost per step (prompt excluded; other = sampling, acceptance, feature injection, bookkeeping; waits = "
           "the share of the decode that the calling thread / each worker thread spent waiting for the others, "
           "spex_pool_wait_s):\n\n");
    printf("| Method | Draft quant |%s Temp | Steps | Draft ms | Verify ms | Other ms | Step ms | Draft %% | Verify %% | "
           "Other %% | Verified / cut per step | Waits caller / worker |\n", sc ? " Draft stop |" : "");
    printf("| --- | --- |%s ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
           sc ? " --- |" : "");
    print_rows(r, cost_cells);
    print_site_waits(r, sc);
    printf("\nverify(k)/decode(1): the target alone, one forward of k tokens with logits on every row after a %d-token "
           "prompt, best of %ld rounds over k = 1..K, and the median of each round's own verify(k)/decode(1):\n\n",
           r->verify_prefix, o->reps);
    printf("| k | best ms | ratio to k=1 | ms per token | ratio within a round (median) |\n");
    printf("| ---: | ---: | ---: | ---: | ---: |\n");
    for (int k = 1; k <= o->k_max; k++) {
        const double s = r->verify_s[k - 1];
        printf("| %d | %.3f | %.2f | %.3f | %.2f |\n", k, s * 1e3, s / r->verify_s[0], s * 1e3 / k,
               r->verify_paired[k - 1]);
    }
    if (r->decode_probe > 0)
        printf("\ndecode(1) against a probe of its %.1f MiB of weights just before and after it in each round: "
               "%.2f GB/s, %.0f%% of the probe (medians over %s%d round%s; target >= 85%%)\n",
               (double)r->decode_bytes / 1048576.0, r->decode_gbs, 100.0 * r->decode_probe,
               r->decode_probe_steady ? "the steady " : "all ", r->decode_probe_n, r->decode_probe_n == 1 ? "" : "s");
    if (o->k_max >= 8)
        printf("verify(8)/decode(1) within a round, median: %.2f (target <= 1.6)\n", r->verify_paired[7]);
    printf("\nload average at the end: %.2f\n", load_avg());
    if (!r->greedy_checked) printf("\ngreedy output identical: not checked (no speculative row at T = 0)\n");
    else {
        printf("\ngreedy output identical: %s", r->greedy_ok ? "yes" : "no");
        for (int mi = 1; mi < r->n_meth; mi++)
        {
            const bs_method *me = &r->meth[mi];
            printf("%s%s %s", mi == 1 ? " (" : ", ", me->name, me->quant);
            char l[32];
            stop_label(me, l, sizeof l);
            if (o->stop_given && me->kind != BS_AR) printf(" %s", l);
            printf(" %d/%d", me->identical, r->n_prompts);
        }
        printf(")\n");
    }
}

static bool write_json(const bs_run *r) {
    const bs_opts *o = &r->o;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "target", o->target);
    cJSON_AddStringToObject(j, "prompts", o->prompts);
    cJSON_AddNumberToObject(j, "n_prompts", r->n_prompts);
    cJSON_AddNumberToObject(j, "n_predict", (double)o->n_predict);
    cJSON_AddNumberToObject(j, "threads", (double)o->n_threads);
    cJSON_AddStringToObject(j, "isa", spex_isa_name(spex_cpu_isa()));
    cJSON_AddBoolToObject(j, "amx_int8", cli_amx_on());
    cJSON_AddNumberToObject(j, "load_average_end", load_avg());
    cJSON *ms = cJSON_AddArrayToObject(j, "methods");
    for (int mi = 0; mi < r->n_meth; mi++) {
        const bs_method *me = &r->meth[mi];
        cJSON *jm = cJSON_CreateObject();
        cJSON_AddStringToObject(jm, "method", me->name);
        cJSON_AddStringToObject(jm, "draft_quant", me->quant);
        if (me->src) cJSON_AddStringToObject(jm, "drafter", me->src);
        cJSON_AddNumberToObject(jm, "block", me->kind == BS_AR ? 1 : me->n_max + 1);
        cJSON_AddNumberToObject(jm, "n_max", me->n_max);
        if (me->kind != BS_AR) {
            cJSON_AddNumberToObject(jm, "p_min", me->p_min);
            cJSON_AddBoolToObject(jm, "draft_cut", me->cut);
        }
        if (me->kind != BS_AR) cJSON_AddNumberToObject(jm, "greedy_identical_prompts", me->identical);
        cJSON *rows = cJSON_AddArrayToObject(jm, "rows");
        for (int ti = 0; ti < o->n_temps; ti++) {
            const genset_row *w = &me->rows[ti];
            const double tps0 = row_tps(&r->meth[0].rows[ti]), n = w->steps ? (double)w->steps : 1;
            cJSON *jr = cJSON_CreateObject();
            cJSON_AddNumberToObject(jr, "temp", o->temps[ti]);
            cJSON_AddNumberToObject(jr, "decode_tps", row_tps(w));
            cJSON_AddNumberToObject(jr, "decode_speedup", tps0 > 0 ? row_tps(w) / tps0 : 0);
            cJSON_AddNumberToObject(jr, "mean_len", w->steps ? 1.0 + (double)w->accepted / (double)w->steps : 0);
            cJSON_AddNumberToObject(jr, "acceptance", w->drafted ? (double)w->accepted / (double)w->drafted : 0);
            cJSON_AddNumberToObject(jr, "normal_stops", w->normal_stops);
            cJSON_AddNumberToObject(jr, "runs", w->n_runs);
            cJSON_AddNumberToObject(jr, "tokens", (double)w->n_gen);
            cJSON_AddNumberToObject(jr, "decode_s", w->t_decode);
            cJSON_AddNumberToObject(jr, "steps", (double)w->steps);
            cJSON_AddNumberToObject(jr, "drafted", (double)w->drafted);
            cJSON_AddNumberToObject(jr, "accepted", (double)w->accepted);
            cJSON_AddNumberToObject(jr, "cut", (double)w->cut);
            cJSON_AddNumberToObject(jr, "draft_ms_per_step", 1e3 * w->t_draft / n);
            cJSON_AddNumberToObject(jr, "verify_ms_per_step", 1e3 * w->t_verify / n);
            cJSON_AddNumberToObject(jr, "other_ms_per_step", 1e3 * w->t_other / n);
            double wc, ww;
            row_waits(r, w, &wc, &ww);
            cJSON_AddNumberToObject(jr, "wait_share_caller", wc);
            cJSON_AddNumberToObject(jr, "wait_share_worker", ww);
            cJSON *jw = cJSON_AddObjectToObject(jr, "wait_share_by_site"); /* [run boundaries, barriers] */
            for (int st = 0; st < SPEX_SITE_COUNT; st++) {
                const double v[2] = {site_share(r, w, st, 0), site_share(r, w, st, 1)};
                cJSON_AddItemToObject(jw, site_json[st], cJSON_CreateDoubleArray(v, 2));
            }
            cJSON_AddItemToArray(rows, jr);
        }
        cJSON_AddItemToArray(ms, jm);
    }
    cJSON *jv = cJSON_AddArrayToObject(j, "verify");
    for (int k = 1; k <= o->k_max; k++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "k", k);
        cJSON_AddNumberToObject(x, "ms", r->verify_s[k - 1] * 1e3);
        cJSON_AddNumberToObject(x, "ratio", r->verify_s[k - 1] / r->verify_s[0]);
        cJSON_AddNumberToObject(x, "ratio_paired", r->verify_paired[k - 1]);
        cJSON_AddItemToArray(jv, x);
    }
    if (r->decode_probe > 0) {
        cJSON_AddNumberToObject(j, "decode_gbs", r->decode_gbs);
        cJSON_AddNumberToObject(j, "decode_probe_share", r->decode_probe);
        cJSON_AddNumberToObject(j, "decode_probe_rounds", r->decode_probe_n);
        cJSON_AddBoolToObject(j, "decode_probe_steady", r->decode_probe_steady);
    } else {
        cJSON_AddNullToObject(j, "decode_probe_share");
    }
    cJSON_AddNumberToObject(j, "verify_prefix_tokens", r->verify_prefix);
    if (r->greedy_checked) cJSON_AddBoolToObject(j, "greedy_identical", r->greedy_ok);
    else cJSON_AddNullToObject(j, "greedy_identical");
    char *s = cJSON_Print(j);
    cJSON_Delete(j);
    FILE *f = s ? fopen(o->json, "wb") : NULL;
    bool ok = f && fputs(s, f) >= 0 && fputc('\n', f) != EOF;
    if (f && fclose(f) != 0) ok = false;
    free(s);
    if (!ok) fprintf(stderr, "error: cannot write %s\n", o->json);
    return ok;
}

/* ---- the command ------------------------------------------------------------------------- */

int bench_spec(int argc, char **argv) {
    static bs_run run; /* large (prompt tables); one per process */
    bs_run *r = &run;
    memset(r, 0, sizeof *r);
    int prc = parse_flags(argc, argv, &r->o);
    if (prc) return prc < 0 ? 0 : prc;
    const bs_opts *o = &r->o;
    r->n_prompts = genset_load(o->prompts, r->prompts, BS_MAX_PROMPTS);
    if (r->n_prompts < 0) return 1;

    int rc = 1;
    spex_error e = {0};
    spex_model_params mp = spex_model_default_params();
    mp.no_repack = o->no_repack;
    if (spex_model_load(o->target, &mp, &r->m, &e) != SPEX_OK ||
        spex_tokenizer_load_gguf(spex_model_gguf(r->m), &r->tok, &e) != SPEX_OK ||
        spex_pool_create((int)o->n_threads, &r->pool, &e) != SPEX_OK)
        goto fail;
    spex_pool_set_wait_accounting(r->pool, true); /* the cost table's Waits column */
    r->hp = spex_model_get_hparams(r->m);
    spex_chat_template tmpl = genset_template(r->m, r->tok);
    {
        int32_t *buf = malloc(sizeof(int32_t) * BS_MAX_PROMPT_TOKENS);
        if (!buf) {
            spex_error_set(&e, SPEX_ERR_NOMEM, "out of memory");
            goto fail;
        }
        for (int i = 0; i < r->n_prompts; i++) {
            int n = genset_prompt_ids(r->tok, tmpl, &r->prompts[i], buf, BS_MAX_PROMPT_TOKENS);
            r->ids[i] = n > 0 ? malloc(sizeof(int32_t) * (size_t)n) : NULL;
            if (!r->ids[i]) {
                free(buf);
                goto done;
            }
            memcpy(r->ids[i], buf, sizeof(int32_t) * (size_t)n);
            r->n_ids[i] = n;
            if (n > r->max_ids) r->max_ids = n;
        }
        free(buf);
    }
    if (methods_build(r, &e) != SPEX_OK) goto fail;

    printf("spex bench spec: %d prompts from %s, up to %ld new tokens each, %ld threads, isa %s%s, concurrency 1, "
           "load average %.2f\n",
           r->n_prompts, o->prompts, o->n_predict, o->n_threads, spex_isa_name(spex_cpu_isa()),
           cli_amx_on() ? " + amx-int8" : "", load_avg());
    {
        char tq[32];
        quant_label(spex_model_gguf(r->m), tq, sizeof tq);
        printf("target  %s (%s, %d layers, E %d, V %d, %s)\n", o->target, spex_arch_name(r->hp->arch),
               r->hp->n_layer, r->hp->n_embd, r->hp->n_vocab, tq);
    }
    for (int mi = 1; mi < r->n_meth; mi++) {
        const bs_method *me = &r->meth[mi];
        if (me->kind == BS_DFLASH)
            printf("drafter %s: %s %s, block %d, %d layers\n", me->src, me->name, me->quant,
                   spex_drafter_get_hparams(me->d)->block_size, spex_drafter_get_hparams(me->d)->n_layer);
        else if (me->kind == BS_MTP) printf("drafter MTP: the target's nextn block, n_max %d\n", me->n_max);
        else if (me->kind == BS_HYBRID)
            printf("drafter %s + n-gram lookup (key %ld tokens), the better draft per step, n_max %d\n", me->src,
                   r->o.ngram_n, me->n_max);
        else if (me->kind == BS_DRAFT_MODEL)
            printf("drafter draft-simple: %s (%s), autoregressive, n_max %d\n", me->path, me->quant, me->n_max);
        else printf("drafter n-gram: prompt lookup, key %ld tokens, n_max %d\n", r->o.ngram_n, me->n_max);
    }
    printf("\n");
    fflush(stdout);

    if (!run_table(r) || !run_verify(r)) goto done;
    print_results(r);
    if (o->json && !write_json(r)) goto done;
    rc = r->greedy_ok ? 0 : 1;
    goto done;
fail:
    fprintf(stderr, "error: %s\n", e.msg);
done:
    for (int mi = 0; mi < r->n_meth; mi++) {
        bs_method *me = &r->meth[mi];
        spex_session_free(me->ses);
        if (me->owns_d) {
            spex_drafter_free(me->d);
            if (r->tmpdir[0] && me->src) unlink(me->path);
        }
    }
    if (r->tmpdir[0]) rmdir(r->tmpdir);
    for (int i = 0; i < r->n_prompts; i++) free(r->ids[i]);
    genset_free(r->prompts, r->n_prompts);
    spex_tokenizer_free(r->tok);
    spex_pool_free(r->pool);
    spex_model_free(r->m);
    return rc;
}
