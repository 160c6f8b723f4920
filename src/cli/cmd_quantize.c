/* hetserve quantize — finds which stages of a model an int8 (or bf16) lane keeps in f32.
 *
 *   hetserve quantize [--model DIR] [--calib FILE] --out DIR [--dtype int8|bf16]
 *                     [--min X] [--mean Y] [--heldout-every N] [--threads N]
 *
 * Runs the calibration texts (one per line; default the built-in set: data/calib/calib.txt,
 * compiled in, as quantization at load uses) through the model in
 * f32 and with each stage quantized alone, then keeps the most damaging stages in f32 until
 * the held-out texts meet the target (model/quant.h). Writes DIR: the model's files and
 * quant.json, which every lane of that dtype then follows. Prints the per-stage table.
 * Exit status: 0 when the target is met, 1 when it is not (DIR is still written) or on an
 * error, 2 on a usage error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/alloc.h"
#include "engine/engine.h"
#include "model/model.h"
#include "model/quant.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: hetserve quantize [--model DIR] [--calib FILE] --out DIR\n"
               "                         [--dtype int8|bf16] [--min X] [--mean Y]\n"
               "                         [--heldout-every N] [--threads N]\n"
               "  --calib FILE   calibration texts, one per line (default: the built-in set,\n"
               "                 data/calib/calib.txt compiled in)\n"
               "  --min/--mean   target cosine to f32 on the held-out texts (default 0.99 / "
               "0.998)\n");
}

static void on_progress(void *ctx, const char *line)
{
    (void)ctx;
    fprintf(stderr, "quantize: %s\n", line);
}

int hs_cmd_quantize(int argc, char **argv)
{
    const char *model_dir = hs_cli_default_model(), *calib = NULL, *out = NULL;
    struct hs_quant_opts qo = {.dtype = HS_DTYPE_I8, .progress = on_progress};
    int threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "hetserve quantize: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (!strcmp(a, "--model"))
            model_dir = v;
        else if (!strcmp(a, "--calib"))
            calib = v;
        else if (!strcmp(a, "--out"))
            out = v;
        else if (!strcmp(a, "--dtype")) {
            int d = hs_compute_dtype_parse(v);
            if (d != HS_DTYPE_I8 && d != HS_DTYPE_BF16) {
                fprintf(stderr, "quantize: --dtype must be int8 or bf16\n");
                return 2;
            }
            qo.dtype = (enum hs_dtype)d;
        } else if (!strcmp(a, "--min"))
            qo.cos_min = atof(v);
        else if (!strcmp(a, "--mean"))
            qo.cos_mean = atof(v);
        else if (!strcmp(a, "--heldout-every"))
            qo.heldout_every = atoi(v);
        else if (!strcmp(a, "--threads"))
            threads = atoi(v);
        else {
            fprintf(stderr, "hetserve quantize: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        i++;
    }
    if (!out) {
        fprintf(stderr, "hetserve quantize: --out DIR is required\n");
        usage(stderr);
        return 2;
    }
    struct hs_error err = {0};
    struct hs_model *m = NULL;
    hs_engine_t e = NULL;
    char **texts = NULL;
    int n = 0, rc = 1;
    if (hs_model_load(model_dir, &m, &err)) goto fail;
    if (hs_quant_calib_texts(calib, &texts, &n, &err)) goto fail;
    if (hs_engine_create("cpu", &(struct hs_engine_opts){.threads = threads}, &e, &err)) goto fail;
    struct hs_engine_caps caps;
    hs_engine_caps(e, &caps);
    if (!(caps.dtypes & (1u << qo.dtype))) {
        hs_error_set(&err, HS_STATUS_UNSUPPORTED, "this CPU has no fast %s path",
                     hs_compute_dtype_name(qo.dtype));
        goto fail;
    }
    struct hs_quant_report *r = hs_calloc(1, sizeof *r);
    if (!r) goto fail;
    if (hs_quant_search(m, e, (const char *const *)texts, n, &qo, r, &err) ||
        hs_quant_write(m, r, out, &err)) {
        hs_quant_report_clear(r);
        hs_free(r);
        goto fail;
    }
    printf("model %s, %s, %d calibration + %d held-out texts from %s\n", m->name,
           hs_compute_dtype_name(r->plan.dtype), r->n_calib, r->n_heldout,
           calib ? calib : "the built-in set (data/calib/calib.txt)");
    printf("%-16s %14s %12s  %s\n", "stage", "damage(mean)", "cos_min", "plan");
    for (int i = 0; i < r->n_stages; i++)
        printf("%-16s %14.2e %12.6f  %s\n", r->stages[i].name, r->stages[i].damage_mean,
               r->stages[i].cos_min,
               r->stages[i].keep_f32 ? "f32" : hs_compute_dtype_name(r->plan.dtype));
    if (r->plan.dtype == HS_DTYPE_I8)
        printf("input smoothing: alpha %.2f%s\n", r->smooth_alpha,
               r->smooth_alpha > 0 ? " (quant.safetensors)" : " (none helped)");
    if (r->plan.dtype == HS_DTYPE_I8) {
        if (r->act_scale)
            printf("activations: per tensor, static scales at percentile %.3f\n",
                   100.0 * r->act_percentile);
        else
            printf("activations: per token, dynamic\n");
    }
    printf("held-out, every stage %s: min %.6f mean %.6f\n", hs_compute_dtype_name(r->plan.dtype),
           r->all_cos_min, r->all_cos_mean);
    printf("held-out, with the plan: min %.6f mean %.6f (target %.4f / %.4f): %s\n",
           r->final_cos_min, r->final_cos_mean, r->opts.cos_min, r->opts.cos_mean,
           r->target_met ? "met" : "NOT met");
    printf("wrote %s/quant.json\n", out);
    rc = r->target_met ? 0 : 1;
    hs_quant_report_clear(r);
    hs_free(r);
fail:
    if (err.msg[0]) fprintf(stderr, "hetserve quantize: %s\n", err.msg);
    hs_quant_calib_free(texts, n);
    hs_engine_destroy(e);
    hs_model_free(m);
    return rc;
}
