#include "core/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_int current_level = -1;

static int level_from_env(void)
{
    const char *s = getenv("HS_LOG_LEVEL");
    if (!s) return HS_LOG_INFO;
    if (strcmp(s, "error") == 0) return HS_LOG_ERROR;
    if (strcmp(s, "warn") == 0) return HS_LOG_WARN;
    if (strcmp(s, "debug") == 0) return HS_LOG_DEBUG;
    return HS_LOG_INFO;
}

void hs_log_set_level(enum hs_log_level level)
{
    atomic_store(&current_level, (int)level);
}

void hs_log(enum hs_log_level level, const char *fmt, ...)
{
    int cur = atomic_load(&current_level);
    if (cur < 0) {
        cur = level_from_env();
        atomic_store(&current_level, cur);
    }
    if ((int)level > cur) return;
    static const char *names[] = {"error", "warn", "info", "debug"};
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(line, sizeof line, "hetserve [%s] ", names[level]);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    /* one fputs per line keeps concurrent lines whole */
    size_t len = strlen(line);
    if (len + 1 < sizeof line) {
        line[len] = '\n';
        line[len + 1] = '\0';
    }
    fputs(line, stderr);
}
