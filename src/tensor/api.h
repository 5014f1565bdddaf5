/*
 * tensor/api.h — the tensor types' interface below the embedding API: each type's block
 * layout and the scalar reference conversions that specify its format (src/tensor/). The
 * type ids themselves (spex_type) are public in include/spex.h. Dependencies follow
 * core <- tensor <- gguf <- cpu <- {model, tok, sample, quant} <- spec <- server (README).
 */
#ifndef SPEX_TENSOR_API_H
#define SPEX_TENSOR_API_H

#include "spex.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spex_type_info {
    const char *name;       /* "q4_K", as ggml spells it                     */
    int64_t block_size;     /* elements per block (1 for plain types)        */
    size_t type_size;       /* bytes per block                               */
    bool quantized;         /* block-quantized                               */
    bool has_ref;           /* spex has quantize/dequantize for it           */
} spex_type_info;

/* NULL for an id spex does not know. */
const spex_type_info *spex_type_get_info(int type);
/* Bytes of a row of n elements; 0 if n is not a multiple of the block size or the type is unknown. */
size_t spex_type_row_size(spex_type type, int64_t n);
/* Parses "q4_K", "Q4_K", "f16", "bf16", ... Returns false if unknown. */
bool spex_type_from_name(const char *name, spex_type *out);

/* Scalar reference conversions (the specification of each format).
 * n must be a multiple of the type's block size. */
spex_status spex_quantize_row_ref(spex_type type, const float *src, void *dst, int64_t n);
spex_status spex_dequantize_row_ref(spex_type type, const void *src, float *dst, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
