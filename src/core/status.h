/* hetserve — status codes.
 *
 * One enum for every fallible call in the project: 0 is success, every error is negative.
 * The table below is the single source of the codes, their names and their human text
 * (hs_status_str). Detail (which file, which byte) travels in a struct hs_error, never in a
 * global and never through errno.
 */
#ifndef HS_CORE_STATUS_H
#define HS_CORE_STATUS_H

#include <stddef.h>

#define HS_STATUS_TABLE(X)                                                                         \
    X(OK, 0, "ok")                                                                                 \
    X(INVALID_ARGUMENT, -1, "invalid argument")                                                    \
    X(INVALID_INPUT, -2, "invalid input")                                                          \
    X(NO_MEMORY, -3, "out of memory")                                                              \
    X(IO, -4, "i/o error")                                                                         \
    X(CORRUPT, -5, "corrupt or malformed file")                                                    \
    X(UNSUPPORTED, -6, "not supported")                                                            \
    X(NOT_FOUND, -7, "not found")                                                                  \
    X(TOO_LONG, -8, "input too long")                                                              \
    X(TIMEOUT, -9, "timed out")                                                                    \
    X(OVERLOADED, -10, "overloaded")                                                               \
    X(ENGINE, -11, "engine failure")                                                               \
    X(SHUTDOWN, -12, "shutting down")                                                              \
    X(INTERNAL, -13, "internal error")                                                             \
    X(FORBIDDEN, -14, "not permitted")

enum hs_status {
#define HS__STATUS_ENUM(name, value, text) HS_STATUS_##name = value,
    HS_STATUS_TABLE(HS__STATUS_ENUM)
#undef HS__STATUS_ENUM
};

typedef enum hs_status hs_status;

/* Human text for a status ("invalid input"); never NULL, "unknown status" for unknown values. */
const char *hs_status_str(hs_status s);
/* Symbolic name of a status ("HS_STATUS_INVALID_INPUT"); never NULL. */
const char *hs_status_name(hs_status s);

/* Error detail carried beside a status. Functions that take a `struct hs_error *err` fill it on
 * failure when err is not NULL; on success they leave it untouched. */
struct hs_error {
    hs_status status;
    char msg[512];
};

/* Records status s and a printf-style message in err (when not NULL) and returns s, so that
 * `return hs_error_set(err, HS_STATUS_CORRUPT, "...")` reads naturally. */
hs_status hs_error_set(struct hs_error *err, hs_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Clears err to HS_STATUS_OK with an empty message. */
void hs_error_clear(struct hs_error *err);

/* Always-on assertion for programmer errors only (never for bad input): prints file:line, aborts.
 */
#define HS_ASSERT(cond)                                                                            \
    do {                                                                                           \
        if (!(cond)) hs__assert_fail(#cond, __FILE__, __LINE__);                                   \
    } while (0)
_Noreturn void hs__assert_fail(const char *expr, const char *file, int line);

#endif
