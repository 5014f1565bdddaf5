/*
 * server.h — internals of `spex serve` shared by the src/server sources (not a public API).
 *
 * What it is: the parsed request (api.c), the task an HTTP thread hands to the engine
 * (engine.c), the engine itself, and the entry point tools/serve.c calls (http.c). What it is
 * not: anything the library exports — the server is built on include/spex.h only and never
 * reaches into src/model (style.md). Spec: ../shared/docs/server-api.md (cited as §N).
 *
 * Threads: the front door's thread (door.c) holds connections until their request head is
 * complete; libmicrohttpd then runs one thread per request in service (http.c); one engine thread owns the
 * target/draft contexts and the spex_spec and advances every busy slot in one batched step.
 * A task is shared by its connection thread and the engine: its mutex guards the output part.
 */
#ifndef SPEX_SERVER_H
#define SPEX_SERVER_H

#include "spex.h"
#include "spec/guard.h"
#include "spec/api.h"
#include "core/clock.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SRV_MAX_STOP 16          /* stop strings per request                          */
#define SRV_MAX_STOP_LEN 256     /* bytes per stop string                             */
#define SRV_MAX_FIELDS 32        /* response_fields entries                           */

/* ======================================================================== */
/* Requests (api.c)                                                          */
/* ======================================================================== */

typedef enum srv_endpoint {
    SRV_EP_CHAT = 1,          /* POST /v1/chat/completions                            */
    SRV_EP_COMPLETIONS = 2,   /* POST /v1/completions                                 */
    SRV_EP_COMPLETION = 3,    /* POST /completion (llama.cpp native)                  */
    SRV_EP_RESPONSES = 4,     /* POST /v1/responses: routing only (responses.h), runs as CHAT */
    SRV_EP_MESSAGES = 5,      /* POST /v1/messages (Anthropic): routing only; its request is
                               * a chat one with srv_request.anthropic set (anthropic.c)    */
    SRV_EP_INFILL = 6,        /* POST /infill: parsed and answered as /completion (infill.c) */
} srv_endpoint;

typedef enum srv_reasoning {
    SRV_REASONING_DEFAULT = -1,
    SRV_REASONING_NONE = 0,        /* thinking left in content                        */
    SRV_REASONING_DEEPSEEK = 1,    /* moved to reasoning_content                      */
    SRV_REASONING_LEGACY = 2,      /* both                                            */
} srv_reasoning;

typedef struct srv_msg {
    spex_chat_role role;
    char *content;            /* text parts joined; owned                             */
    char *reasoning;          /* assistant reasoning_content or NULL; owned           */
    spex_chat_tool_call *tool_calls;   /* assistant tool_calls; name/arguments owned  */
    int n_tool_calls;
} srv_msg;

/* tool_choice (§6.1). Forcing a call (required, a named function) is not implemented: those
 * render the tools like auto. none: the tools are not rendered and the output not parsed. */
typedef enum srv_tool_choice {
    SRV_TOOL_CHOICE_AUTO = 0,
    SRV_TOOL_CHOICE_NONE = 1,
    SRV_TOOL_CHOICE_REQUIRED = 2,
    SRV_TOOL_CHOICE_FUNCTION = 3,
} srv_tool_choice;

/* One parsed request body; every pointer owned (srv_request_free). Fields absent from the
 * JSON keep the "unset" values below, so the server defaults apply. */
typedef struct srv_request {
    srv_endpoint ep;
    srv_msg *msgs;            /* chat                                                  */
    int n_msgs;
    char *prompt;             /* completions: text prompt (NULL when ids are given)    */
    int32_t *prompt_ids;      /* completions: token ids                                */
    int n_prompt_ids;
    char *model;              /* echoed in responses when present                      */
    long n_predict;           /* -2: unset; -1: unlimited                              */
    /* sampling: has_* says the field was given */
    bool has_temp, has_top_p, has_top_k, has_min_p, has_seed, has_rep, has_rep_n, has_freq, has_pres;
    float temp, top_p, min_p, repeat_penalty, freq_penalty, pres_penalty;
    int32_t top_k, repeat_last_n;
    int64_t seed;             /* -1: random                                            */
    char *stop[SRV_MAX_STOP];
    int n_stop;
    bool stream, include_usage, timings_per_token;
    bool return_tokens;       /* /completion: the generated ids as "tokens"              */
    char **response_fields;   /* /completion: only these fields ("a/b" nested), owned     */
    int n_response_fields;
    int enable_thinking;      /* -1: unset                                             */
    srv_reasoning reasoning_format;
    int32_t spec_n_max;       /* -1: unset (speculative.n_max)                          */
    int32_t spec_n_min;       /* -1: unset (speculative.n_min)                          */
    float spec_p_min;         /* < 0: unset (speculative.p_min)                         */
    /* chat tools (§6.1): each tool object printed compactly by cJSON (key order kept)    */
    char **tools;
    int n_tools;
    srv_tool_choice tool_choice;
    bool parallel_tool_calls; /* accepted; calls are never limited                     */
    /* /tokenize, /detokenize */
    bool add_special, with_pieces;
    bool anthropic;           /* parsed from a /v1/messages body: Anthropic response shapes */
    struct srv_infill *infill;   /* /infill (ep SRV_EP_COMPLETION, want_infill): owned     */
    bool want_infill;
} srv_request;

void srv_request_init(srv_request *r, srv_endpoint ep);
void srv_request_free(srv_request *r);
/* Parses body[0 .. len) for endpoint r->ep (after srv_request_init). Returns 0, or an HTTP
 * status (400, 501) with a message in msg. Needs no model (fuzz/fuzz_server_req.c). */
int srv_request_parse(srv_request *r, const char *body, size_t len, char *msg, size_t msg_cap);
/* /tokenize ({content, add_special, with_pieces}) and /detokenize ({tokens}): the same
 * error rules; content goes to r->prompt, tokens to r->prompt_ids. */
int srv_parse_tokenize(srv_request *r, const char *body, size_t len, char *msg, size_t msg_cap);
int srv_parse_detokenize(srv_request *r, const char *body, size_t len, char *msg, size_t msg_cap);

/* ======================================================================== */
/* Anthropic Messages (anthropic.c: requests; anthropic_out.c: responses)   */
/* ======================================================================== */

/* Parses an Anthropic Messages body (count_tokens: the /v1/messages/count_tokens body, which
 * has no max_tokens and does not stream) into r (after srv_request_init) as the equivalent
 * chat request, r->anthropic set. 0, or an HTTP status (400, 500, 501) with msg. Needs no model. */
int srv_anthropic_parse(srv_request *r, const char *body, size_t len, bool count_tokens, char *msg, size_t msg_cap);
/* Anthropic's error body {"type":"error","error":{type, message, code}}, malloc'd. */
char *srv_anthropic_error_json(int code, const char *msg);
const char *srv_anthropic_error_type(int code);

/* ======================================================================== */
/* Fill-in-the-middle (infill.c)                                             */
/* ======================================================================== */

/* /infill's own fields (everything else is /completion's); strings owned. */
typedef struct srv_infill {
    char *prefix, *suffix;    /* input_prefix, input_suffix ("" when absent)             */
    char **files, **texts;    /* input_extra chunks: filename ("tmp" when absent), text (required) */
    int n_extra;
} srv_infill;

/* The model's FIM tokens (-1: none). */
typedef struct srv_fim {
    int32_t pre, suf, mid, pad, rep, sep;
} srv_fim;

/* Reads /infill's fields of body object o into r->infill (prompt: r->prompt, may stay NULL).
 * 0 or 400 with msg. Needs no model. */
struct cJSON;
int srv_infill_parse(srv_request *r, const struct cJSON *o, char *msg, size_t cap);
void srv_infill_free(srv_infill *f);
/* The FIM tokens from the GGUF's tokenizer.ggml.fim_*_token_id (or the older prefix/suffix/
 * middle_token_id) keys, else from the known token texts (<|fim_prefix|>, ...). */
void srv_fim_tokens(const spex_gguf *g, const spex_tokenizer *tok, srv_fim *out);
/* The prompt of an /infill request (layout in infill.c); n_batch, n_ctx, n_predict bound its
 * parts as llama-server does. 0 with *ids (malloc'd), or 400 / 500 with msg. */
int srv_infill_tokens(const spex_tokenizer *tok, const srv_fim *fim, const srv_request *r, bool spm, int32_t n_batch,
                      int32_t n_ctx, long n_predict, int32_t **ids, int *n_ids, char *msg, size_t cap);

/* ======================================================================== */
/* Embeddings requests (embd.c)                                              */
/* ======================================================================== */

#define SRV_EMBD_MAX_INPUTS 2048   /* inputs of one request (OpenAI's limit)                 */
#define SRV_EMBD_SEQS 8            /* inputs that share one forward pass of the embeddings context */

/* One input: text (owned, NUL-terminated) or, when text is NULL, token ids (owned). */
typedef struct srv_embd_input {
    char *text;
    int32_t *ids;
    int n_ids;
} srv_embd_input;

typedef struct srv_embd_req {
    srv_embd_input *in;       /* [n_in], owned                                         */
    int n_in;
    bool oai;                 /* OpenAI's response shape: /v1/embeddings with "input"   */
    bool base64;              /* encoding_format "base64"                              */
    int32_t normalize;        /* embd_normalize (default 2; below -1 read as -1)        */
    char *model;              /* echoed when given (owned)                             */
} srv_embd_req;

/* Parses an embeddings body (rules in embd.c); oai: the endpoint is /v1/embeddings (llama-
 * server answers /embeddings and /embedding in its own shape). 0, or 400 / 500 with msg. Always free with srv_embd_req_free. Needs no model. */
int srv_parse_embd(srv_embd_req *r, const char *body, size_t len, bool oai, char *msg, size_t msg_cap);
void srv_embd_req_free(srv_embd_req *r);
/* The response body, malloc'd (NULL when out of memory): vecs holds, input after input,
 * n_rows[i] rows of E floats (1 when pooled, the tokens with pooling none). OpenAI's shape
 * {"object":"list","data":[{"object":"embedding","index","embedding"}],"model","usage"} or
 * llama-server's [{"index","embedding":[[...], ...]}]. model: used when the request has none. */
char *srv_embd_response(const srv_embd_req *r, const float *vecs, const int32_t *n_rows, int64_t E,
                        int64_t n_tokens, const char *model);

/* ======================================================================== */
/* Tool calls in generated text (toolcall.c)                                 */
/* ======================================================================== */

/* A growable NUL-terminated byte buffer (p may be NULL while len is 0). */
typedef struct srv_strbuf {
    char *p;
    size_t len, cap;
} srv_strbuf;

bool srv_strbuf_add(srv_strbuf *b, const char *s, size_t n);   /* false: out of memory */
void srv_strbuf_free(srv_strbuf *b);

typedef struct srv_tool_call {
    char *name;               /* owned                                                 */
    char *arguments;          /* owned; JSON text (compact object, or the model's string) */
} srv_tool_call;

/* Incremental splitter of generated text into content and <tool_call> blocks; the rules are
 * in toolcall.c's opening comment. Feed pieces in order, then finish once; content is
 * appended to out as soon as it is settled, completed calls to calls[0 .. n_calls) (the
 * caller remembers how many it has sent). oom: an allocation failed (output incomplete). */
typedef struct srv_toolparse {
    srv_tool_call *calls;
    int n_calls, cap_calls;
    bool oom;
    /* private */
    srv_strbuf hold;          /* text state: blanks + a partial "<tool_call>"; block state: blanks before it */
    srv_strbuf body;          /* block state: the bytes after "<tool_call>"                  */
    bool in_block, json_decided, json_mode, in_str, esc, after_call;
} srv_toolparse;

void srv_toolparse_init(srv_toolparse *p);
void srv_toolparse_free(srv_toolparse *p);
void srv_toolparse_feed(srv_toolparse *p, const char *s, size_t n, srv_strbuf *out);
void srv_toolparse_finish(srv_toolparse *p, srv_strbuf *out);

/* llama.cpp's timings object (§10) plus what usage needs (§9). */
typedef struct srv_timings {
    int64_t n_prompt;         /* the whole prompt's tokens (usage, tokens_evaluated)    */
    int64_t cache_n, prompt_n, predicted_n;
    double prompt_ms, predicted_ms;
    int64_t draft_n, draft_n_accepted, draft_rounds;
} srv_timings;

/* Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF); s may be NULL when n is 0. */
bool srv_utf8_valid(const char *s, size_t n);
/* msg = the formatted text (truncated to cap); returns code, so a parser can `return srv_fail(...)`. */
int srv_fail(char *msg, size_t cap, int code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* A JSON string of n bytes (cJSON needs NUL-terminated text); "" when out of memory. */
struct cJSON *srv_json_str_n(const char *s, size_t n);
/* s[0 .. n) with every invalid sequence replaced by U+FFFD (one per maximal invalid subpart),
 * NUL-terminated, malloc'd (NULL when out of memory); *out_len its length. */
char *srv_utf8_repair(const char *s, size_t n, size_t *out_len);
/* A JSON string of s with invalid UTF-8 repaired as above (error messages quote request bytes). */
struct cJSON *srv_json_utf8(const char *s);

/* The error body {"error": {code, message, type}} (§3), malloc'd. */
char *srv_error_json(int code, const char *msg);
const char *srv_error_type(int code);

/* Splits generated text at </think> (§6.3). think_open: the prompt already opened the
 * block. SRV_SPLIT_YES: [*r0, *r1) is reasoning, [*c0, len) content (r0 <= r1 <= c0 <= len);
 * before the closing tag (final=false) a tail that could start it and trailing newlines stay
 * out of the reasoning part. SRV_SPLIT_NONE: no reasoning, everything is content.
 * SRV_SPLIT_WAIT (final=false only): the text may still become "<think>"; send nothing yet. */
enum { SRV_SPLIT_NONE = 0, SRV_SPLIT_YES = 1, SRV_SPLIT_WAIT = 2 };
int srv_split_reasoning(const char *text, size_t len, bool think_open, bool final, size_t *r0, size_t *r1,
                        size_t *c0);

/* ======================================================================== */
/* Tasks and the engine (engine.c)                                           */
/* ======================================================================== */

typedef struct srv_task {
    /* set by the HTTP thread before submission, read-only afterwards */
    srv_endpoint ep;
    int32_t *ids;             /* the prompt (owned)                                    */
    int n_ids;
    spex_sampler *smp;        /* owned; prompt already in its history                  */
    spex_detok_stream *ds;    /* owned; prompt already pushed                          */
    long n_predict;           /* -1: until EOG or a full context                       */
    char stop[SRV_MAX_STOP][SRV_MAX_STOP_LEN];
    int n_stop;
    int32_t spec_n_max;       /* per-request cap (-1: none)                            */
    int32_t spec_n_min;       /* per-request n_min / p_min (-1: the server's)           */
    float spec_p_min;

    /* engine-only state */
    int slot;
    long n_gen;
    double t_queued, t_start, t_prefilled, t_last;
    double p_acc_s, p_acc_f;  /* decayed acceptance counts (adaptive draft length)     */
    uint64_t last_probe;
    int32_t fed;              /* prompt tokens in the slot's cache (prefix reuse + chunks) */
    bool admitted_once;       /* the prefix has been matched against the slot's cache    */

    /* shared, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *text;               /* generated text (cut at a stop string)                 */
    int32_t *gen_ids;         /* the generated tokens (return_tokens), n_gen_ids of them */
    int n_gen_ids, cap_gen_ids;
    size_t len, cap;
    size_t released;          /* bytes that may be sent (no partial stop string)       */
    bool done, cancelled;
    const char *finish;       /* "stop" / "length" when done without error             */
    int stop_word;            /* the stop string that ended it (index), or -1          */
    bool truncated;           /* ended because the slot's context was full             */
    int slot_used;            /* the slot it ran in (id_slot), -1 before admission     */
    int err_code;             /* != 0: failed with this HTTP status                    */
    char err_msg[256];
    srv_timings tm;
    int refs;                 /* connection + engine                                   */

    /* published by the engine under the engine's mutex after each step, for GET /slots */
    long pub_n_gen;
    int64_t pub_draft_n, pub_draft_n_accepted;
    int64_t pub_cache_n, pub_processed;   /* the prompt's reused and processed tokens, once fed */
    int64_t id_task;          /* set under the engine's mutex at submission (GET /slots)    */
} srv_task;

/* An embeddings job: the inputs' tokens run one after the other on the engine's embeddings
 * context (srv_engine_params.embd_ctx), between generation steps. */
typedef struct srv_embd_job {
    const int32_t *ids;       /* every input's tokens, one input after the other (borrowed) */
    const int32_t *n_ids;     /* [n_in] tokens per input, each 1 .. the context's batch     */
    int n_in;
    float *out;               /* rows, input after input: n_ids[i] x E (pooling none) or E  */
    /* engine-only */
    int next;                 /* inputs done                                              */
    int64_t ids_off, out_off;
    struct srv_embd_job *q_next;
    bool cancelled;           /* its client left (under the engine's mutex)               */
    /* set by the engine under its mutex */
    bool done;
    int err_code;             /* != 0: failed with this HTTP status                       */
    char err_msg[256];
} srv_embd_job;

/* A slot action (POST /slots/{id}?action=..., slots_io.c) run by the engine thread between
 * steps on an idle slot; on a slot with a request in it, it waits until the request ends. */
typedef enum srv_slot_action { SRV_SLOT_SAVE = 1, SRV_SLOT_RESTORE = 2, SRV_SLOT_ERASE = 3 } srv_slot_action;

typedef struct srv_slot_job {
    srv_slot_action action;
    int slot;
    size_t hdr_room;          /* save: bytes left free before the payload                  */
    uint8_t *buf;             /* save: malloc'd by the engine (the caller frees): hdr_room,
                               * then n u32 tokens, then the cache image; len in all        */
    size_t len;
    const int32_t *tokens;    /* restore (borrowed): n tokens and the cache image            */
    const void *image;
    uint64_t image_bytes;
    int32_t n;                /* restore: tokens given; results: tokens saved/restored/erased */
    double ms;                /* the engine's part, in milliseconds                         */
    /* engine-only */
    struct srv_slot_job *q_next;
    /* set by the engine under its mutex */
    bool done;
    int err_code;
    char err_msg[256];
} srv_slot_job;

typedef struct srv_engine srv_engine;   /* (below) */
/* Runs job on the engine thread and waits; false: the engine has stopped (job untouched). */
bool srv_engine_slot_action(srv_engine *e, srv_slot_job *job);
/* The most bytes a slot's cache image of n tokens takes (0: n outside the slot's context). */
uint64_t srv_engine_image_max(srv_engine *e, int32_t n);

/* Creates a task holding one reference (the caller's); srv_task_release drops one. */
srv_task *srv_task_new(void);
void srv_task_release(srv_task *t);

typedef struct srv_engine srv_engine;

typedef struct srv_engine_params {
    int32_t n_slots;
    int32_t n_ctx_slot;       /* positions per slot                                    */
    int32_t queue_max;        /* waiting tasks beyond the slots; 503 past it           */
    bool adaptive;            /* per-slot adaptive draft length (§14.2 rule 5)          */
    float min_gain;           /* --spec-min-gain                                        */
    int32_t step_delay_ms;    /* testing only: sleep after each step                    */
    struct spex_context *embd_ctx;   /* embeddings context (--embedding) or NULL: borrowed;
                                      * on the target context's pool (the engine runs both)  */
    int32_t embd_pooling;     /* spex_pooling of its vectors                            */
} srv_engine_params;

/* Borrows everything; starts the engine thread. spec's draft context may be NULL. */
spex_status srv_engine_start(const srv_engine_params *p, spex_spec *spec, const spex_tokenizer *tok,
                             int32_t n_max, srv_engine **out, spex_error *err);
/* Cancels queued and running tasks (they end with 503) and joins the thread; later
 * submissions fail (503). srv_engine_free stops if needed and frees. */
void srv_engine_stop(srv_engine *e);
void srv_engine_free(srv_engine *e);
/* Queues t (takes a reference). false: the queue is full (503) or the engine stopped. */
bool srv_engine_submit(srv_engine *e, srv_task *t);
/* Runs job on the engine thread (between steps; its inputs take at most one prefill chunk of
 * tokens per engine iteration, so running streams keep flowing, up to SRV_EMBD_SEQS of them in
 * one forward) and waits for it. false:
 * the engine has stopped or has no embeddings context (job untouched); else job->done with
 * job->err_code 0 or an HTTP status (400 a bad token id, 503 shutdown) and err_msg. */
bool srv_engine_embed(srv_engine *e, srv_embd_job *job, bool (*client_gone)(void *user), void *user);
/* Marks t cancelled (the client went away); the engine frees its slot within one step. */
void srv_task_cancel(srv_engine *e, srv_task *t);
/* Prometheus text of /metrics (§11), malloc'd. */
char *srv_engine_metrics(srv_engine *e);

/* The server's generation defaults, echoed by GET /props and by idle slots in GET /slots. */
typedef struct srv_gen_defaults {
    spex_sampler_params sp;
    long n_predict;           /* -1: unlimited                                         */
    int32_t n_max, n_min;     /* effective draft lengths (n_max 0: no drafter)          */
    float p_min;
    const char *spec_type;    /* "draft-dflash" or "none"                               */
} srv_gen_defaults;

/* GET /slots body (§12), malloc'd: one object per slot, read under the engine's mutex from
 * what the engine publishes there (srv_task.pub_*) and from the running task's immutable
 * request fields. NULL when out of memory. */
char *srv_engine_slots_json(srv_engine *e, const srv_gen_defaults *d);
/* Slots no request holds now (GET /slots?fail_on_no_slot=1). */
int srv_engine_idle_slots(srv_engine *e);

/* ======================================================================== */
/* Anthropic Messages responses (anthropic_out.c)                            */
/* ======================================================================== */

/* What a /v1/messages response needs besides its task; pointers borrowed. */
typedef struct srv_anth_ctx {
    const char *id;           /* "msg_..."                                              */
    const char *model;
    bool think_open;          /* the prompt opened <think> (§6.3)                        */
    bool tools;               /* tools were rendered: <tool_call> blocks become tool_use */
    srv_reasoning reasoning;  /* the effective reasoning format                          */
} srv_anth_ctx;

/* A stream's progress: what was sent, which content block is open. */
typedef struct srv_anth_stream {
    srv_toolparse tp;
    size_t c_sent, r_sent;    /* text / reasoning bytes of the task already sent            */
    int calls_sent;
    int open;                 /* the open block: 0 none, 1 thinking, 2 text                 */
    int n_blocks;             /* blocks started (the open one is n_blocks - 1)              */
    bool started;             /* message_start sent                                        */
} srv_anth_stream;

/* The message object of a finished task (t->mu held; t ended without error). */
struct cJSON *srv_anthropic_message(const srv_anth_ctx *x, const srv_task *t);
void srv_anthropic_stream_init(srv_anth_stream *s);
void srv_anthropic_stream_free(srv_anth_stream *s);
/* Appends to out the SSE events for what t released since the last call (t->mu held); true
 * once the stream has ended (message_stop or an error event written). */
bool srv_anthropic_stream_step(srv_anth_stream *s, const srv_anth_ctx *x, const srv_task *t, srv_strbuf *out);
/* llama.cpp's timings object (§10) added to o under "timings" (http.c). */
void srv_add_timings(struct cJSON *o, const srv_timings *tm);

/* ======================================================================== */
/* /props and /slots helpers (props.c)                                       */
/* ======================================================================== */

/* What GET /props reports; every pointer borrowed. */
typedef struct srv_props_info {
    srv_gen_defaults d;
    int32_t n_slots, n_ctx_slot;
    const char *model_path, *model_alias;
    const spex_gguf *gguf;           /* the target's: tokenizer.chat_template               */
    spex_chat_template tmpl;         /* the built-in template spex renders with             */
    bool tmpl_from_flag;             /* --chat-template NAME chose it (the GGUF text unused) */
    const char *jinja_text;          /* --chat-template-file's text (NULL: none)            */
    const char *spec_variant;        /* "dflash2", "dflash" or NULL (no drafter)            */
    const char *build_info;
    bool endpoint_slots, endpoint_props, endpoint_metrics;
} srv_props_info;

/* GET /props body, malloc'd (NULL when out of memory). */
char *srv_props_json(const srv_props_info *pi);
/* POST /props with --props: the body must be a JSON object; spex has no property that can
 * change at run time, so nothing else is read. 0 (answer {"success": true}) or 400 with msg. */
int srv_props_update(const char *body, size_t len, char *msg, size_t msg_cap);
/* The llama-server `params` object of a slot: d's values, or t's (its sampler's params,
 * n_predict, stop strings and per-request speculative.n_max) when t is not NULL. */
struct cJSON *srv_params_json(const srv_gen_defaults *d, const srv_task *t);

/* ======================================================================== */
/* Request heads and the front door (head.c, door.c)                         */
/* ======================================================================== */

/* What the front door needs of a request head (srv_head_check). */
typedef struct srv_head {
    char method[16];          /* truncated past 15 bytes                                */
    char path[64];            /* the target before '?', truncated past 63 bytes          */
    bool http10;              /* HTTP/1.0 (else 1.1 or a later 1.x)                      */
    bool is_head;             /* method HEAD: a reply has no body                        */
    bool probe;               /* GET or HEAD of /health, /v1/health or /metrics          */
    int64_t content_length;   /* -1: none; INT64_MAX: too large to represent             */
    bool chunked;             /* Transfer-Encoding: chunked                              */
} srv_head;

/* Length of the request head in buf[0 .. n), its blank line included; 0: not complete yet. */
size_t srv_head_end(const char *buf, size_t n);
/* Checks the head buf[0 .. n) (n from srv_head_end) by head.c's rules. 0, or the HTTP status
 * to answer (400, 413, 501, 505) with msg. Needs no server (fuzz/fuzz_http_head.c). */
int srv_head_check(const char *buf, size_t n, size_t body_max, srv_head *h, char *msg, size_t msg_cap);

/* Places in service kept for /health and /metrics beyond --conn-max (docs/server.md). */
#define SRV_CONN_RESERVE 8

typedef struct srv_door srv_door;

typedef struct srv_door_params {
    const char *host;         /* IPv4 address to listen on                              */
    int port;                 /* 0: any free port (srv_door_port tells)                 */
    int conn_max;             /* connections sending their head, and requests in service: each */
    int conn_max_per_ip;      /* both, per client address; 0: no limit                   */
    double header_timeout_s;  /* a connection's head must be complete this long after accept */
    size_t body_max;          /* Content-Length above it: 413                            */
    /* Hands a connection whose head passed to the HTTP library, which owns fd from then on
     * and reports its end with srv_door_closed. false: the library refused it (fd closed). */
    bool (*handoff)(void *user, int fd, const struct sockaddr_in *addr);
    void *user;
} srv_door_params;

/* Binds and listens, then starts the door's thread. */
spex_status srv_door_start(const srv_door_params *p, srv_door **out, spex_error *err);
int srv_door_port(const srv_door *d);
/* A handed connection of client address ip (network order) has ended. Any thread. */
void srv_door_closed(srv_door *d, uint32_t ip);
/* Requests in service (handed and not yet closed). */
int srv_door_in_service(srv_door *d);
/* Stops accepting, closes every connection not yet handed, joins the thread. */
void srv_door_stop(srv_door *d);
/* Stops if needed and frees; after the HTTP library has stopped (srv_door_closed uses d). */
void srv_door_free(srv_door *d);

/* ======================================================================== */
/* The server (http.c)                                                       */
/* ======================================================================== */

typedef struct srv_config {
    const char *model, *draft, *alias, *host;
    spex_spec_type spec_type; /* --spec-type (AUTO: from -md's file; NONE without one)           */
    spex_ngram_params ngram_params;
    int port;
    const char *api_keys;     /* comma list or NULL                                    */
    const char *cors_origins; /* --cors-origins (checked by srv_cors_valid); NULL: `*`   */
    bool no_webui;            /* --no-webui: no page at `/` (404)                       */
    const char *static_path;  /* --path: serve this folder's files at `/` instead       */
    int32_t n_ctx;            /* total over all slots (0: 4096 per slot)               */
    int32_t n_slots;
    int32_t n_batch;
    int32_t n_threads;
    long n_predict;           /* default -n                                            */
    spex_sampler_params sp;   /* default sampling                                      */
    int32_t n_draft_max, n_draft_min;
    float p_draft_min;
    bool draft_greedy;
    spex_type draft_kv;
    spex_type kv_type;        /* the target's KV cache (-ctk / -ctv)                   */
    const char *chat_template;   /* NULL: detected                                     */
    bool jinja;                  /* --jinja: render with the GGUF's own template       */
    const char *chat_template_file;   /* --chat-template-file: a Jinja template (implies --jinja) */
    bool spm_infill;             /* --spm-infill: /infill in suffix-prefix-middle order          */
    const char *slot_save_path;  /* --slot-save-path: saved slots' folder (NULL: no save/restore) */
    int enable_thinking;         /* default for requests (1/0)                         */
    srv_reasoning reasoning_format;
    bool metrics;
    bool no_repack;           /* --no-repack: no R16 copies of the weights at load        */
    bool no_mmap;             /* --no-mmap: read the model files instead of mapping them  */
    const char *const *model_overrides;   /* --override-kv: the target's metadata         */
    int n_model_overrides;
    bool slots;               /* GET /slots (--slots, default; --no-slots: 501)          */
    bool props;               /* POST /props accepted (--props; else 403)                */
    int32_t queue_max;
    size_t body_max;
    int timeout_s;
    int conn_max;             /* --conn-max                                               */
    int conn_max_per_ip;      /* --conn-max-per-ip (0: no limit)                          */
    double header_timeout_s;  /* --header-timeout                                         */
    int sse_ping_s;           /* --sse-ping-interval; <= 0: off                          */
    bool adaptive;
    bool draft_cut;           /* --spec-draft-cut: spex_spec_params.draft_cut (on)          */
    float min_gain;
    int32_t n_ctx_checkpoints;   /* recurrent targets: checkpoints per slot (--ctx-checkpoints) */
    int32_t checkpoint_min_step; /* --checkpoint-min-step                                         */
    int32_t step_delay_ms;
    const char *const *overrides;
    int n_overrides;
    bool embedding;           /* --embedding / --embeddings: the embeddings endpoints      */
    int32_t pooling;          /* --pooling: a spex_pooling, -1 (unset): the model's         */
} srv_config;

/* Runs until SIGINT/SIGTERM; returns the process exit status. */
int srv_main(const srv_config *cfg);

/* The adaptive draft length's model (engine.c; docs/server.md "Speculation under
 * concurrency"). A step's cost in seconds: verify v0 + v1·rows (rows = Σ(n_s + 1)), plus the
 * drafter's d0 + d1·drows when any slot drafts (drows = Σ over drafting slots of n_s + 1). */
/* Measured step times by row count, bucket k = rows in [2^k, 2^(k+1)): decayed sums of the
 * time, the rows and the weight of the steps that fell in it. */
#define SRV_BUCKETS 16
typedef struct {
    double t, r, w;
} srv_bucket;

typedef struct {
    double v0, v1, d0, d1;
    /* Optional (NULL: the linear fit alone): measured times by bucket of rows / drafted rows.
     * A bucket with weight >= 1 replaces the fit near its mean row count (the fit's slope
     * covers the distance), so a cost curve that is not a line — a small batch that is
     * memory-bound, a large one that is compute-bound — is priced by what it measured. */
    const srv_bucket *vb, *db;
    bool d0_sunk;   /* the drafter's fixed cost d0 counts as paid in every configuration */
    /* Optional (NULL: none), per slot: seconds added to any configuration in which that slot
     * drafts — its share of a one-off cost of starting to draft (the engine's backlog price). */
    const double *start;
} srv_step_cost;

/* The realized-rate guard (engine.c) keeps per number of stepping slots a spex_realized
 * (spec/guard.h) of the steps in which some slot drafted and of those in which none did, the
 * seconds counting draft, backlog injection, verify and other.
 * The guard's verdict at n stepping slots (real indexed by slots, 1..n): the own one where both
 * kinds of step have min_w weight at n; otherwise that of the nearest smaller load that has
 * them, if it is a veto (drafting that lost with fewer slots loses with more: each added slot
 * adds verify rows to a batch that is already wider), so a load does not have to pay its own
 * learning steps to find out what a lighter one showed. */
bool srv_guard_veto(const spex_realized *real, int n, double min_w);
/* True when step number `step` at n stepping slots should be a plain one so that the guard can
 * compare: this load has drafted (w[1] > 0) but has fewer than min_w plain steps, and step is a
 * multiple of `every`. Without it a load where the cost model always drafts never measures
 * the alternative, and the guard cannot see that drafting loses there. */
bool srv_guard_explore(const spex_realized *real, int n, double min_w, uint64_t step, int every);

/* The backlog price of slot drafting now (seconds): a slot that starts drafting first injects
 * its `pending` deferred features at `sec_per_tok` each, once; that buys drafting for the rest
 * of its request, so the step is charged the part of it that the step's `step_tok` expected
 * tokens are of the `remaining` ones (all of it when remaining <= step_tok). */
double srv_backlog_price(int32_t pending, double sec_per_tok, double step_tok, double remaining);

/* Expected tokens of a step that drafts n with per-position acceptance p: Σ_{k=0..n} p^k. */
double srv_expect_tokens(double p, int n);

/* Greedy search (two of them, engine.c) for the draft lengths nd[0..n) (starting from the given ones, each ≤ cap[i];
 * fixed[i] keeps slot i's) that maximise the step's expected tokens per second under c and
 * acceptances p[]. *rows and *drows hold the starting lengths' rows and are updated; returns
 * the step's expected tokens. */
double srv_best_drafts(const srv_step_cost *c, int n, const double *p, const int *cap, const bool *fixed, int *nd,
                       int *rows, int *drows);

#endif
