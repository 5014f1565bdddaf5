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
