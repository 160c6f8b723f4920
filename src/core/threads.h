/* hetserve — how compute threads wait.
 *
 * The CPU engine's parallel regions (its own kernels and oneDNN's) run on OpenMP teams. Between
 * regions, libgomp's workers spin before they sleep, by default up to 300,000 pause loops —
 * several milliseconds on CPUs with a long pause instruction. When another thread shares a core
 * with the team (the HTTP threads, tokenization, a neighbour), a spinning worker keeps the core
 * from the worker that holds the next barrier, and a batch of 2 ms can take hundreds of
 * milliseconds (bench/stall.sh reproduces it). libgomp reads its wait policy once, when it
 * loads, from OMP_WAIT_POLICY and GOMP_SPINCOUNT: hs_threads_wait_policy_init sets a bounded
 * spin (HS_OMP_SPINCOUNT, chosen by bench/stall.sh) by re-executing the program once with it in
 * the environment, unless the user set either variable (then theirs is kept) or
 * HS_OMP_KEEP_POLICY=1 asks to leave libgomp's default.
 *
 * While libgomp manages more threads than the process has CPUs it spins only its throttled
 * count: 100 pauses, unless OMP_WAIT_POLICY=active (1000), and never more than the spin count.
 * A server with several lanes (each batcher has its team) is always there on 2 cores, and 100
 * pauses are ~1.4 us on the AVX-512 Xeon class (a pause ~14 ns): a worker then sleeps at nearly
 * every barrier, and waking a vCPU costs 20-60 us. So the policy set is "active" with the
 * bounded count, the same 1000 pauses (~14 us) with one lane or several. Measured in
 * bench/hybrid's (p), where the short lane preempts the long lane's core (87 req/s, 3
 * interleaved runs): the short lane's layer stages (~24 tokens) took 254-312 us (attention) and
 * 440-545 us (FFN), against 378-418 and 577-655 us with 100 pauses. Two unpinned 2-thread lanes
 * sharing both cores, the case the throttle is for, served 155-168 req/s at 32 clients against
 * 147-153. On a shared 2-core machine under load (load average 6-10), a 1 x 24 int8 batch on 2
 * unpinned threads took 2.5-3x longer with 1000 pauses than with 100 when the team's master and
 * worker shared a core; a cpu engine's spread (one thread per core) prevents that, and with it
 * 1000 pauses served a lone request in ~1 ms instead of ~5 (bench/SERVING.md, 1-client).
 */
#ifndef HS_CORE_THREADS_H
#define HS_CORE_THREADS_H

#define HS_OMP_SPINCOUNT "1000"

/* Call first in main(). Returns only when no re-execution was needed or it failed (then the
 * program runs on with libgomp's default, and says so on stderr). */
void hs_threads_wait_policy_init(char **argv);

/* Ends the calling thread's idle OpenMP workers (a server's main thread: the team it loaded
 * the models with, idle from then on). libgomp counts every pooled worker of every team, and
 * the throttled spin above applies to all of them while that count exceeds the CPUs: with the
 * main thread's workers gone, a 2-core server with one 2-thread lane is back under it (which
 * mattered most before the policy lifted the throttled count to the bound: 1 x 32 int8 had ~30
 * sleeps per thread and batch), and the idle threads end.
 * A later parallel region on the thread starts a new team. Not inside a parallel region. */
void hs_threads_release_idle_team(void);

/* Denormal floats (below 1.2e-38) flushed to zero on the calling thread: results that would be
 * denormal become zero, and denormal inputs read as zero (x86-64's FTZ and DAZ bits; nothing
 * elsewhere), as TensorFlow's compute threads do. Each one costs a microcode assist of ~100
 * cycles otherwise. They arise where an attention row is peaked beyond exp's range: keys ~85
 * or more below the row's best get weights of ~1e-38, and their products with V are denormal
 * while the accumulators hold nothing larger (a sink at the last key, [SEP]). bench_attn has
 * that row: the f32 kernel took 134 ms kept against 2.2 flushed (8 x 12 heads x 128 keys, one
 * thread), with the same outputs; on spread rows, and on MiniLM's batches in bench_cpu, the
 * two are alike. (A GELU input below -13 gives one as well.) Threads inherit the setting from
 * the thread that starts them. HS_KEEP_DENORMALS=1 keeps IEEE denormals (returns 0 then; 1 when
 * set). */
int hs_threads_flush_denormals(void);

#endif
