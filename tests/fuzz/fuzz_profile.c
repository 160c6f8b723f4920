/* Fuzz: a `hetserve profile` file read back for planning (sched/costs.c, hs_costs_parse, the
 * parser hs_costs_load runs on a file).
 * Checks: a refused file says why (HS_STATUS_CORRUPT, message naming the label); an accepted one
 * has at most HS_COSTS_MAX_LANES lanes, terminated names, measured lanes with 1..MAX cells of
 * distinct shapes and positive batch and bucket, finite non-negative times; the queries
 * (hs_costs_stage, hs_costs_whole_ms) give finite non-negative times for any shape; nothing
 * leaks. Each input runs once more with allocations failing from the n-th on: a clean refusal,
 * nothing leaked.
 */
#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "fuzz.h"
#include "sched/costs.h"

static struct hs_costs costs;

static void check_times(const struct hs_cost_times *t)
{
    FUZZ_CHECK(isfinite(t->compute_ms) && t->compute_ms >= 0);
    FUZZ_CHECK(isfinite(t->sync_ms) && t->sync_ms >= 0);
    FUZZ_CHECK(isfinite(t->copy_in_ms) && t->copy_in_ms >= 0);
    FUZZ_CHECK(isfinite(t->copy_out_ms) && t->copy_out_ms >= 0);
}

static void check(const uint8_t *data, size_t size)
{
    fuzz_json_alloc();
    int64_t live = hs_alloc_live();
    struct hs_error err = {0};
    hs_status s = hs_costs_parse((const char *)data, size, "fuzz-profile.json", &costs, &err);
    FUZZ_CHECK(hs_alloc_live() == live);
    if (s != HS_STATUS_OK) {
        FUZZ_CHECK(s == HS_STATUS_CORRUPT || s == HS_STATUS_NO_MEMORY);
        FUZZ_CHECK(strstr(err.msg, "fuzz-profile.json") != NULL);
        return;
    }
    FUZZ_CHECK(costs.n_lanes >= 0 && costs.n_lanes <= HS_COSTS_MAX_LANES);
    for (int i = 0; i < costs.n_lanes; i++) {
        const struct hs_cost_lane *l = &costs.lanes[i];
        FUZZ_CHECK(memchr(l->model, 0, sizeof l->model) && memchr(l->engine, 0, sizeof l->engine));
        FUZZ_CHECK(memchr(l->dtype, 0, sizeof l->dtype) && memchr(l->kind, 0, sizeof l->kind));
        FUZZ_CHECK(l->ok ? l->n_cells >= 1 && l->n_cells <= HS_COSTS_MAX_CELLS : l->n_cells == 0);
        for (int c = 0; c < l->n_cells; c++) {
            const struct hs_cost_cell *cc = &l->cells[c];
            FUZZ_CHECK(cc->batch >= 1 && cc->bucket >= 1);
            for (int k = 0; k < c; k++)
                FUZZ_CHECK(l->cells[k].batch != cc->batch || l->cells[k].bucket != cc->bucket);
            for (int k = 0; k < HS_COST_KINDS; k++) check_times(&cc->stage[k]);
            check_times(&cc->whole);
        }
        if (!l->ok) continue;
        FUZZ_CHECK(hs_costs_lane(&costs, l->engine, NULL, NULL) != NULL);
        static const int shapes[][2] = {{1, 1}, {1, 16}, {7, 48}, {64, 512}, {1000, 3}};
        for (size_t q = 0; q < sizeof shapes / sizeof shapes[0]; q++) {
            for (int k = 0; k < HS_COST_KINDS; k++) {
                struct hs_cost_times t =
                    hs_costs_stage(l, (enum hs_cost_kind)k, shapes[q][0], shapes[q][1]);
                check_times(&t);
            }
            double w = hs_costs_whole_ms(l, shapes[q][0], shapes[q][1]);
            FUZZ_CHECK(isfinite(w) && w >= 0);
        }
    }
}

/* Once more with allocations failing: refused cleanly, nothing leaked. */
static void under_oom(const uint8_t *data, size_t size)
{
    int64_t live = hs_alloc_live();
    fuzz_fail_allocs(data, size);
    hs_status s = hs_costs_parse((const char *)data, size, "fuzz-profile.json", &costs, NULL);
    fuzz_fail_allocs_end();
    FUZZ_CHECK(s == HS_STATUS_OK || s == HS_STATUS_NO_MEMORY || s == HS_STATUS_CORRUPT);
    FUZZ_CHECK(hs_alloc_live() == live);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check(data, size);
    under_oom(data, size);
    return 0;
}
