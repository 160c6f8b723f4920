/* Fuzz: classification-head JSON (model/head.c), through hs_head_load_buffer, the same parser
 * hs_head_load runs on a file.
 * Checks: a refused head says why (HS_STATUS_CORRUPT, message naming the label); an accepted one
 * has 2..HS_HEAD_MAX_CLASSES distinct, non-empty, terminated labels, a dim in range, finite
 * weights, and applying it gives finite probabilities summing to 1 and a valid best class;
 * nothing leaks Each input runs once more with allocations failing from the n-th on
 * (fuzz_fail_allocs): a clean refusal, nothing leaked.
 */
#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "fuzz.h"
#include "model/head.h"

static int check(const uint8_t *data, size_t size)
{
    fuzz_json_alloc();
    int64_t live = hs_alloc_live();
    struct hs_head *h = NULL;
    struct hs_error err = {0};
    hs_status s = hs_head_load_buffer(data, size, "fuzz-head.json", &h, &err);
    if (s != HS_STATUS_OK) {
        FUZZ_CHECK(h == NULL);
        FUZZ_CHECK(s == HS_STATUS_CORRUPT);
        FUZZ_CHECK(strstr(err.msg, "fuzz-head.json") != NULL);
        FUZZ_CHECK(hs_alloc_live() == live);
        return 0;
    }
    FUZZ_CHECK(h->n_classes >= 2 && h->n_classes <= HS_HEAD_MAX_CLASSES);
    FUZZ_CHECK(h->dim >= 1);
    FUZZ_CHECK(memchr(h->model, '\0', sizeof h->model) != NULL);
    for (int c = 0; c < h->n_classes; c++) {
        FUZZ_CHECK(memchr(h->labels[c], '\0', HS_HEAD_LABEL_MAX) != NULL && h->labels[c][0]);
        for (int k = 0; k < c; k++) FUZZ_CHECK(strcmp(h->labels[k], h->labels[c]) != 0);
        FUZZ_CHECK(isfinite(h->bias[c]));
    }
    for (size_t i = 0; i < (size_t)h->n_classes * (size_t)h->dim; i++)
        FUZZ_CHECK(isfinite(h->weight[i]));

    /* an embedding of unit norm, as the heads are applied to */
    float *x = malloc(sizeof(float) * (size_t)h->dim);
    for (int j = 0; j < h->dim; j++) x[j] = (float)(1.0 / sqrt((double)h->dim));
    float probs[HS_HEAD_MAX_CLASSES];
    int best = hs_head_apply(h, x, probs);
    FUZZ_CHECK(best >= 0 && best < h->n_classes);
    double sum = 0;
    for (int c = 0; c < h->n_classes; c++) {
        FUZZ_CHECK(isfinite(probs[c]) && probs[c] >= 0 && probs[c] <= 1);
        FUZZ_CHECK(probs[c] <= probs[best]);
        sum += probs[c];
    }
    FUZZ_CHECK(fabs(sum - 1.0) < 1e-4);
    free(x);
    hs_head_free(h);
    FUZZ_CHECK(hs_alloc_live() == live);
    return 0;
}

/* Once more with allocations failing: refused cleanly, nothing leaked. */
static void under_oom(const uint8_t *data, size_t size)
{
    int64_t live = hs_alloc_live();
    struct hs_head *h = NULL;
    fuzz_fail_allocs(data, size);
    hs_status s = hs_head_load_buffer(data, size, "fuzz-head.json", &h, NULL);
    fuzz_fail_allocs_end();
    FUZZ_CHECK(s == HS_STATUS_OK || s == HS_STATUS_NO_MEMORY || s == HS_STATUS_CORRUPT);
    FUZZ_CHECK((s == HS_STATUS_OK) == (h != NULL));
    hs_head_free(h);
    FUZZ_CHECK(hs_alloc_live() == live);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check(data, size);
    under_oom(data, size);
    return 0;
}
