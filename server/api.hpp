#pragma once
// The routes of `ratekeeper serve`: the demo API (/api/data, /api/profile, /api/search,
// /api/export/<name>, /auth/login) behind the rate-limiting middleware, the decision API
// (POST /v1/check: one rule and identity, a described HTTP request, or a list of checks
// consumed all-or-nothing; docs/decision-api.md), nginx's auth_request endpoint (/v1/auth:
// 200 admitted, 403 denied; docs/nginx.md), /healthz, /readyz and /metrics. Every answer is a
// response: replies are built from validated values, and text taken from the request or the
// store is written into JSON with invalid UTF-8 replaced, never thrown on.
//
// Thread-safe: it holds only thread-safe parts. The limiter and middleware must outlive it.

#include <functional>
#include <memory>
#include <string>

#include "ratekeeper/http/server.hpp"

namespace ratekeeper {
class EventLoop;
}
namespace ratekeeper::limiter {
class Limiter;
}
namespace ratekeeper::http {
class Proxy;
class Middleware;
}

namespace ratekeeper {
class MetricsWriter;
}

namespace ratekeeper::server {

struct ApiOptions {
  bool metrics_enabled = true;
  // The demo API (/api/..., /auth/login); off where the routes are an admin listener.
  bool demo_routes = true;
  // Holds the answers of admissions that must wait (rules with `on_limit: delay`) until their
  // time: the caller then passes the request on at once. Null: a loop of the Api's own.
  std::shared_ptr<EventLoop> loop;
  // More Prometheus text appended to /metrics (e.g. the HTTP server's own counters).
  std::function<void(MetricsWriter&)> extra_metrics;
  // POST /admin/reload: asks for a configuration reload and answers through the responder
  // (from another thread) with its outcome. Accepted from a loopback peer only (the socket's
  // peer: forwarding headers are not believed); others get 403. Empty: the route is a 404.
  std::function<void(http::Responder)> reload;
};

// The HTTP server's own counters and the contained exceptions, in Prometheus text (for
// ApiOptions::extra_metrics); with a proxy (`proxy` not null), the failed TLS handshakes
// count both listeners'.
void write_http_server_metrics(MetricsWriter& out, const http::Server& server, const http::Proxy* proxy);

// process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
// process_open_fds, process_max_fds, process_start_time_seconds (Prometheus' names).
void write_process_metrics(MetricsWriter& out);

class Api {
 public:
  Api(limiter::Limiter& limiter, http::Middleware& middleware, ApiOptions options = {});
  ~Api();
  Api(const Api&) = delete;
  Api& operator=(const Api&) = delete;

  // Answers one request through `respond`, exactly once, inline or later from a store thread.
  void handle(http::Request request, http::Responder respond);

 private:
  class Routes;
  std::unique_ptr<Routes> routes_;
};

}  // namespace ratekeeper::server
