/* Fuzz: the YAML server configuration (server/config.c), through its public API only:
 * hs_config_parse over the defaults, hs_config_validate, hs_config_print.
 * Checks: a refused text says why (HS_STATUS_INVALID_INPUT, message naming the label); what is
 * accepted left err untouched and keeps every count within its array and every string
 * terminated; a valid config prints as YAML that parses back (over fresh defaults) and prints
 * the same again; nothing leaks.
 */
#include <stdbool.h>
#include <string.h>

#include "core/alloc.h"
#include "fuzz.h"
#include "server/config.h"

#define TERMINATED(a) (memchr((a), '\0', sizeof(a)) != NULL)

static void check_strings(const struct hs_config *c)
{
    FUZZ_CHECK(TERMINATED(c->server.host) && TERMINATED(c->server.trace_file));
    FUZZ_CHECK(c->n_engines >= 0 && c->n_engines <= HS_CONFIG_MAX_ENGINES);
    for (int i = 0; i < c->n_engines; i++) {
        const struct hs_engine_cfg *e = &c->engines[i];
        FUZZ_CHECK(TERMINATED(e->name) && TERMINATED(e->kind) && TERMINATED(e->dtype));
        FUZZ_CHECK(e->n_cores >= 0 && e->n_cores <= HS_ENGINE_MAX_CORES);
        FUZZ_CHECK(e->n_shapes >= 0 && e->n_shapes <= HS_SCHED_MAX_SHAPES);
    }
    FUZZ_CHECK(c->n_models >= 0 && c->n_models <= HS_CONFIG_MAX_MODELS);
    for (int i = 0; i < c->n_models; i++) {
        const struct hs_model_cfg *m = &c->models[i];
        FUZZ_CHECK(TERMINATED(m->name) && TERMINATED(m->path) && TERMINATED(m->engine) &&
                   TERMINATED(m->dtype));
        FUZZ_CHECK(m->n_engines >= 0 && m->n_engines <= HS_CONFIG_MAX_ENGINES);
        for (int k = 0; k < m->n_engines; k++) FUZZ_CHECK(TERMINATED(m->engines[k]));
    }
    FUZZ_CHECK(c->batching.n_buckets >= 0 && c->batching.n_buckets <= HS_SCHED_MAX_BUCKETS - 1);
    FUZZ_CHECK(c->n_routes >= 0 && c->n_routes <= HS_CONFIG_MAX_ROUTES);
    for (int i = 0; i < c->n_routes; i++) {
        const struct hs_route_cfg *r = &c->routes[i];
        FUZZ_CHECK(TERMINATED(r->name) && TERMINATED(r->kind) && TERMINATED(r->model) &&
                   TERMINATED(r->split_route) && TERMINATED(r->shadow_route) &&
                   TERMINATED(r->failover_route) && TERMINATED(r->small) && TERMINATED(r->big));
        FUZZ_CHECK(r->n_engines >= 0 && r->n_engines <= HS_CONFIG_MAX_ENGINES);
    }
    FUZZ_CHECK(c->router.n_rules >= 0 && c->router.n_rules <= HS_CONFIG_MAX_RULES);
    FUZZ_CHECK(TERMINATED(c->router.default_route) && TERMINATED(c->router.fallback_engine));
    FUZZ_CHECK(TERMINATED(c->cascade.small) && TERMINATED(c->cascade.small_head) &&
               TERMINATED(c->cascade.big) && TERMINATED(c->cascade.big_head));
}

static char *print(const struct hs_config *c, size_t *len)
{
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    FUZZ_CHECK(f != NULL);
    hs_config_print(c, f);
    fclose(f);
    return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct hs_config c, back;
    int64_t live = hs_alloc_live();
    hs_config_defaults(&c, NULL);
    struct hs_error err = {0};
    hs_status s = hs_config_parse((const char *)data, size, "fuzz.yaml", &c, &err);
    if (s != HS_STATUS_OK) {
        FUZZ_CHECK(s == HS_STATUS_INVALID_INPUT || s == HS_STATUS_NO_MEMORY);
        FUZZ_CHECK(strstr(err.msg, "fuzz.yaml") != NULL);
        FUZZ_CHECK(hs_alloc_live() == live);
        return 0;
    }
    FUZZ_CHECK(err.msg[0] == '\0'); /* a success leaves err untouched */
    check_strings(&c);
    /* Printing is for configs that validate (hetserve config --check prints the effective one):
     * an invalid one may not print back (an empty engine list prints as `engines:`, which reads
     * as null, so as the default list). */
    if (hs_config_validate(&c, &err) != HS_STATUS_OK) {
        FUZZ_CHECK(hs_alloc_live() == live);
        return 0;
    }

    size_t len = 0, len2 = 0;
    char *text = print(&c, &len);
    hs_config_defaults(&back, "another/model");
    s = hs_config_parse(text, len, "printed", &back, &err);
    if (s != HS_STATUS_OK) {
        fprintf(stderr, "printed config does not parse back: %s\n%s\n", err.msg, text);
        FUZZ_CHECK(s == HS_STATUS_OK);
    }
    char *text2 = print(&back, &len2);
    if (len != len2 || memcmp(text, text2, len) != 0)
        fprintf(stderr, "printed config prints differently:\n%s\n---\n%s\n", text, text2);
    FUZZ_CHECK(len == len2 && memcmp(text, text2, len) == 0);
    free(text);
    free(text2);
    FUZZ_CHECK(hs_alloc_live() == live);
    return 0;
}
