/* hetbench — request bodies that are files: a folder of images sent as raw bytes (POST /v1/ocr).
 *
 * hs_bench_images_load reads every JPEG and PNG file of a folder (found by their first bytes, not
 * their names; other files are skipped and counted) into memory, in name order, ahead of the run.
 * Each body has a kind, the Content-Type it is sent with (hs_bench_body_ctype): JSON for the
 * generated texts, image/jpeg or image/png for images, application/octet-stream for a captured
 * body of any other type. Nothing here touches the network. Not thread-safe. All allocation
 * through hs_malloc.
 */
#ifndef HS_TOOLS_HETBENCH_IMAGES_H
#define HS_TOOLS_HETBENCH_IMAGES_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "hetbench/workload.h"

enum hs_bench_body_kind {
    HS_BENCH_BODY_JSON,
    HS_BENCH_BODY_JPEG,
    HS_BENCH_BODY_PNG,
    HS_BENCH_BODY_OCTET,
    HS_BENCH_BODY_KINDS
};

/* "application/json", "image/jpeg", "image/png", "application/octet-stream" */
const char *hs_bench_body_ctype(enum hs_bench_body_kind k);
/* The kind a Content-Type value is sent as (parameters after ';' ignored, case-insensitive);
 * NULL or "" is JSON, an unknown type octet-stream. */
enum hs_bench_body_kind hs_bench_body_kind_of_ctype(const char *ctype);
/* JPEG (FF D8 FF), PNG (89 'P' 'N' 'G' 0D 0A 1A 0A), else HS_BENCH_BODY_OCTET. */
enum hs_bench_body_kind hs_bench_body_kind_sniff(const uint8_t *p, size_t n);

struct hs_bench_image {
    char *name; /* the file's name in the folder */
    uint8_t *bytes;
    size_t len;
    enum hs_bench_body_kind kind;
};

struct hs_bench_images {
    struct hs_bench_image *im; /* [n], by name */
    size_t n;
    size_t skipped; /* files that are not JPEG or PNG (or are empty) */
    size_t bytes;   /* all images together */
};

/* Reads the images of folder dir (not its sub-folders). Errors: HS_STATUS_IO (the folder or a
 * file cannot be read), HS_STATUS_INVALID_INPUT (no JPEG or PNG in it, or a file over
 * max_bytes), HS_STATUS_NO_MEMORY, each naming the path. out is zeroed first; free it with
 * hs_bench_images_free (also on error). */
hs_status hs_bench_images_load(const char *dir, size_t max_bytes, struct hs_bench_images *out,
                               struct hs_error *err);
/* One image drawn uniformly. */
const struct hs_bench_image *hs_bench_images_pick(const struct hs_bench_images *s,
                                                  struct hs_bench_rng *r);
void hs_bench_images_free(struct hs_bench_images *s);

#endif
