/* hetserve — cores lent between CPU engines, stage by stage (engines[].borrow_cores).
 *
 * A CPU engine pinned to a core set owns those cores. Another pinned CPU engine may name some
 * of them in its borrow list: before each stage it runs, it borrows every listed core whose
 * owners are idle — none of them is running a stage, and none has finished one within the
 * last HS_CPU_LEASE_IDLE_NS (an engine in the middle of a batch runs its stages back to back,
 * microseconds apart, so a pause longer than that means its lane has nothing to run) — runs
 * the stage with one more thread on each borrowed core, and gives them back when the stage
 * ends (a layer stage of a long batch runs in rounds of whole sequences of ~0.5 GFLOP each,
 * cpu_engine.c, each round a stage here). An owner that wants its core while it is lent waits
 * for the round in flight to end: a few milliseconds (bench/hybrid, two runs: longest wait
 * 8.5 and 15 ms, 33-37 ms when a whole stage of 8 x 256 tokens was the unit), which the
 * lease counts (hs_engine_cpu_lease_stats). Leases never nest: a borrower takes only idle
 * cores and never waits while it holds one, so two engines borrowing from each other cannot
 * deadlock.
 *
 * A borrower may also preempt (engines[].borrow_preempt): a latency lane that should have the
 * cores of a batch lane whenever it has work. While it runs stages (and for HS_CPU_LEASE_IDLE_NS
 * after its last, so the gaps between its stages do not count as idle), the owners of the cores
 * it preempts yield them at their next round boundary: their next stage waits, at most
 * HS_CPU_LEASE_YIELD_MAX_NS per round (then it runs on its core regardless, so a batch lane
 * under a latency lane's overload still moves), and the preemptor borrows the core as soon as
 * no owner runs, idle or not. Its stages never wait for the core: one that starts while the
 * owner's round is in flight runs on its own cores and picks the core up at the next stage. An
 * owner of a preempted core runs its layer stages in rounds too (cpu_engine.c). Two engines
 * that preempt each other's cores would hold each other up to the bound; the config refuses it.
 *
 * The table is process-wide, one entry per core (cores below HS_CPU_LEASE_CORES); only engines
 * that borrow, and the owners of the cores they list, touch it. Thread-safe.
 */
#ifndef HS_ENGINE_CPU_LEASE_H
#define HS_ENGINE_CPU_LEASE_H

#include <stdbool.h>
#include <stdint.h>

#define HS_CPU_LEASE_CORES   1024
#define HS_CPU_LEASE_IDLE_NS 200000 /* 0.2 ms without a stage: the owner's lane is idle */
#define HS_CPU_LEASE_YIELD_MAX_NS                                                                  \
    20000000 /* 20 ms: the longest an owner's round waits for a preempting borrower */

/* An engine that borrows `core` exists (from now on the core's owners take it per stage). */
void hs__cpu_lease_watch(int core);
/* Is the core watched (some engine may borrow it)? */
bool hs__cpu_lease_watched(int core);
/* Owner: waits while the core is lent, then marks one more of its owners running a stage. */
void hs__cpu_lease_take(int core);
/* Owner: its stage ended. */
void hs__cpu_lease_drop(int core);
/* Borrower: lends the core to the caller when no owner runs or ran within idle_ns; true when
 * lent (give it back with hs__cpu_lease_return). Never waits. */
bool hs__cpu_lease_borrow(int core, int64_t idle_ns);
void hs__cpu_lease_return(int core);

/* A borrower that preempts `core` exists (its owners then yield it, and run in rounds). */
void hs__cpu_lease_watch_preempt(int core);
bool hs__cpu_lease_preempted(int core);
/* Preempting borrower, around each of its stages: claim before it takes its own cores (the
 * owner's next round then yields), unclaim after it gave everything back. */
void hs__cpu_lease_claim(int core);
void hs__cpu_lease_unclaim(int core);
/* Preempting borrower, between claim and unclaim: lends the core when no owner runs on it
 * (owners that wait for it do not count, nor does their idle time); never waits. */
bool hs__cpu_lease_borrow_first(int core);
/* The bound of an owner's yield (<= 0: back to HS_CPU_LEASE_YIELD_MAX_NS). Process-wide: for
 * tests. */
void hs__cpu_lease_set_yield_max(int64_t ns);

/* The work of a round of a borrowing engine's layer stage (cpu_engine.c, HS_CPU_ROUND_FLOP;
 * <= 0: back to that default). Process-wide: for tests. */
void hs__cpu_set_round_flop(int64_t flop);

#endif
