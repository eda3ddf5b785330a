// Api: the dispatch of the routes (routes.hpp says which file serves which group).
#include "api.hpp"

#include <utility>

#include "ratekeeper/core/event_loop.hpp"
#include "ratekeeper/core/metrics_writer.hpp"
#include "ratekeeper/http/client_ip.hpp"
#include "routes.hpp"

namespace ratekeeper::server {

void Api::Routes::handle(Request request, Responder respond) {
  spdlog::debug("{} {} from {}", request.method, request.target, request.peer_address);
  const std::string_view path = request.path();
  const std::string_view method = request.method;
  if (options_.demo_routes) return demo(request, path, method, std::move(respond));
  own(std::move(request), std::move(respond));
}

// /healthz, /readyz, /metrics, /v1/check, /v1/settle, /v1/release, /v1/renew, /v1/auth, /admin/keys, /admin/top, /admin/overrides, /admin/reload.
void Api::Routes::own(Request request, Responder respond) {
  const std::string_view path = request.path();
  const std::string_view method = request.method;
  if (path == "/healthz") {
    if (method != "GET" && method != "HEAD") return respond(not_allowed("GET, HEAD"));
    return respond(json_response(200, R"({"status":"ok"})"));
  }
  if (path == "/readyz") {
    if (method != "GET" && method != "HEAD") return respond(not_allowed("GET, HEAD"));
    return respond(readiness());
  }
  if (path == "/metrics") {
    if (method != "GET" && method != "HEAD") return respond(not_allowed("GET, HEAD"));
    if (!options_.metrics_enabled) return respond(error_response(404, "Not found"));
    MetricsWriter out;
    limiter_.write_metrics(out);
    middleware_.metrics().write(out);
    if (options_.extra_metrics) options_.extra_metrics(out);
    return respond(Response{200, std::string(kPrometheus), {}, out.take()});
  }
  if (path == "/v1/check") {
    if (method != "POST") return respond(not_allowed("POST"));
    return check(request, std::move(respond));
  }
  if (path == "/v1/settle") {
    if (method != "POST") return respond(not_allowed("POST"));
    return settle(request, std::move(respond));
  }
  if (path == "/v1/release") {
    if (method != "POST") return respond(not_allowed("POST"));
    return release(request, std::move(respond));
  }
  if (path == "/v1/renew") {
    if (method != "POST") return respond(not_allowed("POST"));
    return renew(request, std::move(respond));
  }
  if (path == "/v1/auth") return auth(std::move(request), std::move(respond));
  if (path == "/admin/keys") {
    if (method != "GET" && method != "DELETE") return respond(not_allowed("GET, DELETE"));
    if (!from_loopback(request)) {
      return respond(error_response(403, "/admin/keys is accepted from loopback only"));
    }
    return keys(request, std::move(respond));
  }
  if (path == "/admin/top") {
    if (method != "GET" && method != "HEAD") return respond(not_allowed("GET, HEAD"));
    if (!from_loopback(request)) {
      return respond(error_response(403, "/admin/top is accepted from loopback only"));
    }
    return respond(top_denied(request));
  }
  if (path == "/admin/overrides") {
    if (method != "GET" && method != "PUT" && method != "DELETE") return respond(not_allowed("GET, PUT, DELETE"));
    if (!from_loopback(request)) {
      return respond(error_response(403, "/admin/overrides is accepted from loopback only"));
    }
    return overrides(request, std::move(respond));
  }
  if (path == "/admin/reload" && options_.reload) {
    if (method != "POST") return respond(not_allowed("POST"));
    if (!from_loopback(request)) {
      return respond(error_response(403, "POST /admin/reload is accepted from loopback only"));
    }
    return options_.reload(std::move(respond));
  }
  respond(error_response(404, "Not found"));
}

// Answers at once, or, for an admission that must wait (on_limit: delay), when its time
// comes: the caller passes the request on as soon as it has the answer, never early.
void Api::Routes::answer(Micros delay, Responder& respond, Response r) {
  if (delay <= 0) return respond(std::move(r));
  EventLoop& loop = hold_loop();
  const std::size_t index = loop.on_loop_thread() ? loop.current_index() : 0;
  loop.post(
      index,
      [respond = std::move(respond), r = std::move(r)]() mutable { respond(std::move(r)); },
      delay);
}

EventLoop& Api::Routes::hold_loop() {
  std::call_once(own_loop_once_, [this] {
    if (!options_.loop) options_.loop = std::make_shared<EventLoop>(1);
  });
  return *options_.loop;
}

// Whether the request's socket peer is a loopback address (127.0.0.0/8, ::1).
bool Api::Routes::from_loopback(const Request& request) {
  const auto ip = http::parse_ip(request.peer_address);
  if (!ip) return false;
  if (!ip->v6) return ip->bytes[0] == 127;
  return *ip == *http::parse_address("::1");
}

Response Api::Routes::not_allowed(std::string_view allow) {
  auto r = error_response(405, "Method not allowed");
  r.headers.emplace_back("Allow", std::string(allow));
  return r;
}

Api::Api(limiter::Limiter& limiter, http::Middleware& middleware, ApiOptions options)
    : routes_(std::make_unique<Routes>(limiter, middleware, std::move(options))) {}

Api::~Api() = default;

void Api::handle(http::Request request, http::Responder respond) {
  routes_->handle(std::move(request), std::move(respond));
}

}  // namespace ratekeeper::server
