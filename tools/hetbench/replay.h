/* hetbench — replay of a hetserve capture file (docs/CAPTURE.md): the pure parts.
 *
 * hs_bench_replay_load reads every line with the server's own reader (hs_capture_parse_line),
 * orders them by arrival, and prepares each request ahead of the run: its send time (the
 * captured arrival offset divided by the speed-up), its endpoint, and its JSON body with the
 * captured priority, deadline and inputs — the captured texts when the line has them, otherwise
 * texts generated from the built-in word list until the model's WordPiece tokenizer gives each
 * one the captured token length. The achieved match is counted (exact, off by one, worse).
 * A line with a captured body (an image sent to /v1/ocr) is sent as it came, body and
 * Content-Type.
 * Nothing here touches the network. Not thread-safe. All allocation through hs_malloc.
 */
#ifndef HS_TOOLS_HETBENCH_REPLAY_H
#define HS_TOOLS_HETBENCH_REPLAY_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "hetbench/images.h"
#include "hetbench/workload.h"
#include "model/tokenizer.h"

struct hs_bench_replay_req {
    int64_t at_ns; /* send time, from the start of the replay */
    char *endpoint;
    char *body;
    size_t body_len;
    int cls;                      /* index of its endpoint in class_name */
    unsigned items;               /* inputs */
    enum hs_bench_body_kind kind; /* JSON, or a captured body's Content-Type (an image) */
};

struct hs_bench_replay {
    struct hs_bench_replay_req *req; /* [n], by send time */
    size_t n;
    size_t skipped;   /* lines with no inputs (requests refused before tokenizing) */
    size_t no_bodies; /* of those, lines of a body that was not captured (texts off) */
    int n_classes;    /* distinct endpoints */
    char class_name[HS_BENCH_MIX_MAX][HS_BENCH_NAME_MAX]; /* "v1_embeddings", "embed", ... */
    /* inputs sent with captured texts, and generated ones by how close their length came */
    size_t texts_captured, gen_exact, gen_off_by_one, gen_worse;
    int gen_max_diff;
};

/* Reads and prepares the capture file at path. speed > 0 divides the arrival offsets. tok: the
 * model's tokenizer, needed only when a line has no texts (NULL otherwise is an error naming
 * the line). Errors: HS_STATUS_IO, HS_STATUS_INVALID_INPUT (with "path:line: ..."),
 * HS_STATUS_NO_MEMORY. out is zeroed first; free it with hs_bench_replay_free (also on error). */
hs_status hs_bench_replay_load(const char *path, const struct hs_tokenizer *tok, double speed,
                               uint64_t seed, struct hs_bench_replay *out, struct hs_error *err);
void hs_bench_replay_free(struct hs_bench_replay *r);

/* Appends to out a text of built-in words whose encoding with tok has `tokens` ids ([CLS] and
 * [SEP] included) when it can; *achieved receives the count it has (at least 3: a text is never
 * empty). */
hs_status hs_bench_text_for_tokens(const struct hs_tokenizer *tok, const struct hs_bench_words *w,
                                   struct hs_bench_rng *r, int tokens, struct hs_bench_buf *out,
                                   int *achieved);

#endif
