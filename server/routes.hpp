#pragma once
// Api::Routes: the routes of `ratekeeper serve` (api.hpp), one file per group: api.cpp
// dispatches (and serves /healthz, /metrics, /admin/reload), routes_demo.cpp the demo API,
// routes_decision.cpp the decision API (/v1/check), routes_auth.cpp nginx's auth_request
// (/v1/auth), routes_health.cpp readiness and the HTTP server's metrics, routes_admin.cpp
// the inspection and reset of keys (/admin/keys), the most denied identities (/admin/top) and
// the per-identity overrides (/admin/overrides);
// the helpers they share are in routes_support.cpp. Internal to the program.

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <expected>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api.hpp"
#include "ratekeeper/http/middleware.hpp"
#include "ratekeeper/limiter/limiter.hpp"

namespace ratekeeper::server {

using http::Request;
using http::Responder;
using http::Response;
using json = nlohmann::json;

constexpr std::string_view kJson = "application/json";
constexpr std::string_view kPrometheus = "text/plain; version=0.0.4; charset=utf-8";

// The demo API's endpoints.
enum class Endpoint { data, profile, search, export_, login };

// JSON text of a reply. Strings echoed from the request or the store may hold any bytes:
// invalid UTF-8 is replaced (U+FFFD), never thrown on.
std::string json_text(const json& j);

Response json_response(int status, std::string body);

Response error_response(int status, std::string_view message);

Response bad_request(std::string_view detail);

// application/x-www-form-urlencoded decoding ('+' is a space); bad escapes are kept as sent.
std::string url_decode(std::string_view s);

// The first value of query parameter `name`, decoded.
std::optional<std::string> query_param(std::string_view query, std::string_view name);

// A duration in whole milliseconds, rounded up (negative: 0), as the JSON answers give them.
Micros to_ms(Micros t);

// A request method as the rules take it (http::is_request_method: a token without lower-case
// letters), at most 32 characters.
bool is_method(std::string_view s);

class Api::Routes {
 public:
  Routes(limiter::Limiter& limiter, http::Middleware& middleware, ApiOptions options)
      : limiter_(limiter), middleware_(middleware), options_(std::move(options)) {}

  void handle(Request request, Responder respond);

 private:
  // api.cpp: the dispatch, and what every group uses.
  // /healthz, /readyz, /metrics, /v1/check, /v1/auth, /admin/reload.
  void own(Request request, Responder respond);
  // Answers at once, or, for an admission that must wait (on_limit: delay), when its time
  // comes: the caller passes the request on as soon as it has the answer, never early.
  void answer(Micros delay, Responder& respond, Response r);
  EventLoop& hold_loop();
  // Whether the request's socket peer is a loopback address (127.0.0.0/8, ::1).
  static bool from_loopback(const Request& request);
  static Response not_allowed(std::string_view allow);

  // routes_demo.cpp: the demo API, then the own endpoints.
  void demo(Request& request, std::string_view path, std::string_view method,
            Responder respond);
  // Runs the middleware, then the endpoint when admitted. `arg` is what the endpoint needs
  // from the request (the middleware's callback may run after the request is gone).
  void limited(const Request& request, Endpoint endpoint, std::string arg, Responder respond);
  static Response serve(Endpoint endpoint, const std::string& arg);
  // No real authentication: the endpoint exists to be protected against brute force.
  static Response login(const std::string& body);

  // routes_decision.cpp
  // POST /v1/check: `request` (an HTTP request described by the caller), `checks` (explicit
  // checks, all-or-nothing) or `rule` + `identity` (one check, the original shape).
  void check(const Request& request, Responder respond);
  // POST /v1/settle: a reservation made by a check with `reserve` settled to the actual cost.
  void settle(const Request& request, Responder respond);
  // POST /v1/release: a reservation's request ended (its concurrency slots given back).
  void release(const Request& request, Responder respond);
  // POST /v1/renew: the heartbeat of a reservation holding concurrency slots.
  void renew(const Request& request, Responder respond);
  // `request`: the method, path (and query), headers and client address of a request the
  // caller received, evaluated as the middleware evaluates one (the same rules, identities
  // and tiers). Without `client_ip`, the caller's own address stands for the client's.
  void check_request(const json& described, const Request& caller, Responder respond);
  // `checks`: explicit checks of rules for identities chosen by the caller, consumed
  // all-or-nothing in one evaluation.
  void check_list(const json& checks, Responder respond);
  // One evaluation of the limiter, answered with the decision, headers and limits.
  void evaluate(std::vector<limiter::AppliedRule> apps, Responder respond);

  // routes_auth.cpp
  // /v1/auth, nginx's auth_request: the original request as nginx describes it
  // (X-Original-Method, X-Original-URI, X-Real-IP, the client's own headers) through the
  // middleware, answered 200 (empty) when admitted and 403 when denied (429) or refused
  // (400), the only answers nginx takes besides 401; X-RateLimit-Status carries the status
  // ratekeeper would have answered, the rate-limit headers are there to be copied. A
  // subrequest that does not describe a request is a 400 (nginx: 500, as for an outage).
  // Not 204 when admitted: every answer is written with a Content-Length, which 204 forbids.
  void auth(Request subrequest, Responder respond);
  // The address nginx received the request from: X-Real-IP when the socket peer is a trusted
  // proxy and the header is an address, else the peer. The middleware then walks
  // X-Forwarded-For from it as from a socket peer.
  std::string forwarded_peer(const Request& subrequest) const;

  // routes_health.cpp
  Response readiness() const;

  // routes_admin.cpp
  // /admin/keys?rule=&identity=[&tier=][&endpoint=]: GET inspects one identity's keys under a
  // rule (each limit's key and what is left, read without consuming), DELETE resets them
  // (their next request starts from full limits; an audit line is logged). Loopback only.
  void keys(const Request& request, Responder respond);
  // /admin/top?rule=[&minutes=5][&n=10]: the identities the rule denied most over the last
  // minutes, in this process (limiter/top_denied.hpp). Loopback only.
  Response top_denied(const Request& request) const;
  // /admin/overrides: GET lists the per-identity overrides in the store (limiter/overrides.hpp);
  // PUT {"rule", "identity", "factor", "note"?} sets one; DELETE ?rule=&identity= removes one.
  // Every change is logged (an audit line). Loopback only.
  void overrides(const Request& request, Responder respond);

  limiter::Limiter& limiter_;
  http::Middleware& middleware_;
  ApiOptions options_;
  std::once_flag own_loop_once_;
};

}  // namespace ratekeeper::server
