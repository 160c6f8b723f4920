/* hetserve profile — measured cost of every lane's stage kinds, and the memory plan.
 *
 *   hetserve profile [--config FILE] [--model DIR] [--out FILE] [--shapes B,BxS,S] [--quick]
 *                    [--target X] [--cap-s S] [--min-n N] [--no-gemm] [--quiet]
 *
 * For every lane (model x engine, in the lane's dtype) of the configuration (default: the
 * default configuration on --model or the default model) and every stage kind, over a grid of
 * (batch, bucket) shapes: compute, sync, copy-in and copy-out times, each repeated to a stated
 * confidence (model/profile.h); the memory each stage kind and the workspace take; the memory
 * plan of the configuration (server/memplan.h); the practical GEMM rate of every engine's
 * device. Writes the versioned JSON described in docs/PROFILE.md to --out (default
 * profile.json) and progress to stderr. Lanes of a kind this build lacks, or whose device is
 * absent, are listed as skipped with one line. Exit status: 0 when every lane that could run was
 * profiled, 1 on a failure, 2 on a usage error.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "engine/engine.h"
#include "model/model.h"
#include "model/profile.h"
#include "server/config.h"
#include "server/memplan.h"

static const char usage[] =
    "usage: hetserve profile [--config FILE] [--model DIR] [--out FILE] [--shapes B,..xS,..]\n"
    "                        [--quick] [--target X] [--cap-s S] [--min-n N] [--no-gemm] "
    "[--quiet]\n"
    "  --config FILE   the configuration whose lanes are profiled (default: the default one)\n"
    "  --model DIR     the model of the default configuration\n"
    "  --out FILE      where the JSON goes (default profile.json; - = stdout)\n"
    "  --shapes G      grid of batches x buckets, e.g. 1,8,32x16,64,256 (default: 1, batch_max/4,\n"
    "                  batch_max x the first, middle and last of batching.buckets)\n"
    "  --quick         a tiny grid (1,4x16,32) and few repeats, for tests\n"
    "  --target X      CI95 half-width of each median to reach, relative (default 0.05)\n"
    "  --cap-s S       time cap per (shape, stage kind), seconds (default 1)\n"
    "  --min-n N       repetitions at least (default 8)\n"
    "  --no-gemm       skip the GEMM peak measurement\n"
    "  --quiet         no progress lines\n";

static bool parse_list(const char *s, int *out, int *n, int lo, int hi)
{
    *n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < lo || v > hi || *n >= HS_PROFILE_MAX_GRID) return false;
        out[(*n)++] = (int)v;
        s = end;
        if (*s == ',')
            s++;
        else if (*s)
            return false;
    }
    return *n > 0;
}

static bool parse_shapes(const char *s, struct hs_profile_opts *o)
{
    const char *x = strchr(s, 'x');
    if (!x) return false;
    char left[256];
    size_t n = (size_t)(x - s);
    if (n >= sizeof left) return false;
    memcpy(left, s, n);
    left[n] = '\0';
    return parse_list(left, o->batches, &o->n_batches, 1, 1 << 16) &&
           parse_list(x + 1, o->buckets, &o->n_buckets, 2, 1 << 16);
}

static void add_unique(int *v, int *n, int x)
{
    for (int i = 0; i < *n; i++)
        if (v[i] == x) return;
    v[(*n)++] = x;
}

static void progress_line(void *ctx, const char *line)
{
    fprintf(stderr, "profile: %s\n", line);
}

static json_t *plan_json(const struct hs_mem_plan *p)
{
    json_t *o = json_object(), *engines = json_array(), *devices = json_array();
    json_object_set_new(o, "margin_ratio", json_real(p->margin_ratio));
    json_object_set_new(o, "fits", json_boolean(p->fits));
    json_object_set_new(o, "refusal", p->fits ? json_null() : json_string(p->refusal));
    for (int i = 0; i < p->n_engines; i++) {
        const struct hs_mem_engine *e = &p->engines[i];
        json_t *j = json_object();
        json_object_set_new(j, "engine", json_string(e->name));
        json_object_set_new(j, "kind", json_string(e->kind));
        json_object_set_new(j, "device", json_integer(e->device));
        json_object_set_new(j, "lanes", json_integer(e->n_lanes));
        json_object_set_new(j, "weights_bytes", json_integer(e->weights_bytes));
        json_object_set_new(j, "shared_bytes", json_integer(e->shared_bytes));
        json_object_set_new(j, "activation_bytes", json_integer(e->activation_bytes));
        json_object_set_new(j, "workspace_bytes", json_integer(e->workspace_bytes));
        json_object_set_new(j, "runtime_bytes", json_integer(e->runtime_bytes));
        json_object_set_new(j, "margin_bytes", json_integer(e->margin_bytes));
        json_object_set_new(j, "need_bytes", json_integer(e->need_bytes));
        json_object_set_new(j, "limit_bytes", json_integer(e->limit_bytes));
        json_object_set_new(j, "at", json_string(e->shape));
        json_array_append_new(engines, j);
    }
    for (int i = 0; i < p->n_devices; i++) {
        const struct hs_mem_device *d = &p->devices[i];
        json_t *j = json_object();
        json_object_set_new(j, "kind", json_string(d->kind));
        json_object_set_new(j, "device", json_integer(d->device));
        json_object_set_new(j, "engines_bytes", json_integer(d->engines_bytes));
        json_object_set_new(j, "mapped_bytes", json_integer(d->mapped_bytes));
        json_object_set_new(j, "need_bytes", json_integer(d->need_bytes));
        json_object_set_new(j, "have_bytes", json_integer(d->have_bytes));
        json_object_set_new(j, "have", json_string(d->have_what));
        json_array_append_new(devices, j);
    }
    json_object_set_new(o, "engines", engines);
    json_object_set_new(o, "devices", devices);
    json_t *notes = json_array();
    for (int i = 0; i < p->n_notes; i++) json_array_append_new(notes, json_string(p->notes[i]));
    json_object_set_new(o, "notes", notes);
    return o;
}

static json_t *ints_json(const int *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(v[i]));
    return a;
}

static double load_avg(void)
{
    double l[1] = {0};
    return getloadavg(l, 1) == 1 ? l[0] : -1;
}

static bool on_engine(const struct hs_model_cfg *mc, const char *engine)
{
    for (int j = 0; j < (mc->n_engines ? mc->n_engines : 1); j++)
        if (!strcmp(mc->n_engines ? mc->engines[j] : mc->engine, engine)) return true;
    return false;
}

/* Profiles every lane of engine ec into lanes; false when one failed (message printed). */
static bool engine_present(const struct hs_engine_cfg *ec)
{
    const struct hs_engine_kind *k = hs_engine_kind_find(ec->kind);
    return hs_engine_kind_built(k) && ec->device < hs_engine_kind_devices(k);
}

/* Profiles every lane of engine ec (e: NULL when its device is absent) into lanes; false when
 * one failed (message printed). */
static bool profile_engine(const struct hs_config *c, const struct hs_engine_cfg *ec, hs_engine_t e,
                           struct hs_model **models, const struct hs_profile_opts *base,
                           json_t *lanes)
{
    const struct hs_engine_kind *k = hs_engine_kind_find(ec->kind);
    const bool absent = !e;
    struct hs_error err = {0};
    bool ok = true;
    for (int mi = 0; mi < c->n_models && ok; mi++) {
        const struct hs_model_cfg *mc = &c->models[mi];
        if (!on_engine(mc, ec->name)) continue;
        const int dt = hs_config_lane_dtype(mc, ec);
        if (absent) {
            const char *why = hs_engine_kind_built(k) ? "skipped: no device" : "skipped: not built";
            json_t *lane = json_object();
            json_object_set_new(lane, "model", json_string(mc->name[0] ? mc->name : mc->path));
            json_object_set_new(lane, "engine", json_string(ec->name));
            json_object_set_new(lane, "kind", json_string(ec->kind));
            json_object_set_new(lane, "dtype",
                                json_string(hs_compute_dtype_name((enum hs_dtype)dt)));
            json_object_set_new(lane, "status", json_string(why));
            json_array_append_new(lanes, lane);
            fprintf(stderr, "profile: %s (%s:%d, %s): %s\n", ec->name, ec->kind, ec->device,
                    hs_compute_dtype_name((enum hs_dtype)dt), why);
            continue;
        }
        struct hs_profile_opts o = *base;
        o.tokens_max =
            ec->batch_max_tokens > 0 ? ec->batch_max_tokens : c->batching.batch_max_tokens;
        json_t *lane = NULL;
        if (hs_profile_lane(models[mi], e, (enum hs_dtype)dt, &o, &lane, &err) != HS_STATUS_OK) {
            fprintf(stderr, "hetserve profile: lane %s on %s: %s\n", models[mi]->name, ec->name,
                    err.msg);
            ok = false;
            break;
        }
        if (mc->name[0]) json_object_set_new(lane, "model", json_string(mc->name));
        json_object_set_new(lane, "device", json_integer(ec->device));
        json_array_append_new(lanes, lane);
    }
    return ok;
}

int hs_cmd_profile(int argc, char **argv)
{
    json_set_alloc_funcs(hs_malloc, hs_free);
    const char *config = NULL, *model = NULL, *out_path = "profile.json", *shapes = NULL;
    bool quick = false, gemm = true, quiet = false;
    struct hs_profile_opts o = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 0;
        } else if (!strcmp(a, "--quick")) {
            quick = true;
        } else if (!strcmp(a, "--no-gemm")) {
            gemm = false;
        } else if (!strcmp(a, "--quiet")) {
            quiet = true;
        } else if (!v) {
            fprintf(stderr, "hetserve profile: unknown or incomplete option '%s'\n%s", a, usage);
            return 2;
        } else if (!strcmp(a, "--config")) {
            config = argv[++i];
        } else if (!strcmp(a, "--model")) {
            model = argv[++i];
        } else if (!strcmp(a, "--out")) {
            out_path = argv[++i];
        } else if (!strcmp(a, "--shapes")) {
            shapes = argv[++i];
        } else if (!strcmp(a, "--target") || !strcmp(a, "--cap-s")) {
            double x = strtod(v, &end);
            if (*end || !(x > 0) || x > 3600) {
                fprintf(stderr, "hetserve profile: bad value '%s' for %s\n", v, a);
                return 2;
            }
            *(a[2] == 't' ? &o.target_rel : &o.cell_cap_s) = x;
            i++;
        } else if (!strcmp(a, "--min-n")) {
            long n = strtol(v, &end, 10);
            if (*end || n < 1 || n > 100000) {
                fprintf(stderr, "hetserve profile: bad value '%s' for --min-n\n", v);
                return 2;
            }
            o.n_min = (int)n;
            i++;
        } else {
            fprintf(stderr, "hetserve profile: unknown option '%s'\n%s", a, usage);
            return 2;
        }
    }
    if (shapes && !parse_shapes(shapes, &o)) {
        fprintf(stderr, "hetserve profile: bad --shapes '%s' (e.g. 1,8,32x16,64,256)\n", shapes);
        return 2;
    }

    struct hs_config *c = hs_malloc(sizeof *c);
    struct hs_mem_plan *plan = hs_malloc(sizeof *plan);
    struct hs_model *models[HS_CONFIG_MAX_MODELS] = {0};
    hs_engine_t engines[HS_CONFIG_MAX_ENGINES] = {0};
    struct hs_error err = {0};
    json_t *root = NULL;
    int rc = 1;
    if (!c || !plan) goto done;
    hs_config_defaults(c, model ? model : hs_cli_default_model());
    if (config && hs_config_load(config, c, &err) != HS_STATUS_OK) {
        fprintf(stderr, "hetserve profile: %s\n", err.msg);
        goto done;
    }
    if (quick) {
        o.n_min = o.n_min ? o.n_min : 3;
        o.cell_cap_s = o.cell_cap_s > 0 ? o.cell_cap_s : 0.05;
        if (!shapes) {
            o.n_batches = o.n_buckets = 2;
            o.batches[0] = 1, o.batches[1] = 4, o.buckets[0] = 16, o.buckets[1] = 32;
        }
    } else if (!shapes) {
        const int bm = c->batching.batch_max;
        add_unique(o.batches, &o.n_batches, 1);
        add_unique(o.batches, &o.n_batches, bm / 4 > 1 ? bm / 4 : 1);
        add_unique(o.batches, &o.n_batches, bm);
        const int nb = c->batching.n_buckets;
        add_unique(o.buckets, &o.n_buckets, c->batching.buckets[0]);
        add_unique(o.buckets, &o.n_buckets, c->batching.buckets[(nb - 1) / 2]);
        add_unique(o.buckets, &o.n_buckets, c->batching.buckets[nb - 1]);
    }
    hs_profile_opts_defaults(&o);
    if (!quiet) o.progress = progress_line;

    /* the memory plan first: it needs nothing loaded */
    if (hs_mem_plan_make(c, plan, &err) != HS_STATUS_OK) {
        fprintf(stderr, "hetserve profile: %s\n", err.msg);
        goto done;
    }
    hs_mem_plan_print(plan, stderr, "profile: ");

    const int64_t t_start = hs_now_ns();
    root = json_object();
    json_object_set_new(root, "format", json_string("hetserve-profile"));
    json_object_set_new(root, "version", json_integer(1));
    char when[32];
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    json_object_set_new(root, "created", json_string(when));
    json_object_set_new(root, "config", config ? json_string(config) : json_null());
    json_t *machine = json_object(), *peaks = json_array();
    json_object_set_new(machine, "cores_online", json_integer(sysconf(_SC_NPROCESSORS_ONLN)));
    json_object_set_new(machine, "load_avg_1m_start", json_real(load_avg()));
    json_object_set_new(machine, "mem_available_bytes",
                        json_integer(hs_engine_kind_mem_available(hs_engine_kind_find("cpu"), 0)));
    json_object_set_new(root, "machine", machine);
    json_t *settings = json_object();
    json_object_set_new(settings, "batches", ints_json(o.batches, o.n_batches));
    json_object_set_new(settings, "buckets", ints_json(o.buckets, o.n_buckets));
    json_object_set_new(settings, "target_rel", json_real(o.target_rel));
    json_object_set_new(settings, "cell_cap_s", json_real(o.cell_cap_s));
    json_object_set_new(settings, "n_min", json_integer(o.n_min));
    json_object_set_new(settings, "n_max", json_integer(o.n_max));
    json_object_set_new(settings, "quick", json_boolean(quick));
    json_object_set_new(root, "settings", settings);
    json_object_set_new(root, "memory_plan", plan_json(plan));

    /* GEMM peaks before any engine pins this thread's team to its cores */
    for (int i = 0; i < c->n_engines && gemm; i++) {
        const struct hs_engine_cfg *ec = &c->engines[i];
        const struct hs_engine_kind *k = hs_engine_kind_find(ec->kind);
        const int threads = ec->threads > 0 ? ec->threads : ec->n_cores;
        const char *what = "";
        double g = hs_engine_kind_gemm_gflops(k, ec->device, threads, quick ? 0.05 : 0.5, &what);
        json_t *p = json_object();
        json_object_set_new(p, "engine", json_string(ec->name));
        json_object_set_new(p, "kind", json_string(ec->kind));
        json_object_set_new(p, "threads", json_integer(threads));
        json_object_set_new(p, "what", json_string(what));
        json_object_set_new(p, "gflops", g > 0 ? json_real(g) : json_null());
        json_array_append_new(peaks, p);
        if (!quiet && g > 0)
            fprintf(stderr, "profile: %s: %s: %.0f GFLOP/s (%d thread%s)\n", ec->name, what, g,
                    threads, threads == 1 ? "" : "s");
    }
    json_object_set_new(root, "gemm_peaks", peaks);

    /* every engine before any runs, as the server does: a CPU engine pins the calling thread's
     * team to its cores at its first batch, after which the others' cores look unavailable */
    for (int i = 0; i < c->n_engines; i++) {
        const struct hs_engine_cfg *ec = &c->engines[i];
        if (!engine_present(ec)) continue;
        struct hs_engine_opts eo = {
            .name = ec->name, .threads = ec->threads, .n_cores = ec->n_cores, .device = ec->device};
        memcpy(eo.cores, ec->cores, sizeof eo.cores);
        if (hs_engine_create(ec->kind, &eo, &engines[i], &err) != HS_STATUS_OK) {
            fprintf(stderr, "hetserve profile: engine %s: %s\n", ec->name, err.msg);
            goto done;
        }
    }
    for (int i = 0; i < c->n_models; i++) {
        bool used = false; /* load only models that some present engine runs */
        for (int j = 0; j < c->n_engines; j++)
            used |= on_engine(&c->models[i], c->engines[j].name) && engines[j];
        if (used && hs_model_load(c->models[i].path, &models[i], &err) != HS_STATUS_OK) {
            fprintf(stderr, "hetserve profile: %s\n", err.msg);
            goto done;
        }
    }
    json_t *lanes = json_array();
    json_object_set_new(root, "lanes", lanes);
    bool ok = true;
    for (int i = 0; i < c->n_engines && ok; i++)
        ok = profile_engine(c, &c->engines[i], engines[i], models, &o, lanes);
    if (!ok) goto done;
    json_object_set_new(machine, "load_avg_1m_end", json_real(load_avg()));
    json_object_set_new(root, "elapsed_s", json_real((double)(hs_now_ns() - t_start) / 1e9));
    if (!strcmp(out_path, "-")) {
        if (json_dumpf(root, stdout, JSON_INDENT(1)) == 0) fputc('\n', stdout);
    } else if (json_dump_file(root, out_path, JSON_INDENT(1)) != 0) {
        fprintf(stderr, "hetserve profile: cannot write %s\n", out_path);
        goto done;
    }
    if (!quiet && strcmp(out_path, "-"))
        fprintf(stderr, "profile: wrote %s (%.0f s)\n", out_path,
                (double)(hs_now_ns() - t_start) / 1e9);
    rc = 0;
done:
    json_decref(root);
    for (int i = 0; i < HS_CONFIG_MAX_MODELS; i++) hs_model_free(models[i]);
    for (int i = 0; i < HS_CONFIG_MAX_ENGINES; i++) hs_engine_destroy(engines[i]);
    hs_free(plan);
    hs_free(c);
    return rc;
}
