/* `hetserve embed`, `hetserve tokenize`, `hetserve devices`. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/alloc.h"
#include "engine/engine.h"
#include "model/executor.h"
#include "model/model.h"
#include "model/tokenizer/tok.h"

struct common_opts {
    const char *model;
    const char *engine; /* KIND or KIND:DEVICE */
    const char *dtype;  /* NULL: the kind's native dtype */
    int threads;
    int n_texts;
    char **texts;
    bool owned; /* texts read from standard input: each is hs_malloc'd */
};

static void common_free(struct common_opts *o)
{
    if (o->owned)
        for (int i = 0; i < o->n_texts; i++) hs_free(o->texts[i]);
    hs_free(o->texts);
    o->texts = NULL;
    o->n_texts = 0;
}

/* Parses --model/--engine/--threads; the remaining arguments are texts ("-" = read lines from
 * standard input). Returns 0, or 2 on a usage error. */
static int parse_common(int argc, char **argv, struct common_opts *o, const char *usage_line)
{
    o->model = hs_cli_default_model();
    o->engine = "cpu";
    o->dtype = NULL;
    o->threads = 0;
    o->n_texts = 0;
    o->owned = false;
    o->texts = hs_calloc((size_t)argc + 1, sizeof(char *));
    if (!o->texts) return 2;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("%s\n", usage_line);
            common_free(o);
            return 1;
        } else if (strcmp(argv[i], "--model") == 0 && i + 1 < argc) {
            o->model = argv[++i];
        } else if (strcmp(argv[i], "--engine") == 0 && i + 1 < argc) {
            o->engine = argv[++i];
        } else if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc) {
            o->dtype = argv[++i];
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            o->threads = atoi(argv[++i]);
        } else if (strncmp(argv[i], "--", 2) == 0 && strcmp(argv[i], "--") != 0) {
            fprintf(stderr, "hetserve: unknown option %s\n%s\n", argv[i], usage_line);
            common_free(o);
            return 2;
        } else {
            o->texts[o->n_texts++] = argv[i];
        }
    }
    if (o->n_texts == 1 && strcmp(o->texts[0], "-") == 0) {
        /* one text per line from stdin */
        int cap = 64;
        o->n_texts = 0;
        hs_free(o->texts);
        o->owned = true;
        o->texts = hs_calloc((size_t)cap, sizeof(char *));
        char *line = NULL;
        size_t lcap = 0;
        ssize_t len;
        bool oom = !o->texts;
        while (!oom && (len = getline(&line, &lcap, stdin)) >= 0) {
            if (len > 0 && line[len - 1] == '\n') line[--len] = '\0';
            if (o->n_texts == cap) {
                char **nt = hs_realloc(o->texts, sizeof(char *) * (size_t)cap * 2);
                if (!nt) {
                    oom = true;
                    break;
                }
                o->texts = nt;
                cap *= 2;
            }
            if (!(o->texts[o->n_texts] = hs_strdup(line)))
                oom = true;
            else
                o->n_texts++;
        }
        free(line);
        if (oom) {
            fprintf(stderr, "hetserve: out of memory reading standard input\n");
            common_free(o);
            return 2;
        }
    }
    if (o->n_texts == 0) {
        fprintf(stderr, "%s\n", usage_line);
        common_free(o);
        return 2;
    }
    return 0;
}

static void print_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

int hs_cmd_embed(int argc, char **argv)
{
    struct common_opts o;
    int rc = parse_common(argc, argv, &o,
                          "usage: hetserve embed [--model DIR] [--engine KIND[:DEVICE]] "
                          "[--dtype f32|f16|bf16|int8] [--threads N] TEXT... | -");
    if (rc) return rc == 1 ? 0 : rc;
    struct hs_error err = {0};
    struct hs_model *m = NULL;
    hs_engine_t e = NULL;
    struct hs_executor *x = NULL;
    float *out = NULL;
    int *tokens = NULL;
    rc = 1;
    if (hs_model_load(o.model, &m, &err) != HS_STATUS_OK) goto fail;
    char kind[32];
    struct hs_engine_opts eo = {.threads = o.threads};
    if (hs_cli_parse_engine(o.engine, kind, sizeof kind, &eo.device, &err)) goto fail;
    const struct hs_engine_kind *ek = hs_engine_kind_find(kind);
    int dtype = o.dtype ? hs_compute_dtype_parse(o.dtype) : (ek ? (int)ek->native : -1);
    if (o.dtype && dtype < 0) {
        hs_error_set(&err, HS_STATUS_INVALID_ARGUMENT, "unknown dtype '%s' (f32, f16, bf16, int8)",
                     o.dtype);
        goto fail;
    }
    if (hs_engine_create(kind, &eo, &e, &err) != HS_STATUS_OK) goto fail;
    const bool planned = m->quant && (int)m->quant->dtype == dtype;
    if (dtype == HS_DTYPE_I8 && !planned)
        fprintf(stderr,
                "hetserve embed: warning: %s has no int8 quantization plan (quant.json): every "
                "stage runs int8 without input smoothing, which is less accurate than a quantized "
                "folder (hetserve quantize --model %s --out DIR)\n",
                o.model, o.model);
    struct hs_placement plan;
    hs_placement_single(m, e, &plan);
    struct hs_executor_opts xo = {.batch_max = 32, .dtype = (enum hs_dtype)dtype};
    if (hs_executor_create(m, &plan, &xo, &x, &err) != HS_STATUS_OK) goto fail;
    const int dim = hs_pooled_dim(&m->config.dims);
    out = hs_malloc(sizeof(float) * (size_t)dim * (size_t)o.n_texts);
    tokens = hs_malloc(sizeof(int) * (size_t)o.n_texts);
    if (!out || !tokens) {
        hs_error_set(&err, HS_STATUS_NO_MEMORY, "out of memory");
        goto fail;
    }
    if (hs_executor_embed_texts(x, (const char *const *)o.texts, o.n_texts, out, tokens, &err) !=
        HS_STATUS_OK)
        goto fail;
    printf("{\"model\":");
    print_json_string(stdout, m->name);
    printf(",\"engine\":\"%s\",\"dtype\":\"%s\",\"quant_plan\":%s,\"dim\":%d,\"data\":[",
           hs_engine_name(e), hs_compute_dtype_name((enum hs_dtype)dtype),
           planned ? "true" : "false", dim);
    /* a SPLADE model's vocabulary-wide rows: their non-zero entries, as /embed_sparse */
    const bool sparse = m->config.dims.pool == HS_POOL_SPLADE;
    for (int i = 0; i < o.n_texts; i++) {
        printf("%s{\"index\":%d,\"tokens\":%d,\"%s\":[", i ? "," : "", i, tokens[i],
               sparse ? "sparse" : "embedding");
        for (int j = 0, k = 0; j < dim; j++) {
            const float v = out[(size_t)i * dim + j];
            if (!sparse)
                printf("%s%.9g", j ? "," : "", v);
            else if (v != 0.0f)
                printf("%s{\"index\":%d,\"value\":%.9g}", k++ ? "," : "", j, v);
        }
        printf("]}");
    }
    printf("]}\n");
    rc = 0;
fail:
    if (rc)
        fprintf(stderr, "hetserve embed: %s\n", err.msg[0] ? err.msg : hs_status_str(err.status));
    hs_free(out);
    hs_free(tokens);
    hs_executor_free(x);
    hs_engine_destroy(e);
    hs_model_free(m);
    common_free(&o);
    return rc;
}

/* `hetserve tokenize --tokenizer FILE`: a bare tokenizer.json, no model. */
static int tokenize_file(const char *file, const char *pair, bool special, int n_texts,
                         char **texts)
{
    struct hs_error err = {0};
    struct hs_tok *tok = NULL;
    if (hs_tok_load(file, &tok, &err) != HS_STATUS_OK) {
        fprintf(stderr, "hetserve tokenize: %s\n", err.msg);
        return 1;
    }
    printf("[");
    int rc = 0;
    for (int i = 0; i < n_texts && rc == 0; i++) {
        struct hs_tok_encode_opts eo = {.add_special_tokens = special};
        struct hs_tok_encoding e;
        if (hs_tok_encode(tok, texts[i], strlen(texts[i]), pair, pair ? strlen(pair) : 0, &eo, &e,
                          &err) != HS_STATUS_OK) {
            fprintf(stderr, "hetserve tokenize: %s\n", err.msg);
            rc = 1;
            break;
        }
        printf("%s{\"ids\":[", i ? "," : "");
        for (size_t j = 0; j < e.n; j++) printf("%s%d", j ? "," : "", e.ids[j]);
        printf("],\"tokens\":[");
        for (size_t j = 0; j < e.n; j++) {
            const char *t = hs_tok_id_to_token(tok, e.ids[j]);
            if (j) putchar(',');
            print_json_string(stdout, t ? t : "");
        }
        printf("],\"type_ids\":[");
        for (size_t j = 0; j < e.n; j++) printf("%s%d", j ? "," : "", e.type_ids[j]);
        printf("],\"special\":[");
        for (size_t j = 0; j < e.n; j++) printf("%s%d", j ? "," : "", e.special[j]);
        printf("],\"offsets\":[");
        for (size_t j = 0; j < e.n; j++) printf("%s[%u,%u]", j ? "," : "", e.start[j], e.end[j]);
        printf("]}");
        hs_tok_encoding_free(&e);
    }
    printf("]\n");
    hs_tok_free(tok);
    return rc;
}

int hs_cmd_tokenize(int argc, char **argv)
{
    /* --tokenizer FILE [--pair TEXT] [--no-special]: a tokenizer.json alone */
    const char *file = NULL, *pair = NULL;
    bool special = true;
    char **rest = hs_calloc((size_t)argc + 1, sizeof *rest);
    int nrest = 0;
    if (!rest) return 1;
    for (int i = 0; i < argc; i++) {
        if (i > 0 && strcmp(argv[i], "--tokenizer") == 0 && i + 1 < argc)
            file = argv[++i];
        else if (i > 0 && strcmp(argv[i], "--pair") == 0 && i + 1 < argc)
            pair = argv[++i];
        else if (i > 0 && strcmp(argv[i], "--no-special") == 0)
            special = false;
        else
            rest[nrest++] = argv[i];
    }
    struct common_opts o;
    int rc = parse_common(nrest, rest, &o,
                          "usage: hetserve tokenize [--model DIR | --tokenizer tokenizer.json "
                          "[--pair TEXT] [--no-special]] TEXT... | -");
    hs_free(rest);
    if (rc) return rc == 1 ? 0 : rc;
    if (file) {
        rc = tokenize_file(file, pair, special, o.n_texts, o.texts);
        common_free(&o);
        return rc;
    }
    struct hs_error err = {0};
    struct hs_model *m = NULL;
    rc = 1;
    if (hs_model_load(o.model, &m, &err) != HS_STATUS_OK) goto fail;
    const int cap = m->config.max_seq_len;
    int32_t *ids = hs_malloc(sizeof(int32_t) * (size_t)cap);
    printf("[");
    for (int i = 0; i < o.n_texts; i++) {
        int n = 0, full = 0;
        if (hs_model_tokenize(m, o.texts[i], strlen(o.texts[i]), ids, cap, &n, &full, &err) !=
            HS_STATUS_OK) {
            printf("]\n");
            hs_free(ids);
            goto fail;
        }
        printf("%s{\"ids\":[", i ? "," : "");
        for (int j = 0; j < n; j++) printf("%s%d", j ? "," : "", ids[j]);
        printf("],\"tokens\":[");
        for (int j = 0; j < n; j++) {
            if (j) putchar(',');
            print_json_string(stdout, hs_tokenizer_id_to_token(m->tokenizer, ids[j]));
        }
        printf("],\"truncated\":%s}", full > n ? "true" : "false");
    }
    printf("]\n");
    hs_free(ids);
    rc = 0;
fail:
    if (rc) fprintf(stderr, "hetserve tokenize: %s\n", err.msg);
    hs_model_free(m);
    common_free(&o);
    return rc;
}

static void print_caps(const char *name, const struct hs_engine_caps *cp, int first)
{
    const struct hs_engine_caps c = *cp;
    printf("%s{\"name\":\"%s\",\"kind\":", first ? "" : ",", name);
    print_json_string(stdout, c.kind);
    printf(",\"device\":");
    print_json_string(stdout, c.device);
    printf(",\"isa\":");
    print_json_string(stdout, c.isa);
    printf(",\"threads\":%d,\"mem_bytes\":%lld,\"gemm\":", c.threads, (long long)c.mem_bytes);
    print_json_string(stdout, c.gemm);
    printf(",\"dtypes\":[");
    int k = 0;
    for (int d = 0; d < HS_DTYPE_COUNT; d++)
        if (c.dtypes & (1u << d))
            printf("%s\"%s\"", k++ ? "," : "", hs_compute_dtype_name((enum hs_dtype)d));
    printf("],\"stages\":[");
    k = 0;
    for (int s = 0; s < HS_STAGE_COUNT; s++)
        if (c.stages & (1u << s))
            printf("%s\"%s\"", k++ ? "," : "", hs_stage_kind_name((enum hs_stage_kind)s));
    printf("]}");
}

static const char devices_usage[] =
    "usage: hetserve devices\n"
    "  prints as JSON every registered engine kind (built, devices found, native and compute\n"
    "  dtypes) and every engine found with its capabilities (device, ISA, threads, memory,\n"
    "  dtypes, stages)\n";

int hs_cmd_devices(int argc, char **argv)
{
    if (argc > 1) {
        if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
            fputs(devices_usage, stdout);
            return 0;
        }
        fprintf(stderr, "hetserve devices: unknown argument '%s'\n%s", argv[1], devices_usage);
        return 2;
    }
    printf("{\"kinds\":[");
    for (int i = 0; i < hs_engine_kind_count(); i++) {
        const struct hs_engine_kind *k = hs_engine_kind_at(i);
        printf("%s{\"kind\":\"%s\",\"built\":%s,\"devices\":%d,\"native\":\"%s\",\"dtypes\":[",
               i ? "," : "", k->name, hs_engine_kind_built(k) ? "true" : "false",
               hs_engine_kind_devices(k), hs_compute_dtype_name(k->native));
        int n = 0;
        for (int d = 0; d < HS_DTYPE_COUNT; d++)
            if (k->dtypes & (1u << d))
                printf("%s\"%s\"", n++ ? "," : "", hs_compute_dtype_name((enum hs_dtype)d));
        printf("],\"summary\":");
        print_json_string(stdout, k->summary);
        printf("}");
    }
    printf("],\"engines\":[");
    int first = 1;
    for (int i = 0; i < hs_engine_kind_count(); i++) {
        const struct hs_engine_kind *k = hs_engine_kind_at(i);
        const int n = hs_engine_kind_devices(k);
        for (int d = 0; d < n; d++) {
            char name[32];
            snprintf(name, sizeof name, "%s%d", k->name, d);
            struct hs_error err = {0};
            struct hs_engine_caps caps;
            /* each device's own claims: what verify runs and serve admits on it */
            if (hs_engine_device_caps(k, d, NULL, &caps, &err) == HS_STATUS_OK) {
                print_caps(name, &caps, first);
                first = 0;
            }
        }
    }
    printf("]}\n");
    return 0;
}
