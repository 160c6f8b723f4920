/* Single-thread tokenizer throughput on a golden corpus: the tokenizer.json pipeline (and, with
 * --vocab, the legacy vocab.txt WordPiece path) over the single texts of a
 * golden file of tests/data/tokenizer_json/. Prints texts/s; gates nothing. The HF peer is
 * bench/tok_bench.py (encode_batch, one thread) on the same texts.
 *
 * usage: bench_tokenizer TOKENIZER.json GOLDEN.json [--seconds S] [--vocab vocab.txt] */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "model/tokenizer.h"
#include "model/tokenizer/tok.h"

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_tokenizer TOKENIZER.json GOLDEN.json [--seconds S] "
                        "[--vocab vocab.txt]\n");
        return 2;
    }
    double seconds = 2.0;
    const char *vocab = NULL;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--seconds") == 0) seconds = atof(argv[i + 1]);
        if (strcmp(argv[i], "--vocab") == 0) vocab = argv[i + 1];
    }
    json_error_t je;
    json_t *doc = json_load_file(argv[2], JSON_ALLOW_NUL, &je);
    if (!doc) {
        fprintf(stderr, "bench_tokenizer: %s: %s\n", argv[2], je.text);
        return 1;
    }
    /* the distinct single texts of the corpus */
    json_t *cases = json_object_get(doc, "cases"), *tab = json_object_get(doc, "texts");
    size_t n = 0;
    const char **texts = calloc(json_array_size(cases) + 1, sizeof *texts);
    size_t *lens = calloc(json_array_size(cases) + 1, sizeof *lens);
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *k = json_array_get(cases, i);
        if (json_is_integer(json_object_get(k, "pair")) ||
            !json_is_true(json_object_get(k, "add")) || !json_is_null(json_object_get(k, "trunc")))
            continue;
        json_t *t = json_array_get(tab, (size_t)json_integer_value(json_object_get(k, "text")));
        texts[n] = json_string_value(t);
        lens[n] = json_string_length(t);
        n++;
    }
    struct hs_error err = {0};
    struct hs_tok *tok = NULL;
    if (hs_tok_load(argv[1], &tok, &err)) {
        fprintf(stderr, "bench_tokenizer: %s\n", err.msg);
        return 1;
    }
    struct hs_tok_trunc none = {.max_length = -1};
    struct hs_tok_encode_opts o = {.add_special_tokens = true, .truncation = &none};
    size_t done = 0, tokens = 0;
    int64_t t0 = hs_now_ns(), end = t0 + (int64_t)(seconds * 1e9);
    while (hs_now_ns() < end) {
        for (size_t i = 0; i < n; i++) {
            struct hs_tok_encoding e;
            if (hs_tok_encode(tok, texts[i], lens[i], NULL, 0, &o, &e, &err)) {
                fprintf(stderr, "bench_tokenizer: %s\n", err.msg);
                return 1;
            }
            tokens += e.n;
            hs_tok_encoding_free(&e);
        }
        done += n;
    }
    double s = (double)(hs_now_ns() - t0) / 1e9;
    printf("tokenizer.json %s: %zu texts in %.2f s: %.0f texts/s (%.0f tokens/s)\n", argv[1], done,
           s, (double)done / s, (double)tokens / s);
    if (vocab) {
        struct hs_tokenizer *legacy = NULL;
        if (hs_tokenizer_load(vocab, NULL, &legacy, &err)) {
            fprintf(stderr, "bench_tokenizer: %s\n", err.msg);
            return 1;
        }
        static int32_t ids[1 << 16];
        done = 0;
        t0 = hs_now_ns();
        end = t0 + (int64_t)(seconds * 1e9);
        while (hs_now_ns() < end) {
            for (size_t i = 0; i < n; i++) {
                int nt = 0;
                if (hs_tokenizer_encode(legacy, texts[i], lens[i], ids, 1 << 16, &nt, NULL, &err)) {
                    fprintf(stderr, "bench_tokenizer: %s\n", err.msg);
                    return 1;
                }
            }
            done += n;
        }
        s = (double)(hs_now_ns() - t0) / 1e9;
        printf("vocab.txt %s: %zu texts in %.2f s: %.0f texts/s\n", vocab, done, s,
               (double)done / s);
        hs_tokenizer_free(legacy);
    }
    hs_tok_free(tok);
    json_decref(doc);
    free(texts);
    free(lens);
    return 0;
}
