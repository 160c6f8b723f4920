/* `hetserve ocr`: PP-OCR on images, on engines that run ONNX graphs (model/ocr.h), printing one
 * JSON object per image: its text lines (box corners, text, recognition and detection scores)
 * and per-stage times. */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <jansson.h>

#include "cli/cli.h"
#include "core/alloc.h"
#include "core/file.h"
#include "engine/engine.h"
#include "model/ocr.h"

static const char *usage_line =
    "usage: hetserve ocr --det DET.onnx --rec REC.onnx --dict DICT.txt [--cls CLS.onnx]\n"
    "                    [--engine KIND[:DEVICE]] [--det-engine K] [--rec-engine K] [--threads N]\n"
    "                    [--limit-side-len N] [--box-thresh X] [--drop-score X]\n"
    "                    [--workers N] [--rec-images N] [--stats] IMAGE|FOLDER...\n"
    "  runs detection, DB post-processing, crops, (direction classification), recognition and\n"
    "  CTC decoding on each JPEG / PNG image (a folder: its *.jpg, *.jpeg, *.png, by name) and\n"
    "  prints one JSON object per image, in the order given. Images go through a pipeline\n"
    "  (decode, det, db_post, [cls], rec, ctc; --workers threads per CPU stage); --rec-images N\n"
    "  batches the crops of up to N images in one recognizer run (1: each image alone, as the\n"
    "  reference does); --stats prints each stage's items, batches and times on stderr.\n"
    "  The engines must run ONNX graphs (openvino, the default); scripts/setup --models ocr\n"
    "  puts PP-OCRv5's files in models/ppocrv5/.";

static int is_image_name(const char *n)
{
    const char *dot = strrchr(n, '.');
    return dot &&
           (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg") || !strcasecmp(dot, ".png"));
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Appends path, or the images of the folder path, to *list. */
static int add_inputs(const char *path, char ***list, int *n, int *cap)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "hetserve ocr: %s: no such file or folder\n", path);
        return -1;
    }
    char **names = NULL;
    int nn = 0, ncap = 0;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (!d) return -1;
        for (struct dirent *e; (e = readdir(d));) {
            if (e->d_name[0] == '.' || !is_image_name(e->d_name)) continue;
            if (nn == ncap) {
                ncap = ncap ? ncap * 2 : 16;
                names = hs_realloc(names, sizeof *names * (size_t)ncap);
            }
            size_t l = strlen(path) + strlen(e->d_name) + 2;
            names[nn] = hs_malloc(l);
            snprintf(names[nn++], l, "%s/%s", path, e->d_name);
        }
        closedir(d);
        if (nn) qsort(names, (size_t)nn, sizeof *names, cmp_str);
    } else {
        names = hs_malloc(sizeof *names);
        names[nn++] = hs_strdup(path);
    }
    for (int i = 0; i < nn; i++) {
        if (*n == *cap) {
            *cap = *cap ? *cap * 2 : 16;
            *list = hs_realloc(*list, sizeof **list * (size_t)*cap);
        }
        (*list)[(*n)++] = names[i];
    }
    hs_free(names);
    return 0;
}

static hs_status make_engine(const char *spec, int threads, hs_engine_t *e, struct hs_error *err)
{
    char kind[32];
    struct hs_engine_opts eo = {.threads = threads};
    hs_status s = hs_cli_parse_engine(spec, kind, sizeof kind, &eo.device, err);
    if (s) return s;
    return hs_engine_create(kind, &eo, e, err);
}

struct cli_job {
    struct hs_ocr_job job;
    const char *path;
    char *bytes;
    char *json; /* the result line, or */
    char *err;  /* why it failed */
};

struct done_ctx {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n;
};

static json_t *lines_json(const struct hs_op_data *d);

/* an image's journey is over: its line (or error) kept, its memory freed */
static void on_done(void *ctx, void *item, hs_status s, const struct hs_error *err)
{
    struct done_ctx *dc = ctx;
    struct hs_ocr_job *jb = item;
    struct cli_job *j = jb->user;
    if (s) {
        j->err = hs_strdup(err ? err->msg : hs_status_str(s));
    } else {
        const struct hs_ocr_timings *t = &jb->t;
        json_t *o = json_pack(
            "{s:s,s:i,s:i,s:o,s:{s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f},s:i}", "image", j->path, "width",
            jb->d.image.w, "height", jb->d.image.h, "lines", lines_json(&jb->d), "timings_ms",
            "decode", t->decode / 1e6, "det_prep", t->det_prep / 1e6, "det", t->det / 1e6,
            "db_post", t->db_post / 1e6, "crop", t->crop / 1e6, "cls", t->cls / 1e6, "rec",
            t->rec / 1e6, "ctc", t->ctc / 1e6, "rec_batch_images", jb->rec_batch_images);
        char *js = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
        j->json = js ? hs_strdup(js) : NULL;
        free(js);
        json_decref(o);
        if (!j->json) j->err = hs_strdup("out of memory");
    }
    hs_op_data_free(&jb->d);
    hs_free(j->bytes);
    j->bytes = NULL;
    pthread_mutex_lock(&dc->mu);
    dc->n++;
    pthread_cond_signal(&dc->cv);
    pthread_mutex_unlock(&dc->mu);
}

/* per stage: items, batches (mean and largest size), time queued and running, on stderr */
static void print_stats(struct hs_pipeline *p)
{
    json_t *a = json_array();
    for (int i = 0; i < hs_pipeline_stage_count(p); i++) {
        struct hs_pipeline_stage_stats s;
        hs_pipeline_stage_stats(p, i, &s);
        json_array_append_new(
            a, json_pack("{s:s,s:I,s:I,s:I,s:f,s:i,s:f,s:f}", "stage", hs_pipeline_stage_name(p, i),
                         "items", (json_int_t)s.items_in, "failed", (json_int_t)s.items_failed,
                         "batches", (json_int_t)s.batches, "batch_mean",
                         s.batches ? (double)s.batch_items / s.batches : 0.0, "batch_max",
                         s.batch_size_max, "queue_ms", s.queue_ns / 1e6, "run_ms", s.run_ns / 1e6));
    }
    json_t *o = json_pack("{s:o}", "stages", a);
    char *js = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
    fprintf(stderr, "%s\n", js);
    free(js);
    json_decref(o);
}

static json_t *lines_json(const struct hs_op_data *d)
{
    json_t *a = json_array();
    for (int i = 0; i < d->n_lines; i++) {
        const struct hs_ocr_line *l = &d->lines[i];
        json_t *box = json_array();
        for (int k = 0; k < 4; k++)
            json_array_append_new(box, json_pack("[ii]", (int)l->box.p[k].x, (int)l->box.p[k].y));
        json_t *o = json_pack("{s:o,s:s,s:f,s:f}", "box", box, "text", l->text, "score",
                              (double)l->score, "det_score", (double)l->box.score);
        if (l->rotated) json_object_set_new(o, "rotated", json_true());
        json_array_append_new(a, o);
    }
    return a;
}

int hs_cmd_ocr(int argc, char **argv)
{
    const char *det = NULL, *rec = NULL, *cls = NULL, *dict = NULL;
    const char *engine = "openvino", *det_engine = NULL, *rec_engine = NULL;
    int threads = 0, limit = 960, workers = 1, rec_images = 1, stats = 0;
    struct cli_job *jobs = NULL;
    struct hs_pipeline *pipe = NULL;
    double box_thresh = -1, drop_score = -1;
    char **inputs = NULL;
    int n_inputs = 0, cap = 0, rc = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int more = i + 1 < argc;
        if (!strcmp(a, "--help")) {
            printf("%s\n", usage_line);
            rc = 0;
            goto out;
        } else if (!strcmp(a, "--det") && more) {
            det = argv[++i];
        } else if (!strcmp(a, "--rec") && more) {
            rec = argv[++i];
        } else if (!strcmp(a, "--cls") && more) {
            cls = argv[++i];
        } else if (!strcmp(a, "--dict") && more) {
            dict = argv[++i];
        } else if (!strcmp(a, "--engine") && more) {
            engine = argv[++i];
        } else if (!strcmp(a, "--det-engine") && more) {
            det_engine = argv[++i];
        } else if (!strcmp(a, "--rec-engine") && more) {
            rec_engine = argv[++i];
        } else if (!strcmp(a, "--threads") && more) {
            threads = atoi(argv[++i]);
        } else if (!strcmp(a, "--workers") && more) {
            workers = atoi(argv[++i]);
        } else if (!strcmp(a, "--rec-images") && more) {
            rec_images = atoi(argv[++i]);
        } else if (!strcmp(a, "--stats")) {
            stats = 1;
        } else if (!strcmp(a, "--limit-side-len") && more) {
            limit = atoi(argv[++i]);
        } else if (!strcmp(a, "--box-thresh") && more) {
            box_thresh = atof(argv[++i]);
        } else if (!strcmp(a, "--drop-score") && more) {
            drop_score = atof(argv[++i]);
        } else if (!strncmp(a, "--", 2)) {
            fprintf(stderr, "hetserve ocr: unknown option %s\n%s\n", a, usage_line);
            goto out;
        } else if (add_inputs(a, &inputs, &n_inputs, &cap)) {
            rc = 1;
            goto out;
        }
    }
    if (!det || !rec || !dict || !n_inputs) {
        fprintf(stderr, "hetserve ocr: --det, --rec, --dict and an image are needed\n%s\n",
                usage_line);
        goto out;
    }
    rc = 1;
    struct hs_error err = {0};
    hs_engine_t e_det = NULL, e_rec = NULL;
    struct hs_ocr_models m = {0};
    if (make_engine(det_engine ? det_engine : engine, threads, &e_det, &err)) goto fail;
    if (rec_engine && make_engine(rec_engine, threads, &e_rec, &err)) goto fail;
    if (hs_ocr_models_load(&m, e_det, det, e_rec ? e_rec : e_det, rec, NULL, cls, dict, &err))
        goto fail;
    m.params.det_limit_side_len = limit;
    if (box_thresh >= 0) m.params.db.box_thresh = box_thresh;
    if (drop_score >= 0) m.params.drop_score = drop_score;
    for (const char *names[] = {"det_prep", "db_post", "ctc_decode"}, **p = names; p < names + 3;
         p++)
        if (hs_op_find(*p)->check(&m.params, &err)) goto fail;
    struct done_ctx dc = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    jobs = hs_calloc((size_t)n_inputs, sizeof *jobs);
    if (!jobs) {
        hs_error_set(&err, HS_STATUS_NO_MEMORY, "no memory for %d images", n_inputs);
        goto fail;
    }
    const struct hs_ocr_pipeline_opts po = {
        .cpu_workers = workers, .queue_max = 16, .rec_images = rec_images, .rec_window_us = 2000};
    static struct hs_ocr_stage stages[HS_PIPELINE_MAX_STAGES]; /* as long as the pipeline */
    if (hs_ocr_pipeline_create(&m, &po, stages, on_done, &dc, &pipe, &err)) goto fail;
    int failed = 0;
    for (int i = 0; i < n_inputs; i++) {
        struct cli_job *j = &jobs[i];
        j->path = inputs[i];
        j->job.user = j;
        size_t n = 0;
        if (hs_read_file(inputs[i], (size_t)HS_IMAGE_MAX_BYTES_DEFAULT, &j->bytes, &n, &err)) {
            j->err = hs_strdup(err.msg);
            pthread_mutex_lock(&dc.mu);
            dc.n++;
            pthread_mutex_unlock(&dc.mu);
            continue;
        }
        j->job.d.bytes = (const uint8_t *)j->bytes;
        j->job.d.n_bytes = n;
        /* admission refuses when the first queue is full: wait for room */
        hs_status s;
        while ((s = hs_pipeline_submit(pipe, &j->job, 0, &err)) == HS_STATUS_OVERLOADED) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        if (s) goto fail;
    }
    pthread_mutex_lock(&dc.mu);
    while (dc.n < n_inputs) pthread_cond_wait(&dc.cv, &dc.mu);
    pthread_mutex_unlock(&dc.mu);
    for (int i = 0; i < n_inputs; i++) {
        if (jobs[i].err) {
            fprintf(stderr, "hetserve ocr: %s: %s\n", jobs[i].path, jobs[i].err);
            failed++;
        } else {
            printf("%s\n", jobs[i].json);
        }
    }
    if (stats) print_stats(pipe);
    rc = failed ? 1 : 0;
    goto done;
fail:
    fprintf(stderr, "hetserve ocr: %s\n", err.msg);
done:
    hs_pipeline_destroy(pipe);
    if (jobs)
        for (int i = 0; i < n_inputs; i++) {
            hs_free(jobs[i].json);
            hs_free(jobs[i].err);
            hs_free(jobs[i].bytes);
        }
    hs_free(jobs);
    hs_ocr_models_free(&m);
    hs_engine_destroy(e_rec);
    hs_engine_destroy(e_det);
out:
    for (int i = 0; i < n_inputs; i++) hs_free(inputs[i]);
    hs_free(inputs);
    return rc;
}
