/* hetserve — command-line front end. Each `hetserve <cmd>` lives in src/cli/cmd_<cmd>.c as
 * `int hs_cmd_<cmd>(int argc, char **argv)` (argv[0] is the command name) and is listed in
 * main.c's table. Exit codes: 0 ok, 1 failure, 2 usage error. */
#ifndef HS_CLI_CLI_H
#define HS_CLI_CLI_H

#include <stddef.h>

int hs_cmd_embed(int argc, char **argv);
int hs_cmd_tokenize(int argc, char **argv);
int hs_cmd_devices(int argc, char **argv);
int hs_cmd_verify(int argc, char **argv);
int hs_cmd_serve(int argc, char **argv);
int hs_cmd_config(int argc, char **argv);
int hs_cmd_quantize(int argc, char **argv);
int hs_cmd_profile(int argc, char **argv);
int hs_cmd_plan(int argc, char **argv);
int hs_cmd_ocr(int argc, char **argv);

/* Default model folder: $HS_MODEL_DIR, else models/all-MiniLM-L6-v2 under the current directory. */
const char *hs_cli_default_model(void);

#include "core/status.h"
/* Splits "KIND" or "KIND:DEVICE" (e.g. "cuda:1") into kind and device (0 when absent).
 * HS_STATUS_INVALID_ARGUMENT with a message for an unknown kind or a bad device number. */
hs_status hs_cli_parse_engine(const char *spec, char *kind, size_t kind_size, int *device,
                              struct hs_error *err);

#endif
