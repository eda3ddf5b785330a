#pragma once
// The rate-limiting middleware, framework-agnostic: matches the request's rules, resolves
// identities (client IP behind trusted proxies, user header, API key, user→IP fallback) and
// tiers, asks the Limiter, and answers admitted, or 429 / 400, with the headers to add to
// the response.
// Thread-safe; the Limiter must outlive the Middleware.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ratekeeper/core/log_limit.hpp"
#include "ratekeeper/http/client_ip.hpp"
#include "ratekeeper/http/headers.hpp"
#include "ratekeeper/http/path.hpp"
#include "ratekeeper/http/request.hpp"
#include "ratekeeper/http/request_metrics.hpp"
#include "ratekeeper/http/rule_match.hpp"
#include "ratekeeper/limiter/limiter.hpp"

namespace ratekeeper::http {

// An admitted request's reservation (a rule with `usage` or concurrency limits), settled from
// its response or released when it ends.
struct UsageReservation {
  limiter::AppliedRule application;  // the rule, identity, tier and endpoint it was made under
  std::string id;
  // The shortest slot_ttl of the rule's concurrency limits (limiter::shortest_slot_ttl); 0: it
  // holds no slot.
  Micros slot_ttl = 0;
  // While the request lasts, its slots are renewed this often: a third of slot_ttl; 0: never.
  Micros heartbeat() const noexcept { return slot_ttl / 3; }
  // The rule's cost comes from the response (`usage`); else the reservation is only released.
  bool costed() const noexcept { return application.rule->usage.enabled(); }
};

struct MiddlewareResult {
  bool admitted = true;
  int status = 200;          // 200 admitted; 429 rate limited; 400 bad identity; 500 internal error
  std::string body;          // JSON body of a rejection; empty when admitted
  std::string content_type;  // of a rejection's body; empty when admitted
  HeaderList headers;        // add to the response whether admitted or not
  // Admitted, to be passed on only after this long (a rule with `on_limit: delay` reserved
  // the request's place at that time); 0: at once.
  Micros delay = 0;
  RequestOutcome outcome = RequestOutcome::unmatched;
  // The rule the answer came from: the first that denied, else the first applied; empty when
  // none applied.
  std::string rule;
  // Admitted with a reservation: settle it (Middleware::settle) when the response reports its
  // cost, or release it (Middleware::release) when the request ends; renew it meanwhile when
  // it holds slots. The Limiter must outlive it (hold the middleware's generation).
  std::optional<UsageReservation> usage;
};

using MiddlewareCallback = std::function<void(MiddlewareResult)>;

struct HandleOptions {
  // Whether the caller learns when the request ends, to release what it holds. False (nginx's
  // auth_request asks about a request it then serves alone): a rule with concurrency limits
  // that applies is answered 500 and logged (rate-bounded), counted as an error, before any
  // slot is taken; a rule with `usage` charges its configured estimate, whatever the
  // request's estimate header says (no cost will ever settle it).
  bool can_release = true;
};

struct MiddlewareOptions {
  HeaderOptions headers;
  TrustedProxies trusted_proxies;
  // An IPv6 client's IP identity is its network of this many bits ("ip:2001:db8:1:2::/64"),
  // 128 its address: a host is given a /64 and can send from any address in it.
  int ipv6_prefix = 64;
  // The requests each rule applies to, in configuration order; a rule without one is not
  // applied to HTTP requests (the decision API still checks it).
  std::vector<RuleMatch> matches;
  // The normal form of the paths the rules match (http/path.hpp): the server's and the proxy's.
  PathOptions paths;
  // Where it counts its answers (null: its own). A middleware rebuilt from a reloaded
  // configuration continues the running one's instead (continue_metrics).
  std::shared_ptr<RequestMetrics> metrics;
};

class Middleware {
 public:
  // std::invalid_argument when a match names a rule the limiter does not have.
  Middleware(limiter::Limiter& limiter, MiddlewareOptions options);

  // Decides on a request. `done` is called exactly once, inline or on a store thread, after
  // handle() may have returned: it must not refer to `request` (copy what it needs first).
  void handle(const Request& request, MiddlewareCallback done, HandleOptions options = {});
  MiddlewareResult handle_sync(const Request& request);

  // Settles `usage` to `cost`, what the response reported in `where` (its header, its body's
  // field); nullopt: no valid cost (an integer from 0 to 2^41), so the estimate stays charged
  // and a rate-bounded log line says so. The settlement goes on in the background (a store
  // failure is logged by the Limiter). Thread-safe.
  void settle(const UsageReservation& usage, std::optional<std::int64_t> cost, std::string_view where);
  // The request ended without a cost to settle (a rule without `usage`, or a response cut
  // short): its slots are given back, its estimate stays. In the background. Thread-safe.
  void release(const UsageReservation& usage);
  // A heartbeat of a request that still runs: its slots renewed (Limiter::renew). A slot lost
  // (expired before the heartbeat) is logged, rate-bounded. Thread-safe.
  void renew(const UsageReservation& usage);
  // The cost a header's value carries: a decimal integer from 0 to 2^41, nothing else.
  static std::optional<std::int64_t> header_cost(std::optional<std::string_view> value);

  // The request's rules as applied to it (identity, tier, endpoint resolved), or the
  // reason for a 400. Rules match the normal form of the request's path (http/path.hpp); a
  // path that has none (an invalid escape, a control byte) is a 400. Exposed for tests and
  // for diagnostics.
  Result<std::vector<limiter::AppliedRule>> applied_rules(const Request& request) const;

  // The identity of one rule for a request, e.g. "user:123" or "ip:192.0.2.7".
  Result<limiter::AppliedRule> resolve(const limiter::Rule& rule, const Request& request) const;

  const MiddlewareOptions& options() const noexcept { return options_; }
  // What it answered, by result (ratekeeper_http_requests_total).
  const RequestMetrics& metrics() const noexcept { return *metrics_; }
  // Its counters become `previous`'s, shared (a middleware rebuilt from a reloaded
  // configuration counts on). Call before the first request: not thread-safe.
  void continue_metrics(const Middleware& previous) { metrics_ = previous.metrics_; }

 private:
  limiter::Limiter* limiter_;
  MiddlewareOptions options_;
  // Fills `app`, a new one, with the application of `rule` to `request` at its normal `path`.
  Result<void> resolve_at(limiter::AppliedRule& app, const limiter::Rule& rule, const Request& request,
                          std::string_view path) const;
  // The identity `spec` gives a request ("ip:…", "user:…", "key:…"); ip_fallback: the IP stood
  // in for a missing header; user_id: the header's value, when it gave one.
  Result<std::string> identity_of(const limiter::IdentitySpec& spec, const Request& request, bool& ip_fallback,
                                  std::string& user_id) const;

  struct Route {
    const RuleMatch* match;     // in options_
    const limiter::Rule* rule;  // in the limiter
  };
  std::vector<Route> routes_;
  // limiter::shortest_slot_ttl of each rule of the limiter, by its index: computed once.
  std::vector<Micros> slot_ttls_;
  bool has_defaults_ = false;  // some route is `unmatched`
  std::shared_ptr<RequestMetrics> metrics_;
  std::unique_ptr<LogLimit> usage_log_;  // responses without a valid usage header
  std::shared_ptr<LogLimit> holding_log_;  // requests two holding rules applied to; lost slots
};

}  // namespace ratekeeper::http
