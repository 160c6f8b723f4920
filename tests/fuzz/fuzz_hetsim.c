/* Fuzz: hetsim's command-line specs and price table (tools/hetsim/spec.c). The first byte picks
 * the parser (classes, slo, search, prices, tenants), the rest is its text.
 * Checks: a refusal says why; an accepted spec keeps its promises (classes named, bounds positive
 * and ascending; SLO classes among the names, targets positive and finite; search engines among
 * the names, each once, 0 <= lo <= hi <= max; prices non-negative, finite, sources terminated;
 * tenants named, each once, shares and weights positive and finite);
 * nothing leaks. Each input runs once more with allocations failing: a clean refusal, no leak.
 */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "core/alloc.h"
#include "fuzz.h"
#include "hetsim/spec.h"

static const char *const NAMES[] = {"short", "long", "cpu", "gpu", "a"};
#define N_NAMES 5

static hs_status run(const uint8_t *data, size_t size, bool check)
{
    if (size < 1) return HS_STATUS_OK;
    char *text = hs_malloc(size);
    if (!text) return HS_STATUS_NO_MEMORY;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    struct hs_error err = {0};
    hs_status st = HS_STATUS_OK;
    switch (data[0] % 5) {
    case 0: {
        struct hs_sim_classes c;
        st = hs_sim_classes_parse(text, &c, &err);
        if (check && !st) {
            FUZZ_CHECK(c.n >= 1 && c.n <= HS_SPEC_MAX_ITEMS);
            for (int i = 0; i < c.n; i++) {
                FUZZ_CHECK(c.name[i][0] && memchr(c.name[i], 0, sizeof c.name[i]));
                FUZZ_CHECK(!strchr(c.name[i], ','));
                FUZZ_CHECK(c.max_tokens[i] >= 1 && (!i || c.max_tokens[i] > c.max_tokens[i - 1]));
            }
        }
        break;
    }
    case 1: {
        struct hs_sim_slo s;
        st = hs_sim_slo_parse(text, NAMES, N_NAMES, &s, &err);
        if (check && !st) {
            FUZZ_CHECK(s.n >= 0 && s.n <= HS_SPEC_MAX_ITEMS);
            for (int i = 0; i < s.n; i++)
                FUZZ_CHECK(s.cls[i] >= 0 && s.cls[i] < N_NAMES && s.p99_ms[i] > 0 &&
                           isfinite(s.p99_ms[i]));
        }
        break;
    }
    case 2: {
        struct hs_sim_search s;
        st = hs_sim_search_parse(text, NAMES, N_NAMES, 64, &s, &err);
        if (check && !st) {
            FUZZ_CHECK(s.n >= 1 && s.n <= N_NAMES);
            for (int i = 0; i < s.n; i++) {
                FUZZ_CHECK(s.engine[i] >= 0 && s.engine[i] < N_NAMES);
                FUZZ_CHECK(s.lo[i] >= 0 && s.lo[i] <= s.hi[i] && s.hi[i] <= 64);
                for (int k = 0; k < i; k++) FUZZ_CHECK(s.engine[k] != s.engine[i]);
            }
        }
        break;
    }
    case 4: {
        struct hs_sim_tenants t;
        st = hs_sim_tenants_parse(text, &t, &err);
        if (check && !st) {
            FUZZ_CHECK(t.n >= 1 && t.n <= HS_SPEC_MAX_ITEMS);
            for (int i = 0; i < t.n; i++) {
                FUZZ_CHECK(t.name[i][0] && memchr(t.name[i], 0, sizeof t.name[i]));
                FUZZ_CHECK(!strpbrk(t.name[i], ":,"));
                FUZZ_CHECK(t.share[i] > 0 && isfinite(t.share[i]) && t.weight[i] > 0 &&
                           isfinite(t.weight[i]));
                for (int k = 0; k < i; k++) FUZZ_CHECK(strcmp(t.name[k], t.name[i]) != 0);
            }
        }
        break;
    }
    default: {
        double usd[N_NAMES];
        char src[N_NAMES][256];
        st = hs_sim_prices_parse(text, size - 1, "fuzz-prices.json", NAMES, 2, usd, src, &err);
        if (check && !st)
            for (int i = 0; i < 2; i++)
                FUZZ_CHECK(usd[i] >= 0 && isfinite(usd[i]) && memchr(src[i], 0, sizeof src[i]));
        if (check && st) FUZZ_CHECK(strstr(err.msg, "fuzz-prices.json") != NULL);
        break;
    }
    }
    if (check && st) FUZZ_CHECK(err.msg[0] != '\0');
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
    run(data, size, false);
    fuzz_fail_allocs_end();
    FUZZ_CHECK(hs_alloc_live() == live);
    return 0;
}
