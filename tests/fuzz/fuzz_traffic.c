/* Fuzz: the traffic of `hetserve plan --traffic` — the spec "rate=R;TOKENS:WEIGHT,..."
 * (sched/plan.c, hs_traffic_parse), a trace of "<seconds> <tokens>" lines
 * (hs_traffic_parse_lines) and a capture file of JSON lines (server/capture_traffic.c,
 * hs_capture_traffic_parse). The first byte picks the parser (mod 3), the rest is its text.
 * Checks: a refusal is HS_STATUS_INVALID_INPUT with a message, and a file's names the file
 * ("T:..."); accepted traffic has a positive finite rate, 1..HS_TRAFFIC_MAX_LENGTHS lengths
 * >= 1 whose shares are >= 0 and sum to 1; a capture's arrivals are at least two, sorted by
 * arrival from 0, each of >= 1 sequences of [2, 2^20] tokens, a valid priority and a deadline
 * >= 0, and as many sequences as the summary counts; nothing leaks. Each input runs once more
 * with allocations failing: a clean refusal, nothing leaked.
 */
#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "fuzz.h"
#include "sched/plan.h"
#include "server/capture.h"

static const int BUCKETS[] = {16, 32, 64, 128, 256, 512};
#define N_BUCKETS 6

static hs_status run(const uint8_t *data, size_t size, bool check)
{
    if (size < 1) return HS_STATUS_OK;
    char *text = hs_malloc(size);
    if (!text) return HS_STATUS_NO_MEMORY;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    const int mode = data[0] % 3;
    struct hs_traffic t;
    struct hs_capture_traffic_summary sum;
    struct hs_error err = {0};
    hs_status st;
    if (mode == 0)
        st = hs_traffic_parse(text, &t, &err);
    else if (mode == 1)
        st = hs_traffic_parse_lines("T", text, size - 1, BUCKETS, N_BUCKETS, &t, &err);
    else
        st =
            hs_capture_traffic_parse("T", text, size - 1, BUCKETS, N_BUCKETS, NULL, &t, &sum, &err);
    if (check && st) {
        FUZZ_CHECK(st == HS_STATUS_INVALID_INPUT);
        FUZZ_CHECK(err.msg[0] != '\0');
        if (mode) FUZZ_CHECK(!strncmp(err.msg, "T:", 2));
    }
    if (check && !st) {
        FUZZ_CHECK(t.rate_per_s > 0 && isfinite(t.rate_per_s));
        FUZZ_CHECK(t.n >= 1 && t.n <= HS_TRAFFIC_MAX_LENGTHS);
        double total = 0;
        for (int i = 0; i < t.n; i++) {
            FUZZ_CHECK(t.tokens[i] >= 1 && t.share[i] >= 0 && isfinite(t.share[i]));
            total += t.share[i];
        }
        FUZZ_CHECK(fabs(total - 1) < 1e-9);
        const struct hs_sim_traffic *c = &t.captured;
        if (mode == 2) {
            FUZZ_CHECK(c->n >= 2 && (long)c->n == sum.requests && c->a[0].at_s == 0);
            long seqs = 0;
            for (size_t i = 0; i < c->n; i++) {
                const struct hs_sim_arrival *a = &c->a[i];
                FUZZ_CHECK(isfinite(a->at_s) && (i == 0 || a->at_s >= c->a[i - 1].at_s));
                FUZZ_CHECK(a->n_inputs >= 1 && a->tokens && a->timeout_ms >= 0);
                FUZZ_CHECK(a->priority == HS_PRIORITY_INTERACTIVE ||
                           a->priority == HS_PRIORITY_BATCH);
                for (int k = 0; k < a->n_inputs; k++)
                    FUZZ_CHECK(a->tokens[k] >= 2 && a->tokens[k] <= 1 << 20);
                seqs += a->n_inputs;
            }
            FUZZ_CHECK(seqs == sum.sequences && sum.span_s > 0);
            FUZZ_CHECK(c->a[c->n - 1].at_s == sum.span_s);
        } else {
            FUZZ_CHECK(c->n == 0);
        }
    }
    hs_traffic_free(&t);
    hs_free(text);
    return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_json_alloc();
    int64_t live = hs_alloc_live();
    run(data, size, true);
    FUZZ_CHECK(hs_alloc_live() == live);
    fuzz_fail_allocs(data, size);
    hs_status st = run(data, size, false);
    fuzz_fail_allocs_end();
    FUZZ_CHECK(st == HS_STATUS_OK || st == HS_STATUS_NO_MEMORY || st == HS_STATUS_INVALID_INPUT);
    FUZZ_CHECK(hs_alloc_live() == live);
    return 0;
}
