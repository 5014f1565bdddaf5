/*
 * compat.c — the llama.cpp flags that `spex run` and `spex serve` do not apply, in one table,
 * so a llama-server / llama-cli command line either starts unchanged and says why a flag does
 * nothing here, or stops with the reason (contract in cli.h, cli_llama_flag).
 *
 * What it is: each flag's names, the value it takes (none, an integer, a number, on/off/auto,
 * a word), the tools that know it (llama-server's own flags are serve's only) and the
 * one-line reason, printed once per flag on stderr as "note: ...". A value that is invalid for
 * llama.cpp is an error naming the flag. A flag whose absence of effect would change the
 * results (an adapter, a grammar, a sampler spex lacks, a RoPE override) is an error with the
 * reason, except with the value that turns the feature off. What it is not: the flags spex
 * applies — those stay in each tool's own parser; docs/server.md has the table of both.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
    V_NONE,    /* a switch                                                              */
    V_INT,     /* an integer, or auto / all                                             */
    V_NUM,     /* a number                                                              */
    V_ONOFF,   /* an optional on|off|auto (llama.cpp's newer form; older: a bare switch) */
    V_WORD,    /* any value                                                             */
    V_OFF,     /* a value: accepted only as `off` (the feature disabled), else refused  */
    V_ERROR,   /* refused, with the reason                                              */
} value_kind;

enum { T_RUN = 1, T_SERVE = 2, T_BOTH = 3 };

typedef struct compat_flag {
    const char *names[5];
    value_kind kind;
    unsigned tools;
    const char *off;   /* V_OFF: the value that disables the feature */
    const char *why;
} compat_flag;

#define NO_GPU "no GPU backend in this build: everything runs on the CPU"
#define ONE_DEVICE "the CPU is the only device in this build"
#define NO_PIN "spex's thread pool sets no CPU affinity, priority or polling"
#define IN_RAM "every weight is in host memory already"
#define NO_LOG "spex's log lines go to stderr, plain, always"
#define NO_DOWNLOAD "spex never downloads: pass the GGUF file with -m FILE"
#define NO_ROPE "RoPE / YaRN overrides are not supported: spex uses the model's own RoPE parameters"
#define NO_LORA "LoRA adapters are not supported: merge the adapter into the GGUF"
#define NO_CVEC "control vectors are not supported"
#define NO_GRAMMAR "grammars and JSON schemas are not supported (a request's grammar / json_schema is a 400 too)"
#define NO_MEDIA "spex serves text only: no images, audio or video"
#define NO_UI "spex's built-in chat page has no settings file and no MCP proxy"
#define NO_TOOLS "the server's built-in tools and MCP servers are not supported"
#define NO_DRAFT_PIN "the drafter runs on the -t threads, with no affinity, priority or polling"
#define NO_MOD "only with --spec-type ngram-mod / ngram-map-k4v, which spex refuses"

static const compat_flag FLAGS[] = {
    /* llama.cpp's common flags (llama-server and llama-cli) */
    {{"--version"}, V_ERROR, T_BOTH, NULL, "spex prints no version: GET /props gives build_info"},
    {{"-cl", "--cache-list"}, V_ERROR, T_BOTH, NULL, "spex has no model cache (it never downloads)"},
    {{"--completion-bash"}, V_ERROR, T_BOTH, NULL, "spex has no bash completion script"},
    {{"-tb", "--threads-batch"}, V_INT, T_BOTH, NULL, "prompt and generation share the -t threads"},
    {{"-C", "--cpu-mask", "-Cb", "--cpu-mask-batch"}, V_WORD, T_BOTH, NULL, NO_PIN},
    {{"-Cr", "--cpu-range", "-Crb", "--cpu-range-batch"}, V_WORD, T_BOTH, NULL, NO_PIN},
    {{"--cpu-strict", "--cpu-strict-batch", "--prio", "--prio-batch"}, V_INT, T_BOTH, NULL, NO_PIN},
    {{"--poll", "--poll-batch"}, V_INT, T_BOTH, NULL, NO_PIN},
    {{"-ub", "--ubatch-size"}, V_INT, T_BOTH, NULL, "a prompt batch runs as one pass (-b sets its size)"},
    {{"--keep"}, V_INT, T_BOTH, NULL, "the context is never shifted, so no prompt tokens are kept across a shift"},
    {{"--swa-full"}, V_NONE, T_BOTH, NULL, "no sliding-window-attention architectures in spex"},
    {{"-fa", "--flash-attn"}, V_ONOFF, T_BOTH, NULL, "spex's attention is always one fused pass over the KV cache"},
    {{"--perf", "--no-perf"}, V_NONE, T_BOTH, NULL, "spex always reports its timings"},
    {{"--rope-scaling"}, V_ERROR, T_BOTH, NULL, NO_ROPE},
    {{"--rope-scale", "--rope-freq-base", "--rope-freq-scale", "--yarn-orig-ctx"}, V_ERROR, T_BOTH, NULL, NO_ROPE},
    {{"--yarn-ext-factor", "--yarn-attn-factor", "--yarn-beta-slow", "--yarn-beta-fast"}, V_ERROR, T_BOTH, NULL, NO_ROPE},
    {{"-kvo", "--kv-offload", "-nkvo", "--no-kv-offload"}, V_NONE, T_BOTH, NULL, "no GPU: the KV cache is in host memory"},
    {{"--no-host"}, V_NONE, T_BOTH, NULL, "no device buffers in this build"},
    {{"-dt", "--defrag-thold"}, V_NUM, T_BOTH, NULL, "spex's KV cache is never fragmented (deprecated in llama.cpp)"},
    {{"--rpc"}, V_WORD, T_BOTH, NULL, "no RPC backend: everything runs on this host's CPU"},
    {{"-lm", "--load-mode"}, V_WORD, T_BOTH, NULL, "spex reads weights through a read-only mapping"},
    {{"-lzm", "--lazy-mode"}, V_WORD, T_BOTH, NULL, "spex maps every tensor; the kernel pages it in on demand"},
    {{"--mlock"}, V_NONE, T_BOTH, NULL, "the mapped weights are not locked in memory (not applied)"},
    {{"--numa"}, V_WORD, T_BOTH, NULL, "no NUMA placement in spex's thread pool"},
    {{"-dev", "--device"}, V_WORD, T_BOTH, NULL, ONE_DEVICE},
    {{"--list-devices"}, V_ERROR, T_BOTH, NULL, "spex has no device list: " ONE_DEVICE},
    {{"-ot", "--override-tensor"}, V_WORD, T_BOTH, NULL, IN_RAM},
    {{"-cmoe", "--cpu-moe"}, V_NONE, T_BOTH, NULL, IN_RAM},
    {{"-ncmoe", "--n-cpu-moe", "--moe-cache-mib", "-ncffn", "--n-cpu-ffn"}, V_INT, T_BOTH, NULL, IN_RAM},
    {{"-ngl", "--n-gpu-layers", "--gpu-layers"}, V_INT, T_BOTH, NULL, NO_GPU},
    {{"-sm", "--split-mode"}, V_WORD, T_BOTH, NULL, "one CPU device: nothing to split"},
    {{"-ts", "--tensor-split"}, V_WORD, T_BOTH, NULL, "one CPU device: nothing to split"},
    {{"-mg", "--main-gpu"}, V_INT, T_BOTH, NULL, NO_GPU},
    {{"-fit", "--fit"}, V_ONOFF, T_BOTH, NULL, "no GPU memory to fit the model into"},
    {{"-fitt", "--fit-target"}, V_WORD, T_BOTH, NULL, "no GPU memory to fit the model into"},
    {{"-fitc", "--fit-ctx"}, V_INT, T_BOTH, NULL, "no GPU memory to fit the model into"},
    {{"--check-tensors"}, V_NONE, T_BOTH, NULL, "tensor data is not scanned at load (the GGUF layout is bounds-checked)"},
    {{"--op-offload", "--no-op-offload"}, V_NONE, T_BOTH, NULL, NO_GPU},
    {{"--lora", "--lora-scaled"}, V_ERROR, T_BOTH, NULL, NO_LORA},
    {{"--control-vector", "--control-vector-scaled", "--control-vector-layer-range"}, V_ERROR, T_BOTH, NULL, NO_CVEC},
    {{"-mu", "--model-url", "-dr", "--docker-repo"}, V_ERROR, T_BOTH, NULL, NO_DOWNLOAD},
    {{"-hf", "-hfr", "--hf-repo"}, V_ERROR, T_BOTH, NULL, NO_DOWNLOAD},
    {{"-hff", "--hf-file"}, V_ERROR, T_BOTH, NULL, NO_DOWNLOAD},
    {{"-hft", "--hf-token"}, V_WORD, T_BOTH, NULL, "spex never downloads"},
    {{"--offline"}, V_NONE, T_BOTH, NULL, "spex never downloads"},
    {{"--log-disable", "--log-jsonl", "--no-log-jsonl"}, V_NONE, T_BOTH, NULL, NO_LOG},
    {{"--log-prefix", "--no-log-prefix", "--log-timestamps", "--no-log-timestamps"}, V_NONE, T_BOTH, NULL, NO_LOG},
    {{"--log-file"}, V_WORD, T_BOTH, NULL, NO_LOG ": redirect stderr"},
    {{"--log-colors"}, V_ONOFF, T_BOTH, NULL, NO_LOG},
    {{"-v", "--verbose", "--log-verbose"}, V_NONE, T_SERVE, NULL, NO_LOG},
    {{"-lv", "--verbosity", "--log-verbosity"}, V_INT, T_BOTH, NULL, NO_LOG},
    {{"-ngld", "--n-gpu-layers-draft", "--spec-draft-ngl", "--gpu-layers-draft"}, V_INT, T_BOTH, NULL,
     "no GPU backend in this build: the drafter runs on the CPU"},
    {{"-devd", "--device-draft", "--spec-draft-device"}, V_WORD, T_BOTH, NULL, ONE_DEVICE},
    /* sampling */
    {{"--sampler-seq", "--sampling-seq"}, V_ERROR, T_BOTH, NULL, "not supported: give the chain by name with --samplers"},
    {{"--ignore-eos"}, V_ERROR, T_BOTH, NULL, "not supported: generation always ends at the end-of-generation token"},
    {{"--top-nsigma", "--top-n-sigma"}, V_OFF, T_BOTH, "-1", "top-n-sigma sampling is not supported"},
    {{"--xtc-probability"}, V_OFF, T_BOTH, "0", "XTC sampling is not supported"},
    {{"--xtc-threshold"}, V_NUM, T_BOTH, NULL, "XTC sampling is not supported (--xtc-probability above 0 is refused)"},
    {{"--typical", "--typical-p"}, V_OFF, T_BOTH, "1", "locally typical sampling is not supported"},
    {{"--dry-multiplier"}, V_OFF, T_BOTH, "0", "DRY sampling is not supported"},
    {{"--dry-base", "--dry-allowed-length", "--dry-penalty-last-n"}, V_NUM, T_BOTH, NULL,
     "DRY sampling is not supported (--dry-multiplier above 0 is refused)"},
    {{"--dry-sequence-breaker"}, V_WORD, T_BOTH, NULL, "DRY sampling is not supported (--dry-multiplier above 0 is refused)"},
    {{"--adaptive-target"}, V_OFF, T_BOTH, "-1", "adaptive-p sampling is not supported"},
    {{"--adaptive-decay"}, V_NUM, T_BOTH, NULL, "adaptive-p sampling is not supported (--adaptive-target is refused)"},
    {{"--dynatemp-range"}, V_OFF, T_BOTH, "0", "dynamic temperature is not supported"},
    {{"--dynatemp-exp"}, V_NUM, T_BOTH, NULL, "dynamic temperature is not supported (--dynatemp-range above 0 is refused)"},
    {{"--mirostat"}, V_OFF, T_BOTH, "0", "Mirostat sampling is not supported"},
    {{"--mirostat-lr", "--mirostat-ent"}, V_NUM, T_BOTH, NULL, "Mirostat sampling is not supported (--mirostat 1 / 2 is refused)"},
    {{"-l", "--logit-bias"}, V_ERROR, T_BOTH, NULL, "logit biases are not supported (a request's logit_bias is a 400 too)"},
    {{"--grammar", "--grammar-file", "-j", "--json-schema"}, V_ERROR, T_BOTH, NULL, NO_GRAMMAR},
    {{"-jf", "--json-schema-file"}, V_ERROR, T_BOTH, NULL, NO_GRAMMAR},
    {{"-bs", "--backend-sampling"}, V_NONE, T_BOTH, NULL, "sampling always runs on the CPU"},
    /* llama-server's own */
    {{"-e", "--escape", "--no-escape"}, V_NONE, T_SERVE, NULL, "the server takes no prompt on its command line"},
    {{"-e", "--escape"}, V_ERROR, T_RUN, NULL, "not supported: the prompt is taken as given (no escape sequences)"},
    {{"--no-escape"}, V_NONE, T_RUN, NULL, "the prompt is always taken as given"},
    {{"-lcs", "--lookup-cache-static", "-lcd", "--lookup-cache-dynamic"}, V_WORD, T_SERVE, NULL,
     "no lookup cache files: --spec-type ngram looks up in each request's own tokens"},
    {{"-cram", "--cache-ram"}, V_INT, T_SERVE, NULL, "no prompt cache in host memory beyond the slots' own"},
    {{"--cache-idle-slots", "--no-cache-idle-slots"}, V_NONE, T_SERVE, NULL, "no prompt cache in host memory beyond the slots' own"},
    {{"-kvu", "--kv-unified", "-no-kvu", "--no-kv-unified"}, V_NONE, T_SERVE, NULL,
     "each slot has its own KV cache of -c / -np positions"},
    {{"--context-shift"}, V_ERROR, T_SERVE, NULL,
     "not supported: the context is never shifted; a full slot ends its generation (finish_reason length)"},
    {{"--no-context-shift"}, V_NONE, T_SERVE, NULL,
     "the context is never shifted: a full slot ends its generation (finish_reason length)"},
    {{"-r", "--reverse-prompt"}, V_WORD, T_SERVE, NULL, "the server stops at each request's own stop strings"},
    {{"-sp", "--special"}, V_ERROR, T_SERVE, NULL, "not supported in the server: control tokens are not printed as text"},
    {{"--warmup", "--no-warmup"}, V_NONE, T_BOTH, NULL, "spex runs no warm-up pass at load"},
    {{"--embd-normalize"}, V_INT, T_SERVE, NULL, "each embeddings request sets its own embd_normalize (default 2, euclidean)"},
    {{"-cb", "--cont-batching", "-nocb", "--no-cont-batching"}, V_NONE, T_SERVE, NULL, "slots are always batched together"},
    {{"-mm", "--mmproj", "-mmu", "--mmproj-url"}, V_ERROR, T_BOTH, NULL, "multimodal projectors are not supported: " NO_MEDIA},
    {{"--mmproj-auto", "--no-mmproj", "--no-mmproj-auto"}, V_NONE, T_BOTH, NULL, "no multimodal projector is ever loaded"},
    {{"--mmproj-offload", "--no-mmproj-offload"}, V_NONE, T_BOTH, NULL, "no multimodal projector is ever loaded"},
    {{"-mmdev", "--mmproj-device"}, V_WORD, T_BOTH, NULL, "no multimodal projector is ever loaded"},
    {{"--image-min-tokens", "--image-max-tokens", "--mtmd-batch-max-tokens"}, V_INT, T_BOTH, NULL, NO_MEDIA},
    {{"--video-fps", "--video-timestamp-interval"}, V_NUM, T_BOTH, NULL, NO_MEDIA},
    {{"--video-ffmpeg-dir", "--media-path"}, V_WORD, T_BOTH, NULL, NO_MEDIA},
    {{"--tags"}, V_WORD, T_SERVE, NULL, "/v1/models lists no tags"},
    {{"--reuse-port"}, V_NONE, T_SERVE, NULL, "the listening socket is not shared with other processes"},
    {{"--cors-methods", "--cors-headers"}, V_OFF, T_SERVE, "*",
     "a preflight allows every method spex has and the headers it asks for: restrict them in a reverse proxy"},
    {{"--cors-credentials", "--no-cors-credentials"}, V_NONE, T_SERVE, NULL,
     "spex answers CORS without credentials (it uses no cookies)"},
    {{"--api-prefix"}, V_ERROR, T_SERVE, NULL, "not supported: the endpoints are at the root (a reverse proxy can strip a prefix)"},
    {{"--ui-config", "--webui-config", "--ui-config-file", "--webui-config-file"}, V_WORD, T_SERVE, NULL, NO_UI},
    {{"--ui-mcp-proxy", "--webui-mcp-proxy", "--no-ui-mcp-proxy", "--no-webui-mcp-proxy"}, V_NONE, T_SERVE, NULL, NO_UI},
    {{"--tools", "--tools-runtime", "--mcp-servers-config", "--mcp-servers-json"}, V_ERROR, T_SERVE, NULL, NO_TOOLS},
    {{"-ag", "--agent"}, V_ERROR, T_SERVE, NULL, NO_TOOLS},
    {{"-no-ag", "--no-agent"}, V_NONE, T_SERVE, NULL, NO_TOOLS},
    {{"--rerank", "--reranking"}, V_ERROR, T_SERVE, NULL, "no reranking: no model spex loads has a classification head"},
    {{"--ssl-key-file", "--ssl-cert-file"}, V_ERROR, T_SERVE, NULL, "no TLS in spex: put a TLS-terminating reverse proxy in front"},
    {{"--threads-http"}, V_INT, T_SERVE, NULL, "a thread per request in service (docs/server.md, Connections)"},
    {{"--cache-prompt", "--no-cache-prompt"}, V_NONE, T_SERVE, NULL, "a slot's prompt prefix is always reused"},
    {{"--cache-reuse"}, V_INT, T_SERVE, NULL, "a slot reuses its prompt's prefix only; no KV shifting"},
    {{"--models-dir", "--models-preset"}, V_ERROR, T_SERVE, NULL, "no router mode: spex serves the one model of -m"},
    {{"--models-max"}, V_INT, T_SERVE, NULL, "no router mode: spex serves the one model of -m"},
    {{"--models-autoload", "--no-models-autoload"}, V_NONE, T_SERVE, NULL, "no router mode: spex serves the one model of -m"},
    {{"--reasoning-effort"}, V_WORD, T_BOTH, NULL, "spex's built-in templates have no effort levels"},
    {{"--reasoning-budget"}, V_OFF, T_BOTH, "-1", "a thinking budget is not supported"},
    {{"--reasoning-budget-message"}, V_WORD, T_BOTH, NULL, "a thinking budget is not supported (--reasoning-budget is refused)"},
    {{"--reasoning-preserve", "--no-reasoning-preserve"}, V_NONE, T_BOTH, NULL,
     "the built-in template decides which reasoning traces it renders"},
    {{"--skip-chat-parsing"}, V_ERROR, T_SERVE, NULL, "not supported: reasoning and tool calls are always parsed"},
    {{"--no-skip-chat-parsing"}, V_NONE, T_SERVE, NULL, "reasoning and tool calls are always parsed"},
    {{"--prefill-assistant"}, V_ERROR, T_SERVE, NULL,
     "not supported: a final assistant message is rendered as a whole turn (as with --no-prefill-assistant)"},
    {{"--no-prefill-assistant"}, V_NONE, T_SERVE, NULL, "a final assistant message is always rendered as a whole turn"},
    {{"-sps", "--slot-prompt-similarity"}, V_NUM, T_SERVE, NULL, "a request goes to the free slot whose cache shares the longest prefix with it"},
    {{"--lora-init-without-apply"}, V_NONE, T_SERVE, NULL, NO_LORA},
    {{"--sleep-idle-seconds"}, V_INT, T_SERVE, NULL, "the model stays loaded while the server runs"},
    {{"--log-prompts-dir"}, V_WORD, T_BOTH, NULL, "prompts are not logged"},
    /* llama-cli's own (spex run) */
    {{"--server-base"}, V_ERROR, T_RUN, NULL, "spex run runs the model itself: point a client at spex serve instead"},
    {{"--verbose-prompt"}, V_NONE, T_RUN, NULL, "-v prints the prompt's token ids"},
    {{"--display-prompt", "--no-display-prompt"}, V_NONE, T_RUN, NULL, "the prompt is never echoed: stdout has the generated text only"},
    {{"-co", "--color"}, V_ONOFF, T_RUN, NULL, "the output is never colored"},
    {{"-ctxcp", "--ctx-checkpoints", "--swa-checkpoints"}, V_INT, T_RUN, NULL, "one prompt per run: no prefix to reuse"},
    {{"-cram", "--cache-ram"}, V_INT, T_RUN, NULL, "one prompt per run: no prompt cache"},
    {{"--context-shift"}, V_ERROR, T_RUN, NULL, "not supported: the context is never shifted; generation ends when it is full"},
    {{"--no-context-shift"}, V_NONE, T_RUN, NULL, "the context is never shifted: generation ends when the context is full"},
    {{"--show-timings", "--no-show-timings"}, V_NONE, T_RUN, NULL, "counts and speeds always go to stderr"},
    {{"-sysf", "--system-prompt-file"}, V_ERROR, T_RUN, NULL, "not supported: give the system message with --system TEXT"},
    {{"-r", "--reverse-prompt"}, V_ERROR, T_RUN, NULL, "not supported: spex run stops at the end-of-generation token or -n"},
    {{"-no-cnv", "--no-conversation"}, V_NONE, T_RUN, NULL, "the prompt is raw unless --chat"},
    {{"-st", "--single-turn"}, V_NONE, T_RUN, NULL, "spex run always runs one turn"},
    {{"-mli", "--multiline-input", "--simple-io"}, V_NONE, T_RUN, NULL, "spex run is not interactive: its output is plain"},
    {{"--image", "--audio", "--video"}, V_ERROR, T_RUN, NULL, "spex runs text only: no images, audio or video"},
    {{"-o", "--output", "--output-file"}, V_ERROR, T_RUN, NULL, "not supported: the text goes to stdout (redirect it)"},
    {{"--reasoning-format"}, V_WORD, T_RUN, NULL, "spex run prints the text as generated, thinking included"},
    {{"--skip-chat-parsing", "--no-skip-chat-parsing"}, V_NONE, T_RUN, NULL, "spex run prints the text as generated, unparsed"},
    /* speculative decoding */
    {{"-hfd", "-hfrd", "--hf-repo-draft", "--spec-draft-hf"}, V_ERROR, T_BOTH, NULL,
     "spex never downloads: pass the drafter's GGUF file with -md FILE"},
    {{"-td", "--threads-draft", "--spec-draft-threads"}, V_INT, T_BOTH, NULL, NO_DRAFT_PIN},
    {{"-tbd", "--threads-batch-draft", "--spec-draft-threads-batch"}, V_INT, T_BOTH, NULL, NO_DRAFT_PIN},
    {{"-Cd", "--cpu-mask-draft", "--spec-draft-cpu-mask"}, V_WORD, T_BOTH, NULL, NO_DRAFT_PIN},
    {{"-Crd", "--cpu-range-draft", "--spec-draft-cpu-range"}, V_WORD, T_BOTH, NULL, NO_DRAFT_PIN},
    {{"-Cbd", "--cpu-mask-batch-draft", "--spec-draft-cpu-mask-batch"}, V_WORD, T_BOTH, NULL, NO_DRAFT_PIN},
    {{"--cpu-strict-draft", "--spec-draft-cpu-strict", "--cpu-strict-batch-draft", "--spec-draft-cpu-strict-batch"},
     V_INT, T_BOTH, NULL, NO_DRAFT_PIN},
    {{"--prio-draft", "--spec-draft-prio", "--prio-batch-draft", "--spec-draft-prio-batch"}, V_INT, T_BOTH, NULL,
     NO_DRAFT_PIN},
    {{"--poll-draft", "--spec-draft-poll", "--poll-batch-draft", "--spec-draft-poll-batch"}, V_INT, T_BOTH, NULL,
     NO_DRAFT_PIN},
    {{"-otd", "--override-tensor-draft", "--spec-draft-override-tensor"}, V_WORD, T_BOTH, NULL, IN_RAM},
    {{"-cmoed", "--cpu-moe-draft", "--spec-draft-cpu-moe"}, V_NONE, T_BOTH, NULL, IN_RAM},
    {{"-ncmoed", "--n-cpu-moe-draft", "--spec-draft-n-cpu-moe", "--spec-draft-ncmoe"}, V_INT, T_BOTH, NULL, IN_RAM},
    {{"--spec-synth-len", "--spec-synth-rates"}, V_ERROR, T_BOTH, NULL,
     "synthetic acceptance (benchmarking only) is not supported: spex bench spec measures drafts"},
    {{"--spec-draft-p-split", "--draft-p-split"}, V_NUM, T_BOTH, NULL, "a draft is one chain: nothing to split"},
    {{"--spec-draft-backend-sampling", "--no-spec-draft-backend-sampling"}, V_NONE, T_BOTH, NULL,
     "the drafter samples on the CPU"},
    {{"--spec-ngram-mod-n-min", "--spec-ngram-mod-n-max", "--spec-ngram-mod-n-match"}, V_INT, T_BOTH, NULL, NO_MOD},
    {{"--spec-ngram-map-k4v-size-n", "--spec-ngram-map-k4v-size-m", "--spec-ngram-map-k4v-min-hits"}, V_INT, T_BOTH,
     NULL, NO_MOD},
    {{"--spec-verify-budget"}, V_INT, T_BOTH, NULL, "the online cost fit sets the draft length"},
    {{"--spec-default"}, V_NONE, T_BOTH, NULL, "the speculative type follows the files given (--spec-type, -md)"},
    /* llama.cpp's presets that download models */
    {{"--embd-gemma-default", "--fim-qwen-1.5b-default", "--fim-qwen-3b-default", "--fim-qwen-7b-default"}, V_ERROR,
     T_BOTH, NULL, NO_DOWNLOAD},
    {{"--fim-qwen-7b-spec", "--fim-qwen-14b-spec", "--fim-qwen-30b-default"}, V_ERROR, T_BOTH, NULL, NO_DOWNLOAD},
    {{"--gpt-oss-20b-default", "--gpt-oss-120b-default", "--vision-gemma-4b-default", "--vision-gemma-12b-default"},
     V_ERROR, T_BOTH, NULL, NO_DOWNLOAD},
};
#define N_FLAGS (sizeof FLAGS / sizeof *FLAGS)

static bool is_int(const char *v) {
    if (!v || !*v) return false;
    char *end;
    (void)strtol(v, &end, 10);
    return !*end || !strcmp(v, "auto") || !strcmp(v, "all");
}

static bool is_num(const char *v) {
    if (!v || !*v) return false;
    char *end;
    (void)strtod(v, &end);
    return !*end;
}

/* v means `off` for a V_OFF flag: the same text, or the same number. */
static bool is_off(const char *v, const char *off) {
    return v && (!strcmp(v, off) || (is_num(v) && is_num(off) && strtod(v, NULL) == strtod(off, NULL)));
}

static const compat_flag *find(bool serve, const char *a) {
    for (size_t i = 0; i < N_FLAGS; i++) {
        if (!(FLAGS[i].tools & (serve ? T_SERVE : T_RUN))) continue;
        for (int k = 0; k < 5 && FLAGS[i].names[k]; k++)
            if (!strcmp(a, FLAGS[i].names[k])) return &FLAGS[i];
    }
    return NULL;
}

int cli_llama_flag(bool serve, const char *a, const char *v, bool *takes) {
    *takes = false;
    const compat_flag *f = find(serve, a);
    if (!f) return 0;
    switch (f->kind) {
    case V_NONE: break;
    case V_INT:
    case V_NUM:
        if (f->kind == V_INT ? !is_int(v) : !is_num(v)) {
            fprintf(stderr, "error: %s needs %s\n", a, f->kind == V_INT ? "an integer (or auto / all)" : "a number");
            return -1;
        }
        *takes = true;
        break;
    case V_ONOFF:
        /* llama.cpp's newer form takes on|off|auto; the older one is a bare switch */
        *takes = v && (!strcmp(v, "on") || !strcmp(v, "off") || !strcmp(v, "auto") || !strcmp(v, "1") ||
                       !strcmp(v, "0") || !strcmp(v, "true") || !strcmp(v, "false"));
        break;
    case V_WORD:
        if (!v || !*v) {
            fprintf(stderr, "error: %s needs a value\n", a);
            return -1;
        }
        *takes = true;
        break;
    case V_OFF:
        if (!is_off(v, f->off)) {
            fprintf(stderr, "error: %s %s: %s (only %s, off, is accepted)\n", a, v ? v : "", f->why, f->off);
            return -1;
        }
        *takes = true;
        break;
    case V_ERROR:
        fprintf(stderr, "error: %s: %s\n", a, f->why);
        return -1;
    }
    fprintf(stderr, "note: %s%s%s: no effect: %s\n", a, *takes ? " " : "", *takes ? v : "", f->why);
    return 1;
}

/* The names of one group (accepted, or refused), wrapped under a heading. */
static void help_group(FILE *out, bool serve, bool refused, const char *heading) {
    fprintf(out, "\n%s\n ", heading);
    int col = 1;
    for (size_t i = 0; i < N_FLAGS; i++) {
        const compat_flag *f = &FLAGS[i];
        if (!(f->tools & (serve ? T_SERVE : T_RUN)) || (f->kind == V_ERROR) != refused) continue;
        for (int k = 0; k < 5 && f->names[k]; k++) {
            int w = (int)strlen(f->names[k]) + 1;
            if (col + w > 100) fprintf(out, "\n "), col = 1;
            fprintf(out, " %s", f->names[k]);
            col += w;
        }
    }
    fprintf(out, "\n");
}

void cli_llama_flags_help(FILE *out, bool serve) {
    help_group(out, serve, false,
               "llama.cpp flags accepted without effect (a 'note:' line at start says why; sampler flags only\n"
               "with the value that turns the sampler off):");
    help_group(out, serve, true, "llama.cpp flags refused (an 'error:' line says why and what to do instead):");
}
