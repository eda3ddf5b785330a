// The decision API: POST /v1/check (docs/decision-api.md).
#include "routes.hpp"

#include <algorithm>

#include "ratekeeper/http/headers.hpp"

namespace ratekeeper::server {
namespace {

// The most explicit checks one POST /v1/check may carry.
constexpr std::size_t kMaxChecks = 64;

// A reason for a 400, naming the field of the body it is about.
using Invalid = std::unexpected<std::string>;

template <class T>
using Parsed = std::expected<T, std::string>;

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

// The optional `parent` of a check (a rule with a parent: the parent's identity), empty when
// absent.
Parsed<std::string> parent_of(const json& object, std::string_view field) {
  const auto it = object.find("parent");
  if (it == object.end()) return std::string();
  if (!it->is_string() || it->get_ref<const std::string&>().empty()) {
    return Invalid(fmt::format("`{}` must be a non-empty string", field));
  }
  return it->get<std::string>();
}

// The optional `tier` of a check, empty when absent.
Parsed<std::string> tier_of(const json& object, std::string_view field) {
  const auto it = object.find("tier");
  if (it == object.end()) return std::string();
  if (!it->is_string()) return Invalid(fmt::format("`{}` must be a string", field));
  return it->get<std::string>();
}

// A reservation's time to live when the check does not give one, and the longest it may give.
constexpr Micros kDefaultReservationTtl = 300 * kMicrosPerSecond;
constexpr std::int64_t kMaxReservationTtlMs = 86'400'000;

// The optional `reserve` of a check: its time to live in µs when true, nullopt when absent or
// false; `reservation_ttl_ms` (1 .. a day) only with it.
Parsed<std::optional<Micros>> reservation_of(const json& object) {
  const auto it = object.find("reserve");
  const auto ttl = object.find("reservation_ttl_ms");
  if (it != object.end() && !it->is_boolean()) return Invalid("`reserve` must be true or false");
  const bool reserve = it != object.end() && it->get<bool>();
  if (ttl == object.end()) return reserve ? std::optional<Micros>(kDefaultReservationTtl) : std::nullopt;
  if (!reserve) return Invalid("`reservation_ttl_ms` needs `reserve`: true");
  if (!ttl->is_number_integer() || ttl->get<std::int64_t>() < 1 || ttl->get<std::int64_t>() > kMaxReservationTtlMs ||
      (ttl->is_number_unsigned() && ttl->get<std::uint64_t>() > static_cast<std::uint64_t>(kMaxReservationTtlMs))) {
    return Invalid(fmt::format("`reservation_ttl_ms` must be an integer from 1 to {}", kMaxReservationTtlMs));
  }
  return ttl->get<std::int64_t>() * kMicrosPerMilli;
}

// The first member of `object` not in `known`, if any.
std::optional<std::string> unknown_member(const json& object,
                                          std::initializer_list<std::string_view> known) {
  for (const auto& [key, value] : object.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end()) return key;
  }
  return std::nullopt;
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

// POST /v1/check: `request` (an HTTP request described by the caller), `checks` (explicit
// checks, all-or-nothing) or `rule` + `identity` (one check, the original shape).
void Api::Routes::check(const Request& request, Responder respond) {
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
  auto parent = parent_of(parsed, "parent");
  if (!parent) return respond(bad_request(parent.error()));
  const auto reservation = reservation_of(parsed);
  if (!reservation) return respond(bad_request(reservation.error()));
  const auto& rule_name = rule_it->get_ref<const std::string&>();
  const limiter::Rule* rule = limiter_.find_rule(rule_name);
  if (!rule) {
    return respond(
        json_response(400, http::bad_request_body(fmt::format("unknown rule `{}`", rule_name))));
  }
  const limiter::FailureMode policy = rule->on_store_error;
  auto answered = [this, policy, respond = std::move(respond)](Result<limiter::Verdict> verdict) mutable {
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
  };
  const auto& identity = identity_it->get_ref<const std::string&>();
  if (*reservation) {
    return limiter_.reserve(rule_name, identity, cost->value_or(1), **reservation, std::move(answered), *tier,
                            *parent);
  }
  limiter_.check(rule_name, identity, cost->value_or(1), std::move(answered), *tier, *parent);
}

namespace {

// The body of /v1/settle, /v1/release and /v1/renew: `rule`, `identity` (and `tier`) as the
// check that reserved gave them, `reservation` its id, and the members `extra` of the call.
struct HeldCall {
  json body;
  std::string rule, identity, tier, parent, id;
};

Parsed<HeldCall> held_call(const Request& request, std::initializer_list<std::string_view> known) {
  HeldCall out;
  out.body = json::parse(request.body, nullptr, /*allow_exceptions=*/false);
  if (out.body.is_discarded()) return Invalid("body is not valid JSON");
  if (!out.body.is_object()) return Invalid("body must be a JSON object");
  if (auto key = unknown_member(out.body, known)) return Invalid(fmt::format("unknown member `{}`", *key));
  auto rule = required_string(out.body, "rule", "rule");
  if (!rule) return Invalid(rule.error());
  auto identity = required_string(out.body, "identity", "identity");
  if (!identity) return Invalid(identity.error());
  auto id = required_string(out.body, "reservation", "reservation");
  if (!id) return Invalid(id.error());
  auto tier = tier_of(out.body, "tier");
  if (!tier) return Invalid(tier.error());
  auto parent = parent_of(out.body, "parent");
  if (!parent) return Invalid(parent.error());
  out.parent = std::move(*parent);
  out.rule = std::move(*rule);
  out.identity = std::move(*identity);
  out.id = std::move(*id);
  out.tier = std::move(*tier);
  return out;
}

// The answer {"<field>": bool} of a store's answer, a 400 for a bad argument, a 503 when the
// store failed.
std::function<void(Result<bool>)> answer_held(Responder respond, const char* field) {
  return [respond = std::move(respond), field](Result<bool> r) mutable {
    if (!r) {
      if (r.error().code == ErrorCode::invalid_argument) return respond(bad_request(r.error().message));
      return respond(error_response(503, "Store unavailable: " + r.error().message));
    }
    respond(json_response(200, json_text(json{{field, *r}})));
  };
}

}  // namespace

// POST /v1/settle: `cost` the actual cost; the slots the reservation holds are released too.
void Api::Routes::settle(const Request& request, Responder respond) {
  auto call = held_call(request, {"rule", "identity", "tier", "parent", "reservation", "cost"});
  if (!call) return respond(bad_request(call.error()));
  const auto cost = cost_of(call->body, "cost");
  if (!cost) return respond(bad_request(cost.error()));
  if (!*cost) return respond(bad_request("`cost` (the actual cost) is required"));
  auto app = limiter_.application(call->rule, call->identity, 0, call->tier, call->parent);
  if (!app) return respond(bad_request(app.error().message));
  limiter_.settle(std::move(*app), call->id, **cost, answer_held(std::move(respond), "settled"));
}

// POST /v1/release: the request ended; its slots given back, its cost left as reserved.
void Api::Routes::release(const Request& request, Responder respond) {
  auto call = held_call(request, {"rule", "identity", "tier", "parent", "reservation"});
  if (!call) return respond(bad_request(call.error()));
  auto app = limiter_.application(call->rule, call->identity, 0, call->tier, call->parent);
  if (!app) return respond(bad_request(app.error().message));
  limiter_.settle(std::move(*app), call->id, std::nullopt, answer_held(std::move(respond), "released"));
}

// POST /v1/renew: a heartbeat; the reservation kept `reservation_ttl_ms` more (default 5
// minutes), its slots their slot_ttl more.
void Api::Routes::renew(const Request& request, Responder respond) {
  auto call = held_call(request, {"rule", "identity", "tier", "parent", "reservation", "reservation_ttl_ms"});
  if (!call) return respond(bad_request(call.error()));
  Micros ttl = kDefaultReservationTtl;
  if (call->body.contains("reservation_ttl_ms")) {
    call->body["reserve"] = true;
    auto given = reservation_of(call->body);
    if (!given) return respond(bad_request(given.error()));
    ttl = **given;
  }
  auto app = limiter_.application(call->rule, call->identity, 0, call->tier, call->parent);
  if (!app) return respond(bad_request(app.error().message));
  limiter_.renew(std::move(*app), call->id, ttl, answer_held(std::move(respond), "renewed"));
}

// `request`: the method, path (and query), headers and client address of a request the
// caller received, evaluated as the middleware evaluates one (the same rules, identities
// and tiers). Without `client_ip`, the caller's own address stands for the client's.
void Api::Routes::check_request(const json& described, const Request& caller, Responder respond) {
  if (!described.is_object()) return respond(bad_request("`request` must be an object"));
  if (auto key = unknown_member(described, {"method", "path", "headers", "client_ip"})) {
    return respond(bad_request(fmt::format("`request.{}` is not a field of a request", *key)));
  }
  Request request;
  auto method = required_string(described, "method", "request.method");
  if (!method || !is_method(*method)) {
    return respond(bad_request("`request.method` must be an HTTP method: a token in upper case, such as POST"));
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
      // As an HTTP parser gives a field's value (RFC 9110 5.5): without the spaces and tabs
      // around it, so that " alice " is the identity `alice` here as over HTTP.
      std::string_view v = value.get_ref<const std::string&>();
      const auto first = v.find_first_not_of(" \t");
      v = first == std::string_view::npos ? std::string_view() : v.substr(first, v.find_last_not_of(" \t") - first + 1);
      request.headers.emplace_back(name, std::string(v));
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
void Api::Routes::check_list(const json& checks, Responder respond) {
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
    if (auto key = unknown_member(item, {"rule", "identity", "cost", "tier", "parent"})) {
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
    const auto parent = parent_of(item, field("parent"));
    if (!parent) return respond(bad_request(parent.error()));
    auto app = limiter_.application(*rule, *identity, cost->value_or(0), *tier, *parent);
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
void Api::Routes::evaluate(std::vector<limiter::AppliedRule> apps, Responder respond) {
  limiter_.evaluate(
      std::move(apps),
      [this, respond = std::move(respond)](Result<limiter::Evaluation>&& ev) mutable {
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

}  // namespace ratekeeper::server
