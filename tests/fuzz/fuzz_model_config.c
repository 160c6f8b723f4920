/* Fuzz: the model folder loader (model/config.c, hs_model_config_load) over a folder written
 * from the input, and hs_model_config_parse_hf on its config.json text.
 *
 * Input: up to five files separated by lines "----" ("\n----\n"), in this order: config.json,
 * 1_Pooling/config.json, modules.json, sentence_bert_config.json, tokenizer_config.json. An empty
 * part is a file that is absent. The folder is a fresh temporary one per input.
 * Checks: a refused folder says why (status CORRUPT, UNSUPPORTED or NOT_FOUND for a missing
 * config.json, message naming the folder); an accepted one has sane dimensions (hidden a
 * multiple of heads, head_dim * heads = hidden (but for qwen3's explicit head_dim), kv heads
 * dividing heads, an even rotary dimension within the head, a max sequence length of at least 2
 * that fits the positions after pos_offset, pad_token_id in the vocabulary, strip_accents -1/0/1,
 * terminated special tokens), and parsing its config.json alone gives the same dimensions;
 * nothing leaks Each input runs once more with allocations failing from the n-th on
 * (fuzz_fail_allocs): a clean refusal, nothing leaked.
 */
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "fuzz.h"
#include "model/arch.h"
#include "model/config.h"

static const char *const files[5] = {"config.json", "1_Pooling/config.json", "modules.json",
                                     "sentence_bert_config.json", "tokenizer_config.json"};
static char dir[512];

/* The folder for one input: TMPDIR, else memory (/dev/shm) where there is one, since a file
 * system on a disk makes this harness several times slower. Made and removed around every input
 * (libFuzzer ends with _Exit, so an atexit cleanup would leave folders behind). */
static void make_dir(void)
{
    const char *tmp = getenv("TMPDIR");
    struct stat sb;
    if (!tmp || !*tmp)
        tmp = stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode) ? "/dev/shm" : "/tmp";
    snprintf(dir, sizeof dir, "%s/hs-fuzz-model-XXXXXX", tmp);
    if (!mkdtemp(dir)) {
        perror("fuzz_model_config: mkdtemp");
        abort();
    }
    char p[1024];
    snprintf(p, sizeof p, "%s/1_Pooling", dir);
    if (mkdir(p, 0700) != 0) abort();
}

static void remove_dir(void)
{
    char p[1024];
    for (int i = 0; i < 5; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    snprintf(p, sizeof p, "%s/1_Pooling", dir);
    rmdir(p);
    rmdir(dir);
}

/* Writes the parts of the input as the folder's files; returns the length of config.json's. */
static size_t write_folder(const uint8_t *data, size_t size)
{
    static const char sep[] = "\n----\n";
    const uint8_t *part = data, *end = data + size;
    size_t first_len = 0;
    for (int i = 0; i < 5; i++) {
        const uint8_t *next = part < end ? memmem(part, (size_t)(end - part), sep, 6) : NULL;
        size_t n = part < end ? (size_t)((next ? next : end) - part) : 0;
        if (i == 0) first_len = n;
        if (n > 0) { /* (an empty part: no file) */
            char p[1024];
            snprintf(p, sizeof p, "%s/%s", dir, files[i]);
            FILE *f = fopen(p, "wb");
            if (!f || fwrite(part, 1, n, f) != n || fclose(f) != 0) abort();
        }
        part = next ? next + 6 : end;
    }
    return first_len;
}

static int check(const uint8_t *data, size_t size, size_t first_len)
{
    const uint8_t *first = data;
    int64_t live = hs_alloc_live();
    struct hs_model_config c;
    struct hs_error err = {0};
    hs_status s = hs_model_config_load(dir, &c, &err);
    if (s != HS_STATUS_OK) {
        FUZZ_CHECK(s == HS_STATUS_CORRUPT || s == HS_STATUS_UNSUPPORTED ||
                   (s == HS_STATUS_NOT_FOUND && first_len == 0));
        FUZZ_CHECK(strstr(err.msg, dir) != NULL);
        FUZZ_CHECK(hs_alloc_live() == live);
        return 0;
    }
    const struct hs_encoder_dims *d = &c.dims;
    FUZZ_CHECK(d->hidden >= 1 && d->heads >= 1 && d->hidden % d->heads == 0);
    /* heads of hidden / heads, or (qwen3) an explicit head_dim with grouped-query kv heads */
    FUZZ_CHECK(d->head_dim >= 1 && d->kv_heads >= 1 && d->heads % d->kv_heads == 0);
    FUZZ_CHECK(d->head_dim * d->heads == d->hidden || !strcmp(c.arch->model_type, "qwen3"));
    FUZZ_CHECK(d->pos != HS_POS_ROTARY ||
               (d->rotary_dim >= 2 && d->rotary_dim % 2 == 0 && d->rotary_dim <= d->head_dim));
    FUZZ_CHECK(d->layers >= 1 && d->intermediate >= 1 && d->vocab >= 1 && d->type_vocab >= 1);
    FUZZ_CHECK(d->pos_offset >= 0 && d->pos_offset < d->max_positions);
    FUZZ_CHECK(c.max_seq_len >= 2 && c.max_seq_len <= d->max_positions - d->pos_offset);
    FUZZ_CHECK(c.pad_token_id >= 0 && c.pad_token_id < d->vocab);
    FUZZ_CHECK(d->ln_eps > 0 && d->ln_eps < 1);
    FUZZ_CHECK(c.strip_accents >= -1 && c.strip_accents <= 1);
    const char *specials[] = {c.cls_token, c.sep_token, c.unk_token, c.pad_token, c.mask_token};
    for (int i = 0; i < 5; i++) {
        FUZZ_CHECK(memchr(specials[i], '\0', sizeof c.cls_token) != NULL);
        FUZZ_CHECK(specials[i][0] != '\0');
    }
    FUZZ_CHECK(c.arch && hs_arch_find(c.model_type) == c.arch);

    /* config.json alone, from memory: the same encoder */
    char *text = malloc(first_len + 1);
    memcpy(text, first, first_len);
    text[first_len] = '\0';
    struct hs_model_config h;
    hs_status hs = hs_model_config_parse_hf(text, "config.json", &h, &err);
    free(text);
    /* (a NUL inside config.json ends the text here, but not the file) */
    if (!memchr(first, '\0', first_len)) {
        FUZZ_CHECK(hs == HS_STATUS_OK);
        FUZZ_CHECK(h.dims.hidden == d->hidden && h.dims.layers == d->layers &&
                   h.dims.heads == d->heads && h.dims.intermediate == d->intermediate &&
                   h.dims.vocab == d->vocab && h.dims.max_positions == d->max_positions &&
                   h.dims.pos_offset == d->pos_offset && h.dims.act == d->act);
    }
    FUZZ_CHECK(hs_alloc_live() == live);
    return 0;
}

/* Once more with allocations failing (the folder is already written): a clean refusal, nothing
 * leaked. */
static void under_oom(const uint8_t *data, size_t size)
{
    int64_t live = hs_alloc_live();
    struct hs_model_config c;
    fuzz_fail_allocs(data, size);
    hs_status s = hs_model_config_load(dir, &c, NULL);
    fuzz_fail_allocs_end();
    FUZZ_CHECK(s == HS_STATUS_OK || s == HS_STATUS_NO_MEMORY || s == HS_STATUS_CORRUPT ||
               s == HS_STATUS_UNSUPPORTED || s == HS_STATUS_NOT_FOUND);
    FUZZ_CHECK(hs_alloc_live() == live);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_json_alloc();
    make_dir();
    size_t first_len = write_folder(data, size);
    check(data, size, first_len);
    under_oom(data, size);
    remove_dir();
    return 0;
}
