/* hetserve — logging to stderr. Thread-safe; level from HS_LOG_LEVEL (error|warn|info|debug),
 * default info. */
#ifndef HS_CORE_LOG_H
#define HS_CORE_LOG_H

enum hs_log_level { HS_LOG_ERROR, HS_LOG_WARN, HS_LOG_INFO, HS_LOG_DEBUG };

void hs_log(enum hs_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void hs_log_set_level(enum hs_log_level level);

#define hs_log_error(...) hs_log(HS_LOG_ERROR, __VA_ARGS__)
#define hs_log_warn(...)  hs_log(HS_LOG_WARN, __VA_ARGS__)
#define hs_log_info(...)  hs_log(HS_LOG_INFO, __VA_ARGS__)
#define hs_log_debug(...) hs_log(HS_LOG_DEBUG, __VA_ARGS__)

#endif
