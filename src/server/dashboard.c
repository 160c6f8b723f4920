/* GET /dashboard: the page of src/server/dashboard/dashboard.html, embedded at build time by
 * cmake/embed.cmake (a generated header in the build folder), so the binary serves it alone. */
#include "server/dashboard.h"

#include "dashboard_html.h"

const char *hs_dashboard_page(size_t *len)
{
    *len = (size_t)hs_dashboard_html_len;
    return (const char *)hs_dashboard_html;
}
