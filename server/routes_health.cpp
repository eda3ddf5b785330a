// Readiness (/readyz) and the HTTP server's own metrics.
#include "routes.hpp"

#include "ratekeeper/core/contained.hpp"
#include "ratekeeper/core/metrics_writer.hpp"
#include "ratekeeper/http/proxy.hpp"

namespace ratekeeper::server {

Response Api::Routes::readiness() const {
  const auto health = limiter_.store().health();
  json body{{"status", health.ready ? "ready" : "not ready"},
            {"store", limiter_.store().kind()},
            {"detail", health.detail}};
  if (!health.ready) body["reason"] = health.detail;
  return json_response(health.ready ? 200 : 503, json_text(body));
}

// The HTTP server's own counters and the contained exceptions.
// Both listeners' (the proxy's, when there is one, and this server's) in each.
void write_http_server_metrics(MetricsWriter& out, const http::Server& server, const http::Proxy* proxy) {
  auto stats = server.stats();
  if (proxy != nullptr) {
    const auto p = proxy->stats();
    stats.tls_handshake_failures += p.tls_handshake_failures;
    stats.connections_open += p.connections_open;
    stats.accept_errors += p.accept_errors;
    stats.handler_exceptions += p.handler_exceptions;
  }
  out.counter("ratekeeper_http_tls_handshake_failures_total",
              "Client connections closed in a failed TLS handshake (TLS listeners; the reason is logged).",
              std::uint64_t{stats.tls_handshake_failures});
  out.gauge("ratekeeper_http_connections_open", "Client connections open, on every listener.",
            static_cast<std::int64_t>(stats.connections_open));
  out.counter("ratekeeper_http_accept_errors_total",
              "Failed accepts (e.g. out of file descriptors): accepting backs off and resumes by itself.",
              std::uint64_t{stats.accept_errors});
  out.counter("ratekeeper_http_handler_exceptions_total", "Requests answered 500 because handling them threw.",
              std::uint64_t{stats.handler_exceptions});
  out.counter("ratekeeper_contained_exceptions_total",
              "Exceptions caught on event-loop threads and in completion handlers; the process went on.",
              std::uint64_t{contained_exceptions()});
}

}  // namespace ratekeeper::server
