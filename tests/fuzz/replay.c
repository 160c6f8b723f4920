/* hetserve — the plain driver of a fuzz harness (normal builds, no libFuzzer).
 *
 *   fuzz_<name> [-n MUTATIONS] [-l MAX_LEN] [-s SEED] PATH...
 *
 * Feeds every file named (a folder: every file in it, by name) to LLVMFuzzerTestOneInput, then
 * MUTATIONS inputs made from those seeds by a fixed PRNG (bit flips, byte and token overwrites,
 * inserts, deletes, duplicated and spliced ranges; at most MAX_LEN bytes), so that ctest runs
 * each harness over its corpus and a few thousand near-misses on every build. Each input sits in
 * a heap buffer of exactly its size, as libFuzzer gives it, so a sanitizer build (make asan)
 * catches reads past its end. Exit status 0 when every input passed; a finding aborts.
 */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fuzz.h"

struct seed {
    char *path;
    uint8_t *data;
    size_t size;
};

static struct seed *seeds;
static size_t n_seeds, cap_seeds;

static void add_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        exit(2);
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (n == cap) buf = realloc(buf, cap *= 2);
        size_t got = fread(buf + n, 1, cap - n, f);
        if (got == 0) break;
        n += got;
    }
    fclose(f);
    if (n_seeds == cap_seeds) {
        cap_seeds = cap_seeds ? cap_seeds * 2 : 64;
        seeds = realloc(seeds, cap_seeds * sizeof *seeds);
    }
    seeds[n_seeds++] = (struct seed){strdup(path), buf, n};
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void add_path(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "replay: no such file or folder %s\n", path);
        exit(2);
    }
    if (!S_ISDIR(sb.st_mode)) {
        add_file(path);
        return;
    }
    DIR *d = opendir(path);
    if (!d) exit(2);
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) names = realloc(names, (cap = cap ? cap * 2 : 64) * sizeof *names);
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, by_name); /* the same order everywhere */
    for (size_t i = 0; i < n; i++) {
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", path, names[i]);
        add_file(full);
        free(names[i]);
    }
    free(names);
}

/* splitmix64: a fixed, portable sequence */
static uint64_t rng_state;
static uint64_t rng(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static size_t below(size_t n)
{
    return n ? (size_t)(rng() % n) : 0;
}

/* Text that parsers branch on: JSON and YAML punctuation and values, numbers at the edges of
 * their types, escapes, and UTF-8 that is malformed, long or special to the tokenizer. */
static const char *const tokens[] = {
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "\\",
    "null",
    "true",
    "false",
    "0",
    "-1",
    "1e309",
    "-0.0",
    "2147483648",
    "9223372036854775808",
    "-9223372036854775809",
    "1.5",
    "\"\"",
    "[]",
    "{}",
    "\\u0000",
    "\\ud800",
    "\\uDFFF",
    "\n",
    "\n- ",
    ": ",
    "  ",
    "#",
    "&a ",
    "*a",
    "!!str ",
    "---\n",
    "|\n",
    "[CLS]",
    "[SEP]",
    "[UNK]",
    "[MASK]",
    "<s>",
    "</s>",
    "##",
    "\xc3\xa9",
    "e\xcc\x81",
    "\xe4\xb8\xad",
    "\xf0\x9f\x98\x80",
    "\xc4\xb0",
    "\xc0\x80",
    "\xed\xa0\x80",
    "\xf4\x90\x80\x80",
    "\xef\xbf\xbd",
    "\xe2\x80\x8b",
    "\xc2\xa0",
    "\xff",
    "\x80",
    "\x00",
};

static size_t mutate(uint8_t *buf, size_t size, size_t max_len)
{
    int rounds = 1 + (int)below(6);
    for (int r = 0; r < rounds; r++) {
        size_t pos = below(size + 1);
        switch (below(8)) {
        case 0: /* flip a bit */
            if (size) buf[below(size)] ^= (uint8_t)(1u << below(8));
            break;
        case 1: /* any byte */
            if (size) buf[below(size)] = (uint8_t)rng();
            break;
        case 2: { /* delete a range */
            if (!size) break;
            size_t n = 1 + below(size - pos < 16 ? size - pos + 1 : 16);
            if (pos + n > size) n = size - pos;
            memmove(buf + pos, buf + pos + n, size - pos - n);
            size -= n;
            break;
        }
        case 3:
        case 4: { /* insert a token */
            const char *t = tokens[below(sizeof tokens / sizeof tokens[0])];
            size_t n = strlen(t) ? strlen(t) : 1; /* "\x00" inserts one NUL */
            if (size + n > max_len) break;
            memmove(buf + pos + n, buf + pos, size - pos);
            memcpy(buf + pos, t, n);
            size += n;
            break;
        }
        case 5: { /* duplicate a range of itself */
            if (!size) break;
            size_t from = below(size), n = 1 + below(size - from);
            if (n > 64) n = 64;
            if (size + n > max_len) break;
            uint8_t tmp[64];
            memcpy(tmp, buf + from, n);
            memmove(buf + pos + n, buf + pos, size - pos);
            memcpy(buf + pos, tmp, n);
            size += n;
            break;
        }
        case 6: { /* splice in a range of another seed */
            const struct seed *o = &seeds[below(n_seeds)];
            if (!o->size) break;
            size_t from = below(o->size), n = 1 + below(o->size - from);
            if (n > 256) n = 256;
            if (size + n > max_len) n = max_len - size;
            memmove(buf + pos + n, buf + pos, size - pos);
            memcpy(buf + pos, o->data + from, n);
            size += n;
            break;
        }
        default: /* cut the end */
            size = pos;
            break;
        }
    }
    return size;
}

/* The input being run, written out when it crashes so that it can be replayed alone and kept. */
static const uint8_t *current;
static size_t current_size;
static const char *current_name;

static void put_stderr(const char *s)
{
    ssize_t w = write(2, s, strlen(s));
    (void)w; /* (in a signal handler: nothing to do about a failed write) */
}

static void on_crash(int sig)
{
    int fd = open("replay-crash.bin", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        ssize_t w = write(fd, current, current_size);
        (void)w;
        close(fd);
    }
    put_stderr("replay: the failing input (");
    put_stderr(current_name);
    put_stderr(") was written to replay-crash.bin\n");
    signal(sig, SIG_DFL);
    raise(sig);
}

static void run_one(const uint8_t *data, size_t size, const char *name)
{
    uint8_t *copy = malloc(size ? size : 1); /* exactly size bytes, as libFuzzer passes them */
    if (size) memcpy(copy, data, size);
    current = copy;
    current_size = size;
    current_name = name;
    LLVMFuzzerTestOneInput(copy, size);
    free(copy);
}

int main(int argc, char **argv)
{
    long mutations = 1000, max_len = 4096;
    uint64_t seed = 1;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i += 2) {
        if (i + 1 >= argc) break;
        if (!strcmp(argv[i], "-n"))
            mutations = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "-l"))
            max_len = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "-s"))
            seed = strtoull(argv[i + 1], NULL, 10);
        else
            break;
    }
    if (i >= argc || max_len < 1) {
        fprintf(stderr, "usage: %s [-n MUTATIONS] [-l MAX_LEN] [-s SEED] PATH...\n", argv[0]);
        return 2;
    }
    for (; i < argc; i++) add_path(argv[i]);
    if (!n_seeds) {
        fprintf(stderr, "replay: no seed files\n");
        return 2;
    }
    signal(SIGABRT, on_crash);
    signal(SIGSEGV, on_crash);
    signal(SIGBUS, on_crash);
    signal(SIGFPE, on_crash);
    clock_t t0 = clock();
    for (size_t k = 0; k < n_seeds; k++) run_one(seeds[k].data, seeds[k].size, seeds[k].path);
    rng_state = seed;
    uint8_t *buf = malloc((size_t)max_len);
    for (long m = 0; m < mutations; m++) {
        const struct seed *s = &seeds[below(n_seeds)];
        size_t size = s->size < (size_t)max_len ? s->size : (size_t)max_len;
        memcpy(buf, s->data, size);
        size = mutate(buf, size, (size_t)max_len);
        run_one(buf, size, "a mutation");
    }
    free(buf);
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    printf("%s: %zu seeds and %ld mutations passed in %.2f s CPU\n", argv[0], n_seeds, mutations,
           secs);
    for (size_t k = 0; k < n_seeds; k++) {
        free(seeds[k].path);
        free(seeds[k].data);
    }
    free(seeds);
    return 0;
}
