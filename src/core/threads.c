#include "core/threads.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

void hs_threads_wait_policy_init(char **argv)
{
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    const char *keep = getenv("HS_OMP_KEEP_POLICY");
    if (keep && strcmp(keep, "0") != 0) return;
    /* "active" only lifts the throttled count to the bound (threads.h); the bound is the
     * spin count itself */
    if (setenv("GOMP_SPINCOUNT", HS_OMP_SPINCOUNT, 1) != 0 ||
        setenv("OMP_WAIT_POLICY", "active", 1) != 0) {
        unsetenv("GOMP_SPINCOUNT");
        return;
    }
    execv("/proc/self/exe", argv);
    /* not reached unless exec failed: run on, with the default policy */
    unsetenv("GOMP_SPINCOUNT");
    unsetenv("OMP_WAIT_POLICY");
    fprintf(stderr,
            "hetserve: could not re-execute to set the OpenMP wait policy; set "
            "GOMP_SPINCOUNT=%s OMP_WAIT_POLICY=active yourself to avoid stalls when cores are "
            "shared\n",
            HS_OMP_SPINCOUNT);
}

void hs_threads_release_idle_team(void)
{
    /* soft: the threads end, the runtime stays usable (OpenMP 5.0) */
    (void)omp_pause_resource_all(omp_pause_soft);
}

int hs_threads_flush_denormals(void)
{
    static int keep = -1; /* HS_KEEP_DENORMALS, read once (racing first calls read the same) */
    int k = __atomic_load_n(&keep, __ATOMIC_RELAXED);
    if (k < 0) {
        const char *v = getenv("HS_KEEP_DENORMALS");
        k = v && strcmp(v, "0") != 0;
        __atomic_store_n(&keep, k, __ATOMIC_RELAXED);
    }
    if (k) return 0;
#if defined(__x86_64__) || defined(__i386__)
    /* FTZ (bit 15) and DAZ (bit 6) */
    _mm_setcsr(_mm_getcsr() | 0x8040u);
    return 1;
#else
    return 0;
#endif
}
