/*
 * gguf_fixtures.h — GGUF helpers shared by the model tests.
 */
#ifndef SPEX_TESTS_GGUF_FIXTURES_H
#define SPEX_TESTS_GGUF_FIXTURES_H

#include <stdbool.h>
#include <stdint.h>

#include "spex.h"

/* dst = src with every tensor dequantized to F32; false on any failure. */
bool test_write_dequantized(const char *src, const char *dst);
/* dst = src (every key and tensor as it is) with key set to the u32 value v; false on failure. */
bool test_write_with_u32(const char *src, const char *dst, const char *key, uint32_t v);

#endif
