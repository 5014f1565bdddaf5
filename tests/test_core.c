/*
 * test_core.c — core utilities: fp16/bf16 conversions, status strings, the type table, ISA choice,
 * large-buffer allocation.
 */
#include "spex.h"
#include "cpu/api.h"
#include "core/fp16.h"
#include "core/mem.h"
#include "tensor/blocks.h"
#include "test.h"
#include "tensor/api.h"

TEST(fp16_roundtrip_all_halves) {
    /* every finite half converts to float and back to the same bits */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = spex_fp16_to_f32((spex_fp16)h);
        if (f != f) continue;
        CHECK_MSG(spex_f32_to_fp16(f) == h, "half 0x%04x", h);
    }
}

TEST(fp16_rounding_ties_to_even) {
    CHECK_EQ_INT(spex_f32_to_fp16(1.0f), 0x3c00);
    CHECK_EQ_INT(spex_f32_to_fp16(65504.0f), 0x7bff);
    CHECK_EQ_INT(spex_f32_to_fp16(65520.0f), 0x7c00);           /* overflow rounds to inf */
    CHECK_EQ_INT(spex_f32_to_fp16(1.0f + 1.0f / 2048), 0x3c00);  /* tie -> even (down)    */
    CHECK_EQ_INT(spex_f32_to_fp16(1.0f + 3.0f / 2048), 0x3c02);  /* tie -> even (up)      */
    CHECK_EQ_INT(spex_f32_to_fp16(5.9604645e-08f), 0x0001);     /* smallest subnormal    */
    CHECK_EQ_INT(spex_f32_to_fp16(-2.98e-08f), 0x8000);          /* below half of it: -0  */
}

TEST(bf16_rounding) {
    CHECK_EQ_INT(spex_f32_to_bf16(1.0f), 0x3f80);
    CHECK_EQ_INT(spex_f32_to_bf16(spex_bits_f32(0x3f808000u)), 0x3f80); /* tie -> even */
    CHECK_EQ_INT(spex_f32_to_bf16(spex_bits_f32(0x3f818000u)), 0x3f82);
    CHECK(spex_bf16_to_f32(spex_f32_to_bf16(NAN)) != spex_bf16_to_f32(spex_f32_to_bf16(NAN)));
}

TEST(type_table_matches_ggml) {
    CHECK_EQ_INT(spex_type_get_info(SPEX_TYPE_Q4_K)->type_size, 144);
    CHECK_EQ_INT(spex_type_get_info(SPEX_TYPE_Q6_K)->type_size, 210);
    CHECK_EQ_INT(spex_type_get_info(SPEX_TYPE_BF16)->type_size, 2);
    CHECK(spex_type_get_info(4) == NULL); /* removed ggml id (q4_2) */
    CHECK(spex_type_get_info(-1) == NULL);
    CHECK(spex_type_get_info(999) == NULL);
    CHECK_EQ_INT(spex_type_row_size(SPEX_TYPE_Q8_0, 64), 68);
    CHECK_EQ_INT(spex_type_row_size(SPEX_TYPE_Q8_0, 33), 0);
    spex_type t;
    CHECK(spex_type_from_name("Q4_K", &t) && t == SPEX_TYPE_Q4_K);
    CHECK(spex_type_from_name("bf16", &t) && t == SPEX_TYPE_BF16);
    CHECK(!spex_type_from_name("q4_K_X", &t));
}

TEST(error_context) {
    spex_error e = {0};
    CHECK(spex_error_set(&e, SPEX_ERR_FORMAT, "file %s: field %s", "a.gguf", "n_tensors") == SPEX_ERR_FORMAT);
    CHECK(e.status == SPEX_ERR_FORMAT);
    CHECK(strstr(e.msg, "n_tensors") != NULL);
    CHECK(spex_error_set(NULL, SPEX_ERR_IO, "x") == SPEX_ERR_IO);
    /* quoted file contents cannot break the one-line contract */
    spex_error_set(&e, SPEX_ERR_UNSUPPORTED, "architecture '%s'", "a\nb\rc\x01" "d\x7f");
    CHECK_MSG(!strcmp(e.msg, "architecture 'a?b?c?d?'"), "got '%s'", e.msg);
}

TEST(isa_choice_and_override) {
    spex_isa best = spex_cpu_isa();
    CHECK(spex_cpu_set_isa(SPEX_ISA_SCALAR) == SPEX_OK);
    CHECK(spex_cpu_isa() == SPEX_ISA_SCALAR);
    CHECK(spex_cpu_set_isa(best) == SPEX_OK);
#if defined(__x86_64__)
    CHECK(spex_cpu_set_isa(SPEX_ISA_NEON) == SPEX_ERR_UNSUPPORTED);
#endif
}

TEST(alloc_large_alignment_and_use) {
    CHECK(spex_alloc_large(0) == NULL);
    /* small: 64-byte aligned; from SPEX_HUGE_MIN on: 2 MiB aligned (huge pages where offered) */
    const size_t sizes[] = {1, 100, SPEX_HUGE_MIN - 1, SPEX_HUGE_MIN, SPEX_HUGE_MIN + 1, 3 * SPEX_HUGE_MIN + 4097};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        uint8_t *p = spex_alloc_large(sizes[i]);
        CHECK_MSG(p != NULL, "size %zu", sizes[i]);
        if (!p) continue;
        const size_t align = sizes[i] >= SPEX_HUGE_MIN ? SPEX_HUGE_MIN : 64;
        CHECK_MSG((uintptr_t)p % align == 0, "size %zu at %p", sizes[i], (void *)p);
        memset(p, 0xa5, sizes[i]); /* every byte asked for is usable */
        CHECK(p[0] == 0xa5 && p[sizes[i] - 1] == 0xa5);
        free(p);
    }
    /* the measurement switch off: ordinary 64-byte aligned memory */
    spex_mem_thp = 0;
    uint8_t *q = spex_alloc_large(SPEX_HUGE_MIN + 1);
    spex_mem_thp = 1;
    CHECK(q != NULL && (uintptr_t)q % 64 == 0);
    free(q);
}

/* The KV cache's allocation: zeroed, every byte usable, 2 MiB aligned from SPEX_HUGE_MIN on;
 * the free matches the allocation even when the measurement switch changed in between. */
TEST(alloc_zeroed) {
    CHECK(spex_alloc_zeroed(0) == NULL);
    spex_free_zeroed(NULL, 5); /* no-op */
    const size_t sizes[] = {1, 4096, SPEX_HUGE_MIN - 1, SPEX_HUGE_MIN, 3 * SPEX_HUGE_MIN + 4097};
    for (int round = 0; round < 2; round++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            uint8_t *p = spex_alloc_zeroed(sizes[i]);
            CHECK_MSG(p != NULL, "size %zu", sizes[i]);
            if (!p) continue;
            if (sizes[i] >= SPEX_HUGE_MIN) CHECK_MSG((uintptr_t)p % SPEX_HUGE_MIN == 0, "size %zu", sizes[i]);
            size_t nz = 0;
            for (size_t b = 0; b < sizes[i]; b += 509) nz += p[b] != 0;
            CHECK_MSG(nz == 0 && p[sizes[i] - 1] == 0, "size %zu: not zeroed", sizes[i]);
            memset(p, 0x5a, sizes[i]);
            CHECK(p[0] == 0x5a && p[sizes[i] - 1] == 0x5a);
            spex_mem_thp = round; /* round 0 frees with the switch flipped */
            spex_free_zeroed(p, sizes[i]);
            spex_mem_thp = 1;
        }
}

TEST_MAIN()
