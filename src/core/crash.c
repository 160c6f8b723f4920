#include "core/crash.h"

#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

/* Only async-signal-safe calls after the signal: write(2) and backtrace_symbols_fd, which
 * writes without allocating. backtrace() itself may load libgcc on its first call, so it is
 * called once at install time. */
static void put(const char *s)
{
    size_t n = strlen(s);
    while (n) {
        ssize_t w = write(STDERR_FILENO, s, n);
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

static const struct {
    int sig;
    const char *name;
} fatal[] = {
    {SIGSEGV, "SIGSEGV"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
    {SIGILL, "SIGILL"},   {SIGABRT, "SIGABRT"},
};

static void on_fatal(int sig)
{
    const char *name = "a fatal signal";
    for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++)
        if (fatal[i].sig == sig) name = fatal[i].name;
    put("hetserve: ");
    put(name);
    put("; the stack of the thread that took it:\n");
    void *frames[64];
    int n = backtrace(frames, 64);
    backtrace_symbols_fd(frames, n, STDERR_FILENO);
    /* SA_RESETHAND put the default action back: the signal ends the process as it would have */
    raise(sig);
}

void hs_crash_report_install(void)
{
    void *warm[1];
    (void)backtrace(warm, 1);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal;
    sa.sa_flags = (int)SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++)
        (void)sigaction(fatal[i].sig, &sa, NULL);
}
