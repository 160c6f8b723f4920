/* hetserve — a fatal signal's report.
 *
 * hs_crash_report_install makes SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT write one line
 * naming the signal and the stack of the thread that took it to standard error, then end the
 * process with that signal as before (its exit status and core dump do not change). A crash
 * that happens once in a thousand runs leaves its evidence in the log that the test or the
 * container runtime keeps, not only in a core file nobody collected. Frames are printed as
 * module(symbol+offset) [address]: `addr2line -e hetserve -f <offset>` names a static function.
 */
#ifndef HS_CORE_CRASH_H
#define HS_CORE_CRASH_H

void hs_crash_report_install(void);

#endif
