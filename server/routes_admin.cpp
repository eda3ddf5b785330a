// /admin/keys: one identity's keys under one rule, inspected (GET) or reset (DELETE).
// /admin/top: the identities a rule denied most over the last minutes, in this process.
// /admin/overrides: the per-identity overrides, listed (GET), set (PUT) or removed (DELETE).
#include "routes.hpp"

#include <fmt/chrono.h>

#include <charconv>
#include <chrono>
#include <expected>

#include "ratekeeper/algorithms/limit.hpp"
#include "ratekeeper/core/log_limit.hpp"
#include "ratekeeper/http/path.hpp"
#include "ratekeeper/limiter/keys.hpp"

namespace ratekeeper::server {

namespace {

// A query parameter that must be a whole number in [low, high] when given.
std::expected<int, std::string> bounded_param(std::string_view query, std::string_view name, int fallback, int low,
                                              int high) {
  const auto text = query_param(query, name);
  if (!text) return fallback;
  int value = 0;
  const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (ec != std::errc{} || end != text->data() + text->size() || value < low || value > high) {
    return std::unexpected(fmt::format("`{}` must be a whole number from {} to {}", name, low, high));
  }
  return value;
}

// A store failure of an admin call (answered 503, or 400 for a refused argument): logged, a
// burst then a line a second, so that a script polling against a dead store cannot flood the
// log.
void log_failure(std::string_view what, std::string_view identity, std::string_view rule, std::string_view peer,
                 const Error& error) {
  static LogLimit limit("admin: operations on a key that failed");
  std::uint64_t suppressed = 0;
  if (!limit.admit(suppressed)) return;
  spdlog::warn("admin: {} of {} under rule '{}' asked by {} failed: {}{}", what, identity, rule, peer, error.message,
               suppressed > 0 ? fmt::format(" ({} similar lines left out)", suppressed) : std::string());
}

json identity_json(const limiter::RuleOutcome& outcome, std::string_view rule) {
  return json{{"rule", rule}, {"identity", outcome.identity}, {"tier", outcome.tier}};
}

json override_json(const limiter::Override& o) {
  const auto seconds = std::chrono::sys_seconds(std::chrono::seconds(o.set_at / kMicrosPerSecond));
  return json{{"rule", o.rule},
              {"identity", o.identity},
              {"factor", o.factor},
              {"note", o.note},
              {"set_by", o.set_by},
              {"set_at", fmt::format("{:%Y-%m-%dT%H:%M:%S}Z", seconds)}};
}

// The body of PUT /admin/overrides: {"rule", "identity", "factor", "note"?}.
std::expected<limiter::Override, std::string> override_body(std::string_view body) {
  const json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return std::unexpected("body is not valid JSON");
  if (!parsed.is_object()) return std::unexpected("body must be a JSON object");
  for (const auto& [name, value] : parsed.items()) {
    if (name != "rule" && name != "identity" && name != "factor" && name != "note") {
      return std::unexpected(fmt::format("unknown field `{}` (rule, identity, factor, note)", name.substr(0, 64)));
    }
  }
  limiter::Override o;
  const auto rule = parsed.find("rule");
  if (rule == parsed.end() || !rule->is_string() || rule->get_ref<const std::string&>().empty()) {
    return std::unexpected("`rule` must be a rule's name");
  }
  o.rule = rule->get<std::string>();
  const auto identity = parsed.find("identity");
  if (identity == parsed.end() || !identity->is_string() || identity->get_ref<const std::string&>().empty()) {
    return std::unexpected("`identity` must be a non-empty string (\"user:42\", \"ip:192.0.2.7\")");
  }
  o.identity = identity->get<std::string>();
  const auto factor = parsed.find("factor");
  if (factor == parsed.end() || !factor->is_number()) {
    return std::unexpected(fmt::format("`factor` must be a number from {} to {}", limiter::kMinOverrideFactor,
                                       limiter::kMaxOverrideFactor));
  }
  o.factor = factor->get<double>();
  if (const auto note = parsed.find("note"); note != parsed.end()) {
    if (!note->is_string()) return std::unexpected("`note` must be a string");
    o.note = note->get<std::string>();
  }
  return o;
}

}  // namespace

void Api::Routes::overrides(const Request& request, Responder respond) {
  const std::string peer = request.peer_address;
  if (request.method == "GET") {
    return limiter_.list_overrides([this, respond = std::move(respond)](Result<std::vector<limiter::Override>> r) {
      if (!r) return respond(error_response(503, r.error().message));
      json list = json::array();
      for (const auto& o : *r) list.push_back(override_json(o));
      respond(json_response(200, json_text(json{{"in_effect_version", limiter_.overrides().version()},
                                                {"overrides", std::move(list)}})));
    });
  }
  if (request.method == "PUT") {
    auto o = override_body(request.body);
    if (!o) return respond(bad_request(o.error()));
    o->set_by = peer;
    o->set_at = SystemClock::instance().now();
    const json answer = override_json(*o);
    // As keys spell it (control bytes escaped): a log line cannot be split.
    const std::string who = limiter::escape_identity(o->identity).value_or("(invalid identity)");
    const std::string rule = o->rule;
    const std::string factor = fmt::format("{}", o->factor);
    const std::string note = o->note.empty() ? std::string("none") : fmt::format("{:?}", o->note);
    return limiter_.set_override(std::move(*o), [answer, who, rule, factor, note, peer,
                                                  respond = std::move(respond)](Result<store::TableWrite> r) {
      if (!r) {
        log_failure("override", who, rule, peer, r.error());
        const int status = r.error().code == ErrorCode::invalid_argument ? 400 : 503;
        return respond(error_response(status, r.error().message));
      }
      spdlog::info("admin: {} set the override of {} under rule '{}' to x{}{} (note: {})", peer, who, rule, factor,
                   r->existed ? ", replacing the one before" : "", note);
      json body = answer;
      body["replaced"] = r->existed;
      respond(json_response(200, json_text(body)));
    });
  }
  const std::string_view query = request.query();
  const auto rule = query_param(query, "rule");
  const auto identity = query_param(query, "identity");
  if (!rule || rule->empty()) return respond(bad_request("`rule` must be given"));
  if (!identity || identity->empty()) return respond(bad_request("`identity` must be given"));
  const std::string who = limiter::escape_identity(*identity).value_or("(invalid identity)");
  limiter_.remove_override(*rule, *identity, [who, rule = *rule, identity = *identity, peer,
                                              respond = std::move(respond)](Result<bool> r) {
    if (!r) {
      log_failure("override removal", who, rule, peer, r.error());
      const int status = r.error().code == ErrorCode::invalid_argument ? 400 : 503;
      return respond(error_response(status, r.error().message));
    }
    if (*r) spdlog::info("admin: {} removed the override of {} under rule '{}'", peer, who, rule);
    respond(json_response(200, json_text(json{{"rule", rule}, {"identity", identity}, {"removed", *r}})));
  });
}

void Api::Routes::keys(const Request& request, Responder respond) {
  const std::string_view query = request.query();
  const auto rule_name = query_param(query, "rule");
  const auto identity = query_param(query, "identity");
  if (!rule_name || rule_name->empty()) return respond(bad_request("`rule` must be given"));
  if (!identity || identity->empty()) return respond(bad_request("`identity` must be given"));
  const std::string tier = query_param(query, "tier").value_or("");
  const std::string parent = query_param(query, "parent").value_or("");
  auto app = limiter_.application(*rule_name, *identity, 0, tier, parent);
  if (!app) return respond(bad_request(app.error().message));
  // Per-endpoint rules count each path on keys of its own: the path as the rules see it.
  if (app->rule->bucket == limiter::BucketScope::per_endpoint) {
    const auto endpoint = query_param(query, "endpoint");
    if (!endpoint || endpoint->empty()) {
      return respond(bad_request(fmt::format("rule `{}` counts per endpoint: `endpoint` must be given", *rule_name)));
    }
    auto normal = http::normalize_path(*endpoint, middleware_.options().paths);
    if (!normal) return respond(bad_request(fmt::format("`endpoint`: {}", normal.error().message)));
    app->endpoint = std::move(*normal);
  }
  const std::string rule = *rule_name;

  const std::string peer = request.peer_address;
  // As its keys spell it (control bytes escaped): a log line cannot be split.
  const std::string who = limiter::escape_identity(app->identity).value_or("(invalid identity)");
  if (request.method == "GET") {
    return limiter_.inspect(std::move(*app), [rule, who, peer, respond = std::move(respond)](Result<limiter::RuleOutcome> r) {
      if (!r) {
        log_failure("inspection", who, rule, peer, r.error());
        const int status = r.error().code == ErrorCode::invalid_argument ? 400 : 503;
        return respond(error_response(status, r.error().message));
      }
      json limits = json::array();
      for (const auto& l : r->limits) {
        limits.push_back({{"policy", l.policy_name},
                          {"key", l.key},
                          {"algorithm", algorithms::to_string(l.limit.algorithm)},
                          {"limit", l.limit.capacity},
                          {"window_ms", to_ms(l.limit.horizon())},
                          {"remaining", std::max<std::int64_t>(0, l.decision.remaining)},
                          {"reset_after_ms", to_ms(l.decision.reset_after)}});
      }
      json body = identity_json(*r, rule);
      body["limits"] = std::move(limits);
      respond(json_response(200, json_text(body)));
    });
  }
  limiter_.reset(std::move(*app), [rule, who, peer, identity = *identity, respond = std::move(respond)](Result<limiter::Limiter::ResetOutcome> r) {
    if (!r) {
      log_failure("reset", who, rule, peer, r.error());
      const int status = r.error().code == ErrorCode::invalid_argument ? 400 : 503;
      return respond(error_response(status, r.error().message));
    }
    spdlog::info("admin: {} reset the keys of {} under rule '{}' ({} key(s), {} held state)", peer, who, rule,
                 r->keys.size(), r->existed);
    respond(json_response(200, json_text(json{{"rule", rule}, {"identity", identity}, {"keys", r->keys},
                                              {"existed", r->existed}})));
  });
}

Response Api::Routes::top_denied(const Request& request) const {
  const std::string_view query = request.query();
  const auto rule_name = query_param(query, "rule");
  if (!rule_name || rule_name->empty()) return bad_request("`rule` must be given");
  const limiter::Rule* rule = limiter_.find_rule(*rule_name);
  if (rule == nullptr) return bad_request(fmt::format("unknown rule `{}`", rule_name->substr(0, 64)));
  const auto minutes = bounded_param(query, "minutes", 5, 1, limiter::TopDenied::kMinutes);
  if (!minutes) return bad_request(minutes.error());
  const auto n = bounded_param(query, "n", 10, 1, 1000);
  if (!n) return bad_request(n.error());
  const auto report = limiter_.top_denied().top(limiter_.rule_index(rule), *minutes,
                                                static_cast<std::size_t>(*n), limiter_.steady_now());
  json top = json::array();
  for (const auto& e : report.top) {
    top.push_back({{"identity", e.identity}, {"denied_at_least", e.at_least}, {"denied_at_most", e.at_most}});
  }
  return json_response(200, json_text(json{{"rule", rule->name}, {"minutes", *minutes}, {"denials", report.denials},
                                           {"identities", std::move(top)}}));
}

}  // namespace ratekeeper::server
