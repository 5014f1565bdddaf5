/*
 * run.c — `spex run`: text generation with one target model, alone or with a DFlash drafter
 * (-md; the speculative loop is in run_spec.c).
 *
 * What it is: a thin driver over the public API — load the model and its tokenizer, render the
 * prompt (plain, or through the chat template with --chat), tokenize it, feed it in chunks of
 * -b tokens, then sample one token at a time until an end-of-generation token, -n tokens, or a
 * full context. Flag names follow llama.cpp's llama-cli where it has one. What it is not: an
 * interactive chat loop (that comes with the server). The options shared with `spex serve` are
 * parsed by tools/opts.c's table; only run's own flags are parsed here.
 *
 * Output contract (docs/run.md):
 *  - stdout carries only the generated text, streamed through the UTF-8-safe detokenizer and
 *    flushed after every token: no prompt echo, no trailing newline, the stopping token itself
 *    not printed. With an SPM vocab the prompt's tokens are pushed through the stream first, so
 *    the dummy-prefix space after BOS is dropped exactly as llama2.c's run.c drops it (this is
 *    what makes the stories260K greedy story byte-identical to stories260K.greedy.txt).
 *  - stderr gets a newline, then the prompt and generation counts with their speeds and the stop
 *    reason: eos / eot (an end-of-generation token), bos (BOS sampled: llama2.c's rule for
 *    models trained on BOS-separated stories), n_predict (-n reached), context full.
 *  - Exit status: 0 on success; 2 with a one-line "error: ..." for bad usage or a bad flag value;
 *    1 with a one-line "error: ..." for anything the run itself cannot do (unreadable prompt
 *    file, a model the library refuses, a prompt longer than the context).
 */
#include "spex.h"
#include "gguf/api.h"
#include "model/api.h"
#include "cli.h"
#include "opts.h"
#include "run.h"
#include "tok/api.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


static void usage(FILE *f) {
    fprintf(f,
            "usage: spex run -m MODEL [-p PROMPT | -f FILE] [options]\n"
            "\n"
            "Generates text with a llama or qwen3 GGUF. The generated text goes to stdout (streamed, no\n"
            "prompt echo, no trailing newline); token counts, speeds and the stop reason go to stderr.\n"
            "\n"
            "model and prompt:\n"
            "  -m, --model FILE           GGUF model (required)\n"
            "  -p, --prompt TEXT          prompt (default: empty, i.e. BOS only where the vocab adds BOS)\n"
            "  -f, --file FILE            read the prompt from FILE (not with -p)\n"
            "      --no-bos               do not add BOS/EOS as the vocab asks\n"
            "      --special              print control tokens (e.g. <think>, <|im_end|>) as text\n"
            "\n"
            "chat:\n"
            "      --chat, -cnv, --conversation\n"
            "                             render the prompt as one user turn with the model's chat template\n"
            "                             (from tokenizer.chat_template; ChatML if the vocab has <|im_start|>)\n"
            "      --system, -sys TEXT    system message (with --chat)\n"
            "      --no-think             enable_thinking = false in the template (with --chat); also\n"
            "                             -rea off, --chat-template-kwargs '{\"enable_thinking\":false}'\n"
            "      --chat-template NAME   override the detected template: none, chatml, qwen3, qwen35\n"
            "      --jinja, --no-jinja    render through the GGUF's own Jinja chat template (off: built-in)\n"
            "      --chat-template-file FILE  render through this Jinja template (implies --jinja)\n"
            "      --chat-template-kwargs JSON  extra template variables (Jinja), e.g. '{\"enable_thinking\":false}'\n"
            "\n"
            "generation:\n"
            "  -n, --n-predict N          tokens to generate; -1 = until end of generation or full context (-1)\n"
            "  -c, --ctx-size N           context in tokens, prompt included; 0 = min(context_length, 4096) (0)\n"
            "  -b, --batch-size N         prompt tokens per forward pass (512)\n"
            "  -t, --threads N            threads; 0 or -1 = every online CPU (0)\n"
            "\n"
            "sampling (llama.cpp's defaults and order: penalties;top_k;top_p;min_p;temperature):\n"
            "      --temp T               temperature; 0 = greedy (0.8)\n"
            "      --top-k K              keep the K most likely tokens; 0 = off (40)\n"
            "      --top-p P              nucleus: smallest set of mass >= P; 1 = off (0.95)\n"
            "      --min-p M              drop tokens below M * p_max; 0 = off (0.05)\n"
            "      --repeat-penalty R     divide/multiply logits of recent tokens; 1 = off (1.0)\n"
            "      --repeat-last-n N      history the penalties see; -1 = the context size (64)\n"
            "      --presence-penalty X   subtract X once from tokens seen (0.0)\n"
            "      --frequency-penalty X  subtract X per occurrence (0.0)\n"
            "      --samplers LIST        the chain, ';'-separated (e.g. \"penalties;temperature;top_k\")\n"
            "  -s, --seed S               RNG seed; -1 = from the clock (-1)\n"
            "\n"
            "speculative decoding (DFlash v1 / DFlash2, detected from the draft file; docs/speculative.md):\n"
            "  -md, --model-draft FILE    drafter GGUF (arch dflash; the target's head and embedding are\n"
            "                             borrowed), or a small model of the target's vocabulary (draft-simple)\n"
            "      --spec-type T          auto (from the draft file), none (ignore -md), dflash, mtp (the\n"
            "                             target's own MTP block, qwen35; no -md; n-max default 3), ngram\n"
            "                             (prompt lookup; no -md; n-max 16), draft-simple (-md a small model of\n"
            "                             the target's family drafts autoregressively; n-max 16), hybrid (-md's\n"
            "                             DFlash drafter and n-gram lookup, the better draft per step; n-max 16)\n"
            "      --spec-draft-n-max N   tokens drafted per step; clamped to block_size - 1 (block_size - 1)\n"
            "                             (llama.cpp's removed --draft, --draft-n, --draft-max, --draft-min,\n"
            "                             --draft-n-min are errors, as there)\n"
            "      --spec-draft-n-min N   drop drafts shorter than N (0; at most n-max: clamped with a warning)\n"
            "      --spec-draft-p-min P   stop the walk below this confidence, in [0, 1] (0 = off; also --draft-p-min)\n"
            "      --spec-draft-cut on|off|auto  verify only the drafted tokens that raise the expected tokens\n"
            "                             per second (confidence and verify price learned online; lossless);\n"
            "                             auto: on, but off for a fixed --seed at T > 0 with probabilistic draft\n"
            "                             sampling, so those runs repeat token for token (auto)\n"
            "      --spec-guard on|off|auto  draft only while drafting steps measure more tokens per second\n"
            "                             than plain ones (one drafting step in 64 re-checks; lossless);\n"
            "                             auto: as --spec-draft-cut auto (auto)\n"
            "      --spec-draft-sampling M  probabilistic (sampled walk + rejection sampling at T > 0) or\n"
            "                             greedy (greedy walk + sample-and-match) (probabilistic)\n"
            "      --spec-draft-override-kv KEY=TYPE:VALUE  draft-only metadata override (repeatable),\n"
            "                             e.g. dflash.block_size=int:6\n"
            "  -ctk, --cache-type-k T, -ctv, --cache-type-v T\n"
            "                             target KV type: f16, f32, q8_0 (f16; K and V share one type)\n"
            "  -ctkd, --cache-type-k-draft T, -ctvd, --cache-type-v-draft T\n"
            "                             draft KV type: f16, f32, q8_0 (f16; K and V share one type)\n"
            "\n"
            "  -nr, --no-repack           keep every weight in the file's layout (no R16 copies at load;\n"
            "                             docs/models.md)\n"
            "      --no-mmap, --mmap      read the model files into memory instead of mapping them (--mmap)\n"
            "      --override-kv KEY=TYPE:VALUE  the target's metadata override (repeatable; TYPE int,\n"
            "                             float, bool or str), e.g. tokenizer.ggml.add_bos_token=bool:false\n"
            "  -v, --verbose              model/context lines at load, the prompt's token ids, the seed\n"
            "  -h, --help                 this text\n");
    cli_llama_flags_help(f, false);
}

/* ======================================================================== */
/* Flags                                                                     */
/* ======================================================================== */


/* a is the short or the long spelling (s2 may be NULL). */
static bool flag_is(const char *a, const char *s1, const char *s2) {
    return !strcmp(a, s1) || (s2 && !strcmp(a, s2));
}

/* The flags of `spex run` alone (the common ones are tools/opts.c's): 1 when a is one of them
 * (*takes: v was its value), 0 when not, -1 after an error line. */
static int flag_run(const char *a, const char *v, run_opts *o, cli_common *c, bool *takes) {
    if (flag_is(a, "-p", "--prompt") || flag_is(a, "-f", "--file") || flag_is(a, "--system", "--system-prompt") ||
        !strcmp(a, "-sys")) {
        if (!v) {
            fprintf(stderr, "error: %s needs a value\n", a);
            return -1;
        }
        *(flag_is(a, "-p", "--prompt") ? &o->prompt : flag_is(a, "-f", "--file") ? &o->prompt_file : &o->system) = v;
        return 1;
    }
    if (!strcmp(a, "--spec-guard")) {
        if (!v || (strcmp(v, "on") && strcmp(v, "off") && strcmp(v, "auto"))) {
            if (!v) fprintf(stderr, "error: %s needs a value\n", a);
            else fprintf(stderr, "error: %s expects on, off or auto, got '%s'\n", a, v);
            return -1;
        }
        o->guard = !strcmp(v, "on") ? 1 : !strcmp(v, "off") ? 0 : -1;
        return 1;
    }
    *takes = false;   /* the switches */
    if (flag_is(a, "--chat", "-cnv") || !strcmp(a, "--conversation")) o->chat = true;
    else if (!strcmp(a, "--no-think")) c->enable_thinking = 0;   /* as -rea off: the last one given wins */
    else if (!strcmp(a, "--no-bos")) o->no_bos = true;
    else if (flag_is(a, "--special", "-sp")) o->special = true;
    else if (flag_is(a, "-v", "--verbose") || !strcmp(a, "--log-verbose")) o->verbose = true;
    else return 0;
    return 1;
}

/* cli_common into run_opts: the values as spex run reads them. */
static void from_common(run_opts *o, const cli_common *c) {
    o->model = c->model;
    o->draft = c->draft;
    o->spec_type = c->spec_type;
    o->n_draft_max = c->n_draft_max;
    o->n_draft_min = c->n_draft_min;
    o->p_draft_min = c->p_draft_min;
    o->draft_greedy = c->draft_greedy;
    o->draft_cut = c->draft_cut;
    memcpy(o->model_overrides, c->model_overrides, sizeof c->model_overrides);
    o->n_model_overrides = c->n_model_overrides;
    memcpy(o->overrides, c->overrides, sizeof c->overrides);
    o->n_overrides = c->n_overrides;
    o->ngram = c->ngram;
    o->kv_type = c->kv_type;
    o->ctk_draft = c->draft_kv;
    o->sp = c->sp;
    o->n_threads = c->n_threads < 0 ? 0 : c->n_threads;   /* llama.cpp's -1: every CPU */
    o->n_ctx = c->n_ctx;   /* one sequence's */
    o->n_batch = c->n_batch;
    o->n_predict = c->n_predict;
    o->chat_template = c->chat_template;
    o->chat_template_file = c->chat_template_file;
    o->chat_template_kwargs = c->chat_template_kwargs;
    o->jinja = c->jinja;
    o->no_think = c->enable_thinking == 0;
    o->no_mmap = c->no_mmap;
    o->no_repack = c->no_repack;
}

/* Returns 0 when the run should go on, else the exit status (0 for --help is signalled by -1). */
static int parse_args(int argc, char **argv, run_opts *o) {
    cli_common c;
    cli_common_init(&c);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (flag_is(a, "-h", "--help") || !strcmp(a, "--usage")) {
            usage(stdout);
            return -1;
        }
        bool takes = true;
        int r = cli_common_flag(a, v, &c, &takes);
        if (!r) takes = true, r = flag_run(a, v, o, &c, &takes);
        if (!r && (takes = true, r = cli_llama_flag(false, a, v, &takes)) == 0) {   /* llama.cpp's, not applied here */
            fprintf(stderr, "error: unknown flag '%s' (see 'spex run --help')\n", a);
            return 2;
        }
        if (r < 0) return 2;
        if (takes) i++;
    }
    if (cli_common_finish(&c) < 0) return 2;
    from_common(o, &c);
    if (!o->model) {
        fprintf(stderr, "error: -m MODEL is required (see 'spex run --help')\n");
        return 2;
    }
    if (o->prompt && o->prompt_file) {
        fprintf(stderr, "error: give the prompt with -p or -f, not both\n");
        return 2;
    }
    if (o->spec_type && !strcmp(o->spec_type, "none")) o->draft = NULL;
    else if (run_spec_is_ngram(o) && o->draft) {
        fprintf(stderr, "error: --spec-type %s drafts by lookup: it takes no drafter (-md)\n", o->spec_type);
        return 2;
    } else if (o->spec_type && strcmp(o->spec_type, "auto") && !run_spec_is_mtp(o) && !run_spec_is_ngram(o) &&
               !o->draft) {
        fprintf(stderr, "error: --spec-type %s needs a drafter (-md FILE)\n", o->spec_type);
        return 2;
    }
    if (!o->chat && (o->system || o->no_think || o->chat_template || o->chat_template_file)) {
        fprintf(stderr, "error: --system, --no-think, --chat-template and --chat-template-file need --chat\n");
        return 2;
    }
    if (o->chat_template_file) o->jinja = true;   /* llama.cpp: a template file is Jinja */
    return 0;
}

/* ======================================================================== */
/* Prompt                                                                    */
/* ======================================================================== */

/* Whole file into a malloc'd buffer (any bytes; a NUL is appended for convenience). */
static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "error: cannot read prompt file '%s': %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - 1 - n, f);
        if (ferror(f)) {
            fprintf(stderr, "error: cannot read prompt file '%s': %s\n", path, strerror(errno));
            free(buf);
            buf = NULL;
            break;
        }
        if (feof(f)) break;
        char *nb = cap < ((size_t)1 << 30) ? realloc(buf, cap * 2) : NULL;
        if (!nb) {
            fprintf(stderr, "error: prompt file '%s' is too large\n", path);
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    fclose(f);
    if (buf) buf[n] = 0, *len = n;
    return buf;
}

/* The chat rendering of [system,] user: malloc'd, NUL-terminated; NULL after printing an error. */
/* --jinja / --chat-template-file: the prompt rendered by that Jinja template, as llama-cli
 * renders it; NULL after an error line, or with *fallback set when the model has no template
 * of its own (the built-in one renders, as without --jinja). */
static char *render_jinja(const run_opts *o, const spex_model *m, const spex_tokenizer *tok,
                          const spex_chat_msg *msgs, size_t n, size_t *len, bool *fallback) {
    spex_error err = {0};
    spex_jinja *t = NULL;
    spex_status st = spex_jinja_load(spex_model_gguf(m), o->chat_template_file, &t, NULL, NULL, &err);
    if (st == SPEX_ERR_NOT_FOUND && !o->chat_template_file) {
        fprintf(stderr, "note: --jinja: %s has no tokenizer.chat_template; the built-in template renders\n", o->model);
        *fallback = true;
        return NULL;
    }
    if (st != SPEX_OK) {
        fprintf(stderr, "error: %s%s\n", o->chat_template_file ? "--chat-template-file " : "", err.msg);
        return NULL;
    }
    char *bos = spex_token_text_dup(tok, spex_token_bos(tok)), *eos = spex_token_text_dup(tok, spex_token_eos(tok));
    char *out = NULL;
    spex_jinja_chat opts = {.add_generation_prompt = true, .enable_thinking = !o->no_think, .bos_token = bos,
                            .eos_token = eos, .extra_json = o->chat_template_kwargs};
    if (!bos || !eos) fprintf(stderr, "error: out of memory\n");
    else if (spex_chat_apply_jinja(t, msgs, n, NULL, 0, &opts, &out, len, &err) != SPEX_OK)
        fprintf(stderr, "error: chat template: %s\n", err.msg), out = NULL;
    else if (o->verbose)
        fprintf(stderr, "chat template: Jinja, from %s\n", o->chat_template_file ? o->chat_template_file : "tokenizer.chat_template");
    free(bos);
    free(eos);
    spex_jinja_free(t);
    return out;
}

static char *render_chat(const run_opts *o, const spex_model *m, const spex_tokenizer *tok, const char *user,
                         size_t *len) {
    spex_chat_msg msgs[2];
    size_t n = 0;
    if (o->system) msgs[n++] = (spex_chat_msg){.role = SPEX_CHAT_SYSTEM, .content = o->system};
    msgs[n++] = (spex_chat_msg){.role = SPEX_CHAT_USER, .content = user};
    if (o->jinja && !o->chat_template) {
        bool fallback = false;
        char *r = render_jinja(o, m, tok, msgs, n, len, &fallback);
        if (!fallback) return r;
    }
    spex_chat_template tmpl;
    if (o->chat_template) {
        (void)spex_chat_template_from_name(o->chat_template, &tmpl);   /* checked by parse_args */
    } else {
        bool warned = false;
        tmpl = spex_model_chat_template(m, tok, &warned);
        spex_str js = {0};
        if (warned)
            fprintf(stderr, "warning: %s; using the %s template\n",
                    spex_gguf_get_str(spex_model_gguf(m), "tokenizer.chat_template", &js, NULL) == SPEX_OK
                        ? "tokenizer.chat_template is not one spex knows"
                        : "the model has no chat template",
                    spex_chat_template_name(tmpl));
    }
    if (o->verbose) fprintf(stderr, "chat template: %s\n", spex_chat_template_name(tmpl));

    spex_error err = {0};
    size_t need = 0;
    spex_status st = spex_chat_apply(tmpl, msgs, n, true, !o->no_think, NULL, 0, &need, &err);
    if (st != SPEX_OK && st != SPEX_ERR_RANGE) {
        fprintf(stderr, "error: chat template: %s\n", err.msg);
        return NULL;
    }
    char *buf = malloc(need + 1);
    if (!buf) {
        fprintf(stderr, "error: out of memory\n");
        return NULL;
    }
    if (spex_chat_apply(tmpl, msgs, n, true, !o->no_think, buf, need + 1, len, &err) != SPEX_OK) {
        fprintf(stderr, "error: chat template: %s\n", err.msg);
        free(buf);
        return NULL;
    }
    return buf;
}

/* Tokenizes text into a malloc'd array; NULL after printing an error. */
static int32_t *tokenize_all(const spex_tokenizer *tok, const char *text, size_t len, bool add_special,
                             int *n_out) {
    spex_error err = {0};
    int n = 0;
    spex_status st = spex_tokenize(tok, text, len, add_special, true, NULL, 0, &n, &err);
    if (st != SPEX_OK && st != SPEX_ERR_RANGE) {
        fprintf(stderr, "error: tokenize: %s\n", err.msg);
        return NULL;
    }
    int32_t *ids = malloc(sizeof *ids * (size_t)(n > 0 ? n : 1));
    if (!ids) {
        fprintf(stderr, "error: out of memory\n");
        return NULL;
    }
    if (n > 0 && spex_tokenize(tok, text, len, add_special, true, ids, n, &n, &err) != SPEX_OK) {
        fprintf(stderr, "error: tokenize: %s\n", err.msg);
        free(ids);
        return NULL;
    }
    *n_out = n;
    return ids;
}

/* ======================================================================== */
/* Generation                                                                */
/* ======================================================================== */

void run_write_str(spex_str s) {
    if (s.len) fwrite(s.ptr, 1, s.len, stdout);
}

void run_log_stderr(void *user, const char *line) {
    (void)user;
    fprintf(stderr, "%s\n", line);
}

double run_rate(long n, double secs) {
    return secs > 0 ? (double)n / secs : 0.0;
}

/* Everything after the flags; the caller frees nothing (this function owns its resources). */
static int run_generate(const run_opts *o, const char *text, size_t text_len) {
    int rc = 1;
    spex_error err = {0};
    spex_model *m = NULL;
    spex_tokenizer *tok = NULL;
    char *chat_text = NULL;
    int32_t *ids = NULL;

    spex_model_params mp = spex_model_default_params();
    mp.verbose = o->verbose;
    mp.log = run_log_stderr;
    mp.no_repack = o->no_repack;
    mp.no_mmap = o->no_mmap;
    mp.overrides = o->model_overrides;
    mp.n_overrides = o->n_model_overrides;
    if (spex_model_load(o->model, &mp, &m, &err) != SPEX_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        goto done;
    }
    if (spex_tokenizer_load_gguf(spex_model_gguf(m), &tok, &err) != SPEX_OK) {
        fprintf(stderr, "error: %s: tokenizer: %s\n", o->model, err.msg);
        goto done;
    }
    const spex_model_hparams *hp = spex_model_get_hparams(m);
    if (spex_tokenizer_n_vocab(tok) > hp->n_vocab) {
        fprintf(stderr, "error: %s: the tokenizer has %d tokens but the model only %d logits\n", o->model,
                spex_tokenizer_n_vocab(tok), hp->n_vocab);
        goto done;
    }

    if (o->chat) {
        size_t n = 0;
        chat_text = render_chat(o, m, tok, text, &n);
        if (!chat_text) goto done;
        text = chat_text;
        text_len = n;
    }
    int n_prompt = 0;
    ids = tokenize_all(tok, text, text_len, !o->no_bos, &n_prompt);
    if (!ids) goto done;
    if (n_prompt == 0) {
        fprintf(stderr, "error: the prompt is empty and %s; give a prompt with -p or -f\n",
                o->no_bos ? "--no-bos is set" : "the vocab adds no BOS token");
        goto done;
    }
    if (o->verbose) {
        fprintf(stderr, "prompt ids (%d):", n_prompt);
        for (int i = 0; i < n_prompt; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
    }

    rc = run_session(o, m, tok, ids, n_prompt);
done:
    free(ids);
    free(chat_text);
    spex_tokenizer_free(tok);
    spex_model_free(m);
    return rc;
}

int cmd_run(int argc, char **argv) {
    run_opts o = {.guard = -1};   /* the rest from cli_common (tools/opts.c) */
    int n_args = 0;
    char **args = NULL;
    if (!cli_env_args(false, argc, argv, &n_args, &args)) return 2;   /* LLAMA_ARG_*: before the flags */
    int prc = parse_args(n_args, args, &o);
    if (prc == 2) cli_env_explain();
    if (prc < 0) return 0;
    if (prc > 0) return prc;

    char *file_text = NULL;
    size_t len = 0;
    const char *text = "";
    if (o.prompt_file) {
        file_text = read_file(o.prompt_file, &len);
        if (!file_text) return 1;
        text = file_text;
    } else if (o.prompt) {
        text = o.prompt;
        len = strlen(text);
    }
    int rc = run_generate(&o, text, len);
    free(file_text);
    return rc;
}
