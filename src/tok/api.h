/*
 * tok/api.h — the tokenizer module's interface beyond the embedding API: the converters that
 * turn a vocabulary's original files into tokenizer.ggml.* keys (`spex convert-vocab`).
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
