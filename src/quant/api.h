/*
 * quant/api.h — the quantization module's interface: whole-file quantization and the per-tensor
 * type recipe.
 * Builds on include/spex.h (the embedding API: handles, status codes, the types every
 * module shares); tools and tests include it beside spex.h. Dependencies follow
 * core <- tensor <- gguf <- cpu <- model <- spec <- server (README).
 */
#ifndef SPEX_QUANT_API_H
#define SPEX_QUANT_API_H

#include "spex.h"
#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================== */
/* Quantization of whole files                                               */
/* ======================================================================== */

typedef enum spex_ftype {
    SPEX_FTYPE_F32 = 0,
    SPEX_FTYPE_F16 = 1,
    SPEX_FTYPE_Q4_0 = 2,
    SPEX_FTYPE_Q8_0 = 7,
    SPEX_FTYPE_Q4_K_M = 15,
    SPEX_FTYPE_Q5_K_M = 17,
    SPEX_FTYPE_Q6_K = 18,
    SPEX_FTYPE_BF16 = 32,
} spex_ftype;   /* values are llama.cpp's general.file_type ids */

bool spex_ftype_from_name(const char *name, spex_ftype *out);
const char *spex_ftype_name(spex_ftype ft);

typedef struct spex_quantize_params {
    spex_ftype ftype;
    int n_threads;
    bool verbose;          /* one line per tensor on stderr */
} spex_quantize_params;

spex_quantize_params spex_quantize_default_params(void);

/* One tensor as the per-tensor recipe sees it. */
typedef struct spex_quant_tensor {
    const char *name;             /* GGUF tensor name                                      */
    int64_t row;                  /* ne[0]                                                 */
    bool has_output;              /* the file has output.weight (else token_embd is the head) */
    int64_t i_attn_v, n_attn_v;   /* its rank among attention value tensors, their count   */
    int64_t i_ffn_down, n_layer;  /* its rank among ffn_down tensors, block_count          */
    uint32_t n_expert;            /* 0: dense                                              */
} spex_quant_tensor;

/* The type llama.cpp's recipe gives a quantizable tensor in a file quantized to ft (what
 * spex_quantize_file writes; `spex gen-model` types its tensors the same way). why (may be
 * NULL): the rule that picked it, or NULL; wanted (may be NULL): the type before the
 * row-size fallback. */
spex_type spex_quantize_tensor_type(spex_ftype ft, const spex_quant_tensor *t, const char **why, spex_type *wanted);
/* Refuses to overwrite the input (same path or same inode). */
spex_status spex_quantize_file(const char *in_path, const char *out_path,
                               const spex_quantize_params *params, spex_error *err);

#ifdef __cplusplus
}
#endif

#endif
