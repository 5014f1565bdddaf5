/*
 * convert.c — `spex convert-vocab`: writes a vocab-only GGUF (general.architecture and the
 * tokenizer.ggml.* keys, no tensors) from a Hugging Face tokenizer.json (+ optional
 * tokenizer_config.json) or a SentencePiece tokenizer.model, with the library's converters
 * (src/tok/convert*.c; docs/tokenizers.md, "Converting tokenizers").
 *
 * The file is reopened and its tokenizer loaded before reporting success, so a GGUF this
 * command writes is one spex can use. Exit status: 0 on success; 1 with one "error: ..." line
 * when conversion fails (OUT is then not created: the writer renames a temporary file); 2 for
 * bad usage.
 */
#include "spex.h"
#include "tok/api.h"
#include "gguf/api.h"
#include "cli.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: spex convert-vocab (--hf tokenizer.json [--config tokenizer_config.json] | --spm tokenizer.model)\n"
            "                          -o OUT.gguf [--arch NAME] [--vocab-size N]\n"
            "\n"
            "Writes a vocab-only GGUF: general.architecture and llama.cpp's tokenizer.ggml.* keys, no tensors.\n"
            "\n"
            "  --hf FILE          Hugging Face byte-level BPE tokenizer.json (model gpt2; pre-tokenizer qwen2,\n"
            "                     qwen35, llama-bpe or gpt-2, recognised from its regex)\n"
            "  --config FILE      tokenizer_config.json: special tokens, add_bos/add_eos, chat template (--hf only)\n"
            "  --spm FILE         SentencePiece BPE tokenizer.model (model llama)\n"
            "  -o, --output FILE  the GGUF to write\n"
            "  --arch NAME        general.architecture (default: qwen3 for --hf, llama for --spm)\n"
            "  --vocab-size N     pad with unused [PADn] tokens to N, the model's embedding rows (config.json\n"
            "                     vocab_size; Qwen3: 151936) (--hf only)\n");
}

int cmd_convert_vocab(int argc, char **argv) {
    const char *hf = NULL, *config = NULL, *spm = NULL, *out = NULL, *arch = NULL;
    long n_vocab = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--hf")) dst = &hf;
        else if (!strcmp(a, "--config")) dst = &config;
        else if (!strcmp(a, "--spm")) dst = &spm;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) dst = &out;
        else if (!strcmp(a, "--arch")) dst = &arch;
        else if (!strcmp(a, "--vocab-size")) {
            if (!cli_parse_int(a, i + 1 < argc ? argv[++i] : NULL, 1, 1L << 22, &n_vocab)) return 2;
            continue;
        } else {
            fprintf(stderr, "error: convert-vocab: unexpected argument '%s' (see spex convert-vocab --help)\n", a);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "error: convert-vocab: %s needs a value\n", a);
            return 2;
        }
        *dst = argv[++i];
    }
    if (!out || (!hf == !spm)) {
        fprintf(stderr, "error: convert-vocab: give -o and exactly one of --hf, --spm\n\n");
        usage(stderr);
        return 2;
    }
    if (spm && (config || n_vocab)) {
        fprintf(stderr, "error: convert-vocab: --config and --vocab-size apply to --hf only\n");
        return 2;
    }
    if (!arch) arch = hf ? "qwen3" : "llama";
    if (!arch[0]) {
        fprintf(stderr, "error: convert-vocab: --arch is empty\n");
        return 2;
    }

    spex_error err = {0};
    spex_gguf_writer *w = NULL;
    spex_status st = spex_gguf_writer_init(&w, &err);
    if (st == SPEX_OK && spex_gguf_writer_set_str(w, "general.architecture", arch, strlen(arch)) != SPEX_OK)
        st = spex_error_set(&err, SPEX_ERR_NOMEM, "cannot set general.architecture");
    if (st == SPEX_OK) {
        if (spm) st = spex_vocab_from_spm_model(spm, w, &err);
        else if (n_vocab) st = spex_vocab_from_hf_json_padded(hf, config, (int32_t)n_vocab, w, &err);
        else st = spex_vocab_from_hf_json(hf, config, w, &err);
    }
    if (st == SPEX_OK) st = spex_gguf_writer_write(w, out, &err);
    spex_gguf_writer_free(w);
    if (st != SPEX_OK) {
        fprintf(stderr, "error: %s\n", err.msg[0] ? err.msg : spex_status_str(st));
        return 1;
    }

    /* prove the file loads, and say what it holds */
    spex_gguf *g = NULL;
    spex_tokenizer *t = NULL;
    if (spex_gguf_open(out, &g, &err) != SPEX_OK || spex_tokenizer_load_gguf(g, &t, &err) != SPEX_OK) {
        fprintf(stderr, "error: %s was written but does not load: %s\n", out, err.msg);
        spex_gguf_close(g);
        return 1;
    }
    printf("wrote %s: arch %s, model %s%s%s, %d tokens, bos %d, eos %d, add_bos %s\n", out, arch,
           spex_tokenizer_get_kind(t) == SPEX_TOKENIZER_SPM ? "llama" : "gpt2",
           spex_tokenizer_pre(t)[0] ? ", pre " : "", spex_tokenizer_pre(t), (int)spex_tokenizer_n_vocab(t),
           (int)spex_token_bos(t), (int)spex_token_eos(t), spex_tokenizer_add_bos(t) ? "on" : "off");
    spex_tokenizer_free(t);
    spex_gguf_close(g);
    return 0;
}
