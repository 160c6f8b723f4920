#include "server/capture.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"

struct hs_capture {
    char path[1024], path_old[1040];
    FILE *f;
    int64_t file_bytes, max_bytes;
    double sample_ratio;
    bool texts;
    int64_t t0_ns;      /* hs_now_ns at open: offsets are measured from here */
    int64_t t0_wall_ns; /* CLOCK_REALTIME at the same moment */

    /* the ring: bytes [head, head + used) (mod cap) are whole lines waiting for the writer */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *ring, *chunk; /* chunk: the writer's copy of what it drains */
    size_t cap, head, used;
    bool stop;
    pthread_t writer;

    atomic_llong lines, bytes, dropped, rotations;
    bool io_warned;
};

/* ---------------------------------------------------------------------------------------------
 * writer
 */

/* The current file becomes path.1 and a new one is started. Writer thread only. */
static void rotate(struct hs_capture *c)
{
    if (c->f) fclose(c->f);
    if (rename(c->path, c->path_old) != 0 && !c->io_warned) {
        hs_log_warn("capture: cannot rename %s: %s", c->path, strerror(errno));
        c->io_warned = true;
    }
    c->f = fopen(c->path, "w");
    c->file_bytes = 0;
    atomic_fetch_add(&c->rotations, 1);
}

static void write_line(struct hs_capture *c, const char *p, size_t n)
{
    if (c->file_bytes > 0 && c->file_bytes + (int64_t)n > c->max_bytes) rotate(c);
    if (!c->f || fwrite(p, 1, n, c->f) != n) {
        if (!c->io_warned) hs_log_warn("capture: cannot write %s", c->path);
        c->io_warned = true;
        atomic_fetch_add(&c->dropped, 1);
        return;
    }
    c->file_bytes += (int64_t)n;
    atomic_fetch_add(&c->lines, 1);
    atomic_fetch_add(&c->bytes, (long long)n);
}

static void *writer_main(void *arg)
{
    struct hs_capture *c = arg;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        while (!c->used && !c->stop) pthread_cond_wait(&c->cv, &c->mu);
        size_t n = c->used;
        if (!n) { /* stopping, and nothing left */
            pthread_mutex_unlock(&c->mu);
            break;
        }
        /* take everything at once: requests wait for the lock only during this copy */
        size_t first = c->cap - c->head < n ? c->cap - c->head : n;
        memcpy(c->chunk, c->ring + c->head, first);
        memcpy(c->chunk + first, c->ring, n - first);
        c->head = (c->head + n) % c->cap;
        c->used = 0;
        pthread_mutex_unlock(&c->mu);
        for (size_t at = 0; at < n;) {
            const char *nl = memchr(c->chunk + at, '\n', n - at);
            size_t len = nl ? (size_t)(nl - (c->chunk + at)) + 1 : n - at;
            write_line(c, c->chunk + at, len);
            at += len;
        }
        if (c->f) fflush(c->f);
    }
    return NULL;
}

hs_status hs_capture_open(const struct hs_capture_opts *o, struct hs_capture **out,
                          struct hs_error *err)
{
    *out = NULL;
    if (strlen(o->path) >= sizeof((struct hs_capture *)0)->path)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "capture file name too long");
    struct hs_capture *c = hs_calloc(1, sizeof *c);
    if (!c) return hs_error_set(err, HS_STATUS_NO_MEMORY, "capture");
    c->cap = (size_t)o->buffer_bytes;
    c->ring = hs_malloc(c->cap);
    c->chunk = hs_malloc(c->cap);
    if (!c->ring || !c->chunk) {
        hs_free(c->ring);
        hs_free(c->chunk);
        hs_free(c);
        return hs_error_set(err, HS_STATUS_NO_MEMORY, "capture buffer of %zu bytes", c->cap);
    }
    snprintf(c->path, sizeof c->path, "%s", o->path);
    snprintf(c->path_old, sizeof c->path_old, "%s.1", o->path);
    c->f = fopen(c->path, "a");
    if (!c->f) {
        hs_status st = hs_error_set(err, HS_STATUS_IO, "cannot open capture file %s: %s", o->path,
                                    strerror(errno));
        hs_free(c->ring);
        hs_free(c->chunk);
        hs_free(c);
        return st;
    }
    struct stat sb;
    c->file_bytes = fstat(fileno(c->f), &sb) == 0 ? (int64_t)sb.st_size : 0;
    c->max_bytes = o->max_bytes;
    c->sample_ratio = o->sample_ratio;
    c->texts = o->texts;
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    c->t0_ns = hs_now_ns();
    c->t0_wall_ns = (int64_t)wall.tv_sec * 1000000000 + wall.tv_nsec;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    if (pthread_create(&c->writer, NULL, writer_main, c) != 0) {
        fclose(c->f);
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->cv);
        hs_free(c->ring);
        hs_free(c->chunk);
        hs_free(c);
        return hs_error_set(err, HS_STATUS_INTERNAL, "capture: cannot start the writer thread");
    }
    *out = c;
    return HS_STATUS_OK;
}

void hs_capture_close(struct hs_capture *c)
{
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->writer, NULL);
    if (c->f) fclose(c->f);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    hs_free(c->ring);
    hs_free(c->chunk);
    hs_free(c);
}

void hs_capture_push(struct hs_capture *c, const char *line, size_t len)
{
    pthread_mutex_lock(&c->mu);
    if (len > c->cap - c->used) {
        pthread_mutex_unlock(&c->mu);
        atomic_fetch_add(&c->dropped, 1);
        return;
    }
    size_t tail = (c->head + c->used) % c->cap;
    size_t first = c->cap - tail < len ? c->cap - tail : len;
    memcpy(c->ring + tail, line, first);
    memcpy(c->ring, line + first, len - first);
    c->used += len;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* ---------------------------------------------------------------------------------------------
 * sampling, formatting, metrics
 */

bool hs_capture_sampled(const struct hs_capture *c, uint64_t id)
{
    if (!c || c->sample_ratio <= 0) return false;
    if (c->sample_ratio >= 1) return true;
    /* splitmix64's finalizer: consecutive ids spread evenly over [0, 1) */
    uint64_t z = id + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0 < c->sample_ratio;
}

/* The strings of the body's input field, as a JSON array, when it holds strings. */
static void put_texts(struct hs_buf *out, const struct hs_capture_rec *r)
{
    if (!r->body || !r->input_field) return;
    json_t *root = json_loadb(r->body, r->body_len, 0, NULL);
    json_t *in = json_is_object(root) ? json_object_get(root, r->input_field) : NULL;
    size_t n = json_is_array(in) ? json_array_size(in) : json_is_string(in) ? 1 : 0;
    bool all_strings = n > 0;
    for (size_t i = 0; i < n && all_strings; i++)
        all_strings = json_is_string(json_is_array(in) ? json_array_get(in, i) : in);
    if (all_strings) {
        hs_buf_puts(out, ",\"texts\":[");
        for (size_t i = 0; i < n; i++) {
            json_t *s = json_is_array(in) ? json_array_get(in, i) : in;
            if (i) hs_buf_putc(out, ',');
            hs_buf_json_str(out, json_string_value(s), json_string_length(s));
        }
        hs_buf_putc(out, ']');
        json_t *t = json_object_get(root, "truncate");
        if (json_is_true(t)) hs_buf_puts(out, ",\"truncate\":true");
    }
    json_decref(root);
}

static void put_name(struct hs_buf *out, const char *key, const char *v)
{
    if (!v) return;
    hs_buf_printf(out, ",\"%s\":", key);
    hs_buf_json_str(out, v, strlen(v));
}

void hs_capture_format(const struct hs_capture *c, const struct hs_capture_rec *r,
                       struct hs_buf *out)
{
    const int64_t *ts = r->ts;
    int64_t at = ts[HS_TS_RECEIVED];
    int64_t wall = c->t0_wall_ns + (at - c->t0_ns);
    hs_buf_printf(out, "{\"v\":%d,\"id\":%llu,\"time\":%.6f,\"offset_ms\":%.3f", HS_CAPTURE_VERSION,
                  (unsigned long long)r->id, (double)wall / 1e9, hs_ns_to_ms(at - c->t0_ns));
    put_name(out, "endpoint", r->endpoint);
    hs_buf_printf(out, ",\"status\":%d", r->status);
    put_name(out, "model", r->model);
    put_name(out, "tenant", r->tenant);
    if (r->has_qos)
        hs_buf_printf(out, ",\"priority\":\"%s\",\"timeout_ms\":%lld",
                      hs_priority_name(r->priority),
                      (long long)((r->deadline_ns - at + 500000) / 1000000));
    hs_buf_printf(out, ",\"inputs\":%d,\"tokens\":[", r->n_seqs);
    for (int i = 0; i < r->n_seqs; i++)
        hs_buf_printf(out, "%s%d", i ? "," : "", r->seqs[i].n_tokens);
    hs_buf_putc(out, ']');
    put_name(out, "route", r->route);
    put_name(out, "policy", r->policy);
    put_name(out, "route_note", r->note);
    hs_buf_puts(out, ",\"engines\":[");
    for (int i = 0; i < r->n_engines; i++) {
        if (i) hs_buf_putc(out, ',');
        hs_buf_json_str(out, r->engines[i], strlen(r->engines[i]));
    }
    hs_buf_puts(out, "],\"stages_ms\":{");
    int64_t prev = at;
    bool first = true;
    for (int i = 1; i < HS_TS_COUNT; i++) {
        if (!ts[i] || ts[i] < prev) continue;
        hs_buf_printf(out, "%s\"%s\":%.3f", first ? "" : ",", hs_ts_name((enum hs_ts)i),
                      hs_ns_to_ms(ts[i] - prev));
        prev = ts[i];
        first = false;
    }
    hs_buf_printf(out, "},\"total_ms\":%.3f", hs_ns_to_ms(prev - at));
    if (r->body_is_input) {
        put_name(out, "content_type", r->content_type);
        hs_buf_printf(out, ",\"body_bytes\":%zu", r->body_len);
        if (c->texts && r->body) {
            hs_buf_puts(out, ",\"body\":\"");
            hs_buf_base64(out, r->body, r->body_len);
            hs_buf_putc(out, '"');
        }
    } else if (c->texts) {
        put_texts(out, r);
    }
    hs_buf_puts(out, "}\n");
}

void hs_capture_stats(struct hs_capture *c, struct hs_capture_stats *out)
{
    out->lines = atomic_load(&c->lines);
    out->bytes = atomic_load(&c->bytes);
    out->dropped = atomic_load(&c->dropped);
    out->rotations = atomic_load(&c->rotations);
}

void hs_capture_metrics(struct hs_capture *c, struct hs_buf *b)
{
    if (!c) return;
    struct hs_capture_stats st;
    hs_capture_stats(c, &st);
    hs_buf_printf(b,
                  "# HELP hetserve_capture_lines_total Request lines written to the capture "
                  "file.\n# TYPE hetserve_capture_lines_total counter\n"
                  "hetserve_capture_lines_total %lld\n"
                  "# HELP hetserve_capture_bytes_total Bytes written to the capture file.\n"
                  "# TYPE hetserve_capture_bytes_total counter\n"
                  "hetserve_capture_bytes_total %lld\n"
                  "# HELP hetserve_capture_dropped_total Capture lines dropped: the buffer was "
                  "full (or the file could not be written).\n"
                  "# TYPE hetserve_capture_dropped_total counter\n"
                  "hetserve_capture_dropped_total %lld\n"
                  "# HELP hetserve_capture_rotations_total Capture file rotations (file -> "
                  "file.1).\n# TYPE hetserve_capture_rotations_total counter\n"
                  "hetserve_capture_rotations_total %lld\n",
                  st.lines, st.bytes, st.dropped, st.rotations);
}

/* ---------------------------------------------------------------------------------------------
 * reading
 */

void hs_capture_entry_free(struct hs_capture_entry *e)
{
    if (e->texts)
        for (int i = 0; i < e->n_inputs; i++) hs_free(e->texts[i]);
    hs_free(e->texts);
    hs_free(e->tokens);
    hs_free(e->body);
    e->texts = NULL;
    e->tokens = NULL;
    e->body = NULL;
    e->body_len = 0;
    e->n_inputs = 0;
}

/* Copies string field key of o into dst[cap]; absent is fine unless required. */
static bool get_str(json_t *o, const char *key, char *dst, size_t cap, bool required,
                    struct hs_error *err)
{
    json_t *v = json_object_get(o, key);
    if (!v)
        return required ? (hs_error_set(err, HS_STATUS_INVALID_INPUT, "missing \"%s\"", key), false)
                        : true;
    if (!json_is_string(v) || json_string_length(v) >= cap ||
        strlen(json_string_value(v)) != json_string_length(v)) {
        hs_error_set(err, HS_STATUS_INVALID_INPUT, "\"%s\" must be a string under %zu bytes", key,
                     cap);
        return false;
    }
    memcpy(dst, json_string_value(v), json_string_length(v) + 1);
    return true;
}

hs_status hs_capture_parse_line(const char *line, size_t len, struct hs_capture_entry *e,
                                struct hs_error *err)
{
    memset(e, 0, sizeof *e);
    e->body_bytes = -1;
    json_error_t je;
    json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return hs_error_set(err, HS_STATUS_INVALID_INPUT, "not JSON: %s (column %d)", je.text,
                            je.column);
    hs_status st = HS_STATUS_INVALID_INPUT;
#define BAD(...)                                                                                   \
    do {                                                                                           \
        hs_error_set(err, HS_STATUS_INVALID_INPUT, __VA_ARGS__);                                   \
        goto out;                                                                                  \
    } while (0)
    if (!json_is_object(root)) BAD("a capture line is a JSON object");
    json_t *v = json_object_get(root, "v");
    if (!json_is_integer(v) || json_integer_value(v) != HS_CAPTURE_VERSION)
        BAD("\"v\" must be %d (the capture format's version)", HS_CAPTURE_VERSION);
    v = json_object_get(root, "id");
    if (v && (!json_is_integer(v) || json_integer_value(v) < 0))
        BAD("\"id\" must be a non-negative integer");
    e->id = v ? (uint64_t)json_integer_value(v) : 0;
    v = json_object_get(root, "offset_ms");
    if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) < 0 ||
        json_number_value(v) > 1e12)
        BAD("\"offset_ms\" must be a number in [0, 1e12]");
    e->offset_ms = json_number_value(v);
    if (!get_str(root, "endpoint", e->endpoint, sizeof e->endpoint, true, err)) goto out;
    if (e->endpoint[0] != '/') BAD("\"endpoint\" must be a path");
    v = json_object_get(root, "status");
    if (v && (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 999))
        BAD("\"status\" must be an HTTP status");
    e->status = v ? (int)json_integer_value(v) : 0;
    if (!get_str(root, "model", e->model, sizeof e->model, false, err) ||
        !get_str(root, "priority", e->priority, sizeof e->priority, false, err))
        goto out;
    if (e->priority[0] && hs_priority_parse(e->priority) < 0)
        BAD("\"priority\" must be interactive or batch");
    v = json_object_get(root, "timeout_ms");
    if (v && (!json_is_integer(v) || json_integer_value(v) < 0 ||
              json_integer_value(v) > 86400000LL * 365))
        BAD("\"timeout_ms\" must be a non-negative integer");
    e->timeout_ms = v ? (long long)json_integer_value(v) : 0;
    e->truncate = json_is_true(json_object_get(root, "truncate"));
    json_t *tok = json_object_get(root, "tokens");
    if (!json_is_array(tok)) BAD("\"tokens\" must be an array of token lengths");
    size_t n = json_array_size(tok);
    if (n > HS_CAPTURE_INPUTS_MAX) BAD("more than %d inputs", HS_CAPTURE_INPUTS_MAX);
    v = json_object_get(root, "inputs");
    if (v && (!json_is_integer(v) || json_integer_value(v) != (json_int_t)n))
        BAD("\"inputs\" must equal the number of token lengths");
    json_t *texts = json_object_get(root, "texts");
    if (texts && (!json_is_array(texts) || json_array_size(texts) != n))
        BAD("\"texts\" must be an array with one text per token length");
    if (n) {
        e->tokens = hs_calloc(n, sizeof *e->tokens);
        if (!e->tokens) {
            st = hs_error_set(err, HS_STATUS_NO_MEMORY, "capture line");
            goto out;
        }
    }
    e->n_inputs = (int)n;
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(tok, i);
        if (!json_is_integer(t) || json_integer_value(t) < 2 || json_integer_value(t) > 1 << 20)
            BAD("tokens[%zu] must be an integer in [2, %d]", i, 1 << 20);
        e->tokens[i] = (int)json_integer_value(t);
    }
    if (texts && n) {
        e->texts = hs_calloc(n, sizeof *e->texts);
        if (!e->texts) {
            st = hs_error_set(err, HS_STATUS_NO_MEMORY, "capture line");
            goto out;
        }
        for (size_t i = 0; i < n; i++) {
            json_t *t = json_array_get(texts, i);
            if (!json_is_string(t)) BAD("texts[%zu] must be a string", i);
            size_t tl = json_string_length(t);
            e->texts[i] = hs_malloc(tl + 1);
            if (!e->texts[i]) {
                st = hs_error_set(err, HS_STATUS_NO_MEMORY, "capture line");
                goto out;
            }
            memcpy(e->texts[i], json_string_value(t), tl + 1);
        }
    }
    if (!get_str(root, "content_type", e->content_type, sizeof e->content_type, false, err))
        goto out;
    v = json_object_get(root, "body_bytes");
    if (v && (!json_is_integer(v) || json_integer_value(v) < 0 ||
              json_integer_value(v) > HS_CAPTURE_BODY_MAX))
        BAD("\"body_bytes\" must be an integer in [0, %d]", HS_CAPTURE_BODY_MAX);
    e->body_bytes = v ? (long long)json_integer_value(v) : -1;
    v = json_object_get(root, "body");
    if (v) {
        if (!json_is_string(v) || json_string_length(v) / 4 * 3 > HS_CAPTURE_BODY_MAX)
            BAD("\"body\" must be a base64 string of at most %d bytes", HS_CAPTURE_BODY_MAX);
        const size_t sl = json_string_length(v);
        if (!(e->body = hs_malloc(sl / 4 * 3 + 4))) {
            st = hs_error_set(err, HS_STATUS_NO_MEMORY, "capture line");
            goto out;
        }
        const long long dn = hs_base64_decode(json_string_value(v), sl, e->body);
        if (dn < 0) BAD("\"body\" is not base64");
        e->body_len = (size_t)dn;
        if (e->body_bytes >= 0 && e->body_bytes != dn)
            BAD("\"body\" decodes to %lld bytes, \"body_bytes\" says %lld", dn, e->body_bytes);
    }
    st = HS_STATUS_OK;
#undef BAD
out:
    json_decref(root);
    return st;
}
