/* Cores lent between CPU engines (lease.h). One mutex and condition variable per watched
 * core: the owner side takes and drops once per stage, so the lock is uncontended but for the
 * moments a borrower looks at the core. */
#include "engine/cpu/lease.h"

#include <pthread.h>
#include <stdatomic.h>

#include "core/clock.h"
#include "engine/engine.h"

struct lease {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int running;          /* owners running a stage on the core now */
    bool lent;            /* a borrower runs a stage on it */
    int waiting;          /* owners waiting for it to come back: no new loan until they ran */
    int64_t last_end_ns;  /* when an owner's stage last ended */
    int64_t lent_at_ns;   /* when the current loan began */
    int claimants;        /* preempting borrowers running a stage (lease.h) */
    int64_t claim_end_ns; /* when a preempting borrower's stage last ended; 0 = never */
    struct hs_cpu_lease_stats st;
};

static struct lease leases[HS_CPU_LEASE_CORES];
static atomic_bool watched[HS_CPU_LEASE_CORES];
static atomic_bool preempted[HS_CPU_LEASE_CORES];
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void init_all(void)
{
    /* the owner's wait for a preempting borrower is timed on hs_now_ns's clock */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    for (int i = 0; i < HS_CPU_LEASE_CORES; i++) {
        pthread_mutex_init(&leases[i].mu, NULL);
        pthread_cond_init(&leases[i].cv, &ca);
    }
    pthread_condattr_destroy(&ca);
}

static bool valid(int core)
{
    return core >= 0 && core < HS_CPU_LEASE_CORES;
}

void hs__cpu_lease_watch(int core)
{
    if (!valid(core)) return;
    pthread_once(&init_once, init_all);
    atomic_store(&watched[core], true);
}

bool hs__cpu_lease_watched(int core)
{
    return valid(core) && atomic_load_explicit(&watched[core], memory_order_acquire);
}

void hs__cpu_lease_watch_preempt(int core)
{
    if (!valid(core)) return;
    hs__cpu_lease_watch(core);
    atomic_store(&preempted[core], true);
}

bool hs__cpu_lease_preempted(int core)
{
    return valid(core) && atomic_load_explicit(&preempted[core], memory_order_acquire);
}

/* One more wait of dt in a counter triple (under l->mu). */
static void count_wait(int64_t *n, int64_t *sum_ns, int64_t *max_ns, int64_t dt)
{
    (*n)++;
    *sum_ns += dt;
    if (dt > *max_ns) *max_ns = dt;
}

/* The core lent to the caller (under l->mu). */
static void lend(struct lease *l, int64_t now)
{
    l->lent = true;
    l->lent_at_ns = now;
    l->st.lent_stages++;
}

/* When the owner's yield to a preempting borrower ends (under l->mu): now, when none claims
 * the core or claimed it within the idle time. */
static int64_t claim_until(const struct lease *l, int64_t now)
{
    if (l->claimants > 0) return INT64_MAX;
    if (l->claim_end_ns == 0) return now;
    const int64_t until = l->claim_end_ns + HS_CPU_LEASE_IDLE_NS;
    return until > now ? until : now;
}

static _Atomic int64_t yield_max_ns = HS_CPU_LEASE_YIELD_MAX_NS;

void hs__cpu_lease_set_yield_max(int64_t ns)
{
    atomic_store(&yield_max_ns, ns > 0 ? ns : HS_CPU_LEASE_YIELD_MAX_NS);
}

static void wait_until(struct lease *l, int64_t deadline_ns)
{
    struct timespec ts = {.tv_sec = deadline_ns / 1000000000LL,
                          .tv_nsec = deadline_ns % 1000000000LL};
    pthread_cond_timedwait(&l->cv, &l->mu, &ts);
}

/* The owner's yield: waits while a preempting borrower runs (or ran within the idle time), at
 * most HS_CPU_LEASE_YIELD_MAX_NS (under l->mu). */
static void yield(struct lease *l)
{
    const int64_t t0 = hs_now_ns(), cap = t0 + atomic_load(&yield_max_ns);
    int64_t now = t0;
    if (claim_until(l, now) <= now) return;
    l->waiting++;
    for (int64_t until; (until = claim_until(l, now)) > now && now < cap; now = hs_now_ns())
        wait_until(l, until < cap ? until : cap);
    l->waiting--;
    count_wait(&l->st.yields, &l->st.yield_ns, &l->st.yield_max_ns, now - t0);
}

void hs__cpu_lease_take(int core)
{
    if (!hs__cpu_lease_watched(core)) return;
    struct lease *l = &leases[core];
    pthread_mutex_lock(&l->mu);
    if (hs__cpu_lease_preempted(core)) yield(l);
    if (l->lent) {
        const int64_t t0 = hs_now_ns();
        l->waiting++;
        while (l->lent) pthread_cond_wait(&l->cv, &l->mu);
        l->waiting--;
        count_wait(&l->st.waits, &l->st.wait_ns, &l->st.wait_max_ns, hs_now_ns() - t0);
    }
    l->running++;
    pthread_mutex_unlock(&l->mu);
}

void hs__cpu_lease_drop(int core)
{
    if (!hs__cpu_lease_watched(core)) return;
    struct lease *l = &leases[core];
    pthread_mutex_lock(&l->mu);
    if (l->running > 0) l->running--;
    l->last_end_ns = hs_now_ns();
    pthread_mutex_unlock(&l->mu);
}

bool hs__cpu_lease_borrow(int core, int64_t idle_ns)
{
    if (!hs__cpu_lease_watched(core)) return false;
    struct lease *l = &leases[core];
    /* a look without the lock first: a busy owner is the common case under load */
    if (pthread_mutex_trylock(&l->mu) != 0) return false;
    const int64_t now = hs_now_ns();
    /* an owner woken by the last return has not run yet: lending again at once would starve it */
    const bool ok =
        !l->lent && l->running == 0 && l->waiting == 0 && now - l->last_end_ns >= idle_ns;
    if (ok) lend(l, now);
    pthread_mutex_unlock(&l->mu);
    return ok;
}

void hs__cpu_lease_return(int core)
{
    if (!hs__cpu_lease_watched(core)) return;
    struct lease *l = &leases[core];
    pthread_mutex_lock(&l->mu);
    if (l->lent) {
        l->lent = false;
        l->st.lent_ns += hs_now_ns() - l->lent_at_ns;
    }
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

void hs__cpu_lease_claim(int core)
{
    if (!hs__cpu_lease_preempted(core)) return;
    struct lease *l = &leases[core];
    pthread_mutex_lock(&l->mu);
    l->claimants++;
    l->st.claims++;
    pthread_mutex_unlock(&l->mu);
}

void hs__cpu_lease_unclaim(int core)
{
    if (!hs__cpu_lease_preempted(core)) return;
    struct lease *l = &leases[core];
    pthread_mutex_lock(&l->mu);
    if (l->claimants > 0) l->claimants--;
    l->claim_end_ns = hs_now_ns();
    /* an owner waiting for the claim re-times its wait from the new end */
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

bool hs__cpu_lease_borrow_first(int core)
{
    if (!hs__cpu_lease_preempted(core)) return false;
    struct lease *l = &leases[core];
    pthread_mutex_lock(&l->mu);
    const bool ok = !l->lent && l->running == 0;
    if (ok) {
        lend(l, hs_now_ns());
        l->st.claims_lent++;
    }
    pthread_mutex_unlock(&l->mu);
    return ok;
}

bool hs_engine_cpu_lease_stats(int core, struct hs_cpu_lease_stats *out)
{
    if (!hs__cpu_lease_watched(core)) return false;
    struct lease *l = &leases[core];
    pthread_mutex_lock(&l->mu);
    *out = l->st;
    pthread_mutex_unlock(&l->mu);
    return true;
}
