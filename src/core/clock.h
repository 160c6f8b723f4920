/* hetserve — monotonic clock. */
#ifndef HS_CORE_CLOCK_H
#define HS_CORE_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Monotonic nanoseconds since an arbitrary origin; thread-safe. */
static inline int64_t hs_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline double hs_ns_to_ms(int64_t ns)
{
    return (double)ns / 1e6;
}

#endif
