/*
 * compare.h — another engine's autoregressive decode figure for `spex demo --compare-ar`.
 *
 * What it is: the reader of the file a user passes to put spex's demo table beside another
 * engine's (llama.cpp's above all). Two forms: llama-bench's JSON or JSON-lines output (`-o
 * json` / `-o jsonl`: the first test with n_gen > 0 and n_prompt 0, its avg_ts; the name from
 * model_type and build_commit), or plain text whose first number is the tokens per second and
 * whose text before it, if any, names the engine ("llama.cpp b4500: 41.3"). What it is not: a
 * benchmark runner; spex never starts the other engine.
 */
#ifndef SPEX_TOOLS_COMPARE_H
#define SPEX_TOOLS_COMPARE_H

#include <stdbool.h>
#include <stddef.h>

typedef struct compare_ar {
    char name[128];   /* what the figure is of, for the table */
    double tps;       /* decode tokens per second, > 0        */
} compare_ar;

/* Parses text[0 .. len) (not NUL-terminated). false with msg when no figure is found. */
bool compare_ar_parse(const char *text, size_t len, compare_ar *out, char *msg, size_t msg_cap);
/* Reads and parses a file; false with msg (unreadable, too large, no figure). */
bool compare_ar_load(const char *path, compare_ar *out, char *msg, size_t msg_cap);

#endif
