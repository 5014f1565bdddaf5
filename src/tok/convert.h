/*
 * convert.h — internals shared by the tokenizer converters (src/tok/convert.c reads Hugging
 * Face tokenizer.json with cJSON, src/tok/convert_spm.c reads SentencePiece tokenizer.model
 * with its own protobuf reader and needs no cJSON, so a fuzz target can link it alone).
 *
 * The public entry points are in the Tokenizer section of spex.h; docs/tokenizers.md
 * ("Converting tokenizers") says which keys each writes.
 */
#ifndef SPEX_TOK_CONVERT_H
#define SPEX_TOK_CONVERT_H

#include <stddef.h>
#include <stdint.h>

#include "spex.h"
#include "tok/api.h"

/* Largest vocabulary a converter accepts: bounds every allocation sized by an id read from a
 * file (the largest real vocabularies are ~262k). */
#define SPEX_CONVERT_MAX_VOCAB (1 << 22)
/* Largest input file read whole (tokenizer.json of the biggest vocabularies is ~30 MB). */
#define SPEX_CONVERT_MAX_FILE ((size_t)1 << 30)

/* Reads a whole file into a NUL-terminated malloc'd buffer (caller frees); what names the
 * file's role in the error message. */
spex_status spex_convert_read_file(const char *path, const char *what, char **data, size_t *size,
                                   spex_error *err);

/* A writer setter's status turned into an error naming the key. */
spex_status spex_convert_set_failed(spex_status st, const char *key, spex_error *err);

/* spex_vocab_from_spm_model on bytes already in memory; name is used in error messages. */
spex_status spex_vocab_from_spm_buffer(const void *data, size_t size, const char *name,
                                       spex_gguf_writer *w, spex_error *err);

#endif
