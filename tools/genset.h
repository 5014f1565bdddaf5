/*
 * genset.h — a set of prompts and one generation through spex_spec, shared by `spex demo`
 * (tools/demo.c) and `spex bench spec` (tools/bench_spec.c).
 *
 * What it is: the JSON-lines prompt format of models/demo.jsonl, its rendering through the
 * target's chat template, and one timed generation through the library's loop
 * (spex_spec_generate; the target alone is spex_spec without a drafter, so every method shares
 * every per-step cost except the drafting) added up into a table row. What it is not: a
 * sampler or stop-string engine (`spex run`, `spex serve`): a generation stops where
 * spex_spec_generate stops (a stop token, the token cap, a full context).
 */
#ifndef SPEX_TOOLS_GENSET_H
#define SPEX_TOOLS_GENSET_H

#include "spex.h"
#include "cpu/api.h"
#include "spec/api.h"

#include <stdbool.h>
#include <stdint.h>

/* One prompt. A line with "user" (and optional "system") is a chat problem rendered with the
 * target's template; a line with only "prompt" is plain text tokenized as it is (special
 * tokens parsed), for targets without a chat template. demo.jsonl lines carry both: "user"
 * wins. */
typedef struct genset_prompt {
    char *system, *user; /* chat form (user != NULL)  */
    char *text;          /* plain form (user == NULL) */
} genset_prompt;

/* What a series of generations adds up to (one table row). */
typedef struct genset_row {
    long n_gen;                      /* tokens emitted, the first one included       */
    double t_decode;                 /* wall seconds after the prompt, summed        */
    uint64_t steps, accepted, drafted;
    uint64_t cut;                    /* drafted tokens the draft cut left unverified */
    double t_draft, t_verify, t_other; /* spex_spec_stats of the steps (prompt excluded) */
    int normal_stops;                /* generations ended by an end-of-generation token */
    int n_runs;
    /* With a pool given to genset_generate (its wait accounting on): seconds its threads
     * waited for each other during t_decode, thread 0 (the caller) and the workers summed. */
    double t_wait_caller, t_wait_workers;
    /* The same waits by site (spex_pool_wait_site), every thread summed: [site][0] at the runs'
     * boundaries, [site][1] at barriers; the workers' wait in progress at the decode's end is in
     * the totals above only. */
    double t_wait_site[SPEX_SITE_COUNT][2];
} genset_row;

double genset_now_s(void);
/* A spex_log_fn that drops everything (spec clamps are expected here). */
void genset_quiet(void *user, const char *line);

/* Reads up to cap prompts from a JSON-lines file; returns the count, or -1 after printing an
 * error (unreadable file, no usable line). Lines that are not JSON objects are skipped. */
int genset_load(const char *path, genset_prompt *p, int cap);
void genset_free(genset_prompt *p, int n);

/* The renderer for the model's tokenizer.chat_template (spex_chat_detect). */
spex_chat_template genset_template(const spex_model *m, const spex_tokenizer *tok);

/* Renders and tokenizes one prompt into ids (cap entries); returns the count or -1 after
 * printing an error. */
int genset_prompt_ids(const spex_tokenizer *tok, spex_chat_template tmpl, const genset_prompt *p, int32_t *ids,
                      int cap);

/* One generation (spex_spec_generate, the loop's draft cut and guard as set) of at most
 * n_predict tokens on sequence 0 of spec from prompt ids[0..np): the sampler is reset and
 * primed with the prompt, the tokens go to out (n_predict entries, the stop token excluded) and the
 * numbers are added to row. With pool (the one spec runs on, its wait accounting on) the
 * threads' waits during the decode are added too; NULL leaves them out. Returns the count, or
 * -1 after printing an error. */
int genset_generate(spex_spec *spec, const spex_tokenizer *tok, const int32_t *ids, int np, int n_predict,
                    spex_sampler *smp, int32_t *out, genset_row *row, spex_pool *pool);

#endif
