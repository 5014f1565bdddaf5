/*
 * gguf.h — internals shared by the GGUF reader (reader.c) and writer (writer.c).
 *
 * The format (GGUF v2/v3, little-endian, as llama.cpp's gguf.cpp writes it; ggml's
 * docs/gguf.md is the spec):
 *
 *   header   "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   kv       n_kv x ( string key | u32 value_type | value )
 *   tinfo    n_tensors x ( string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset )
 *   padding  zeros up to a multiple of general.alignment (default 32)
 *   data     tensor bytes; each offset is relative to the data section and aligned
 *
 *   string   u64 length | bytes (not NUL-terminated)
 *   value    fixed-size scalar | string | array
 *   array    u32 elem_type | u64 n | n x element   (elements of type ARRAY nest)
 *
 * v1 used u32 for counts and lengths and is refused; v2 and v3 read identically (v3 only
 * added big-endian files, which spex refuses). A spex_gguf_value carries the *payload* of a
 * value: the scalar's bytes, the string's bytes, or an array's encoded elements (after its
 * type and count), which is what the writer needs to copy a value verbatim.
 */
#ifndef SPEX_GGUF_GGUF_H
#define SPEX_GGUF_GGUF_H

#include <stdbool.h>
#include <stdint.h>

#include "spex.h"
#include "gguf/api.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "spex reads GGUF data in place and supports little-endian hosts only"
#endif

#define SPEX_GGUF_MAGIC 0x46554747u /* "GGUF" read as a little-endian u32 */
#define SPEX_GGUF_VERSION 3u
#define SPEX_GGUF_DEFAULT_ALIGNMENT 32u
#define SPEX_GGUF_HEADER_SIZE 24u
/* Arrays of arrays deeper than this are refused (bounds the recursion of every walker). */
#define SPEX_GGUF_MAX_DEPTH 8
/* The GGUF spec caps keys at 65535 bytes; tensor names get a generous bound of our own
 * (ggml's is 63) so names from other writers still load. */
#define SPEX_GGUF_MAX_KEY_LEN 65535u
#define SPEX_GGUF_MAX_NAME_LEN 1024u

/* Bytes of one fixed-size value; 0 for STRING, ARRAY and unknown types. */
uint64_t spex_gguf_vtype_size(spex_gguf_vtype t);

/* True if buf[0..size) holds exactly n encoded elements of elem_type, nested arrays at most
 * SPEX_GGUF_MAX_DEPTH - depth levels deep (the writer validates copied values with it). */
bool spex_gguf_payload_valid(const uint8_t *buf, uint64_t size, spex_gguf_vtype elem_type, uint64_t n,
                             int depth);

static inline uint64_t spex_gguf_align_up(uint64_t x, uint64_t a) { return (x + a - 1) & ~(a - 1); }

/* Tensor bytes [p, p + n) were copied elsewhere (the model's repacked weights): their pages
 * go back to the kernel when g maps a file (spex_file_release); nothing happens for a GGUF
 * opened on caller memory, which spex never modifies. */
void spex_gguf_release_data(const spex_gguf *g, const void *p, size_t n);

#endif
