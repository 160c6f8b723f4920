/* hetserve — request capture: one JSON line per answered model request, for replay.
 *
 * Writing (server.capture in the config): the completion path formats a request's line (arrival,
 * endpoint, token lengths, priority, deadline, route, engines, status, stage timings, and the
 * texts only when texts is on) and hands it to hs_capture_push, which copies it into a bounded
 * ring of buffer_bytes and returns: it never waits for the disk. A line that does not fit is
 * dropped and counted. One writer thread drains the ring, appends to the file and rotates it
 * (file -> file.1, replacing an older file.1) before a line would take it past max_bytes.
 * sample_ratio keeps a deterministic share of requests (a hash of the request id).
 *
 * Reading (hetbench replay, tests/fuzz/fuzz_capture.c): hs_capture_parse_line turns one line
 * back into the fields a replay needs. The format is documented field by field in
 * docs/CAPTURE.md; its "v" field is HS_CAPTURE_VERSION.
 */
#ifndef HS_SERVER_CAPTURE_H
#define HS_SERVER_CAPTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "sched/request.h"
#include "server/json.h"

#define HS_CAPTURE_VERSION 1
/* the most inputs a line may list (as limits.items_max's ceiling) */
#define HS_CAPTURE_INPUTS_MAX (1 << 20)
/* the largest body a line may carry (a /v1/ocr image), decoded */
#define HS_CAPTURE_BODY_MAX (64 << 20)

struct hs_capture;

struct hs_capture_opts {
    const char *path;     /* appended to (created when absent) */
    double sample_ratio;  /* [0, 1] */
    bool texts;           /* record the request texts */
    int64_t max_bytes;    /* rotate before the file would pass this */
    int64_t buffer_bytes; /* the ring between requests and the writer */
};

/* Opens the file and starts the writer thread. HS_STATUS_IO when the file cannot be opened. */
hs_status hs_capture_open(const struct hs_capture_opts *o, struct hs_capture **out,
                          struct hs_error *err);
/* Writes what the ring holds, stops the writer and closes the file. No push may run on c any
 * more. NULL is a no-op. */
void hs_capture_close(struct hs_capture *c);

/* Is request id in the sample? Deterministic; thread-safe. False for NULL. */
bool hs_capture_sampled(const struct hs_capture *c, uint64_t id);

/* What the completion path knows of a request (pointers are read during hs_capture_format). */
struct hs_capture_rec {
    uint64_t id;
    const char *endpoint; /* "/v1/embeddings", "/embed", "/predict" */
    int status;           /* HTTP */
    const int64_t *ts;    /* [HS_TS_COUNT], 0 = stage not reached */
    const char *model;    /* NULL when the request never got that far */
    bool has_qos;         /* priority and deadline_ns are known */
    enum hs_priority priority;
    int64_t deadline_ns;               /* absolute, hs_now_ns clock */
    int n_seqs;                        /* tokenized inputs (0: none, e.g. a 400) */
    const struct hs_seq *seqs;         /* [n_seqs]: n_tokens read */
    const char *route, *policy, *note; /* the answering decision (NULL = none) */
    int n_engines;
    const char *engines[2]; /* lanes' engines in the order they ran (cascade: small, big) */
    const char *body;       /* the request body: texts are read from it when texts is on */
    size_t body_len;
    const char *input_field; /* "input" (OpenAI) or "inputs" (TEI) */
    const char *tenant;      /* the API key's tenant (server/auth.h); NULL = none */
    /* a body that is the input itself (POST /v1/ocr: an image, or JSON with one): its
     * Content-Type and size are recorded, and the body, base64, when texts is on */
    bool body_is_input;
    const char *content_type; /* NULL = none sent */
};

/* Appends r's line (JSON and a newline) to out. Thread-safe. */
void hs_capture_format(const struct hs_capture *c, const struct hs_capture_rec *r,
                       struct hs_buf *out);
/* Copies one line into the ring for the writer; never blocks on I/O (a short lock, a copy).
 * A line the ring has no room for is dropped and counted. Thread-safe. */
void hs_capture_push(struct hs_capture *c, const char *line, size_t len);

struct hs_capture_stats {
    long long lines, bytes, dropped, rotations;
};
void hs_capture_stats(struct hs_capture *c, struct hs_capture_stats *out);
/* hetserve_capture_* counters (Prometheus text) appended to out; nothing for NULL. */
void hs_capture_metrics(struct hs_capture *c, struct hs_buf *out);

/* ---- reading ---- */
struct hs_capture_entry {
    uint64_t id;
    double offset_ms;   /* arrival, ms since the capture started (>= 0) */
    char endpoint[192]; /* a path starting with '/' (a KServe path names its model) */
    int status;
    char model[128]; /* "" = not recorded */
    char priority[16];
    long long timeout_ms; /* 0 = not recorded */
    bool truncate;
    int n_inputs;
    int *tokens;  /* [n_inputs] token lengths, [CLS] and [SEP] included */
    char **texts; /* [n_inputs] when the line carries texts, else NULL */
    /* a request whose body is its input (docs/CAPTURE.md "body") */
    char content_type[128]; /* "" = not recorded */
    long long body_bytes;   /* -1 = not recorded */
    uint8_t *body;          /* [body_len], decoded, when the line carries it, else NULL */
    size_t body_len;
};

/* Parses one capture line (without its newline) into e (zeroed first; release with
 * hs_capture_entry_free, also after an error). HS_STATUS_INVALID_INPUT with a message in err
 * for anything that is not a version-1 line of the documented shape. Thread-safe. */
hs_status hs_capture_parse_line(const char *line, size_t len, struct hs_capture_entry *e,
                                struct hs_error *err);
void hs_capture_entry_free(struct hs_capture_entry *e);

/* ---- a capture as planning traffic (capture_traffic.c; `hetserve plan --traffic FILE`) ---- */

#define HS_CAPTURE_TRAFFIC_ENDPOINTS 8

/* What a capture held, for the plan's summary line. */
struct hs_capture_traffic_summary {
    long requests;  /* lines taken: their arrivals are the traffic */
    long sequences; /* their inputs */
    long batch;     /* requests of priority batch */
    long skipped;   /* lines of no sequence (refused before tokenizing) or of another model */
    double span_s;  /* first arrival to last */
    int n_endpoints;
    char endpoint[HS_CAPTURE_TRAFFIC_ENDPOINTS][192];
    long endpoint_requests[HS_CAPTURE_TRAFFIC_ENDPOINTS]; /* the rest counted in the last */
};

/* Reads a capture (data[len]: the file's text, lines as hs_capture_parse_line reads them; name
 * for messages) as the traffic of a plan (sched/plan.h): every request with token lengths, of
 * model (NULL or "": of any model), is an arrival at its offset_ms with its sequences, priority
 * and deadline (t->captured, sorted by arrival); t->rate_per_s is sequences per second over the
 * span of the arrivals and the histogram is the sequences' lengths binned by buckets.
 * HS_STATUS_INVALID_INPUT naming the file and line ("name:3: \"tokens\" must be ..."), or when
 * fewer than two requests at different times remain. t is released with hs_traffic_free, also
 * after an error; sum is optional. */
struct hs_traffic;
hs_status hs_capture_traffic_parse(const char *name, const char *data, size_t len,
                                   const int *buckets, int n_buckets, const char *model,
                                   struct hs_traffic *t, struct hs_capture_traffic_summary *sum,
                                   struct hs_error *err);

#endif
