/*
 * tok/api.h — the tokenizer module's interface beyond the embedding API: the converters that
 * turn a vocabulary's original files into tokenizer.ggml.* keys (`spex convert-vocab`), and
 * the Jinja engine that renders a GGUF's own chat template.
 * Builds on include/spex.h and the GGUF writer (gguf/api.h). Dependencies follow
 * core <- tensor <- gguf <- cpu <- model <- spec <- server, tok beside model (README).
 */
#ifndef SPEX_TOK_API_H
#define SPEX_TOK_API_H

#include "spex.h"
#include "gguf/api.h"

/* ---- the vocabulary in detail ------------------------------------------------------------ */

typedef enum spex_tokenizer_kind {
    SPEX_TOKENIZER_SPM = 1,   /* tokenizer.ggml.model = llama */
    SPEX_TOKENIZER_BPE = 2,   /* tokenizer.ggml.model = gpt2  */
} spex_tokenizer_kind;

/* tokenizer.ggml.token_type values (SentencePiece's numbering, which llama.cpp keeps). */
typedef enum spex_token_type {
    SPEX_TOKEN_UNDEFINED = 0,
    SPEX_TOKEN_NORMAL = 1,
    SPEX_TOKEN_UNKNOWN = 2,
    SPEX_TOKEN_CONTROL = 3,
    SPEX_TOKEN_USER_DEFINED = 4,
    SPEX_TOKEN_UNUSED = 5,
    SPEX_TOKEN_BYTE = 6,
} spex_token_type;


/* NFC-normalise raw text before byte-level BPE (gpt2 only; on by default, targets.md §12.1). */
void spex_tokenizer_set_nfc(spex_tokenizer *t, bool on);

spex_tokenizer_kind spex_tokenizer_get_kind(const spex_tokenizer *t);
const char *spex_tokenizer_pre(const spex_tokenizer *t);   /* "qwen2", ...; "" for SPM */

bool spex_tokenizer_add_bos(const spex_tokenizer *t);      /* add_special adds BOS */
bool spex_tokenizer_add_eos(const spex_tokenizer *t);      /* add_special adds EOS */

int32_t spex_token_unk(const spex_tokenizer *t);
int32_t spex_token_pad(const spex_tokenizer *t);
/* Out-of-range ids are SPEX_TOKEN_UNDEFINED / false. */
spex_token_type spex_token_get_type(const spex_tokenizer *t, int32_t id);
bool spex_token_is_control(const spex_tokenizer *t, int32_t id);

/* The id whose stored text (as in tokenizer.ggml.tokens: "\xe2\x96\x81the", "\xc4\xa0the",
 * "<|im_end|>") equals text[0..len), or SPEX_TOKEN_NONE. */
int32_t spex_token_find(const spex_tokenizer *t, const char *text, size_t len);
/* The stored text of a token (a view owned by t); {NULL, 0} for an out-of-range id. */
spex_str spex_token_text(const spex_tokenizer *t, int32_t id);


/* Longest piece in bytes (bounds the output of one stream push). */
size_t spex_tokenizer_max_piece(const spex_tokenizer *t);

/* Picks the renderer for a GGUF's tokenizer.chat_template (NULL or "" if absent). A recognised
 * Qwen3 or Qwen3.5 template: *warned = false. Anything else: ChatML (Qwen3 rules) when the
 * template or the vocabulary has <|im_start|>, else plain completion; *warned = true when a
 * template was given but not recognised, or when ChatML is guessed without one. */
void spex_chat_detect(const char *jinja_template, bool vocab_has_im_start, spex_chat_template *out,
                      bool *warned);

/* ---- Jinja chat templates (docs/chat-templates.md) --------------------------------------- */

/* A parsed Jinja2 template: the subset real chat templates use, rendered byte for byte as
 * Python's jinja2 renders it the way transformers does (trim_blocks, lstrip_blocks, loop
 * controls, tojson = json.dumps(ensure_ascii=False), raise_exception). Read-only once
 * parsed: one template may be rendered by several threads at once. */
typedef struct spex_jinja spex_jinja;

/* Parses src[0 .. len) (copied; src may be freed after). A syntax error is SPEX_ERR_FORMAT
 * with "jinja: line L col C: ..." in err; past the size limits, SPEX_ERR_RANGE. */
spex_status spex_jinja_parse(const char *src, size_t len, spex_jinja **out, spex_error *err);
void spex_jinja_free(spex_jinja *t);
/* The chat template of --jinja: the file at `file` (--chat-template-file) when non-NULL, else
 * g's tokenizer.chat_template (SPEX_ERR_NOT_FOUND when it has none). *text_out, when not NULL,
 * gets the source (malloc'd, NUL-terminated; the caller frees), *len_out its length. Errors
 * name the source: "FILE: cannot read it: ...", "tokenizer.chat_template: jinja: line ...". */
spex_status spex_jinja_load(const spex_gguf *g, const char *file, spex_jinja **out, char **text_out,
                            size_t *len_out, spex_error *err);

/* Renders t with the variables of a JSON object (context_json[0 .. len)) into *out (malloc'd,
 * NUL-terminated, the caller frees; *out_len without the NUL). raise_exception, a runtime
 * error (undefined attribute of an undefined value, bad operand types, an unknown filter) or
 * a limit (docs/chat-templates.md) is an error status with "jinja: line L col C: ..." and
 * *out NULL. */
spex_status spex_jinja_render(const spex_jinja *t, const char *context_json, size_t len, char **out,
                              size_t *out_len, spex_error *err);

/* The context variables besides messages and tools, as llama.cpp and transformers pass them. */
typedef struct spex_jinja_chat {
    bool add_generation_prompt;
    bool enable_thinking;
    const char *bos_token;    /* NULL: "" */
    const char *eos_token;    /* NULL: "" */
    const char *extra_json;   /* NULL, or a JSON object whose keys are set last (chat_template_kwargs) */
} spex_jinja_chat;

/* The text of token id with specials rendered (a template's bos_token / eos_token): malloc'd,
 * NUL-terminated, "" for an id < 0 or out of range; NULL when out of memory. */
char *spex_token_text_dup(const spex_tokenizer *tok, int32_t id);

/* Renders msgs through a Jinja chat template with the message dicts llama.cpp builds: role,
 * content (NULL as ""), reasoning_content when non-NULL, tool_calls as [{"type": "function",
 * "function": {"name": N, "arguments": A}}] with A the parsed JSON object (the text itself
 * when it is not JSON); tools is the parsed tool objects, or none when n_tools is 0. Output
 * and errors as spex_jinja_render. */
spex_status spex_chat_apply_jinja(const spex_jinja *t, const spex_chat_msg *msgs, size_t n, const char *const *tools,
                                  size_t n_tools, const spex_jinja_chat *opts, char **out, size_t *out_len,
                                  spex_error *err);

/* ---- converters -------------------------------------------------------------------------- */

/* Converters: the tokenizer.ggml.* keys of a vocabulary read from its original files, added to
 * a GGUF writer (the caller sets general.architecture and writes; tools/convert.c does so for
 * `spex convert-vocab`). docs/tokenizers.md, "Converting tokenizers", lists the keys.
 *  - hf_json: a Hugging Face byte-level BPE tokenizer.json (model gpt2; pre qwen2, qwen35,
 *    llama-bpe or gpt-2, recognised from the Split regex); tokenizer_config.json (NULL: none)
 *    gives bos/eos/pad/unk, add_bos/add_eos and tokenizer.chat_template. The _padded form
 *    pads with unused "[PADn]" tokens up to n_vocab (the model's embedding rows, config.json
 *    vocab_size), as llama.cpp's converter does.
 *  - spm_model: a SentencePiece BPE tokenizer.model (model llama: scores, types, add_bos on).
 * Malformed or unsupported input is an error naming the file and the field. */
spex_status spex_vocab_from_hf_json(const char *tokenizer_json_path, const char *tokenizer_config_json_path,
                                    spex_gguf_writer *w, spex_error *err);
spex_status spex_vocab_from_hf_json_padded(const char *tokenizer_json_path, const char *tokenizer_config_json_path,
                                           int32_t n_vocab, spex_gguf_writer *w, spex_error *err);
spex_status spex_vocab_from_spm_model(const char *tokenizer_model_path, spex_gguf_writer *w, spex_error *err);

#endif
