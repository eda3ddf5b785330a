#include "ratekeeper/http/middleware.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <future>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "ratekeeper/algorithms/lease.hpp"
#include "ratekeeper/core/thread_cache.hpp"

#include "ratekeeper/http/path.hpp"
#include "ratekeeper/limiter/identity.hpp"

namespace ratekeeper::http {

using limiter::IdentityKind;

Middleware::Middleware(limiter::Limiter& limiter, MiddlewareOptions options)
    : limiter_(&limiter),
      options_(std::move(options)),
      metrics_(options_.metrics ? options_.metrics : std::make_shared<RequestMetrics>()),
      usage_log_(std::make_unique<LogLimit>("usage: responses without a valid cost")),
      holding_log_(std::make_shared<LogLimit>("requests whose concurrency slots or usage cost could not be held")) {
  routes_.reserve(options_.matches.size());
  for (const auto& match : options_.matches) {
    const limiter::Rule* rule = limiter.find_rule(match.rule);
    if (rule == nullptr) {
      throw std::invalid_argument("a request match names an unknown rule: " + match.rule);
    }
    routes_.push_back(Route{&match, rule});
    has_defaults_ = has_defaults_ || match.unmatched;
  }
  for (const auto& rule : limiter.config().rules) slot_ttls_.push_back(limiter::shortest_slot_ttl(rule, limiter.tiers()));
}

namespace {

// A cost a header carries: a decimal integer from 0 to `max`, nothing else (no sign, space or
// exponent); nullopt otherwise.
std::optional<std::int64_t> parse_header_cost(std::string_view text, std::int64_t max) {
  if (text.empty() || text.size() > 16) return std::nullopt;
  std::int64_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  if (value > max) return std::nullopt;
  return value;
}

// The value of a field a rule decides on (an identity, a tier, an estimate), nullopt when it
// is absent. The proxy sends every field on, so a request whose application might read
// another value than the one counted is refused: the field sent twice, or another spelling of
// its name that a gateway reads as the same variable (X-User_ID, X.User.ID: gateway_equals),
// which an application behind one would take for the header, and one behind a server that
// drops such names would never see.
Result<std::optional<std::string_view>> decided_field(const Request& request, std::string_view name) {
  std::optional<std::string_view> value;
  for (const auto& [n, v] : request.headers) {
    if (!gateway_equals(n, name)) continue;
    if (!iequals(n, name)) {
      return make_error(ErrorCode::invalid_argument,
                        fmt::format("{} is a spelling of {}: the rules decide on {} alone", n, name, name));
    }
    if (value) {
      return make_error(ErrorCode::invalid_argument,
                        fmt::format("{} must be sent once: the rules decide on one value", name));
    }
    value = v;
  }
  return value;
}

// The request's path in normal form (http/path.hpp): a view of the request's own path when it
// is normal already (no allocation), else of `storage`.
Result<std::string_view> normal_path(const Request& request, const PathOptions& options,
                                     std::string& storage) {
  const std::string_view path = request.path();
  if (is_normal_path(path, options)) return path;
  auto normal = normalize_path(path, options);
  if (!normal) return std::unexpected(normal.error());
  storage = std::move(*normal);
  return std::string_view(storage);
}

}  // namespace

Result<limiter::AppliedRule> Middleware::resolve(const limiter::Rule& rule,
                                                 const Request& request) const {
  std::string storage;
  auto path = normal_path(request, options_.paths, storage);
  if (!path) return std::unexpected(path.error());
  limiter::AppliedRule app;
  if (auto ok = resolve_at(app, rule, request, *path); !ok) return std::unexpected(std::move(ok.error()));
  return app;
}

Result<std::string> Middleware::identity_of(const limiter::IdentitySpec& spec, const Request& request,
                                            bool& ip_fallback, std::string& user_id) const {
  auto ip_identity = [&]() -> Result<std::string> {
    // Without trusted proxies the client is the peer, whose text is already canonical when
    // it is a plain dotted quad (the common case): no parsing, no formatting.
    if (options_.trusted_proxies.empty() && is_canonical_ipv4(request.peer_address)) {
      std::string id;
      id.reserve(3 + request.peer_address.size());
      id += "ip:";
      id += request.peer_address;
      return id;
    }
    const auto forwarded =
        options_.trusted_proxies.empty() ? std::string() : request.header_list("X-Forwarded-For");
    auto ip = client_ip(request.peer_address, forwarded, options_.trusted_proxies);
    if (!ip) return std::unexpected(ip.error());
    if (ip->v6 && options_.ipv6_prefix < 128) {
      return fmt::format("ip:{}/{}", network_of(*ip, options_.ipv6_prefix).to_string(), options_.ipv6_prefix);
    }
    return "ip:" + ip->to_string();
  };
  auto header_identity = [&](std::string_view value) {
    return limiter::header_identity(spec.header, spec.prefix, value);
  };
  ip_fallback = false;
  std::optional<std::string_view> value;
  if (spec.kind != IdentityKind::ip) {
    auto field = decided_field(request, spec.header);
    if (!field) return std::unexpected(std::move(field.error()));
    value = *field;
  }
  switch (spec.kind) {
    case IdentityKind::ip:
      return ip_identity();
    case IdentityKind::header: {
      if (!value && !spec.default_value.empty()) value = spec.default_value;
      if (value) {
        user_id = std::string(*value);
        return header_identity(*value);
      }
      break;
    }
    case IdentityKind::user_or_ip: {
      if (value && !value->empty()) {
        user_id = std::string(*value);
        return header_identity(*value);
      }
      break;
    }
    case IdentityKind::api_key: {
      if (value && !value->empty()) return limiter::api_key_identity(*value);
      break;
    }
  }
  ip_fallback = true;
  return ip_identity();
}

Result<void> Middleware::resolve_at(limiter::AppliedRule& app, const limiter::Rule& rule, const Request& request,
                                    std::string_view path) const {
  app.rule = &rule;
  if (rule.bucket == limiter::BucketScope::per_endpoint) app.endpoint = std::string(path);

  std::string user_id;  // for the tier table
  auto identity = identity_of(rule.identity, request, app.ip_fallback, user_id);
  if (!identity) return std::unexpected(identity.error());
  app.identity = std::move(*identity);
  if (rule.parent) {
    bool parent_ip = false;
    std::string parent_id;
    auto parent = identity_of(rule.parent->identity, request, parent_ip, parent_id);
    if (!parent) return std::unexpected(parent.error());
    app.parent = std::move(*parent);
  }

  if (rule.tiered) {
    const auto& tiers = limiter_->tiers();
    std::optional<std::string_view> tier_header;
    if (tiers.trust_header && !app.ip_fallback) {
      auto field = decided_field(request, tiers.header);
      if (!field) return std::unexpected(std::move(field.error()));
      tier_header = *field;
    }
    app.tier = app.ip_fallback ? tiers.default_tier : tiers.resolve(user_id, tier_header);
  }
  if (rule.usage.enabled()) {
    // The estimate: the request's own (its estimate header) or the rule's. One above a limit
    // is refused when evaluated (it could never be admitted).
    app.cost = rule.usage.estimate;
    if (!rule.usage.estimate_header.empty()) {
      auto field = decided_field(request, rule.usage.estimate_header);
      if (!field) return std::unexpected(std::move(field.error()));
      if (const auto value = *field) {
        const auto estimate = parse_header_cost(*value, kMaxExact);
        if (!estimate) {
          return make_error(ErrorCode::invalid_argument,
                            fmt::format("{} must be a decimal integer", rule.usage.estimate_header));
        }
        app.cost = *estimate;
      }
    }
  }
  return {};
}

Result<std::vector<limiter::AppliedRule>> Middleware::applied_rules(const Request& request) const {
  if (!is_request_method(request.method)) {
    return make_error(ErrorCode::invalid_argument, "the method must be a token in upper case, such as POST");
  }
  std::vector<limiter::AppliedRule> out;
  std::string storage;
  const auto normal = normal_path(request, options_.paths, storage);
  if (!normal) return std::unexpected(normal.error());
  const std::string_view path = *normal;
  // The rules selecting the request; if there are none, the default ones (`unmatched`).
  for (const bool defaults : {false, true}) {
    for (const auto& route : routes_) {
      if (route.match->unmatched != defaults || !route.match->matches(request.method, path)) {
        continue;
      }
      if (out.capacity() == 0) limiter::ApplicationLists::take(out);
      // An exact path's endpoint is the rule's: /login/ is /login's bucket, as it is its rule.
      const std::string_view endpoint = route.match->path.empty() ? path : std::string_view(route.match->path);
      if (auto ok = resolve_at(out.emplace_back(), *route.rule, request, endpoint); !ok) {
        return std::unexpected(std::move(ok.error()));
      }
    }
    if (!out.empty() || !has_defaults_) break;
  }
  return out;
}

namespace {

// The rule an evaluation's answer came from: the first enforcing rule that denied, else the
// first that applied.
std::string deciding_rule(const limiter::Evaluation& ev) {
  for (const auto& r : ev.rules) {
    if (!r.decision.allowed && r.rule != nullptr) return r.rule->name;
  }
  return !ev.rules.empty() && ev.rules.front().rule != nullptr ? ev.rules.front().rule->name : std::string();
}

// A request answered 500 before its rules were checked (a rule the request cannot hold), with
// the detail for the caller (empty: none).
MiddlewareResult internal_error(std::string_view detail, std::string rule = {}) {
  MiddlewareResult r;
  r.outcome = RequestOutcome::error;
  r.admitted = false;
  r.status = 500;
  r.body = detail.empty() ? std::string(R"({"error":"Internal error"})")
                          : nlohmann::json{{"error", "Internal error"}, {"detail", detail}}.dump();
  r.content_type = "application/json";
  r.rule = std::move(rule);
  return r;
}

// What the answer to a request needs once the limiter has decided: kept per thread for reuse,
// and reached from the limiter's callback through a pointer, which std::function holds
// without allocating.
struct PendingAnswer {
  std::optional<UsageReservation> usage;
  MiddlewareCallback done;
};
using PendingAnswers = ThreadCache<std::unique_ptr<PendingAnswer>, 256>;

}  // namespace

void Middleware::handle(const Request& request, MiddlewareCallback done, HandleOptions options) {
  auto apps = applied_rules(request);
  if (!apps) {
    metrics_->record(RequestOutcome::bad_request);
    MiddlewareResult r;
    r.outcome = RequestOutcome::bad_request;
    r.admitted = false;
    r.status = 400;
    r.body = bad_request_body(apps.error().message);
    r.content_type = "application/json";
    done(std::move(r));
    return;
  }
  if (apps->empty()) {
    metrics_->record(RequestOutcome::unmatched);
    done(MiddlewareResult{});
    return;
  }
  // The first rule with `usage` or concurrency limits reserves; others with `usage` that apply
  // too are charged their estimate. A second rule holding slots cannot: the request is an
  // internal error (one reservation per request), logged.
  std::optional<UsageReservation> usage;
  for (auto& app : *apps) {
    const Micros slot_ttl = slot_ttls_[limiter_->rule_index(app.rule)];
    if (!app.rule->usage.enabled() && slot_ttl == 0) continue;
    // A caller that never reports the cost is charged the rule's estimate: the request's own
    // estimate header would let the client choose its charge, and nothing would correct it.
    if (!options.can_release && app.rule->usage.enabled()) app.cost = app.rule->usage.estimate;
    if (slot_ttl > 0 && !options.can_release) {
      if (std::uint64_t suppressed = 0; holding_log_->admit(suppressed)) {
        spdlog::error("rule '{}' has a concurrency limit, which the caller cannot release for {} {} (answered "
                      "500; nginx's auth_request: give the limit to the proxy or the decision API){}",
                      app.rule->name, request.method, request.target,
                      suppressed > 0 ? fmt::format(" ({} similar lines left out)", suppressed) : std::string());
      }
      metrics_->record(RequestOutcome::error);
      return done(internal_error(
          "a concurrency limit cannot be enforced where the request's end is not known, as with auth_request",
          app.rule->name));
    }
    if (usage) {
      if (slot_ttl == 0) continue;
      if (std::uint64_t suppressed = 0; holding_log_->admit(suppressed)) {
        spdlog::error("rules '{}' and '{}' both hold concurrency slots or a usage cost for {} {}: a request holds "
                      "one reservation; give the limits to one rule (answered 500){}",
                      usage->application.rule->name, app.rule->name, request.method, request.target,
                      suppressed > 0 ? fmt::format(" ({} similar lines left out)", suppressed) : std::string());
      }
      metrics_->record(RequestOutcome::error);
      return done(internal_error({}));
    }
    app.reservation = limiter::new_reservation_id();
    app.reservation_ttl = app.rule->usage.enabled() ? app.rule->usage.ttl : slot_ttl;
    usage = UsageReservation{app, app.reservation, slot_ttl};
  }
  std::unique_ptr<PendingAnswer> pending;
  if (!PendingAnswers::take(pending)) pending = std::make_unique<PendingAnswer>();
  pending->usage = std::move(usage);
  pending->done = std::move(done);
  // The limiter calls back exactly once: the callback adopts the answer it carries.
  limiter_->evaluate(
      std::move(*apps), [this, held = pending.release()](Result<limiter::Evaluation>&& ev) {
        std::unique_ptr<PendingAnswer> pending(held);
        const MiddlewareCallback done = std::move(pending->done);
        std::optional<UsageReservation> usage = std::move(pending->usage);
        pending->done = nullptr;
        pending->usage.reset();
        PendingAnswers::give(std::move(pending));
        MiddlewareResult r;
        if (!ev) {
          const bool bad = ev.error().code == ErrorCode::invalid_argument;
          r.outcome = bad ? RequestOutcome::bad_request : RequestOutcome::error;
          metrics_->record(r.outcome);
          r.admitted = false;
          r.status = bad ? 400 : 500;
          r.body = bad ? bad_request_body(ev.error().message)
                       : std::string(R"({"error":"Internal error"})");
          r.content_type = "application/json";
          done(std::move(r));
          return;
        }
        r.headers = rate_limit_headers(*ev, options_.headers);
        r.rule = deciding_rule(*ev);
        if (ev->allowed) {
          r.outcome = RequestOutcome::admitted;
          metrics_->record(RequestOutcome::admitted);
          r.delay = ev->decision.delay;
          if (usage && !ev->reservation.empty()) r.usage = std::move(usage);
        } else {
          r.outcome = RequestOutcome::rejected;
          metrics_->record(RequestOutcome::rejected);
          r.admitted = false;
          r.status = 429;
          r.body = rejection_body(retry_after_seconds(ev->decision.retry_after));
          r.content_type = "application/json";
        }
        done(std::move(r));
      });
}

std::optional<std::int64_t> Middleware::header_cost(std::optional<std::string_view> value) {
  return value ? parse_header_cost(*value, algorithms::kMaxCharged) : std::nullopt;
}

void Middleware::settle(const UsageReservation& usage, std::optional<std::int64_t> cost, std::string_view where) {
  if (!cost) {
    limiter_->metrics().record_reservation(limiter_->rule_index(usage.application.rule),
                                           limiter::Reservation::unreported);
    if (std::uint64_t suppressed = 0; usage_log_->admit(suppressed)) {
      spdlog::warn("usage: a response under rule '{}' reported no valid cost in {}: its estimate stays charged{}",
                   usage.application.rule->name, where,
                   suppressed > 0 ? fmt::format(" ({} similar lines left out)", suppressed) : std::string());
    }
    return release(usage);
  }
  limiter_->settle(usage.application, usage.id, *cost, [](Result<bool>) {});
}

void Middleware::release(const UsageReservation& usage) {
  limiter_->settle(usage.application, usage.id, std::nullopt, [](Result<bool>) {});
}

void Middleware::renew(const UsageReservation& usage) {
  const Micros ttl = usage.costed() ? usage.application.rule->usage.ttl : usage.slot_ttl;
  limiter_->renew(usage.application, usage.id, ttl,
                  [log = holding_log_, rule = usage.application.rule->name](Result<bool> r) {
                    if (!r || *r) return;  // a store failure is logged by the limiter
                    if (std::uint64_t suppressed = 0; log->admit(suppressed)) {
                      spdlog::warn("a request under rule '{}' lost its concurrency slot (it expired before its "
                                   "heartbeat): it runs on without one{}",
                                   rule, suppressed > 0 ? fmt::format(" ({} similar lines left out)", suppressed)
                                                        : std::string());
                    }
                  });
}

MiddlewareResult Middleware::handle_sync(const Request& request) {
  std::promise<MiddlewareResult> promise;
  auto future = promise.get_future();
  handle(request, [&promise](MiddlewareResult r) { promise.set_value(std::move(r)); });
  return future.get();
}

}  // namespace ratekeeper::http
