/* `hetserve config`: print the documented default configuration, or check a file. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "core/alloc.h"
#include "server/config.h"

static const char usage[] = "usage: hetserve config --print-defaults | --check FILE\n"
                            "  --print-defaults  print the default YAML configuration, every "
                            "key documented\n"
                            "  --check FILE      parse and validate FILE, print the effective "
                            "configuration\n";

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
        if (hs_config_load(argv[2], c, &err) != HS_STATUS_OK) {
            fprintf(stderr, "hetserve config: %s\n", err.msg);
            rc = 1;
        } else {
            hs_config_print(c, stdout);
        }
        hs_free(c);
        return rc;
    }
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(usage, stdout);
        return 0;
    }
    fputs(usage, stderr);
    return 2;
}
