/* hetserve — verification of an engine against golden embeddings.
 *
 * The golden set is a list of sentences with their fp32 reference embeddings, produced by the
 * reference implementation (tests/golden/: embeddings.json + embeddings.f32). hs_verify_engine
 * runs those sentences through a model on one engine at one compute dtype and compares each
 * embedding with its reference by cosine similarity; the engine passes when both the minimum
 * and the mean cosine reach the tolerance declared for that dtype. `hetserve verify` prints
 * these reports for every available engine, and a server can call hs_verify_engine at start-up
 * (--verify-on-load) to refuse serving from an engine that fails.
 *
 * Golden files:
 *   embeddings.json  {"count": N, "dim": D, "sentences": [...], ...}: each sentence is a
 *                    string or an object with "text"; token ids, when present, are taken from
 *                    "ids", "token_ids" or "input_ids", either per sentence object or as a
 *                    top-level array of arrays. Without ids the sentences are tokenized by the
 *                    model being verified.
 *   embeddings.f32   float32 little-endian [N, D], row i for sentence i.
 */
#ifndef HS_MODEL_VERIFY_H
#define HS_MODEL_VERIFY_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "core/tensor.h"
#include "engine/engine.h"
#include "model/model.h"

struct hs_golden {
    int count;
    int dim;
    char **sentences;   /* [count], NUL-terminated; may also contain NUL bytes */
    size_t *text_bytes; /* [count] byte length of each sentence */
    int32_t **ids;      /* [count] token ids, or NULL when the json has none */
    int *n_ids;         /* [count], or NULL */
    float *emb;         /* [count * dim] */
};

/* Loads a golden set. HS_STATUS_IO when a file cannot be read, HS_STATUS_CORRUPT (message
 * names the file and the fault) when they are malformed or disagree in size. Free with
 * hs_golden_free. */
hs_status hs_golden_load(const char *json_path, const char *f32_path, struct hs_golden **out,
                         struct hs_error *err);
/* Loads <dir>/embeddings.json and <dir>/embeddings.f32; or, when dir ends in ".json", that
 * file and the ".f32" of the same name beside it (tests/golden/tiny_<family>.json). */
hs_status hs_golden_load_dir(const char *dir, struct hs_golden **out, struct hs_error *err);
void hs_golden_free(struct hs_golden *g);

/* Pass thresholds on the cosine similarity to the reference. */
struct hs_verify_tolerance {
    double cos_min;  /* every sentence */
    double cos_mean; /* the average */
};

/* Declared defaults: F32 min and mean >= 0.99999; F16 mean >= 0.9999, min >= 0.999;
 * I8 mean >= 0.998, min >= 0.99;
 * BF16 mean >= 0.999, min >= 0.99; anything else mean >= 0.99, min >= 0.95. */
void hs_verify_default_tolerance(enum hs_dtype dtype, struct hs_verify_tolerance *out);

struct hs_verify_report {
    char engine[64]; /* engine name, e.g. "cuda0" */
    char kind[16];   /* "cpu", "cuda" */
    enum hs_dtype dtype;
    int count; /* sentences compared */
    double cos_min;
    double cos_mean;
    int worst; /* index of the sentence with cos_min */
    struct hs_verify_tolerance tol;
    bool pass;
    double ms; /* wall time of all batches (after preparation) */
};

struct hs_verify_opts {
    int batch_max; /* sentences per batch (default 32) */
    int limit;     /* compare only the first `limit` sentences (0 = all) */
};

/* Runs the golden sentences through model m on engine e at compute dtype `dtype`, batch by
 * batch (each batch padded to a multiple-of-16 bucket), and fills *rep. tol NULL = the declared
 * default for dtype; opts NULL = defaults. Returns HS_STATUS_OK when the comparison ran (whether
 * or not it passed: see rep->pass), an error when it could not run (engine cannot prepare the
 * model at that dtype, dimension mismatch with the golden set, engine failure). Allocates and
 * frees its own executor; thread-safe as long as e may be used by several executors. */
hs_status hs_verify_engine(const struct hs_model *m, hs_engine_t e, enum hs_dtype dtype,
                           const struct hs_golden *g, const struct hs_verify_tolerance *tol,
                           const struct hs_verify_opts *opts, struct hs_verify_report *rep,
                           struct hs_error *err);

/* The lane check at load: a fixed set of texts (short queries, sentences, a paragraph over 128
 * tokens, CJK, emoji, digits, code) embedded by a lane's executor and by a reference executor
 * of the same model (cpu f32), compared by cosine. Both executors' slot 0 must be free (the
 * server checks before it starts its scheduler). rep->engine names the lane's first engine,
 * rep->pass says whether tol (NULL: the dtype's default) was met. */
struct hs_executor;
hs_status hs_verify_lane(struct hs_executor *lane, struct hs_executor *ref, enum hs_dtype dtype,
                         const struct hs_verify_tolerance *tol, struct hs_verify_report *rep,
                         struct hs_error *err);
/* The texts it uses; *n receives the count. */
const char *const *hs_verify_check_texts(int *n);

/* Cosine similarity of two vectors (0 when either is all zeros; NaN inputs give NaN). */
double hs_verify_cosine(const float *a, const float *b, int n);

#endif
