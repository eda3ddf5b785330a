#pragma once
// The server's routes (server/api.hpp) over a memory store, for the fuzz targets that drive
// them (check_json_fuzz, http_request_fuzz, admin_keys_fuzz): the rules below (every identity type, tiers,
// trusted proxies, limits small enough to be exhausted by one input), a clock standing still
// and fresh state for every input, so that an input always gets the same answers.
// Every answer is checked: given exactly once and inline (a memory store answers at once),
// with a status code, and JSON bodies that parse. Not thread-safe.

#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>
#include <string_view>

#include "api.hpp"
#include "config.hpp"
#include "ratekeeper/core/clock.hpp"
#include "ratekeeper/http/middleware.hpp"
#include "ratekeeper/limiter/limiter.hpp"
#include "ratekeeper/store/memory_store.hpp"
#include "require.hpp"

namespace ratekeeper::fuzz {

// The socket peer of every request: a trusted proxy, so X-Forwarded-For is read.
inline constexpr std::string_view kPeer = "10.0.0.2";

inline constexpr std::string_view kConfig = R"(
trusted_proxies: [10.0.0.0/8, "2001:db8::/32"]
headers: {draft: true, legacy: true}
logging: {decisions: {enabled: false}}
tiers:
  default: free
  header: X-User-Tier
  trust_header: true
  levels:
    free: [{capacity: 2, refill_rate: 1}]
    pro: [{name: burst, capacity: 5, refill_rate: 1}, {name: daily, algorithm: fixed_window, limit: 20, window: 1d}]
  users: {alice: pro}
rules:
  - name: api_data
    match: {methods: [GET], path: /api/data}
    limits: [{capacity: 3, refill_rate: 1}]
  - name: api_profile
    match: {methods: [GET], path: /api/profile}
    identity: {type: header, header: X-User-ID, default: anonymous}
    limits: [{algorithm: sliding_window_counter, limit: 3, window: 1m}]
  - name: api_search
    match: {methods: [GET], path: /api/search}
    identity: {type: user_or_ip, header: X-User-ID}
    tiered: true
    ip_limits: [{capacity: 2, refill_rate: 1}]
    usage: {response_header: X-Usage, estimate: 1, estimate_header: X-Max-Tokens}
  - name: auth_login
    match: {methods: [POST], path: /auth/login}
    limits: [{algorithm: sliding_window_log, rate: 2/1m}]
    on_store_error: deny
  - name: api_export
    match: {path_prefix: /api/export/}
    identity: {type: api_key, header: X-API-Key}
    cost: 2
    bucket: per_endpoint
    limits: [{name: burst, capacity: 4, refill_rate: 2}, {name: hourly, algorithm: fixed_window, limit: 10, window: 1h}]
    ip_limits: [{capacity: 4, refill_rate: 1}]
  - name: api_stream
    match: {path_prefix: /api/stream/}
    identity: {type: header, header: X-User-ID}
    limits: [{name: rate, capacity: 3, refill_rate: 1}, {name: slots, algorithm: concurrency, limit: 1, slot_ttl: 10s}]
  - name: api_team
    match: {path_prefix: /api/team/}
    identity: {type: header, header: X-User-ID}
    limits: [{capacity: 2, refill_rate: 1}]
    parent: {identity: {type: header, header: X-Org-ID, prefix: org}, limits: [{capacity: 3, refill_rate: 1}]}
  - name: shadow_all
    match: {path_prefix: /}
    shadow: true
    limits: [{capacity: 1, refill_rate: 1}]
)";

class ApiFixture {
 public:
  ApiFixture()
      : store_({.max_keys = 1000, .shards = 1, .clock = &clock_}),
        limiter_(config().limiter, store_),
        middleware_(limiter_, config().middleware),
        api_(limiter_, middleware_) {}

  static const server::Config& config() {
    static const server::Config c = [] {
      spdlog::set_level(spdlog::level::off);
      return server::parse_config(kConfig, "api_fixture.hpp");
    }();
    return c;
  }

  // The answer of the routes to `request`, sent from `peer`.
  http::Response handle(http::Request request, std::string_view peer = kPeer) {
    request.peer_address = std::string(peer);
    int answers = 0;
    http::Response out;
    api_.handle(std::move(request), [&](http::Response r) {
      ++answers;
      out = std::move(r);
    });
    require(answers == 1);
    require(out.status >= 100 && out.status <= 599);
    if (out.content_type.starts_with("application/json")) {
      require(nlohmann::json::accept(out.body));
    }
    return out;
  }

 private:
  ManualClock clock_{1'700'000'000 * kMicrosPerSecond};
  store::MemoryStore store_;
  limiter::Limiter limiter_;
  http::Middleware middleware_;
  server::Api api_;
};

}  // namespace ratekeeper::fuzz
