/*
 * quantize.c — `spex quantize IN OUT TYPE [-t N] [-v]`: converts a GGUF model to another
 * tensor format with llama.cpp's per-tensor recipe (spex_quantize_file; the recipe and its
 * fallbacks are in docs/quantization.md).
 *
 * Exit status: 0 on success; 1 with one "error: ..." line on stderr when the conversion
 * fails (the output is then not created: the library writes a temporary file and renames it);
 * 2 for bad usage.
 */
#include "spex.h"
#include "gguf/api.h"
#include "quant/api.h"
#include "cli.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: spex quantize IN OUT TYPE [-t N] [-v]\n"
            "\n"
            "Writes OUT, the model IN with its tensors converted to TYPE, using llama.cpp's per-tensor\n"
            "recipe (norms and 1-D tensors kept, output.weight in Q6_K for the K mixes, rows that do not\n"
            "fit a block fall back; see docs/quantization.md). Metadata is copied verbatim; IN is never\n"
            "overwritten.\n"
            "\n"
            "TYPE:  F32 F16 BF16 Q8_0 Q4_0 Q4_K_M Q5_K_M Q6_K   (case-insensitive; Q4_K = Q4_K_M, Q5_K = Q5_K_M)\n"
            "  -t N   threads (default: all cores)\n"
            "  -v     one line per tensor on stderr: name, types, bytes, and why a type was chosen\n");
}

int cmd_quantize(int argc, char **argv) {
    const char *pos[3] = {NULL, NULL, NULL};
    int n_pos = 0;
    spex_quantize_params p = spex_quantize_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            long v;
            if (!cli_parse_int(a, i + 1 < argc ? argv[++i] : NULL, 1, 1024, &v)) return 2;
            p.n_threads = (int)v;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            p.verbose = true;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "error: quantize: unknown flag '%s' (see spex quantize --help)\n", a);
            return 2;
        } else if (n_pos < 3) {
            pos[n_pos++] = a;
        } else {
            fprintf(stderr, "error: quantize: unexpected argument '%s'\n", a);
            return 2;
        }
    }
    if (n_pos != 3) {
        usage(stderr);
        return 2;
    }
    if (!spex_ftype_from_name(pos[2], &p.ftype)) {
        fprintf(stderr, "error: quantize: unknown type '%s' (expected F32 F16 BF16 Q8_0 Q4_0 Q4_K_M Q5_K_M Q6_K)\n",
                pos[2]);
        return 2;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    spex_error err = {0};
    if (spex_quantize_file(pos[0], pos[1], &p, &err) != SPEX_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    spex_gguf *in = NULL, *out = NULL;
    if (spex_gguf_open(pos[0], &in, &err) != SPEX_OK || spex_gguf_open(pos[1], &out, &err) != SPEX_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        spex_gguf_close(in);
        return 1;
    }
    uint64_t params = 0;
    for (int64_t i = 0; i < spex_gguf_n_tensors(out); i++) {
        const spex_tensor_info *t = spex_gguf_tensor(out, i);
        params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
    }
    double in_mb = (double)spex_gguf_file_size(in) / 1048576.0, out_mb = (double)spex_gguf_file_size(out) / 1048576.0;
    printf("wrote %s: %s, %lld tensors, %.2f MiB -> %.2f MiB (%.2f bits per parameter), %.2f s\n", pos[1],
           spex_ftype_name(p.ftype), (long long)spex_gguf_n_tensors(out), in_mb, out_mb,
           params ? 8.0 * (double)(spex_gguf_file_size(out) - spex_gguf_data_offset(out)) / (double)params : 0.0, secs);
    spex_gguf_close(in);
    spex_gguf_close(out);
    return 0;
}
