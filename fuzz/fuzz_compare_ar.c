/*
 * fuzz_compare_ar.c — libFuzzer target for the reader of `spex demo --compare-ar` files
 * (tools/compare.c): arbitrary bytes as llama-bench output or plain text.
 *
 * Checked: no crash, leak or sanitizer report; a figure found is positive and finite with a
 * NUL-terminated name; a refusal says why.
 * Run: make fuzz && ./build-fuzz/fuzz_compare_ar -max_total_time=20 fuzz/corpus/compare_ar
 */
#include "compare.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    compare_ar c;
    char msg[200];
    if (compare_ar_parse((const char *)data, size, &c, msg, sizeof msg)) {
        if (!(c.tps > 0) || !isfinite(c.tps) || !memchr(c.name, 0, sizeof c.name) || !c.name[0]) abort();
    } else if (!msg[0]) {
        abort();
    }
    return 0;
}
