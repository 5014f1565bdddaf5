/*
 * cli.h — the subcommands of the spex binary and the small helpers they share.
 *
 * Tools are thin: they parse flags, call the library, print. Only tools may exit.
 */
#ifndef SPEX_TOOLS_CLI_H
#define SPEX_TOOLS_CLI_H

#include "spex.h"

#include <stdbool.h>
#include <stdio.h>

int cmd_inspect(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_gen_smoke(int argc, char **argv);
int cmd_convert_vocab(int argc, char **argv);
int cmd_gen_model(int argc, char **argv);
int cmd_demo(int argc, char **argv);          /* tools/demo.c: the README's main job */
int cmd_serve(int argc, char **argv);         /* tools/serve.c: the HTTP server (src/server) */
/* `spex serve`'s flags into *c (argv[0] is the subcommand's name): -1 when the server should
 * start with *c, else the exit status (0 after --help, 2 after an error line). */
struct srv_config;
int serve_parse(int argc, char **argv, struct srv_config *c);
int cmd_inflate(int argc, char **argv);       /* tools/inflate.c: function-preserving widening */
int bench_model(int argc, char **argv); /* `spex bench model`, tools/bench_model.c */
int bench_attn(int argc, char **argv);  /* `spex bench attn`, tools/bench_attn.c */
int bench_spec(int argc, char **argv);  /* `spex bench spec`, tools/bench_spec.c */

/* Parses "-t N" style integers; prints an error naming the flag and returns false on bad input. */
bool cli_parse_int(const char *flag, const char *s, long min, long max, long *out);
/* "64,512" into out[0..*n) (at most max_n values, each as cli_parse_int checks it); prints an
 * error naming the flag and returns false on bad input or an empty list. */
bool cli_parse_int_list(const char *flag, const char *s, long min, long max, long *out, int max_n, int *n);
/* The same for a finite float. */
bool cli_parse_float(const char *flag, const char *s, float *out);
/* A KV cache type, llama.cpp's names: f16, f32 or q8_0 (the types a context takes). */
bool cli_parse_kv_type(const char *flag, const char *s, spex_type *out);
/* -ctk / -ctv given separately: spex keeps K and V in one type, so they must agree. Sets *kv
 * from whichever was given (unchanged when neither); false with an error line when they
 * differ. */
bool cli_kv_pair(const char *what, bool has_k, spex_type k, bool has_v, spex_type v, spex_type *kv);
/* argv with llama.cpp's LLAMA_ARG_* variables (tools/env.c) that are set and belong to the tool
 * (serve or run) turned into flags before the command line's own: *out_argv (static storage)
 * and *out_argc. false after an error line (a boolean variable with another value). */
bool cli_env_args(bool serve, int argc, char **argv, int *out_argc, char ***out_argv);
/* After a flag error: one note naming the variables that were applied (none: nothing). */
void cli_env_explain(void);

/* --spec-type names of n-gram drafting, llama.cpp's: ngram, ngram-simple, ngram-map-k (the
 * last with --spec-ngram-min-hits; spex_ngram_lookup covers both). */
bool cli_is_ngram_type(const char *v);
/* --spec-ngram-size-n / --spec-ngram-size-m / --spec-ngram-min-hits (and llama.cpp's names
 * --spec-ngram-simple-* / --spec-ngram-map-k-* of the same three) into *p: 1 when a is one of
 * them (its value taken), 0 when not, -1 after an error line. */
int cli_ngram_flag(const char *a, const char *v, spex_ngram_params *p);

/* llama.cpp flags that tool (serve: llama-server's flags too; else llama-cli's) does not apply
 * (tools/compat.c): 1 when a is one accepted without effect (a "note:" line on stderr says why;
 * *takes: v was its value), 0 when it is not in the table, -1 after an error line (a bad value,
 * or a flag spex refuses because ignoring it would change the results or it asks for what spex
 * cannot do, such as a download). */
int cli_llama_flag(bool serve, const char *a, const char *v, bool *takes);
/* The names of those flags for the tool's --help: the accepted ones, then the refused ones. */
void cli_llama_flags_help(FILE *out, bool serve);
/* Whether the K-quant matmuls of 9+ rows (verify blocks, prompts) run on AMX tiles here (the
 * active ISA is AVX-512 and the CPU and SPEX_AMX allow them): the benchmarks print it, since a
 * host with tiles and one without give different figures (docs/performance.md, "AMX tiles"). */
bool cli_amx_on(void);

#endif
