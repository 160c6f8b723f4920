#include "testutil.h"

#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/file.h"
#include "core/status.h"
#include "core/tensor.h"
#include "core/threads.h"

static void status_strings(void **state)
{
    (void)state;
    assert_string_equal(hs_status_str(HS_STATUS_OK), "ok");
    assert_string_equal(hs_status_name(HS_STATUS_CORRUPT), "HS_STATUS_CORRUPT");
    assert_string_equal(hs_status_str((hs_status)-999), "unknown status");
    struct hs_error e;
    assert_int_equal(hs_error_set(&e, HS_STATUS_IO, "file %s", "x"), HS_STATUS_IO);
    assert_string_equal(e.msg, "file x");
    assert_int_equal(hs_error_set(NULL, HS_STATUS_IO, "ignored"), HS_STATUS_IO);
}

static void alloc_counts_and_fails(void **state)
{
    (void)state;
    int64_t live = hs_alloc_live();
    void *a = hs_malloc(10), *b = hs_malloc_aligned(100, 64);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(((uintptr_t)b) % 64, 0);
    assert_int_equal(hs_alloc_live(), live + 2);
    hs_free(a);
    hs_free_aligned(b);
    assert_int_equal(hs_alloc_live(), live);
    hs_alloc_fail_after(1);
    void *c = hs_malloc(1);
    assert_non_null(c);
    assert_null(hs_malloc(1));
    assert_null(hs_calloc(1, 1));
    hs_alloc_fail_after(-1);
    void *d = hs_malloc(1);
    assert_non_null(d);
    hs_free(c);
    hs_free(d);
}

static void half_conversions(void **state)
{
    (void)state;
    float vals[] = {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.3333f};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        float back = hs_fp16_to_fp32(hs_fp32_to_fp16(vals[i]));
        assert_true(fabsf(back - vals[i]) <= fabsf(vals[i]) * 1e-3f + 1e-8f);
    }
    assert_true(isinf(hs_fp16_to_fp32(hs_fp32_to_fp16(1e6f))));
    assert_true(hs_bf16_to_fp32(0x3f80) == 1.0f);
    assert_int_equal(hs_dtype_parse("BF16"), HS_DTYPE_BF16);
    assert_int_equal(hs_dtype_parse("F64"), -1);
    assert_int_equal(hs_dtype_size(HS_DTYPE_I64), 8);
}

static void read_file_whole(void **state)
{
    (void)state;
    char path[] = "/tmp/hs_test_read_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    /* longer than the first 4 KiB chunk, with a NUL byte inside */
    char data[10000];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (char)('a' + i % 26);
    data[5000] = '\0';
    assert_int_equal(write(fd, data, sizeof data), (int)sizeof data);
    close(fd);
    char *got;
    size_t len;
    struct hs_error err = {0};
    int64_t live = hs_alloc_live();
    assert_int_equal(hs_read_file(path, 0, &got, &len, &err), HS_STATUS_OK);
    assert_int_equal(len, sizeof data);
    assert_memory_equal(got, data, sizeof data);
    assert_int_equal(got[len], '\0');
    hs_free(got);
    /* a limit it passes: refused with the path, nothing kept */
    assert_int_equal(hs_read_file(path, 9999, &got, &len, &err), HS_STATUS_CORRUPT);
    assert_null(got);
    assert_non_null(strstr(err.msg, "larger than 9999 bytes"));
    assert_int_equal(hs_read_file(path, 10000, &got, &len, &err), HS_STATUS_OK);
    hs_free(got);
    /* out of memory: refused, nothing leaked */
    hs_alloc_fail_after(1);
    assert_int_equal(hs_read_file(path, 0, &got, &len, &err), HS_STATUS_NO_MEMORY);
    hs_alloc_fail_after(-1);
    assert_int_equal(hs_alloc_live(), live);
    unlink(path);
    assert_int_equal(hs_read_file(path, 0, &got, &len, &err), HS_STATUS_NOT_FOUND);
    assert_non_null(strstr(err.msg, "cannot open"));
    assert_non_null(strstr(err.msg, path));
}

/* Atomic replacement: the old file or the whole new one, never a part, and no temporary left. */
static int entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d));) n += de->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

static void write_file_atomic_whole_or_not_at_all(void **state)
{
    (void)state;
    char dir[] = "/tmp/hs_test_atomic_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256], sub[256];
    snprintf(path, sizeof path, "%s/plan.json", dir);
    struct hs_error err = {0};
    char *got;
    size_t len;
    assert_int_equal(hs_file_write_atomic(path, "first", 5, &err), HS_STATUS_OK);
    assert_int_equal(hs_file_write_atomic(path, "second!", 7, &err), HS_STATUS_OK);
    assert_int_equal(hs_read_file(path, 0, &got, &len, &err), HS_STATUS_OK);
    assert_string_equal(got, "second!");
    hs_free(got);
    assert_int_equal(entries(dir), 1);
    /* a file too large for what the process may write (a full disk, as far as write() tells):
     * refused with the reason, the old file whole, no temporary left */
    char big[4096];
    memset(big, 'x', sizeof big);
    struct rlimit old, small = {.rlim_cur = 1000, .rlim_max = RLIM_INFINITY};
    getrlimit(RLIMIT_FSIZE, &old);
    small.rlim_max = old.rlim_max;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    hs_status st = hs_file_write_atomic(path, big, sizeof big, &err);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    assert_int_equal(st, HS_STATUS_IO);
    printf("%s\n", err.msg);
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, "cannot write"));
    assert_int_equal(hs_read_file(path, 0, &got, &len, &err), HS_STATUS_OK);
    assert_string_equal(got, "second!");
    hs_free(got);
    assert_int_equal(entries(dir), 1);
    /* the name is a folder: the rename fails, nothing is left behind */
    snprintf(sub, sizeof sub, "%s/sub", dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    assert_int_equal(hs_file_write_atomic(sub, "x", 1, &err), HS_STATUS_IO);
    assert_int_equal(entries(dir), 2);
    /* a folder that does not exist */
    snprintf(sub, sizeof sub, "%s/none/plan.json", dir);
    assert_int_equal(hs_file_write_atomic(sub, "x", 1, &err), HS_STATUS_IO);
    assert_non_null(strstr(err.msg, "No such file"));
    snprintf(sub, sizeof sub, "%s/sub", dir);
    rmdir(sub);
    unlink(path);
    rmdir(dir);
}

/* Denormals flushed on the calling thread by default (a product below 1.2e-38 is zero, a denormal
 * input reads as zero); HS_KEEP_DENORMALS=1, read once per process, keeps them (a child process
 * checks that). */
static volatile float tiny_a = 1e-30f, tiny_b = 1e-20f;

static void denormals_flushed_unless_kept(void **state)
{
    (void)state;
#if defined(__x86_64__)
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv("HS_KEEP_DENORMALS", "1", 1);
        const int set = hs_threads_flush_denormals();
        const float p = tiny_a * tiny_b; /* 1e-50: zero either way */
        const float q = tiny_a * 1e-9f;  /* 1e-39: denormal, kept */
        _exit(set == 0 && p == 0.0f && q > 0.0f ? 0 : 1);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    unsetenv("HS_KEEP_DENORMALS");
    assert_int_equal(hs_threads_flush_denormals(), 1);
    const float q = tiny_a * 1e-9f;
    assert_true(q == 0.0f);
    volatile float d = q;     /* and a denormal input reads as zero: made by bits */
    const unsigned bits = 1u; /* the smallest denormal */
    memcpy((void *)&d, &bits, sizeof bits);
    assert_true(d * 1e30f == 0.0f);
#else
    skip();
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(status_strings),
        cmocka_unit_test(denormals_flushed_unless_kept),
        cmocka_unit_test(read_file_whole),
        cmocka_unit_test(write_file_atomic_whole_or_not_at_all),
        cmocka_unit_test(alloc_counts_and_fails),
        cmocka_unit_test(half_conversions),
    };
    return cmocka_run_group_tests_name("core", tests, NULL, NULL);
}
