/*
 * demo_real.h — the realistic-compute pair of `spex demo`: the given pair inflated to a
 * Qwen3-0.6B-sized trunk (`spex inflate`, docs/inflate.md), made once and cached by content.
 *
 * What it is: the cache key (a 64-bit FNV-1a hash of both files' bytes and the inflate
 * settings), the cache folder (default: the folder of the spex binary, i.e. the build
 * folder), and the inflate run into a temporary folder renamed into place, so an interrupted
 * run never leaves a half-written pair behind. What it is not: the inflation itself
 * (tools/inflate.c) or the table (tools/demo.c).
 */
#ifndef SPEX_TOOLS_DEMO_REAL_H
#define SPEX_TOOLS_DEMO_REAL_H

#include <stdbool.h>

typedef struct demo_real_params {
    long shape[6];       /* E, layers, heads, KV heads, head dim, FFN                        */
    const char *type;    /* the inflated pair's type, as `spex inflate --type` takes it      */
    int n_threads;
} demo_real_params;

/* Qwen3-0.6B's trunk, Q8_0: from the shipped Q8_0 pair, Q8_0 re-creates the original weight
 * blocks exactly, so the inflated pair drafts the same function (docs/inflate.md, Tolerance). */
demo_real_params demo_real_default_params(void);
/* "E,L,H,HKV,HD,FF" into p->shape; false after printing an error. */
bool demo_real_parse_shape(const char *s, demo_real_params *p);

enum { DEMO_REAL_OK = 0, DEMO_REAL_SKIP = 1, DEMO_REAL_FAIL = 2 };

typedef struct demo_real_pair {
    char target[4096], drafter[4096];   /* the inflated files (DEMO_REAL_OK)   */
    char msg[4096];                     /* why not (DEMO_REAL_FAIL)            */
} demo_real_pair;

/* The inflated pair of tpath/dpath in cache (NULL: the binary's folder), made if not cached.
 * DEMO_REAL_SKIP when the target is not smaller than the shape (unless force). */
int demo_real_prepare(const char *tpath, const char *dpath, const char *cache, const demo_real_params *p, bool force,
                      demo_real_pair *out);

#endif
