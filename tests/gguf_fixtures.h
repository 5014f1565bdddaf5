/*
 * gguf_fixtures.h — GGUF helpers shared by the model tests.
 */
#ifndef SPEX_TESTS_GGUF_FIXTURES_H
#define SPEX_TESTS_GGUF_FIXTURES_H

#include <stdbool.h>

#include "spex.h"

/* dst = src with every tensor dequantized to F32; false on any failure. */
bool test_write_dequantized(const char *src, const char *dst);

#endif
