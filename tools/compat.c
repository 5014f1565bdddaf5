/*
 * compat.c — llama.cpp flags that `spex run` and `spex serve` accept without effect, in one
 * table, so a llama-server / llama-cli command line starts unchanged and says why a flag does
 * nothing here (contract in cli.h, cli_llama_flag).
 *
 * What it is: each flag's names, the value it takes (none, an integer, on/off/auto, a word),
 * and the one-line reason, printed once per flag on stderr as "note: ...". A value that is
 * invalid for llama.cpp is an error naming the flag. Flags that ask for something spex cannot
 * do at all (downloads) are errors with the way to do it. What it is not: the flags spex
 * applies — those stay in each tool's own parser.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { V_NONE, V_INT, V_ONOFF, V_WORD, V_ERROR } value_kind;

typedef struct compat_flag {
    const char *names[4];
    value_kind kind;
    const char *why;
} compat_flag;

static const compat_flag FLAGS[] = {
    {{"-fa", "--flash-attn"}, V_ONOFF, "spex's attention is always one fused pass over the KV cache"},
    {{"-ngl", "--n-gpu-layers", "--gpu-layers"}, V_INT, "no GPU backend in this build: running on the CPU"},
    {{"-ngld", "--n-gpu-layers-draft", "--spec-draft-ngl", "--gpu-layers-draft"}, V_INT,
     "no GPU backend in this build: the drafter runs on the CPU"},
    {{"-sm", "--split-mode"}, V_WORD, "one CPU device: nothing to split"},
    {{"-ts", "--tensor-split"}, V_WORD, "one CPU device: nothing to split"},
    {{"-mg", "--main-gpu"}, V_INT, "no GPU backend in this build"},
    {{"-dev", "--device"}, V_WORD, "the CPU is the only device in this build"},
    {{"-devd", "--device-draft"}, V_WORD, "the CPU is the only device in this build"},
    {{"--fit"}, V_ONOFF, "no GPU memory to fit the model into"},
    {{"--no-mmap"}, V_NONE, "spex reads weights through a read-only mapping (not applied)"},
    {{"--mlock"}, V_NONE, "the mapped weights are not locked in memory (not applied)"},
    {{"--numa"}, V_WORD, "no NUMA placement in spex's thread pool"},
    {{"--no-warmup"}, V_NONE, "spex runs no warm-up pass at load"},
    {{"-cram", "--cache-ram"}, V_INT, "no prompt cache in host memory beyond the slots' own"},
    {{"--swa-full"}, V_NONE, "no sliding-window-attention architectures in spex"},
    {{"--context-shift", "--no-context-shift"}, V_NONE,
     "the context is never shifted: a full slot ends its generation (finish_reason length)"},
    {{"--offline"}, V_NONE, "spex never downloads"},
    {{"-ub", "--ubatch-size"}, V_INT, "a prompt batch runs as one pass (-b sets its size)"},
    {{"-tb", "--threads-batch"}, V_INT, "prompt and generation share the -t threads"},
    {{"--threads-http"}, V_INT, "a thread per request in service (docs/server.md, Connections)"},
    {{"-cb", "--cont-batching", "-nocb", "--no-cont-batching"}, V_NONE, "slots are always batched together"},
    {{"-kvu", "--kv-unified"}, V_NONE, "each slot has its own KV cache of -c / -np positions"},
    {{"--jinja", "--no-jinja"}, V_NONE, "spex renders with its built-in templates (--chat-template)"},
    {{"--cache-prompt", "--no-cache-prompt"}, V_NONE, "a slot's prompt prefix is always reused"},
    {{"--spec-verify-budget"}, V_INT, "the online cost fit sets the draft length"},
    {{"-hf", "--hf-repo", "-hff", "--hf-file"}, V_ERROR, "spex never downloads: pass the GGUF file with -m FILE"},
    {{"-hfd", "--hf-repo-draft", "-mu", "--model-url"}, V_ERROR,
     "spex never downloads: pass the GGUF file with -m FILE (-md FILE for a drafter)"},
};

static bool is_int(const char *v) {
    if (!v || !*v) return false;
    char *end;
    (void)strtol(v, &end, 10);
    return !*end || !strcmp(v, "auto") || !strcmp(v, "all");
}

int cli_llama_flag(const char *a, const char *v, bool *takes) {
    *takes = false;
    for (size_t i = 0; i < sizeof FLAGS / sizeof *FLAGS; i++) {
        const compat_flag *f = &FLAGS[i];
        bool hit = false;
        for (int k = 0; k < 4 && f->names[k] && !hit; k++) hit = !strcmp(a, f->names[k]);
        if (!hit) continue;
        const char *shown = NULL;
        switch (f->kind) {
        case V_NONE: break;
        case V_INT:
            if (!is_int(v)) {
                fprintf(stderr, "error: %s needs an integer (or auto / all)\n", a);
                return -1;
            }
            shown = v, *takes = true;
            break;
        case V_ONOFF:
            /* llama.cpp's newer form takes on|off|auto; the older one is a bare switch */
            if (v && (!strcmp(v, "on") || !strcmp(v, "off") || !strcmp(v, "auto") || !strcmp(v, "1") ||
                      !strcmp(v, "0") || !strcmp(v, "true") || !strcmp(v, "false")))
                shown = v, *takes = true;
            break;
        case V_WORD:
            if (!v || !*v) {
                fprintf(stderr, "error: %s needs a value\n", a);
                return -1;
            }
            shown = v, *takes = true;
            break;
        case V_ERROR:
            fprintf(stderr, "error: %s: %s\n", a, f->why);
            return -1;
        }
        fprintf(stderr, "note: %s%s%s: no effect: %s\n", a, shown ? " " : "", shown ? shown : "", f->why);
        return 1;
    }
    return 0;
}
