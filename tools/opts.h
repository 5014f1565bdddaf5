/*
 * opts.h — the options `spex run` and `spex serve` share, parsed by one table (tools/opts.c).
 *
 * What it is: the model, the drafter and speculative decoding, sampling, the KV cache types,
 * threads, context, batch, -n and the chat template, each under every name either tool
 * accepts, with one value rule and one error text. What it is not: what a value means to a
 * tool (serve's -c is the total over its slots, run's one sequence; the -n default differs);
 * each tool copies cli_common into its own options and flags of its own stay in its parser.
 */
#ifndef SPEX_TOOLS_OPTS_H
#define SPEX_TOOLS_OPTS_H

#include "spex.h"

#include <stdbool.h>
#include <stddef.h>

#define CLI_MAX_OVERRIDES 16

typedef struct cli_common {
    const char *model;             /* -m                                                  */
    const char *draft;             /* -md (NULL: none)                                    */
    const char *spec_type;         /* --spec-type as given (NULL: auto; "none" after finish
                                    * when nothing is drafted)                            */
    spex_spec_type spec;           /* the same, parsed (SPEX_SPEC_AUTO when not given)    */
    long n_draft_max;              /* -1: the drafter's bound; 0: nothing drafted         */
    long n_draft_min;
    float p_draft_min;
    bool draft_greedy;             /* --spec-draft-sampling greedy                        */
    int draft_cut;                 /* --spec-draft-cut on|off|auto: 1, 0, -1              */
    const char *model_overrides[CLI_MAX_OVERRIDES];   /* --override-kv (the target's)    */
    int n_model_overrides;
    const char *overrides[CLI_MAX_OVERRIDES];         /* --spec-draft-override-kv       */
    int n_overrides;
    spex_ngram_params ngram;       /* --spec-ngram-*                                      */
    spex_type kv_type, draft_kv;   /* settled by finish from the four below (f16)         */
    spex_type kt, vt, dkt, dvt;    /* -ctk -ctv -ctkd -ctvd as given                      */
    bool has_kt, has_vt, has_dkt, has_dvt;
    spex_sampler_params sp;        /* llama.cpp's defaults; complete after finish         */
    long top_k, seed, repeat_last_n;   /* into sp by finish                               */
    long n_threads;                /* -1 or 0: every online CPU                           */
    long n_ctx;                    /* 0: the tool's default                               */
    long n_batch;                  /* 512                                                 */
    long n_predict;                /* -1: unlimited                                       */
    const char *chat_template;     /* a built-in template's name (checked)                */
    const char *chat_template_file;
    const char *chat_template_kwargs;  /* a JSON object (checked)                        */
    bool jinja;
    int enable_thinking;           /* -rea, enable_thinking of the kwargs: -1 unset, 0, 1 */
    bool no_mmap, no_repack;
} cli_common;

/* The defaults both tools start from. */
void cli_common_init(cli_common *o);
/* One flag a with its possible value v: 1 when a is a common option (*takes: whether v was its
 * value), 0 when it is not, -1 after an error line naming the flag. */
int cli_common_flag(const char *a, const char *v, cli_common *o, bool *takes);
/* The same with only the rows whose first name is in rows (NULL-terminated; NULL: all): for a
 * tool with a few of the common options (spex bench spec). */
int cli_common_flag_in(const char *a, const char *v, cli_common *o, bool *takes, const char *const *rows);
/* After the flags: the checks across flags (K/V pairs, n-min > n-max clamped with a warning,
 * --spec-draft-n-max 0 as no drafting with a note, --chat-template with --chat-template-file,
 * the sampler values the library judges): 0, or -1 after an error line. */
int cli_common_finish(cli_common *o);
/* One line per common option name ("-m --model"), for tests: the i-th row's names joined by
 * spaces into buf; false past the last row. */
bool cli_common_row(int i, char *buf, size_t cap, bool *takes_value);

#endif
