#include "core/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

const char *hs_status_str(hs_status s)
{
    switch (s) {
#define HS__STATUS_STR(name, value, text)                                                          \
    case HS_STATUS_##name:                                                                         \
        return text;
        HS_STATUS_TABLE(HS__STATUS_STR)
#undef HS__STATUS_STR
    }
    return "unknown status";
}

const char *hs_status_name(hs_status s)
{
    switch (s) {
#define HS__STATUS_NAME(name, value, text)                                                         \
    case HS_STATUS_##name:                                                                         \
        return "HS_STATUS_" #name;
        HS_STATUS_TABLE(HS__STATUS_NAME)
#undef HS__STATUS_NAME
    }
    return "HS_STATUS_UNKNOWN";
}

hs_status hs_error_set(struct hs_error *err, hs_status s, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->status = s;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return s;
}

void hs_error_clear(struct hs_error *err)
{
    if (err) {
        err->status = HS_STATUS_OK;
        err->msg[0] = '\0';
    }
}

void hs__assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "hetserve: assertion failed: %s (%s:%d)\n", expr, file, line);
    abort();
}
