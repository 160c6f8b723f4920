/* hetsoak — the pure parts of the soak driver: an incremental HTTP/1.1 response parser, a set of
 * response ids that notices a repeat, Prometheus text samples, the soak's rate profile, and a
 * latency histogram. Nothing here touches the network or the clock; everything is tested by
 * tests/tools/test_soak.c. Not thread-safe: each object belongs to one thread.
 */
#ifndef HS_TOOLS_SOAK_SOAK_H
#define HS_TOOLS_SOAK_SOAK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- HTTP/1.1 responses ---- */

/* What hs_soak_resp_parse learned about the response at the start of a buffer. */
struct hs_soak_resp {
    int status;              /* HTTP status code */
    long long content_bytes; /* Content-Length */
    size_t head_bytes;       /* status line and headers, the blank line included */
    size_t total_bytes;      /* head_bytes + content_bytes: where the next response would start */
    bool close;              /* Connection: close */
    bool has_id;             /* X-Request-Id present and a decimal number */
    uint64_t id;             /* its value */
    int retry_after_s;       /* Retry-After, -1 when absent */
};

enum hs_soak_parse {
    HS_SOAK_PARSE_MORE = 0,      /* not all of it has arrived yet */
    HS_SOAK_PARSE_DONE = 1,      /* r->total_bytes bytes make one whole response */
    HS_SOAK_PARSE_MALFORMED = -1 /* not a response this driver accepts (msg says why) */
};

/* Parses the response that starts at buf[0] from the n bytes received so far. Only what
 * hetserve sends is accepted: "HTTP/1.x NNN ...", CRLF line ends, a Content-Length (chunked
 * transfer coding and bodies delimited by the close are malformed here). Bytes past
 * r->total_bytes belong to whatever follows the response. msg (cap bytes) says what is wrong
 * when MALFORMED. */
enum hs_soak_parse hs_soak_resp_parse(const char *buf, size_t n, struct hs_soak_resp *r, char *msg,
                                      size_t cap);

/* Does a 200 body have the shape its endpoint promises for `items` inputs? openai: an object
 * list with `items` "index" entries; tei: an array of `items` vectors; predict and tokenize: an
 * array of `items` arrays of objects (a single-string predict: one array of objects). Cheap
 * shape checks, not a JSON parse. */
enum hs_soak_endpoint {
    HS_SOAK_EP_OPENAI,
    HS_SOAK_EP_TEI,
    HS_SOAK_EP_PREDICT,
    HS_SOAK_EP_TOKENIZE,
    HS_SOAK_EP_COUNT
};
bool hs_soak_body_ok(enum hs_soak_endpoint ep, const char *body, size_t n, int items);

/* ---- ids: which response ids were seen ---- */

/* A growable bitmap over ids 1..HS_SOAK_ID_MAX. hetserve numbers every HTTP request it takes
 * from 1 up, so a bitmap is small (1e7 ids = 1.25 MB). */
#define HS_SOAK_ID_MAX (1ull << 32)

struct hs_soak_idset {
    uint64_t *bits;
    size_t words;
};

/* 1: id is new (now remembered); 0: id was seen before; -1: id is 0 or above HS_SOAK_ID_MAX, or
 * no memory. */
int hs_soak_idset_add(struct hs_soak_idset *s, uint64_t id);
void hs_soak_idset_free(struct hs_soak_idset *s);

/* ---- Prometheus text exposition ---- */

/* Sum of the samples of metric `name` (exactly that name: "x" does not match "x_total") whose
 * label set contains every `k="v"` pair of `labels` (a comma-separated list such as
 * `route="long",outcome="sent"`; NULL or "" matches all). *found: whether any sample matched
 * (may be NULL). */
double hs_soak_metric_sum(const char *text, const char *name, const char *labels, bool *found);

/* Calls fn(ctx, value_of_label, sample_value) for each sample of `name` carrying label `label`,
 * in order (value_of_label is NUL-terminated, at most 63 bytes). */
void hs_soak_metric_each(const char *text, const char *name, const char *label,
                         void (*fn)(void *ctx, const char *label_value, double v), void *ctx);

/* ---- load profile ---- */

/* Offered load as a multiple of capacity at time t_s of a swing of period period_s: starts at
 * lo, rises to hi at half the period, back to lo at its end (raised cosine). */
double hs_soak_load_factor(double t_s, double period_s, double lo, double hi);

/* ---- latency histogram (log-spaced, 4 buckets per octave from 1 us) ---- */
#define HS_SOAK_HIST_BUCKETS 128

struct hs_soak_hist {
    uint64_t n;
    uint64_t b[HS_SOAK_HIST_BUCKETS];
    double max_ms;
};

void hs_soak_hist_add(struct hs_soak_hist *h, double ms);
/* Upper bound (ms) of the bucket holding the p-th percentile (p in [0, 100]); 0 when empty. */
double hs_soak_hist_pct(const struct hs_soak_hist *h, double p);

#endif
