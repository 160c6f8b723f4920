/* hetsim — the small languages of its command line and its price table, parsed (and fuzzed:
 * tests/fuzz/fuzz_hetsim.c).
 *
 *   classes  "NAME:MAX_TOKENS,..."  ascending bounds on a request's longest input
 *   slo      "CLASS=P99_MS,..."     CLASS one of the given names, P99_MS > 0
 *   search   "ENGINE=MIN..MAX,..."  ENGINE one of the given names, 0 <= MIN <= MAX <= max
 *   tenants  "NAME[:SHARE[:WEIGHT]],..."  distinct names; SHARE (default 1) of the offered rate,
 *            WEIGHT (default 1) in the lanes' fair order; both > 0 and finite
 *   prices   {"ENGINE": {"usd_per_hour": X >= 0, "source": "..."}, ...}: every given engine
 *            needs one; other keys are ignored
 * Every error is HS_STATUS_INVALID_ARGUMENT (INVALID_INPUT for prices) with a message naming the
 * offending part; out is then unspecified. No allocation but jansson's for prices.
 */
#ifndef HS_TOOLS_HETSIM_SPEC_H
#define HS_TOOLS_HETSIM_SPEC_H

#include <stddef.h>

#include "core/status.h"

#define HS_SPEC_MAX_ITEMS 16

struct hs_sim_classes {
    int n;
    char name[HS_SPEC_MAX_ITEMS][32];
    int max_tokens[HS_SPEC_MAX_ITEMS]; /* ascending */
};
hs_status hs_sim_classes_parse(const char *spec, struct hs_sim_classes *c, struct hs_error *err);

struct hs_sim_slo {
    int n;
    int cls[HS_SPEC_MAX_ITEMS]; /* index into the names given */
    double p99_ms[HS_SPEC_MAX_ITEMS];
};
hs_status hs_sim_slo_parse(const char *spec, const char *const *names, int n_names,
                           struct hs_sim_slo *s, struct hs_error *err);

struct hs_sim_search {
    int n;
    int engine[HS_SPEC_MAX_ITEMS]; /* index into the names given */
    int lo[HS_SPEC_MAX_ITEMS], hi[HS_SPEC_MAX_ITEMS];
};
hs_status hs_sim_search_parse(const char *spec, const char *const *names, int n_names, int max,
                              struct hs_sim_search *s, struct hs_error *err);

struct hs_sim_tenants {
    int n;
    char name[HS_SPEC_MAX_ITEMS][32];
    double share[HS_SPEC_MAX_ITEMS];  /* of the offered rate, relative to the others' */
    double weight[HS_SPEC_MAX_ITEMS]; /* scheduler.fair's weight */
};
hs_status hs_sim_tenants_parse(const char *spec, struct hs_sim_tenants *t, struct hs_error *err);

/* usd[i] and source[i] for names[i]; label names the text in messages. */
hs_status hs_sim_prices_parse(const char *text, size_t len, const char *label,
                              const char *const *names, int n_names, double *usd,
                              char (*source)[256], struct hs_error *err);

#endif
