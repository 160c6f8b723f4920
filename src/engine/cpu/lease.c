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
    int running;         /* owners running a stage on the core now */
    bool lent;           /* a borrower runs a stage on it */
    int waiting;         /* owners waiting for it to come back: no new loan until they ran */
    int64_t last_end_ns; /* when an owner's stage last ended */
    int64_t lent_at_ns;  /* when the current loan began */
    struct hs_cpu_lease_stats st;
};

static struct lease leases[HS_CPU_LEASE_CORES];
static atomic_bool watched[HS_CPU_LEASE_CORES];
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void init_all(void)
{
    for (int i = 0; i < HS_CPU_LEASE_CORES; i++) {
        pthread_mutex_init(&leases[i].mu, NULL);
        pthread_cond_init(&leases[i].cv, NULL);
    }
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

void hs__cpu_lease_take(int core)
{
    if (!hs__cpu_lease_watched(core)) return;
    struct lease *l = &leases[core];
    pthread_mutex_lock(&l->mu);
    if (l->lent) {
        const int64_t t0 = hs_now_ns();
        l->waiting++;
        while (l->lent) pthread_cond_wait(&l->cv, &l->mu);
        l->waiting--;
        const int64_t dt = hs_now_ns() - t0;
        l->st.waits++;
        l->st.wait_ns += dt;
        if (dt > l->st.wait_max_ns) l->st.wait_max_ns = dt;
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
    if (ok) {
        l->lent = true;
        l->lent_at_ns = now;
        l->st.lent_stages++;
    }
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

bool hs_engine_cpu_lease_stats(int core, struct hs_cpu_lease_stats *out)
{
    if (!hs__cpu_lease_watched(core)) return false;
    struct lease *l = &leases[core];
    pthread_mutex_lock(&l->mu);
    *out = l->st;
    pthread_mutex_unlock(&l->mu);
    return true;
}
