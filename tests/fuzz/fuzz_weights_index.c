/* Fuzz: the sharded-checkpoint index reader (model/weights.c, hs__weights_index_parse): a
 * model.safetensors.index.json text.
 * Checks: a refused index says why (HS_STATUS_CORRUPT or UNSUPPORTED, message naming the
 * label); an accepted one lists at least one shard, each a plain file name inside the folder
 * (no '/', not "." or "..") listed once; nothing leaks. Each input runs once more with
 * allocations failing from the n-th on (fuzz_fail_allocs): a clean refusal, nothing leaked.
 */
#include <string.h>

#include "core/alloc.h"
#include "fuzz.h"
#include "model/weights.h"

static void check(const uint8_t *data, size_t size)
{
    fuzz_json_alloc();
    int64_t live = hs_alloc_live();
    char **files = NULL;
    int n = -1;
    struct hs_error err = {0};
    hs_status s =
        hs__weights_index_parse((const char *)data, size, "fuzz.index.json", &files, &n, &err);
    if (s != HS_STATUS_OK) {
        FUZZ_CHECK(files == NULL && n == 0);
        FUZZ_CHECK(s == HS_STATUS_CORRUPT || s == HS_STATUS_UNSUPPORTED);
        FUZZ_CHECK(strstr(err.msg, "fuzz.index.json") != NULL);
        FUZZ_CHECK(hs_alloc_live() == live);
        return;
    }
    FUZZ_CHECK(n >= 1 && files[n] == NULL);
    for (int i = 0; i < n; i++) {
        FUZZ_CHECK(files[i][0] != '\0' && strchr(files[i], '/') == NULL);
        FUZZ_CHECK(strcmp(files[i], ".") != 0 && strcmp(files[i], "..") != 0);
        for (int j = 0; j < i; j++) FUZZ_CHECK(strcmp(files[i], files[j]) != 0);
    }
    hs__weights_files_free(files);
    FUZZ_CHECK(hs_alloc_live() == live);
}

static void under_oom(const uint8_t *data, size_t size)
{
    int64_t live = hs_alloc_live();
    char **files = NULL;
    int n = 0;
    fuzz_fail_allocs(data, size);
    hs_status s = hs__weights_index_parse((const char *)data, size, "fuzz", &files, &n, NULL);
    fuzz_fail_allocs_end();
    FUZZ_CHECK(s == HS_STATUS_OK || s == HS_STATUS_NO_MEMORY || s == HS_STATUS_CORRUPT ||
               s == HS_STATUS_UNSUPPORTED);
    FUZZ_CHECK((s == HS_STATUS_OK) == (files != NULL));
    hs__weights_files_free(files);
    FUZZ_CHECK(hs_alloc_live() == live);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check(data, size);
    under_oom(data, size);
    return 0;
}
