/* hetserve verify — every available engine against the golden embeddings.
 *
 *   hetserve verify [--model DIR] [--golden DIR|FILE.json] [--engine KIND[,KIND..]] [--dtype
 * f32|f16|bf16|int8]
 *                   [--batch N] [--limit N] [--min X] [--mean Y] [--quantize auto|off]
 *                   [--cache-dir DIR]
 *
 * For each engine kind (or each named), each device of that kind, and each dtype the kind
 * offers (or the one named), prints one line: min and mean cosine against the golden fp32
 * embeddings, the tolerance, and PASS/FAIL; or "skipped: <why>": the kind is not built in, has
 * no device here, runs no stages here (remote), the device does not compute in that dtype (its
 * own claim, hs_engine_device_caps, not the kind's), the engine does not implement a block feature
 * the model needs (named: rotary positions, RMSNorm, ...), or int8 without a quantization plan.
 * --quantize auto gives a model without an int8 plan the one serve would run (models[].quantize:
 * auto, the same search and the same places: the model folder, or --cache-dir where the folder
 * is read-only; a plan already there is reused), so that int8 checks what serve serves; off (the
 * default) checks the folder as it is, an int8 asked for by --dtype running raw.
 * Exit status: 0 when every engine that ran passed, 1 when one failed or could not run or none ran,
 * 2 on a usage error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/tensor.h"
#include "engine/engine.h"
#include "model/model.h"
#include "model/quant.h"
#include "model/verify.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: hetserve verify [--model DIR] [--golden DIR] [--engine KIND[,KIND..]]\n"
               "                       [--dtype f32|f16|bf16|int8] [--batch N] [--limit N]\n"
               "                       [--min X] [--mean Y] [--quantize auto|off] [--cache-dir "
               "DIR]\n"
               "  --golden DIR   folder with embeddings.json + embeddings.f32 "
               "(default $HS_GOLDEN_DIR, else tests/golden),\n"
               "                 or a NAME.json with NAME.f32 beside it\n"
               "  --min/--mean   override the declared tolerance (cosine)\n"
               "  --quantize     auto: without an int8 plan, search the one serve would make "
               "(models[].quantize: auto;\n"
               "                 written to the model folder, or --cache-dir DIR when it is "
               "read-only); off (default): as it is\n");
}

static int parse_dtype(const char *s)
{
    return hs_compute_dtype_parse(s);
}

static bool kind_wanted(const char *list, const char *kind)
{
    if (!list) return true;
    size_t n = strlen(kind);
    for (const char *p = list; *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == n && strncmp(p, kind, n) == 0) return true;
        if (!comma) break;
        p = comma + 1;
    }
    return false;
}

/* Whether dtype dt wants a quantization plan that model m does not hold. */
static bool lacks_plan(const struct hs_model *m, enum hs_dtype dt)
{
    return hs_quant_dtype_needs_plan(dt) && !(m->quant && m->quant->dtype == dt);
}

static void print_header(void)
{
    printf("%-10s %-6s %-5s %5s %12s %12s %17s %10s  %s\n", "engine", "kind", "dtype", "n",
           "cos_min", "cos_mean", "tol(min/mean)", "ms", "result");
}

int hs_cmd_verify(int argc, char **argv)
{
    const char *model_dir = hs_cli_default_model();
    const char *golden_dir = getenv("HS_GOLDEN_DIR");
    const char *kinds = NULL;
    int dtype_only = -1;
    struct hs_verify_opts vo = {.batch_max = 32, .limit = 0};
    double tol_min = -2.0, tol_mean = -2.0; /* -2: not given */
    int quant_auto = 0;
    const char *cache_dir = NULL;
    if (!golden_dir || !*golden_dir) golden_dir = "tests/golden";

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "verify: %s needs a value (or is unknown)\n", a);
            usage(stderr);
            return 2;
        }
        char *end = NULL;
        if (strcmp(a, "--model") == 0)
            model_dir = v;
        else if (strcmp(a, "--golden") == 0)
            golden_dir = v;
        else if (strcmp(a, "--engine") == 0)
            kinds = v;
        else if (strcmp(a, "--cache-dir") == 0)
            cache_dir = v;
        else if (strcmp(a, "--quantize") == 0) {
            if (strcmp(v, "auto") != 0 && strcmp(v, "off") != 0) {
                fprintf(stderr, "verify: --quantize takes auto or off, not '%s'\n", v);
                return 2;
            }
            quant_auto = v[0] == 'a';
        } else if (strcmp(a, "--dtype") == 0) {
            dtype_only = parse_dtype(v);
            if (dtype_only < 0) {
                fprintf(stderr, "verify: unknown dtype '%s'\n", v);
                return 2;
            }
        } else if (strcmp(a, "--batch") == 0 || strcmp(a, "--limit") == 0) {
            long n = strtol(v, &end, 10);
            if (*end || n < 0 || n > 1 << 20) {
                fprintf(stderr, "verify: bad number '%s' for %s\n", v, a);
                return 2;
            }
            if (a[2] == 'b')
                vo.batch_max = (int)n;
            else
                vo.limit = (int)n;
        } else if (strcmp(a, "--min") == 0 || strcmp(a, "--mean") == 0) {
            double x = strtod(v, &end);
            if (*end || x < -1.0 || x > 1.0) {
                fprintf(stderr, "verify: bad cosine '%s' for %s\n", v, a);
                return 2;
            }
            if (strcmp(a, "--min") == 0)
                tol_min = x;
            else
                tol_mean = x;
        } else {
            fprintf(stderr, "verify: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
        i++;
    }

    struct hs_error err;
    hs_error_clear(&err);
    struct hs_model *m = NULL;
    struct hs_golden *g = NULL;
    if (hs_model_load(model_dir, &m, &err)) {
        fprintf(stderr, "verify: model %s: %s\n", model_dir, err.msg);
        return 1;
    }
    if (hs_golden_load_dir(golden_dir, &g, &err)) {
        fprintf(stderr, "verify: golden set %s: %s\n", golden_dir, err.msg);
        hs_model_free(m);
        return 1;
    }
    /* the plan serve would make at load, for the dtype that needs one (asked for, or int8) */
    const enum hs_dtype plan_dt = dtype_only >= 0 ? (enum hs_dtype)dtype_only : HS_DTYPE_I8;
    if (quant_auto && lacks_plan(m, plan_dt)) {
        struct hs_quant_auto_opts qo = {.dtype = plan_dt, .cache_dir = cache_dir};
        struct hs_quant_auto_info qi;
        printf("verify: %s has no %s quantization plan: looking for or searching the one serve "
               "would make (--quantize auto)\n",
               m->name, hs_compute_dtype_name(plan_dt));
        fflush(stdout);
        const hs_status qs = hs_quant_auto(m, &qo, &qi, &err);
        if (qs == HS_STATUS_UNSUPPORTED) { /* no CPU path to search on: the lanes say so below */
            printf("verify: no plan: %s\n", err.msg);
        } else if (qs) {
            fprintf(stderr, "verify: model %s: the %s quantization plan serve would make: %s\n",
                    m->name, hs_compute_dtype_name(plan_dt), err.msg);
            hs_golden_free(g);
            hs_model_free(m);
            return 1;
        } else if (qi.reused)
            printf("verify: %s plan reused from %s/quant.json\n", hs_compute_dtype_name(plan_dt),
                   qi.dir);
        else
            printf("verify: %s plan made in %.1f s (as serve's quantize: auto): %d of %d stages "
                   "in f32, smoothing alpha %.2f; held-out min cos %.6f, mean %.6f; in "
                   "%s/quant.json\n",
                   hs_compute_dtype_name(plan_dt), qi.seconds, qi.n_keep_f32, qi.n_linear,
                   qi.smooth_alpha, qi.cos_min, qi.cos_mean, qi.dir);
    }
    printf("verify: model %s, %d golden sentences from %s\n", m->name,
           vo.limit > 0 && vo.limit < g->count ? vo.limit : g->count, golden_dir);
    print_header();

    uint32_t need = 0; /* block features the model's stages need (engine/stage.h) */
    for (int i = 0; i < m->n_stages; i++) need |= hs_stage_features(&m->stages[i]);
    int ran = 0, failed = 0;
    if (kinds) { /* a named kind that is unknown or not built is reported, not skipped */
        for (const char *p = kinds; *p;) {
            const char *comma = strchr(p, ',');
            size_t len = comma ? (size_t)(comma - p) : strlen(p);
            char name[32];
            snprintf(name, sizeof name, "%.*s", (int)(len < 31 ? len : 31), p);
            const struct hs_engine_kind *k = hs_engine_kind_find(name);
            if (!k || !hs_engine_kind_built(k)) {
                printf("%s: skipped: %s\n", name,
                       k ? "not built into this binary" : "no such engine kind");
                failed++;
            }
            if (!comma) break;
            p = comma + 1;
        }
    }
    for (int ki = 0; ki < hs_engine_kind_count(); ki++) {
        const struct hs_engine_kind *k = hs_engine_kind_at(ki);
        const char *kind = k->name;
        if (!kind_wanted(kinds, kind)) continue;
        if (!hs_engine_kind_built(k)) { /* named, it was reported above */
            if (!kinds) printf("%s: skipped: not built into this binary\n", kind);
            continue;
        }
        int devices = hs_engine_kind_devices(k);
        if (devices == 0) {
            printf("%s: skipped: no device\n", kind);
            continue;
        }
        for (int dev = 0; dev < devices; dev++) {
            struct hs_engine_opts eo;
            memset(&eo, 0, sizeof eo);
            eo.device = dev;
            char ename[32];
            snprintf(ename, sizeof ename, "%s%d", kind, dev);
            eo.name = ename;
            hs_engine_t e = NULL;
            hs_status s = hs_engine_create(kind, &eo, &e, &err);
            if (s == HS_STATUS_UNSUPPORTED) {
                printf("%s%d: skipped: no device (%s)\n", kind, dev, err.msg);
                continue;
            }
            if (s) {
                printf("%s%d: ERROR: %s\n", kind, dev, err.msg);
                failed++;
                continue;
            }
            struct hs_engine_caps caps;
            hs_engine_caps(e, &caps);
            if (!caps.stages) { /* remote: its batches run on workers (tests/cluster) */
                printf("%-10s %-6s skipped: runs no stages on this machine (%s)\n",
                       hs_engine_name(e), kind, caps.device);
                hs_engine_destroy(e);
                continue;
            }
            if (need & ~caps.features) { /* the model's blocks the engine does not declare */
                char what[256];
                hs_stage_features_str(need & ~caps.features, what, sizeof what);
                printf("%-10s %-6s skipped: this engine does not implement %s (the blocks of "
                       "%s)\n",
                       hs_engine_name(e), kind, what, m->name);
                hs_engine_destroy(e);
                continue;
            }
            for (int dt = 0; dt < HS_DTYPE_COUNT; dt++) {
                if (!((k->dtypes | caps.dtypes) & (1u << dt))) continue;
                if (dtype_only >= 0 && dt != dtype_only) continue;
                if (!(caps.dtypes & (1u << dt))) { /* the device's claim, not the kind's */
                    char has[64];
                    hs_engine_dtype_names(caps.dtypes, has, sizeof has);
                    printf("%-10s %-6s %-5s skipped: this device (%s) does not compute in %s; it "
                           "computes in %s\n",
                           hs_engine_name(e), kind, hs_compute_dtype_name((enum hs_dtype)dt),
                           caps.device, hs_compute_dtype_name((enum hs_dtype)dt), has);
                    continue;
                }
                if (dtype_only < 0 && lacks_plan(m, (enum hs_dtype)dt)) {
                    /* int8 is meant to run with a plan: asked for explicitly, it runs anyway */
                    const char *pn = hs_compute_dtype_name((enum hs_dtype)dt);
                    printf("%-10s %-6s %-5s skipped: %s has no %s quantization plan "
                           "(serve makes one at load, models[].quantize: auto, and --quantize "
                           "auto checks it; hetserve quantize makes a folder; --dtype %s checks "
                           "it raw)\n",
                           hs_engine_name(e), kind, pn, m->name, pn, pn);
                    continue;
                }
                struct hs_verify_tolerance tol;
                hs_verify_default_tolerance((enum hs_dtype)dt, &tol);
                if (tol_min >= -1.0) tol.cos_min = tol_min; /* given on the command line */
                if (tol_mean >= -1.0) tol.cos_mean = tol_mean;
                struct hs_verify_report rep;
                s = hs_verify_engine(m, e, (enum hs_dtype)dt, g, &tol, &vo, &rep, &err);
                const char *dn = hs_compute_dtype_name((enum hs_dtype)dt);
                if (s) {
                    printf("%-10s %-6s %-5s ERROR: %s\n", hs_engine_name(e), kind, dn, err.msg);
                    failed++;
                    continue;
                }
                ran++;
                if (!rep.pass) failed++;
                char tolbuf[32];
                snprintf(tolbuf, sizeof tolbuf, "%.5f/%.5f", rep.tol.cos_min, rep.tol.cos_mean);
                printf("%-10s %-6s %-5s %5d %12.7f %12.7f %17s %10.1f  %s", rep.engine, rep.kind,
                       dn, rep.count, rep.cos_min, rep.cos_mean, tolbuf, rep.ms,
                       rep.pass ? "PASS" : "FAIL");
                if (!rep.pass) printf(" (worst: sentence %d)", rep.worst);
                if (!rep.pass && lacks_plan(m, (enum hs_dtype)dt))
                    printf(" raw: %s has no %s plan; --quantize auto checks the one serve makes",
                           m->name, dn);
                printf("\n");
            }
            hs_engine_destroy(e);
        }
    }
    hs_golden_free(g);
    hs_model_free(m);
    if (ran == 0) {
        printf("verify: no engine ran\n");
        return 1;
    }
    printf("verify: %s\n", failed ? "FAILED" : "all passed");
    return failed ? 1 : 0;
}
