// The coordinator's read-only web UI: one page (GET /ui), its script and
// its style sheet, served by the REST gateway on its port. The page holds
// no data: its script reads the REST API (/v1/jobs, /v1/jobs/{id},
// /v1/jobs/{id}/logs, /v1/workers) with the API token the user types
// (kept in the tab's sessionStorage), so the page needs no token and every
// data request has the REST API's authentication. No file from elsewhere,
// no build step: the three files are these strings.
//
// Views (the URL's fragment): "#/" the jobs (state, progress, latest
// metric, reason) and the workers; "#/job/ID" one job: its state and
// progress, per-epoch curves (test accuracy or RMSE, test log-likelihood,
// samples per second), its worlds, its recoveries and its log. Both
// refresh every 2 s.
#ifndef TAGI_COORDINATOR_WEB_UI_H_
#define TAGI_COORDINATOR_WEB_UI_H_

#include <string_view>

namespace tagi::coordinator {

std::string_view WebUiPage();    // text/html
std::string_view WebUiScript();  // text/javascript
std::string_view WebUiStyle();   // text/css

// The Content-Security-Policy the UI's files are served with: nothing but
// this origin (no inline script, no other host).
inline constexpr char kWebUiPolicy[] =
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

}  // namespace tagi::coordinator

#endif  // TAGI_COORDINATOR_WEB_UI_H_
