/* hetserve — command-line entry point: `hetserve <command> [options]`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/crash.h"
#include "core/threads.h"
#include "engine/engine.h"

struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
};

static const struct command commands[] = {
    {"embed", hs_cmd_embed, "print embeddings of texts as JSON"},
    {"tokenize", hs_cmd_tokenize, "print token ids of texts as JSON"},
    {"devices", hs_cmd_devices, "print the engines found and their capabilities"},
    {"verify", hs_cmd_verify, "check every engine against the golden embeddings"},
    {"quantize", hs_cmd_quantize, "find the stages an int8 lane keeps in f32; write the plan"},
    {"profile", hs_cmd_profile, "measure every lane's stage kinds over shapes; the memory plan"},
    {"plan", hs_cmd_plan, "choose a placement from a profile, traffic and a P99 objective"},
    {"ocr", hs_cmd_ocr, "read the text of images (PP-OCR det -> crop -> rec on ONNX graphs)"},
    {"serve", hs_cmd_serve, "run the HTTP inference server"},
    {"config", hs_cmd_config, "print the documented default configuration, or check a file"},
};

const char *hs_cli_default_model(void)
{
    const char *m = getenv("HS_MODEL_DIR");
    return m && *m ? m : "models/all-MiniLM-L6-v2";
}

hs_status hs_cli_parse_engine(const char *spec, char *kind, size_t kind_size, int *device,
                              struct hs_error *err)
{
    const char *colon = strchr(spec, ':');
    size_t n = colon ? (size_t)(colon - spec) : strlen(spec);
    if (n == 0 || n >= kind_size)
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "bad engine '%s' (KIND[:DEVICE])",
                            spec);
    memcpy(kind, spec, n);
    kind[n] = '\0';
    *device = 0;
    if (colon) {
        char *end = NULL;
        long d = strtol(colon + 1, &end, 10);
        if (!colon[1] || *end || d < 0 || d > 1024)
            return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT,
                                "bad device in engine '%s' (KIND[:DEVICE], DEVICE >= 0)", spec);
        *device = (int)d;
    }
    if (!hs_engine_kind_find(kind)) {
        char known[256];
        hs_engine_kind_names(known, sizeof known);
        return hs_error_set(err, HS_STATUS_INVALID_ARGUMENT, "unknown engine kind '%s' (known: %s)",
                            kind, known);
    }
    return HS_STATUS_OK;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: hetserve <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n`hetserve <command> --help` describes a command's options.\n");
}

int main(int argc, char **argv)
{
    hs_crash_report_install();
    hs_threads_wait_policy_init(argv);
    hs_threads_flush_denormals(); /* before any thread starts: they inherit it */
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "hetserve: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
