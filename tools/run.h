/*
 * run.h — what `spex run`'s two halves share: run.c (flags, prompt) and run_spec.c (the
 * session and the generation, target-only or speculative).
 */
#ifndef SPEX_TOOLS_RUN_H
#define SPEX_TOOLS_RUN_H

#include "spex.h"
#include "model/api.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define RUN_MAX_OVERRIDES 16

typedef struct run_opts {
    const char *model;
    const char *prompt;        /* -p (NULL: none)                       */
    const char *prompt_file;   /* -f (NULL: none)                       */
    const char *system;        /* --system (chat only)                  */
    const char *chat_template; /* --chat-template NAME (chat only)      */
    const char *chat_template_file;   /* --chat-template-file: Jinja (implies jinja) */
    const char *chat_template_kwargs; /* --chat-template-kwargs JSON (Jinja's extra variables) */
    bool jinja;                /* --jinja: the GGUF's own template, rendered */
    long n_predict;            /* -1: until eog or a full context       */
    long n_ctx;                /* 0: the library default                */
    long n_batch;
    long n_threads;            /* 0: every online CPU                   */
    bool chat, no_think, no_bos, special, verbose;
    bool no_repack;            /* --no-repack: no R16 copies at load    */
    bool no_mmap;              /* --no-mmap: read the files, not map them */
    const char *model_overrides[RUN_MAX_OVERRIDES];   /* --override-kv (the target's) */
    int n_model_overrides;
    spex_sampler_params sp;
    /* speculative decoding */
    const char *draft;         /* -md (NULL: target alone)               */
    const char *spec_type;     /* --spec-type (NULL: auto)               */
    long n_draft_max;          /* -1: the drafter's bound; 0: no drafting */
    long n_draft_min;
    float p_draft_min;
    bool draft_greedy;         /* --spec-draft-sampling greedy           */
    int draft_cut;             /* --spec-draft-cut on|off|auto: 1, 0, -1 (auto) */
    int guard;                 /* --spec-guard on|off|auto: 1, 0, -1 (auto) */
    const char *overrides[RUN_MAX_OVERRIDES];
    int n_overrides;
    spex_type ctk_draft;       /* -ctkd / -ctvd: the draft KV cache type (f16) */
    spex_type kv_type;         /* -ctk / -ctv: the target's KV cache type (f16) */
    spex_ngram_params ngram;   /* --spec-ngram-size-n / -m / --spec-ngram-min-hits */
} run_opts;

/* --spec-type mtp (or draft-mtp): the target's MTP block drafts (no -md). */
static inline bool run_spec_is_mtp(const run_opts *o) {
    return o->spec_type && (!strcmp(o->spec_type, "mtp") || !strcmp(o->spec_type, "draft-mtp"));
}
/* --spec-type ngram (ngram-simple, ngram-map-k): prompt lookup drafts (no -md). */
static inline bool run_spec_is_ngram(const run_opts *o) { return cli_is_ngram_type(o->spec_type); }
/* For targets with recurrent layers (qwen35): one stderr line with the recurrent-state memory
 * of the context: one state copy, the copies kept (1 + n_rs_seq) and the total (targets.md §9). */
static inline void run_print_recurrent(const spex_model *m, const spex_context *ctx) {
    const uint64_t one = spex_model_recurrent_state_bytes(m);
    if (!one) return;
    fprintf(stderr, "recurrent state: %.2f MiB per copy, %d copies per sequence (1 + n_rs_seq %d), %.2f MiB in all\n",
            (double)one / 1048576.0, 1 + spex_context_get_params(ctx)->n_rs_seq, spex_context_get_params(ctx)->n_rs_seq,
            (double)spex_context_memory(ctx).recurrent / 1048576.0);
}

/* Generation over the tokenized prompt through a session (the target alone, or speculative):
 * prints the text and the statistics; returns the exit status. */
int run_session(const run_opts *o, const spex_model *m, const spex_tokenizer *tok, const int32_t *ids,
                    int n_prompt);

void run_log_stderr(void *user, const char *line);
void run_write_str(spex_str s);
double run_rate(long n, double secs);

#endif
