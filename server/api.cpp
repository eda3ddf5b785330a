#include "api.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <expected>
#include <initializer_list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ratekeeper/core/contained.hpp"
#include "ratekeeper/core/event_loop.hpp"
#include "ratekeeper/core/metrics_writer.hpp"
#include "ratekeeper/http/client_ip.hpp"
#include "ratekeeper/http/headers.hpp"
#include "ratekeeper/http/middleware.hpp"
#include "ratekeeper/limiter/limiter.hpp"
#include "ratekeeper/store/denial_cache.hpp"
#include "ratekeeper/store/leasing_store.hpp"

namespace ratekeeper::server {
namespace {

using http::Request;
using http::Responder;
using http::Response;
using json = nlohmann::json;

constexpr std::string_view kJson = "application/json";
constexpr std::string_view kPrometheus = "text/plain; version=0.0.4; charset=utf-8";

// JSON text of a reply. Strings echoed from the request or the store may hold any bytes:
// invalid UTF-8 is replaced (U+FFFD), never thrown on.
std::string json_text(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

Response json_response(int status, std::string body) {
  return Response{status, std::string(kJson), {}, std::move(body)};
}

Response error_response(int status, std::string_view message) {
  return json_response(status, json_text(json{{"error", message}}));
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// application/x-www-form-urlencoded decoding ('+' is a space); bad escapes are kept as sent.
std::string url_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 &&
               hex_value(s[i + 2]) >= 0) {
      out += static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The first value of query parameter `name`, decoded.
std::optional<std::string> query_param(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    const auto amp = query.find('&');
    const auto pair = query.substr(0, amp);
    const auto eq = pair.find('=');
    if (url_decode(pair.substr(0, eq)) == name) {
      return eq == std::string_view::npos ? std::string() : url_decode(pair.substr(eq + 1));
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

enum class Endpoint { data, profile, search, export_, login };

// The most explicit checks one POST /v1/check may carry.
constexpr std::size_t kMaxChecks = 64;

// A reason for a 400, naming the field of the body it is about.
using Invalid = std::unexpected<std::string>;
template <class T>
using Parsed = std::expected<T, std::string>;

Response bad_request(std::string_view detail) {
  return json_response(400, http::bad_request_body(detail));
}

// An HTTP method as RFC 9110 writes it: a token (letters, digits, !#$%&'*+-.^_`|~).
bool is_method(std::string_view s) {
  if (s.empty() || s.size() > 32) return false;
  for (const char c : s) {
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum && std::string_view("!#$%&'*+-.^_`|~").find(c) == std::string_view::npos) {
      return false;
    }
  }
  return true;
}

// `object[key]` as a non-empty string; `field` names it in the reason.
Parsed<std::string> required_string(const json& object, const char* key, std::string_view field) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_string() || it->get_ref<const std::string&>().empty()) {
    return Invalid(fmt::format("`{}` must be a non-empty string", field));
  }
  return it->get<std::string>();
}

// The optional `cost` of a check: an integer from 0 to 2^53; nullopt when absent.
Parsed<std::optional<std::int64_t>> cost_of(const json& object, std::string_view field) {
  const auto it = object.find("cost");
  if (it == object.end()) return std::nullopt;
  if (!it->is_number_integer() ||
      (it->is_number_unsigned() &&
       it->get<std::uint64_t>() > static_cast<std::uint64_t>(kMaxExact))) {
    return Invalid(fmt::format("`{}` must be an integer", field));
  }
  const auto cost = it->get<std::int64_t>();
  if (cost < 0) return Invalid(fmt::format("`{}` must not be negative", field));
  return cost;
}

// The optional `tier` of a check, empty when absent.
Parsed<std::string> tier_of(const json& object, std::string_view field) {
  const auto it = object.find("tier");
  if (it == object.end()) return std::string();
  if (!it->is_string()) return Invalid(fmt::format("`{}` must be a string", field));
  return it->get<std::string>();
}

// The first member of `object` not in `known`, if any.
std::optional<std::string> unknown_member(const json& object,
                                          std::initializer_list<std::string_view> known) {
  for (const auto& [key, value] : object.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end()) return key;
  }
  return std::nullopt;
}

Micros to_ms(Micros t) {
  return (std::max<Micros>(t, 0) + kMicrosPerMilli - 1) / kMicrosPerMilli;
}

// The answer of the caller-shaped decision API: the decision, the headers to send with the
// caller's response (the middleware's, http/headers.hpp), and every enforcing limit.
Response evaluation_response(const limiter::Evaluation& ev, const http::HeaderOptions& options) {
  json headers = json::object();
  for (auto& [name, value] : http::rate_limit_headers(ev, options)) {
    headers[name] = std::move(value);
  }
  json limits = json::array();
  for (const auto& rule : ev.rules) {
    for (const auto& l : rule.limits) {
      const auto& d = l.decision;
      limits.push_back({{"rule", rule.rule->name},
                        {"policy", l.policy_name},
                        {"identity", rule.identity},
                        {"tier", rule.tier},
                        {"algorithm", algorithms::to_string(l.limit.algorithm)},
                        {"limit", l.limit.capacity},
                        {"window_ms", to_ms(l.limit.horizon())},
                        {"allowed", d.allowed},
                        {"remaining", std::max<std::int64_t>(0, d.remaining)},
                        {"reset_after_ms", to_ms(d.reset_after)},
                        {"retry_after_ms", d.allowed ? 0 : to_ms(d.retry_after)},
                        {"by_failure_policy", rule.by_failure_policy}});
    }
  }
  const int status = ev.allowed ? 200 : 429;
  json body{{"allowed", ev.allowed},
            {"status", status},
            {"retry_after_ms", ev.allowed ? 0 : to_ms(ev.decision.retry_after)},
            {"delay_ms", ev.allowed ? to_ms(ev.decision.delay) : 0},
            {"by_failure_policy", ev.by_failure_policy},
            {"headers", std::move(headers)},
            {"limits", std::move(limits)}};
  auto r = json_response(status, json_text(body));
  if (!ev.allowed) {
    r.headers.emplace_back("Retry-After",
                           std::to_string(http::retry_after_seconds(ev.decision.retry_after)));
  }
  return r;
}

}  // namespace

class Api::Routes {
 public:
  Routes(limiter::Limiter& limiter, http::Middleware& middleware, ApiOptions options)
      : limiter_(limiter), middleware_(middleware), options_(std::move(options)) {}

  void handle(Request request, Responder respond) {
    spdlog::debug("{} {} from {}", request.method, request.target, request.peer_address);
    const std::string_view path = request.path();
    const std::string_view method = request.method;
    if (options_.demo_routes) return demo(request, path, method, std::move(respond));
    own(std::move(request), std::move(respond));
  }

 private:
  // The seed's demo API, then the own endpoints.
  void demo(Request& request, std::string_view path, std::string_view method,
            Responder respond) {
    if (path == "/api/data") {
      if (method != "GET") return respond(not_allowed("GET"));
      return limited(request, Endpoint::data, {}, std::move(respond));
    }
    if (path == "/api/profile") {
      if (method != "GET") return respond(not_allowed("GET"));
      auto user = request.header("X-User-ID");
      std::string user_id = user && !user->empty() ? std::string(*user) : "anonymous";
      return limited(request, Endpoint::profile, std::move(user_id), std::move(respond));
    }
    if (path == "/api/search") {
      if (method != "GET") return respond(not_allowed("GET"));
      return limited(request, Endpoint::search, query_param(request.query(), "q").value_or(""),
                     std::move(respond));
    }
    if (path.starts_with("/api/export/") && path.size() > 12) {
      if (method != "GET") return respond(not_allowed("GET"));
      return limited(request, Endpoint::export_, url_decode(path.substr(12)), std::move(respond));
    }
    if (path == "/auth/login") {
      if (method != "POST") return respond(not_allowed("POST"));
      std::string body = request.body;
      return limited(request, Endpoint::login, std::move(body), std::move(respond));
    }
    own(std::move(request), std::move(respond));
  }

  // /healthz, /readyz, /metrics, /v1/check, /v1/auth, /admin/reload.
  void own(Request request, Responder respond) {
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
    if (path == "/v1/auth") return auth(std::move(request), std::move(respond));
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
  void answer(Micros delay, Responder& respond, Response r) {
    if (delay <= 0) return respond(std::move(r));
    EventLoop& loop = hold_loop();
    const std::size_t index = loop.on_loop_thread() ? loop.current_index() : 0;
    loop.post(
        index,
        [respond = std::move(respond), r = std::move(r)]() mutable { respond(std::move(r)); },
        delay);
  }

  EventLoop& hold_loop() {
    std::call_once(own_loop_once_, [this] {
      if (!options_.loop) options_.loop = std::make_shared<EventLoop>(1);
    });
    return *options_.loop;
  }

  // Whether the request's socket peer is a loopback address (127.0.0.0/8, ::1).
  static bool from_loopback(const Request& request) {
    const auto ip = http::parse_ip(request.peer_address);
    if (!ip) return false;
    if (!ip->v6) return ip->bytes[0] == 127;
    return *ip == *http::parse_address("::1");
  }

  static Response not_allowed(std::string_view allow) {
    auto r = error_response(405, "Method not allowed");
    r.headers.emplace_back("Allow", std::string(allow));
    return r;
  }

  // Runs the middleware, then the endpoint when admitted. `arg` is what the endpoint needs
  // from the request (the middleware's callback may run after the request is gone).
  void limited(const Request& request, Endpoint endpoint, std::string arg, Responder respond) {
    middleware_.handle(request, [this, endpoint, arg = std::move(arg), respond = std::move(respond)](
                                    http::MiddlewareResult result) mutable {
      if (!result.admitted) {
        return respond(Response{result.status, std::move(result.content_type),
                                std::move(result.headers), std::move(result.body)});
      }
      Response r = serve(endpoint, arg);
      if (r.headers.empty()) {
        r.headers = std::move(result.headers);
      } else {
        for (auto& h : result.headers) r.headers.push_back(std::move(h));
      }
      answer(result.delay, respond, std::move(r));
    });
  }

  static Response serve(Endpoint endpoint, const std::string& arg) {
    switch (endpoint) {
      case Endpoint::data:
        return json_response(200, R"({"data":"success"})");
      case Endpoint::profile:
        return json_response(200, json_text(json{{"profile", {{"user_id", arg}}}}));
      case Endpoint::search: {
        json results = json::array();
        if (!arg.empty()) {
          for (int i = 1; i <= 3; ++i) {
            results.push_back({{"id", i}, {"title", fmt::format("Result {} for {}", i, arg)}});
          }
        }
        return json_response(200, json_text(json{{"query", arg}, {"results", std::move(results)}}));
      }
      case Endpoint::export_:
        return json_response(200, json_text(json{{"export", arg}, {"status", "ready"}}));
      case Endpoint::login:
        return login(arg);
    }
    return error_response(500, "Internal server error");
  }

  // No real authentication: the endpoint exists to be protected against brute force.
  static Response login(const std::string& body) {
    std::string username, password;
    if (!body.empty()) {
      json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
      if (parsed.is_discarded()) {
        return json_response(400, http::bad_request_body("body is not valid JSON"));
      }
      if (parsed.is_object()) {
        if (auto it = parsed.find("username"); it != parsed.end() && it->is_string()) {
          username = it->get<std::string>();
        }
        if (auto it = parsed.find("password"); it != parsed.end() && it->is_string()) {
          password = it->get<std::string>();
        }
      }
    }
    if (username.empty() || password.empty()) {
      auto r = error_response(401, "Missing credentials");
      r.headers.emplace_back("WWW-Authenticate", R"(Bearer realm="ratekeeper")");
      return r;
    }
    return json_response(200, R"({"status":"ok"})");
  }

  Response readiness() const {
    const auto health = limiter_.store().health();
    json body{{"status", health.ready ? "ready" : "not ready"},
              {"store", limiter_.store().kind()},
              {"detail", health.detail}};
    if (!health.ready) body["reason"] = health.detail;
    return json_response(health.ready ? 200 : 503, json_text(body));
  }

  // POST /v1/check: `request` (an HTTP request described by the caller), `checks` (explicit
  // checks, all-or-nothing) or `rule` + `identity` (one check, the original shape).
  void check(const Request& request, Responder respond) {
    json parsed = json::parse(request.body, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded()) {
      return respond(json_response(400, http::bad_request_body("body is not valid JSON")));
    }
    if (!parsed.is_object()) {
      return respond(json_response(400, http::bad_request_body("body must be a JSON object")));
    }
    const bool described = parsed.contains("request");
    const bool listed = parsed.contains("checks");
    const bool single = parsed.contains("rule") || parsed.contains("identity");
    if (int{described} + int{listed} + int{single} > 1) {
      return respond(bad_request("give one of `request`, `checks` or `rule` and `identity`"));
    }
    if (described) return check_request(parsed["request"], request, std::move(respond));
    if (listed) return check_list(parsed["checks"], std::move(respond));
    auto rule_it = parsed.find("rule");
    if (rule_it == parsed.end() || !rule_it->is_string() ||
        rule_it->get_ref<const std::string&>().empty()) {
      return respond(
          json_response(400, http::bad_request_body("`rule` must be a non-empty string")));
    }
    auto identity_it = parsed.find("identity");
    if (identity_it == parsed.end() || !identity_it->is_string() ||
        identity_it->get_ref<const std::string&>().empty()) {
      return respond(
          json_response(400, http::bad_request_body("`identity` must be a non-empty string")));
    }
    const auto cost = cost_of(parsed, "cost");
    if (!cost) return respond(bad_request(cost.error()));
    auto tier = tier_of(parsed, "tier");
    if (!tier) return respond(bad_request(tier.error()));
    const auto& rule_name = rule_it->get_ref<const std::string&>();
    const limiter::Rule* rule = limiter_.find_rule(rule_name);
    if (!rule) {
      return respond(
          json_response(400, http::bad_request_body(fmt::format("unknown rule `{}`", rule_name))));
    }
    const limiter::FailureMode policy = rule->on_store_error;
    limiter_.check(
        rule_name, identity_it->get_ref<const std::string&>(), cost->value_or(1),
        [this, policy, respond = std::move(respond)](Result<limiter::Verdict> verdict) mutable {
          if (!verdict) {
            if (verdict.error().code == ErrorCode::invalid_argument) {
              return respond(json_response(400, http::bad_request_body(verdict.error().message)));
            }
            return respond(error_response(503, "Store unavailable: " + verdict.error().message));
          }
          const bool allowed = verdict->decision.allowed;
          auto r = json_response(allowed ? 200 : 429, http::verdict_json(*verdict, policy));
          if (!allowed) {
            r.headers.emplace_back(
                "Retry-After",
                std::to_string(http::retry_after_seconds(verdict->decision.retry_after)));
          }
          answer(allowed ? verdict->decision.delay : 0, respond, std::move(r));
        },
        *tier);
  }

  // `request`: the method, path (and query), headers and client address of a request the
  // caller received, evaluated as the middleware evaluates one (the same rules, identities
  // and tiers). Without `client_ip`, the caller's own address stands for the client's.
  void check_request(const json& described, const Request& caller, Responder respond) {
    if (!described.is_object()) return respond(bad_request("`request` must be an object"));
    if (auto key = unknown_member(described, {"method", "path", "headers", "client_ip"})) {
      return respond(bad_request(fmt::format("`request.{}` is not a field of a request", *key)));
    }
    Request request;
    auto method = required_string(described, "method", "request.method");
    if (!method || !is_method(*method)) {
      return respond(bad_request("`request.method` must be an HTTP method (a token)"));
    }
    request.method = std::move(*method);
    auto path = required_string(described, "path", "request.path");
    if (!path || path->front() != '/') {
      return respond(bad_request("`request.path` must be a path (and query) starting with /"));
    }
    request.target = std::move(*path);
    if (const auto it = described.find("headers"); it != described.end()) {
      if (!it->is_object()) {
        return respond(bad_request("`request.headers` must be an object of strings"));
      }
      for (const auto& [name, value] : it->items()) {
        if (name.empty() || !value.is_string()) {
          return respond(bad_request(fmt::format(
              "`request.headers` must map header names to strings (`{}`)", name.substr(0, 64))));
        }
        request.headers.emplace_back(name, value.get<std::string>());
      }
    }
    request.peer_address = caller.peer_address;
    if (const auto it = described.find("client_ip"); it != described.end()) {
      const auto ip =
          it->is_string() ? http::parse_ip(it->get_ref<const std::string&>()) : std::nullopt;
      if (!ip) return respond(bad_request("`request.client_ip` must be an IP address"));
      request.peer_address = ip->to_string();
    }
    auto apps = middleware_.applied_rules(request);
    if (!apps) return respond(bad_request(fmt::format("`request`: {}", apps.error().message)));
    evaluate(std::move(*apps), std::move(respond));
  }

  // `checks`: explicit checks of rules for identities chosen by the caller, consumed
  // all-or-nothing in one evaluation.
  void check_list(const json& checks, Responder respond) {
    if (!checks.is_array() || checks.empty() || checks.size() > kMaxChecks) {
      return respond(
          bad_request(fmt::format("`checks` must be an array of 1 to {} checks", kMaxChecks)));
    }
    std::vector<limiter::AppliedRule> apps;
    apps.reserve(checks.size());
    for (std::size_t i = 0; i < checks.size(); ++i) {
      const auto& item = checks[i];
      const auto field = [i](std::string_view key) { return fmt::format("checks[{}].{}", i, key); };
      if (!item.is_object()) {
        return respond(bad_request(fmt::format("`checks[{}]` must be an object", i)));
      }
      if (auto key = unknown_member(item, {"rule", "identity", "cost", "tier"})) {
        return respond(bad_request(fmt::format("`{}` is not a field of a check", field(*key))));
      }
      auto rule = required_string(item, "rule", field("rule"));
      if (!rule) return respond(bad_request(rule.error()));
      auto identity = required_string(item, "identity", field("identity"));
      if (!identity) return respond(bad_request(identity.error()));
      const auto cost = cost_of(item, field("cost"));
      if (!cost) return respond(bad_request(cost.error()));
      const auto tier = tier_of(item, field("tier"));
      if (!tier) return respond(bad_request(tier.error()));
      auto app = limiter_.application(*rule, *identity, cost->value_or(0), *tier);
      if (!app) {
        return respond(bad_request(fmt::format("`checks[{}]`: {}", i, app.error().message)));
      }
      app->cost = *cost;  // absent: the rule's cost
      for (std::size_t j = 0; j < apps.size(); ++j) {
        // One key twice in one atomic check is refused by the store; say which.
        if (apps[j].rule == app->rule && apps[j].identity == app->identity) {
          return respond(bad_request(
              fmt::format("`checks[{}]` repeats the rule and identity of `checks[{}]`", i, j)));
        }
      }
      apps.push_back(std::move(*app));
    }
    evaluate(std::move(apps), std::move(respond));
  }

  // One evaluation of the limiter, answered with the decision, headers and limits.
  void evaluate(std::vector<limiter::AppliedRule> apps, Responder respond) {
    limiter_.evaluate(
        std::move(apps),
        [this, respond = std::move(respond)](Result<limiter::Evaluation> ev) mutable {
          if (!ev) {
            if (ev.error().code == ErrorCode::invalid_argument) {
              return respond(bad_request(ev.error().message));
            }
            return respond(error_response(503, "Store unavailable: " + ev.error().message));
          }
          answer(ev->allowed ? ev->decision.delay : 0, respond,
                 evaluation_response(*ev, middleware_.options().headers));
        });
  }

  // /v1/auth, nginx's auth_request: the original request as nginx describes it
  // (X-Original-Method, X-Original-URI, X-Real-IP, the client's own headers) through the
  // middleware, answered 200 (empty) when admitted and 403 when denied (429) or refused
  // (400), the only answers nginx takes besides 401; X-RateLimit-Status carries the status
  // ratekeeper would have answered, the rate-limit headers are there to be copied. A
  // subrequest that does not describe a request is a 400 (nginx: 500, as for an outage).
  // Not 204 when admitted: every answer is written with a Content-Length, which 204 forbids.
  void auth(Request subrequest, Responder respond) {
    const auto method = subrequest.header("X-Original-Method");
    if (!method || !is_method(*method)) {
      return respond(bad_request("header X-Original-Method must be the request's method"));
    }
    const auto uri = subrequest.header("X-Original-URI");
    if (!uri || uri->empty() || uri->front() != '/') {
      return respond(bad_request("header X-Original-URI must be the request's path and query"));
    }
    Request original;
    original.method = std::string(*method);
    original.target = std::string(*uri);
    original.peer_address = forwarded_peer(subrequest);
    original.peer_port = subrequest.peer_port;
    original.headers = std::move(subrequest.headers);
    middleware_.handle(original, [this, respond = std::move(respond)](
                                     http::MiddlewareResult result) mutable {
      Response r{result.status, std::move(result.content_type), std::move(result.headers),
                 std::move(result.body)};
      r.headers.emplace_back("X-RateLimit-Status", std::to_string(result.status));
      if (result.admitted) {
        r.status = 200;
        r.content_type.clear();
      } else if (result.status == 429 || result.status == 400) {
        r.status = 403;
      }
      answer(result.admitted ? result.delay : 0, respond, std::move(r));
    });
  }

  // The address nginx received the request from: X-Real-IP when the socket peer is a trusted
  // proxy and the header is an address, else the peer. The middleware then walks
  // X-Forwarded-For from it as from a socket peer.
  std::string forwarded_peer(const Request& subrequest) const {
    const auto& proxies = middleware_.options().trusted_proxies;
    const auto peer = http::parse_ip(subrequest.peer_address);
    if (!peer || !proxies.contains(*peer)) return subrequest.peer_address;
    const auto real_ip = subrequest.header("X-Real-IP");
    const auto ip = real_ip ? http::parse_ip(*real_ip) : std::nullopt;
    return ip ? ip->to_string() : subrequest.peer_address;
  }

  limiter::Limiter& limiter_;
  http::Middleware& middleware_;
  ApiOptions options_;
  std::once_flag own_loop_once_;
};

// The HTTP server's own counters, in Prometheus text.
void write_http_server_metrics(MetricsWriter& out, const http::Server& server) {
  const auto stats = server.stats();
  out.gauge("ratekeeper_http_connections_open", "Client connections open.",
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

Api::Api(limiter::Limiter& limiter, http::Middleware& middleware, ApiOptions options)
    : routes_(std::make_unique<Routes>(limiter, middleware, std::move(options))) {}

Api::~Api() = default;

void Api::handle(http::Request request, http::Responder respond) {
  routes_->handle(std::move(request), std::move(respond));
}

}  // namespace ratekeeper::server
