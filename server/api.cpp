#include "api.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "ratekeeper/core/contained.hpp"
#include "ratekeeper/http/headers.hpp"
#include "ratekeeper/http/middleware.hpp"
#include "ratekeeper/limiter/limiter.hpp"
#include "ratekeeper/store/denial_cache.hpp"

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

}  // namespace

class Api::Routes {
 public:
  Routes(limiter::Limiter& limiter, http::Middleware& middleware, ApiOptions options)
      : limiter_(limiter), middleware_(middleware), options_(std::move(options)) {}

  // The denial cache in front of the store, when there is one.
  std::string denial_cache_text() const {
    const auto* cache = dynamic_cast<const store::DenialCache*>(&limiter_.store());
    if (cache == nullptr) return {};
    const auto stats = cache->stats();
    return fmt::format(
        "# HELP ratekeeper_denial_cache_hits_total Checks answered as denied without the store (known denials).\n"
        "# TYPE ratekeeper_denial_cache_hits_total counter\n"
        "ratekeeper_denial_cache_hits_total {}\n"
        "# HELP ratekeeper_denial_cache_entries Denials held (expired ones until swept).\n"
        "# TYPE ratekeeper_denial_cache_entries gauge\n"
        "ratekeeper_denial_cache_entries {}\n",
        stats.hits, stats.size);
  }

  void handle(Request request, Responder respond) {
    spdlog::debug("{} {} from {}", request.method, request.target, request.peer_address);
    const std::string_view path = request.path();
    const std::string_view method = request.method;
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
      std::string text =
          limiter_.metrics_text() + middleware_.metrics().render() + denial_cache_text();
      if (options_.extra_metrics) text += options_.extra_metrics();
      return respond(Response{200, std::string(kPrometheus), {}, std::move(text)});
    }
    if (path == "/v1/check") {
      if (method != "POST") return respond(not_allowed("POST"));
      return check(request.body, std::move(respond));
    }
    respond(error_response(404, "Not found"));
  }

 private:
  static Response not_allowed(std::string_view allow) {
    auto r = error_response(405, "Method not allowed");
    r.headers.emplace_back("Allow", std::string(allow));
    return r;
  }

  // Runs the middleware, then the endpoint when admitted. `arg` is what the endpoint needs
  // from the request (the middleware's callback may run after the request is gone).
  void limited(const Request& request, Endpoint endpoint, std::string arg, Responder respond) {
    middleware_.handle(request, [endpoint, arg = std::move(arg), respond = std::move(respond)](
                                    http::MiddlewareResult result) mutable {
      if (!result.admitted) {
        return respond(Response{result.status, std::move(result.content_type),
                                std::move(result.headers), std::move(result.body)});
      }
      Response r = serve(endpoint, arg);
      for (auto& h : result.headers) r.headers.push_back(std::move(h));
      respond(std::move(r));
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

  void check(const std::string& body, Responder respond) {
    json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded()) {
      return respond(json_response(400, http::bad_request_body("body is not valid JSON")));
    }
    if (!parsed.is_object()) {
      return respond(json_response(400, http::bad_request_body("body must be a JSON object")));
    }
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
    std::int64_t cost = 1;
    if (auto it = parsed.find("cost"); it != parsed.end()) {
      if (!it->is_number_integer() ||
          (it->is_number_unsigned() &&
           it->get<std::uint64_t>() > static_cast<std::uint64_t>(kMaxExact))) {
        return respond(json_response(400, http::bad_request_body("`cost` must be an integer")));
      }
      cost = it->get<std::int64_t>();
      if (cost < 0) {
        return respond(json_response(400, http::bad_request_body("`cost` must not be negative")));
      }
    }
    std::string tier;
    if (auto it = parsed.find("tier"); it != parsed.end()) {
      if (!it->is_string()) {
        return respond(json_response(400, http::bad_request_body("`tier` must be a string")));
      }
      tier = it->get<std::string>();
    }
    const auto& rule_name = rule_it->get_ref<const std::string&>();
    const limiter::Rule* rule = limiter_.find_rule(rule_name);
    if (!rule) {
      return respond(
          json_response(400, http::bad_request_body(fmt::format("unknown rule `{}`", rule_name))));
    }
    const limiter::FailureMode policy = rule->on_store_error;
    limiter_.check(
        rule_name, identity_it->get_ref<const std::string&>(), cost,
        [policy, respond = std::move(respond)](Result<limiter::Verdict> verdict) {
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
          respond(std::move(r));
        },
        tier);
  }

  limiter::Limiter& limiter_;
  http::Middleware& middleware_;
  ApiOptions options_;
};

// The HTTP server's own counters, in Prometheus text.
std::string http_server_metrics(const http::Server& server) {
  const auto stats = server.stats();
  return fmt::format(
      "# HELP ratekeeper_http_connections_open Client connections open.\n"
      "# TYPE ratekeeper_http_connections_open gauge\n"
      "ratekeeper_http_connections_open {}\n"
      "# HELP ratekeeper_http_accept_errors_total Failed accepts (e.g. out of file descriptors): "
      "accepting backs off and resumes by itself.\n"
      "# TYPE ratekeeper_http_accept_errors_total counter\n"
      "ratekeeper_http_accept_errors_total {}\n"
      "# HELP ratekeeper_http_handler_exceptions_total Requests answered 500 because handling "
      "them threw.\n"
      "# TYPE ratekeeper_http_handler_exceptions_total counter\n"
      "ratekeeper_http_handler_exceptions_total {}\n"
      "# HELP ratekeeper_contained_exceptions_total Exceptions caught on event-loop threads and in "
      "completion handlers; the process went on.\n"
      "# TYPE ratekeeper_contained_exceptions_total counter\n"
      "ratekeeper_contained_exceptions_total {}\n",
      stats.connections_open, stats.accept_errors, stats.handler_exceptions,
      contained_exceptions());
}

Api::Api(limiter::Limiter& limiter, http::Middleware& middleware, ApiOptions options)
    : routes_(std::make_unique<Routes>(limiter, middleware, std::move(options))) {}

Api::~Api() = default;

void Api::handle(http::Request request, http::Responder respond) {
  routes_->handle(std::move(request), std::move(respond));
}

}  // namespace ratekeeper::server
