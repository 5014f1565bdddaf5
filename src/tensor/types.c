/*
 * types.c — the table of tensor types: names, block sizes and bytes per block.
 *
 * Ids and names follow ggml (ggml.h / ggml.c type traits) so GGUF files interoperate.
 * has_ref marks the types whose scalar quantize/dequantize spex implements (quant_ref.c).
 */
#include "spex.h"
#include "tensor/blocks.h"
#include "tensor/api.h"

#include <ctype.h>
#include <string.h>

static const spex_type_info type_table[SPEX_TYPE_COUNT] = {
    [SPEX_TYPE_F32] = {"f32", 1, 4, false, true},
    [SPEX_TYPE_F16] = {"f16", 1, 2, false, true},
    [SPEX_TYPE_Q4_0] = {"q4_0", QK4_0, sizeof(block_q4_0), true, true},
    [SPEX_TYPE_Q4_1] = {"q4_1", QK4_1, sizeof(block_q4_1), true, true},
    [SPEX_TYPE_Q5_0] = {"q5_0", QK5_0, sizeof(block_q5_0), true, true},
    [SPEX_TYPE_Q5_1] = {"q5_1", QK5_1, sizeof(block_q5_1), true, true},
    [SPEX_TYPE_Q8_0] = {"q8_0", QK8_0, sizeof(block_q8_0), true, true},
    [SPEX_TYPE_Q8_1] = {"q8_1", QK8_1, sizeof(block_q8_1), true, true},
    [SPEX_TYPE_Q2_K] = {"q2_K", QK_K, sizeof(block_q2_K), true, false},
    [SPEX_TYPE_Q3_K] = {"q3_K", QK_K, sizeof(block_q3_K), true, false},
    [SPEX_TYPE_Q4_K] = {"q4_K", QK_K, sizeof(block_q4_K), true, true},
    [SPEX_TYPE_Q5_K] = {"q5_K", QK_K, sizeof(block_q5_K), true, true},
    [SPEX_TYPE_Q6_K] = {"q6_K", QK_K, sizeof(block_q6_K), true, true},
    [SPEX_TYPE_Q8_K] = {"q8_K", QK_K, sizeof(block_q8_K), true, true},
    [SPEX_TYPE_I8] = {"i8", 1, 1, false, false},
    [SPEX_TYPE_I16] = {"i16", 1, 2, false, false},
    [SPEX_TYPE_I32] = {"i32", 1, 4, false, false},
    [SPEX_TYPE_I64] = {"i64", 1, 8, false, false},
    [SPEX_TYPE_F64] = {"f64", 1, 8, false, false},
    [SPEX_TYPE_BF16] = {"bf16", 1, 2, false, true},
};

const spex_type_info *spex_type_get_info(int type) {
    if (type < 0 || type >= SPEX_TYPE_COUNT || type_table[type].name == NULL) return NULL;
    return &type_table[type];
}

size_t spex_type_row_size(spex_type type, int64_t n) {
    const spex_type_info *ti = spex_type_get_info((int)type);
    if (!ti || n < 0 || n % ti->block_size != 0) return 0;
    return (size_t)(n / ti->block_size) * ti->type_size;
}

bool spex_type_from_name(const char *name, spex_type *out) {
    if (!name) return false;
    for (int t = 0; t < SPEX_TYPE_COUNT; t++) {
        const char *tn = type_table[t].name;
        if (!tn || strlen(tn) != strlen(name)) continue;
        size_t i = 0;
        while (tn[i] && tolower((unsigned char)tn[i]) == tolower((unsigned char)name[i])) i++;
        if (tn[i] == 0) {
            *out = (spex_type)t;
            return true;
        }
    }
    return false;
}
