/* hetserve — the live dashboard page (GET /dashboard).
 *
 * One self-contained HTML page (no library, no CDN) that polls /metrics every second and draws
 * per-engine queue length, latency percentiles, utilization and breaker state, the route mix,
 * the cascade escalations and each pipeline stage's queue, items, failures, batch size and
 * latency. Its source is src/server/dashboard/dashboard.html. */
#ifndef HS_SERVER_DASHBOARD_H
#define HS_SERVER_DASHBOARD_H

#include <stddef.h>

/* The page's bytes (static, NUL-terminated) and their length. Thread-safe. */
const char *hs_dashboard_page(size_t *len);

#endif
