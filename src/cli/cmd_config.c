/* `hetserve config`: print the documented default configuration, or check a file. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/engine.h"
#include "core/alloc.h"
#include "server/config.h"
#include "server/memplan.h"

static const char usage[] = "usage: hetserve config --print-defaults | --check FILE\n"
                            "  --print-defaults  print the default YAML configuration, every "
                            "key documented\n"
                            "  --check FILE      parse and validate FILE, print the effective "
                            "configuration,\n"
                            "                    and its memory plan (stderr); a plan that does "
                            "not fit fails\n";

/* The lanes against the devices present here (their own claims, hs_engine_device_caps): a file
 * checks on any machine, so a lane this machine's device cannot run is a note that serve will
 * refuse it here, not a failure of the file. */
static void device_note(const struct hs_config *c)
{
    struct hs_engine_caps caps[HS_CONFIG_MAX_ENGINES];
    memset(caps, 0, sizeof caps);
    for (int i = 0; i < c->n_engines; i++) {
        const struct hs_engine_cfg *ec = &c->engines[i];
        const struct hs_engine_kind *k = hs_engine_kind_find(ec->kind);
        struct hs_error err = {0};
        if (!k || k->remote || ec->device >= hs_engine_kind_devices(k) ||
            hs_engine_device_caps(k, ec->device, ec->device_name, &caps[i], &err))
            memset(&caps[i], 0, sizeof caps[i]); /* not here: not checked */
    }
    struct hs_error err = {0};
    if (hs_config_check_devices(c, caps, &err))
        fprintf(stderr, "hetserve config: note: on this machine serve refuses it: %s\n", err.msg);
}

int hs_cmd_config(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--print-defaults")) {
        struct hs_config *c = hs_malloc(sizeof *c);
        if (!c) return 1;
        hs_config_defaults(c, hs_cli_default_model());
        hs_config_print(c, stdout);
        hs_free(c);
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "--check")) {
        struct hs_config *c = hs_malloc(sizeof *c);
        if (!c) return 1;
        hs_config_defaults(c, hs_cli_default_model());
        struct hs_error err = {0};
        int rc = 0;
        struct hs_mem_plan *plan = hs_malloc(sizeof *plan);
        if (!plan || hs_config_load(argv[2], c, &err) != HS_STATUS_OK ||
            hs_mem_plan_make(c, plan, &err) != HS_STATUS_OK) {
            fprintf(stderr, "hetserve config: %s\n", plan ? err.msg : "out of memory");
            rc = 1;
        } else {
            hs_config_print(c, stdout);
            device_note(c);
            /* the plan on stderr: stdout stays the configuration, which parses back */
            hs_mem_plan_print(plan, stderr, "");
            if (hs_mem_plan_check(plan, &err) != HS_STATUS_OK) {
                fprintf(stderr, "hetserve config: %s\n", err.msg);
                rc = 1;
            }
        }
        hs_free(plan);
        hs_free(c);
        return rc;
    }
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(usage, stdout);
        return 0;
    }
    if (argc > 1)
        fprintf(stderr, "hetserve config: unknown or incomplete arguments at '%s'\n", argv[1]);
    fputs(usage, stderr);
    return 2;
}
