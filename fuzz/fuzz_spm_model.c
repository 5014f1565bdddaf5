/*
 * fuzz_spm_model.c — libFuzzer target for the SentencePiece tokenizer.model reader
 * (src/tok/convert_spm.c): arbitrary bytes as a protobuf ModelProto through
 * spex_vocab_from_spm_buffer into a GGUF writer.
 *
 * Checked: no crash or sanitizer report; a failure always carries a message. When the bytes
 * convert, the vocab GGUF is written, reopened and loaded as a tokenizer, and a short text
 * tokenized, so what the converter accepts is something the loader handles too (a load
 * may still refuse it: the loader has its own rules, e.g. on duplicate pieces).
 *
 * The reader needs no cJSON. Seeds: fuzz/corpus/spm_model/ (a small valid model).
 * Run: make fuzz && ./build-fuzz/fuzz_spm_model -max_total_time=20 build-fuzz/corpus-spm_model fuzz/corpus/spm_model
 */
#include "spex.h"
#include "tok/api.h"
#include "gguf/api.h"
#include "tok/convert.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    spex_gguf_writer *w = NULL;
    spex_error err = {0};
    if (spex_gguf_writer_init(&w, &err) != SPEX_OK) return 0;
    spex_status st = spex_vocab_from_spm_buffer(data, size, "fuzz.model", w, &err);
    if (st != SPEX_OK && !err.msg[0]) abort();   /* every failure says why */
    if (st == SPEX_OK) {
        char path[64];
        snprintf(path, sizeof path, "/tmp/fuzz_spm_model_%d.gguf", (int)getpid());
        spex_gguf_writer_set_str(w, "general.architecture", "llama", 5);
        if (spex_gguf_writer_write(w, path, &err) == SPEX_OK) {
            spex_gguf *g = NULL;
            spex_tokenizer *t = NULL;
            if (spex_gguf_open(path, &g, &err) == SPEX_OK && spex_tokenizer_load_gguf(g, &t, &err) == SPEX_OK) {
                int32_t ids[64];
                int n = 0;
                spex_tokenize(t, "Hello world \xe2\x96\x81 <s>", 18, true, true, ids, 64, &n, &err);
                for (int i = 0; i < n && i < 64; i++)
                    if (ids[i] < 0 || ids[i] >= spex_tokenizer_n_vocab(t)) abort();
            }
            spex_tokenizer_free(t);
            spex_gguf_close(g);
            unlink(path);
        }
    }
    spex_gguf_writer_free(w);
    return 0;
}
