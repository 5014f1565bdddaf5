/*
 * spex.c — entry point of the spex CLI: dispatches to one subcommand per file in tools/ (the
 * helpers they share are tools/cli.c).
 */
#include "spex.h"
#include "cpu/api.h"
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "spex — GGUF inference engine with DFlash2 speculative decoding\n"
            "\n"
            "usage: spex COMMAND [ARGS]\n"
            "\n"
            "commands:\n"
            "  inspect FILE              metadata, tensor table and validation of a GGUF file\n"
            "  run -m MODEL [-p PROMPT]  generate text (greedy or sampled) with a llama/qwen3 GGUF;\n"
            "                            -md DRAFTER adds DFlash speculative decoding\n"
            "  serve -m MODEL [-md DRAFTER]  OpenAI- and llama-server-compatible HTTP server\n"
            "  demo                      the default models: target alone vs DFlash2, the table\n"
            "  quantize IN OUT TYPE      requantize a GGUF (f16 bf16 q8_0 q4_0 q4_K_M q5_K_M q6_K)\n"
            "  bench kernels             matmul throughput vs memory bandwidth\n"
            "  bench model -m MODEL      prefill and decode throughput of a whole model\n"
            "  bench spec [-m T -md D]   speculative decoding end to end: AR vs DFlash/MTP table\n"
            "  bench attn                one layer's attention for new rows over a KV cache\n"
            "  gen-smoke OUT             write the small synthetic GGUF used by the smoke run\n"
            "  convert-vocab ... -o OUT  vocab-only GGUF from tokenizer.json or tokenizer.model\n"
            "  gen-model --shape S --type T -o OUT   random-weight qwen3 / qwen35 GGUF in real shapes\n"
            "  inflate -m T -md D -o DIR  the pair widened and deepened, computing the same logits\n"
            "  isa                       print the CPU features and the kernel ISA in use\n"
            "\n"
            "Run 'spex COMMAND --help' for a command's flags. SPEX_ISA=scalar|avx2|avx512 forces an ISA.\n");
}

static int cmd_isa(void) {
    const spex_cpu_features *f = spex_cpu_get_features();
    printf("isa: %s\n", spex_isa_name(spex_cpu_isa()));
    printf("features: avx2=%d fma=%d f16c=%d avx512f=%d bw=%d vl=%d dq=%d vnni=%d bf16=%d amx-int8=%d neon=%d avx-vnni=%d\n",
           f->avx2, f->fma, f->f16c, f->avx512f, f->avx512bw, f->avx512vl, f->avx512dq,
           f->avx512vnni, f->avx512bf16, f->amx_int8, f->neon, f->avxvnni);
    if (spex_cpu_isa() == SPEX_ISA_AVX2 || spex_cpu_isa() == SPEX_ISA_AVX512)
        printf("weight read-ahead: %s\n", f->prefetch_nta ? "nta (prefetchnta)" : "l2 (prefetcht1)");
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "inspect")) return cmd_inspect(argc - 1, argv + 1);
    if (!strcmp(cmd, "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "quantize")) return cmd_quantize(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "gen-smoke")) return cmd_gen_smoke(argc - 1, argv + 1);
    if (!strcmp(cmd, "convert-vocab")) return cmd_convert_vocab(argc - 1, argv + 1);
    if (!strcmp(cmd, "gen-model")) return cmd_gen_model(argc - 1, argv + 1);
    if (!strcmp(cmd, "inflate")) return cmd_inflate(argc - 1, argv + 1);
    if (!strcmp(cmd, "demo")) return cmd_demo(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return cmd_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "isa")) return cmd_isa();
    fprintf(stderr, "error: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
