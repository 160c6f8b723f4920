/* hetbench — workload model: the pure parts of the load generator.
 *
 * A seeded RNG (xoshiro256**), Poisson inter-arrival times, length distributions
 * ("80:8-32,20:200-256"), weighted mixes ("interactive:70,batch:30"), request texts built from
 * a word list, a text corpus read from a file (one text per line, optional "tag<TAB>text"), a
 * growable byte buffer with JSON string escaping, and the loopback-only host rule.
 * Nothing here touches the network; everything is deterministic given the seed. Not
 * thread-safe: one workload per thread. All allocation goes through hs_malloc/hs_free.
 */
#ifndef HS_TOOLS_HETBENCH_WORKLOAD_H
#define HS_TOOLS_HETBENCH_WORKLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

/* ---- RNG ---- */
struct hs_bench_rng {
    uint64_t s[4];
};

/* Seeds the generator; equal seeds give equal sequences on every machine. */
void hs_bench_rng_seed(struct hs_bench_rng *r, uint64_t seed);
uint64_t hs_bench_rng_next(struct hs_bench_rng *r);
/* Uniform double in [0, 1). */
double hs_bench_rng_uniform(struct hs_bench_rng *r);
/* Uniform integer in [lo, hi] (inclusive); lo when hi <= lo. */
uint32_t hs_bench_rng_range(struct hs_bench_rng *r, uint32_t lo, uint32_t hi);
/* Exponentially distributed gap with mean 1/rate: the inter-arrival time of a Poisson process
 * of `rate` events per unit time. rate must be > 0. */
double hs_bench_rng_exp(struct hs_bench_rng *r, double rate);

/* ---- weighted mixes: length distributions and priority mixes ---- */
#define HS_BENCH_MIX_MAX  16
#define HS_BENCH_NAME_MAX 32

struct hs_bench_length_class {
    char name[HS_BENCH_NAME_MAX]; /* "8-32", or the name given as "short=80:8-32" */
    double weight;
    uint32_t words_min, words_max;
};

struct hs_bench_lengths {
    int n;
    double weight_total;
    struct hs_bench_length_class c[HS_BENCH_MIX_MAX];
};

/* Parses "W:A-B[,W:A-B...]" (W weight > 0, relative; A <= B word counts >= 1; "W:A" means A-A;
 * an optional "name=" prefix names the class). Errors: HS_STATUS_INVALID_ARGUMENT with a
 * message in err. */
hs_status hs_bench_lengths_parse(const char *spec, struct hs_bench_lengths *out,
                                 struct hs_error *err);
/* Index of a class drawn with probability weight / weight_total. */
int hs_bench_lengths_pick(const struct hs_bench_lengths *l, struct hs_bench_rng *r);

struct hs_bench_mix {
    int n;
    double weight_total;
    char name[HS_BENCH_MIX_MAX][HS_BENCH_NAME_MAX];
    double weight[HS_BENCH_MIX_MAX];
};

/* Parses "name[:W][,name[:W]...]" (W defaults to 1; names are [A-Za-z0-9_-]). */
hs_status hs_bench_mix_parse(const char *spec, struct hs_bench_mix *out, struct hs_error *err);
int hs_bench_mix_pick(const struct hs_bench_mix *m, struct hs_bench_rng *r);

/* ---- growable buffer ---- */
struct hs_bench_buf {
    char *p; /* NUL-terminated when len > 0 or after any append */
    size_t len, cap;
};

hs_status hs_bench_buf_reserve(struct hs_bench_buf *b, size_t extra);
hs_status hs_bench_buf_append(struct hs_bench_buf *b, const char *s, size_t n);
hs_status hs_bench_buf_puts(struct hs_bench_buf *b, const char *s);
/* Appends s as a JSON string literal, quotes included (control characters as \uXXXX). */
hs_status hs_bench_buf_append_json_str(struct hs_bench_buf *b, const char *s);
void hs_bench_buf_free(struct hs_bench_buf *b);

/* ---- words and generated texts ---- */
struct hs_bench_words {
    const char **w;
    size_t n;
    char *storage; /* owned file contents when loaded from a file; NULL for the built-in list */
};

/* The built-in list of common English words (each a single WordPiece token for BERT vocabularies,
 * so words ~ tokens). Never fails; free with hs_bench_words_free (a no-op here). */
void hs_bench_words_builtin(struct hs_bench_words *w);
/* Words from a file, one or more per line, separated by white space. Errors: IO, INVALID_INPUT
 * (no words), NO_MEMORY. */
hs_status hs_bench_words_load(const char *path, struct hs_bench_words *w, struct hs_error *err);
void hs_bench_words_free(struct hs_bench_words *w);

/* Appends `words` words drawn uniformly from w, separated by single spaces, ending in ".".
 * The text has exactly `words` space-separated words. */
hs_status hs_bench_text_gen(const struct hs_bench_words *w, struct hs_bench_rng *r, uint32_t words,
                            struct hs_bench_buf *out);

/* ---- corpus from a file ---- */
struct hs_bench_corpus {
    char *storage;
    const char **text; /* n_texts entries */
    uint16_t *cls;     /* class index of each text */
    size_t n_texts;
    int n_classes;
    char class_name[HS_BENCH_MIX_MAX][HS_BENCH_NAME_MAX];
    size_t *class_members[HS_BENCH_MIX_MAX]; /* indices into text */
    size_t class_count[HS_BENCH_MIX_MAX];
};

/* Parses a corpus in place from data (taken over: freed by hs_bench_corpus_free, even on error).
 * One text per non-empty line; a line "tag<TAB>text" puts the text in class "tag" (at most
 * HS_BENCH_MIX_MAX tags), other lines are in class "all". */
hs_status hs_bench_corpus_parse(char *data, size_t bytes, struct hs_bench_corpus *c,
                                struct hs_error *err);
hs_status hs_bench_corpus_load(const char *path, struct hs_bench_corpus *c, struct hs_error *err);
/* Picks a class with probability proportional to its number of texts, then a text of it. */
int hs_bench_corpus_pick_class(const struct hs_bench_corpus *c, struct hs_bench_rng *r);
const char *hs_bench_corpus_pick_text(const struct hs_bench_corpus *c, int cls,
                                      struct hs_bench_rng *r);
/* The same draw as hs_bench_corpus_pick_text, as the text's index. */
size_t hs_bench_corpus_pick_index(const struct hs_bench_corpus *c, int cls, struct hs_bench_rng *r);
void hs_bench_corpus_free(struct hs_bench_corpus *c);

/* ---- targets ---- */
/* True for the hosts this project allows load on: "localhost", IPv4 127.0.0.0/8 in dotted-quad
 * form, and "::1" (with or without brackets). Everything else — names, other addresses — is false.
 */
bool hs_bench_host_is_loopback(const char *host);

#endif
