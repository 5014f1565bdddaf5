/*
 * matmul_kquants.c — registers the K-quant kernels (Q4_K, Q5_K, Q6_K × Q8_K, and the Q8_K
 * activation quantizer) in a matmul kernel table (contract: src/cpu/matmul.h).
 *
 * What it is: the choice of kernel per ISA. What it is not: the kernels themselves
 * (ref/dot_kquants_ref.c, arch/x86/avx2/dot_kquants_avx2.c,
 * arch/x86/avx512/dot_kquants_avx512.c; declarations in cpu/kquants_internal.h).
 */
#include "cpu/api.h"
#include "cpu/kquants_internal.h"
#include "cpu/isa.h"

void spex_matmul_register_kquants_variant(spex_matmul_kernels *k, spex_isa isa, bool vnni) {
    switch (isa) {
    case SPEX_ISA_SCALAR:
        k->dot[SPEX_TYPE_Q4_K] = spex_dot_q4_K_ref;
        k->dot[SPEX_TYPE_Q5_K] = spex_dot_q5_K_ref;
        k->dot[SPEX_TYPE_Q6_K] = spex_dot_q6_K_ref;
        k->act_quant[SPEX_TYPE_Q8_K] = spex_act_quant_q8_K_ref;
        /* the R16 reference: every table can run R16 weights; AVX-512 and AVX2 with
         * AVX-VNNI replace it with kernels that gain from them */
        k->dot_r16[SPEX_TYPE_Q4_K] = spex_dot_q4_K_r16_ref;
        k->dot_r16[SPEX_TYPE_Q5_K] = spex_dot_q5_K_r16_ref;
        k->dot_r16[SPEX_TYPE_Q6_K] = spex_dot_q6_K_r16_ref;
        k->r16_fast[SPEX_TYPE_Q4_K] = k->r16_fast[SPEX_TYPE_Q5_K] = k->r16_fast[SPEX_TYPE_Q6_K] = false;
        break;
#if SPEX_HAVE_X86
    case SPEX_ISA_AVX2:
        k->dot[SPEX_TYPE_Q4_K] = spex_dot_q4_K_avx2;
        k->dot[SPEX_TYPE_Q5_K] = spex_dot_q5_K_avx2;
        k->dot[SPEX_TYPE_Q6_K] = spex_dot_q6_K_avx2;
        k->act_quant[SPEX_TYPE_Q8_K] = spex_act_quant_q8_K_avx2;
        /* With AVX-VNNI, R16: no transpose per super-block and one vpdpbusd per 32
         * multiply-adds (plain AVX2 keeps the ggml layout: its R16 form is ~20 % slower at 8
         * rows, docs/performance.md, "Kernels by weight type and ISA") */
        if (vnni) { /* the ggml layout runs the same arithmetic, so both layouts give the same bits */
            k->dot[SPEX_TYPE_Q4_K] = spex_dot_q4_K_avxvnni;
            k->dot[SPEX_TYPE_Q5_K] = spex_dot_q5_K_avxvnni;
            k->dot[SPEX_TYPE_Q6_K] = spex_dot_q6_K_avxvnni;
            k->dot_r16[SPEX_TYPE_Q4_K] = spex_dot_q4_K_r16_avxvnni;
            k->dot_r16[SPEX_TYPE_Q5_K] = spex_dot_q5_K_r16_avxvnni;
            k->dot_r16[SPEX_TYPE_Q6_K] = spex_dot_q6_K_r16_avxvnni;
            k->r16_fast[SPEX_TYPE_Q4_K] = k->r16_fast[SPEX_TYPE_Q5_K] = k->r16_fast[SPEX_TYPE_Q6_K] = true;
        }
        break;
    case SPEX_ISA_AVX512:
        k->dot[SPEX_TYPE_Q4_K] = vnni ? spex_dot_q4_K_avx512_vnni : spex_dot_q4_K_avx512;
        k->dot[SPEX_TYPE_Q5_K] = vnni ? spex_dot_q5_K_avx512_vnni : spex_dot_q5_K_avx512;
        k->dot[SPEX_TYPE_Q6_K] = vnni ? spex_dot_q6_K_avx512_vnni : spex_dot_q6_K_avx512;
        k->act_quant[SPEX_TYPE_Q8_K] = spex_act_quant_q8_K_avx512;
        k->dot_r16[SPEX_TYPE_Q4_K] = vnni ? spex_dot_q4_K_r16_avx512_vnni : spex_dot_q4_K_r16_avx512;
        k->dot_r16[SPEX_TYPE_Q5_K] = vnni ? spex_dot_q5_K_r16_avx512_vnni : spex_dot_q5_K_r16_avx512;
        k->dot_r16[SPEX_TYPE_Q6_K] = vnni ? spex_dot_q6_K_r16_avx512_vnni : spex_dot_q6_K_r16_avx512;
        k->r16_fast[SPEX_TYPE_Q4_K] = k->r16_fast[SPEX_TYPE_Q5_K] = k->r16_fast[SPEX_TYPE_Q6_K] = true;
        break;
#endif
    default: break; /* NEON and others: the scalar entries stay */
    }
}

void spex_matmul_register_kquants_amx(spex_matmul_kernels *k) {
#if SPEX_HAVE_X86
    k->dot_r16[SPEX_TYPE_Q4_K] = spex_dot_q4_K_r16_amx;
    k->dot_r16[SPEX_TYPE_Q5_K] = spex_dot_q5_K_r16_amx;
    k->dot_r16[SPEX_TYPE_Q6_K] = spex_dot_q6_K_r16_amx;
#else
    (void)k;
#endif
}
