// validate(LimiterConfig): the one check of a limiter's rules, tiers and key prefix.

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <set>
#include <string>

#include "ratekeeper/algorithms/lease.hpp"
#include "ratekeeper/limiter/limiter.hpp"

namespace ratekeeper::limiter {
namespace {

constexpr std::string_view kNameRule = "must be 1-64 characters of A-Z a-z 0-9 _ - .";

class Issues {
 public:
  void add(std::string field, std::string reason) {
    list_.push_back({std::move(field), std::move(reason)});
  }
  std::vector<ConfigIssue> take() { return std::move(list_); }

 private:
  std::vector<ConfigIssue> list_;
};

// `cost` within every limit of `policy` (a negative cost is reported on the rule).
void check_cost(Issues& out, const Policy& policy, std::int64_t cost, const std::string& field) {
  if (cost < 0) return;
  for (const auto& l : policy) {
    // A request holds one slot of a concurrency limit, whatever its cost.
    const bool slots = l.limit.algorithm == algorithms::Algorithm::concurrency;
    if (auto ok = algorithms::validate_cost(l.limit, slots ? std::min<std::int64_t>(cost, 1) : cost); !ok) {
      out.add(field, ok.error().message);
      return;
    }
  }
}

// A policy's limits: present, named when several (names unique), each admitting `cost`
// (blamed on `cost_field`).
void check_policy(Issues& out, const std::string& field, const Policy& policy, std::int64_t cost,
                  const std::string& cost_field) {
  if (policy.empty()) {
    out.add(field, "must be a non-empty list of limits");
    return;
  }
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < policy.size(); ++i) {
    const auto& l = policy[i];
    const auto name_field = fmt::format("{}[{}].name", field, i);
    if (policy.size() > 1 && l.name.empty()) {
      out.add(name_field, "required field missing (a policy of several limits names each)");
    } else if (!l.name.empty() && !valid_name(l.name)) {
      out.add(name_field, std::string(kNameRule));
    } else if (policy.size() > 1 && !names.insert(l.name).second) {
      out.add(name_field, fmt::format("duplicate limit name '{}'", l.name));
    }
  }
  check_cost(out, policy, cost, cost_field);
}

// The first limit a request under `rule` may get (of its policy or, tiered, of any tier; else
// of its IP fallback's) whose algorithm `allowed` refuses, described for a configuration
// error: "a limit of tier 'pro' ('burst') is sliding_window_log". Nothing when all are allowed.
std::optional<std::string> refused_limit(const Rule& rule, const Tiers& tiers, bool (*allowed)(algorithms::Algorithm)) {
  auto first = [&](const Policy& policy) -> const NamedLimit* {
    for (const auto& l : policy) {
      if (!allowed(l.limit.algorithm)) return &l;
    }
    return nullptr;
  };
  auto describe = [](const std::string& where, const NamedLimit& l) {
    return fmt::format("{}{} is {}", where, l.name.empty() ? std::string() : fmt::format(" ('{}')", l.name),
                       algorithms::to_string(l.limit.algorithm));
  };
  if (rule.tiered) {
    for (const auto& [tier, policy] : tiers.levels) {
      if (const NamedLimit* l = first(policy)) return describe(fmt::format("a limit of tier '{}'", tier), *l);
    }
  } else if (const NamedLimit* l = first(rule.limits)) {
    return describe("a limit", *l);
  }
  if (const NamedLimit* l = first(rule.ip_limits)) return describe("an ip_limits limit", *l);
  if (rule.parent) {
    if (const NamedLimit* l = first(rule.parent->limits)) return describe("a parent limit", *l);
  }
  return std::nullopt;
}

// on_limit delay: a max_delay in (0, kMaxDelay], and only token bucket limits (the rule's,
// its IP fallback's and, tiered, every tier's: a request may get any of them), since only
// GCRA can schedule a request exactly. max_delay without delay is refused as a slip.
void check_on_limit(Issues& out, const std::string& path, const Rule& rule, const Tiers& tiers) {
  const auto max_delay_field = path + ".max_delay";
  if (rule.on_limit == OnLimit::reject) {
    if (rule.max_delay != 0) out.add(max_delay_field, "only with on_limit: delay");
    return;
  }
  if (rule.max_delay <= 0 || rule.max_delay > algorithms::kMaxDelay) {
    out.add(max_delay_field, rule.max_delay == 0
                                 ? std::string("required with on_limit: delay (a duration > 0, at most 1h)")
                                 : fmt::format("must be > 0 and at most 1h, got {} microseconds", rule.max_delay));
  }
  auto token_bucket = [](algorithms::Algorithm a) { return a == algorithms::Algorithm::token_bucket; };
  if (auto why = refused_limit(rule, tiers, token_bucket)) {
    out.add(path + ".on_limit", "delay needs token_bucket limits; " + *why);
  }
}

// lease: a max >= 1 and a ttl in (0, store::kMaxLeaseTtl]; only fixed window and token bucket limits
// (a delayed local admission keeps their meaning: a window's units are its own, a bucket's
// admitted at most ttl after they were consumed), and not with on_limit delay (a lease admits
// now or denies).
void check_lease(Issues& out, const std::string& path, const Rule& rule, const Tiers& tiers) {
  if (rule.lease == store::LeasePolicy{}) return;
  const auto field = path + ".lease";
  if (rule.lease.max < 1) out.add(field + ".max", fmt::format("must be >= 1, got {}", rule.lease.max));
  if (rule.lease.ttl <= 0 || rule.lease.ttl > store::kMaxLeaseTtl) {
    out.add(field + ".ttl", fmt::format("must be > 0 and at most 1h, got {} microseconds", rule.lease.ttl));
  }
  if (rule.on_limit == OnLimit::delay) {
    out.add(field, "not with on_limit: delay (a leased limit admits now or denies)");
  }
  if (auto why = refused_limit(rule, tiers, algorithms::leasable)) {
    out.add(field, "leases need fixed_window or token_bucket limits; " + *why);
  }
}

// usage: a response header (and an estimate header) named, an estimate every limit can take,
// a ttl in (0, 1d]; token bucket and fixed window limits only (what settles below the
// estimate goes back exactly), and not shadow, delayed or leased (a reservation records what
// the store took at admission).
void check_usage(Issues& out, const std::string& path, const Rule& rule, const Tiers& tiers) {
  const auto& usage = rule.usage;
  if (!usage.enabled()) {
    if (usage != UsageSpec{}) {
      out.add(path + ".usage", "required: response_header or response_json (where the response reports the cost)");
    }
    return;
  }
  const auto field = path + ".usage";
  if (!usage.response_json.empty()) {
    const std::string_view dotted = usage.response_json;
    bool ok = dotted.size() <= 256 && dotted.front() != '.' && dotted.back() != '.' &&
              dotted.find("..") == std::string_view::npos;
    if (!ok) out.add(field + ".response_json", "must be field names joined by '.', e.g. usage.total_tokens");
  }
  if (usage.estimate < 0) out.add(field + ".estimate", fmt::format("must be >= 0, got {}", usage.estimate));
  if (usage.ttl <= 0 || usage.ttl > 86'400 * kMicrosPerSecond) {
    out.add(field + ".ttl", fmt::format("must be > 0 and at most 1d, got {} microseconds", usage.ttl));
  }
  if (rule.shadow) out.add(field, "not for a shadow rule (it reserves nothing)");
  if (rule.on_limit == OnLimit::delay) out.add(field, "not with on_limit: delay");
  if (rule.lease != store::LeasePolicy{}) out.add(field, "not with lease");
  if (auto why = refused_limit(rule, tiers, algorithms::reservable)) {
    out.add(field, "a cost from the response needs fixed_window, token_bucket or concurrency limits; " + *why);
  }
  auto check_estimate = [&](const Policy& policy) {
    for (const auto& named : policy) {
      if (named.limit.algorithm == algorithms::Algorithm::concurrency) continue;
      if (usage.estimate > named.limit.capacity) {
        out.add(field + ".estimate", fmt::format("{} is above the capacity of a limit ({})", usage.estimate,
                                                 named.limit.capacity));
        return;
      }
    }
  };
  check_estimate(rule.limits);
  check_estimate(rule.ip_limits);
  if (rule.parent) check_estimate(rule.parent->limits);
  if (rule.tiered) {
    for (const auto& [name, policy] : tiers.levels) check_estimate(policy);
  }
}

// Concurrency limits: a request holds its slot under a reservation, so not in a shadow rule
// (it holds nothing). Delays and leases refuse them through their own checks.
void check_concurrency(Issues& out, const std::string& path, const Rule& rule, const Tiers& tiers) {
  if (!rule.shadow) return;
  auto not_concurrency = [](algorithms::Algorithm a) { return a != algorithms::Algorithm::concurrency; };
  if (auto why = refused_limit(rule, tiers, not_concurrency)) {
    out.add(path + ".shadow", "a shadow rule holds no concurrency slot; " + *why);
  }
}

void check_identity(Issues& out, const std::string& path, const IdentitySpec& id) {
  if (id.kind != IdentityKind::ip && id.header.empty()) {
    out.add(path + ".header", fmt::format("required for identity type {}", to_string(id.kind)));
  }
  if (!id.prefix.empty() && (!valid_name(id.prefix) || id.prefix == "ip" || id.prefix == "key")) {
    out.add(path + ".prefix", std::string(kNameRule) + " and not 'ip' or 'key'");
  }
}

// parent: an identity and limits of its own (named when several), each admitting the rule's
// cost; not with a per-endpoint bucket (the parent's keys are the rule's, not an endpoint's).
void check_parent(Issues& out, const std::string& path, const Rule& rule) {
  if (!rule.parent) return;
  const auto field = path + ".parent";
  check_identity(out, field + ".identity", rule.parent->identity);
  check_policy(out, field + ".limits", rule.parent->limits, rule.cost, path + ".cost");
  if (rule.bucket == BucketScope::per_endpoint) out.add(field, "not with bucket: per_endpoint");
}

void check_rule(Issues& out, const std::string& path, const Rule& rule, const Tiers& tiers) {
  if (!valid_name(rule.name)) out.add(path + ".name", std::string(kNameRule));
  check_identity(out, path + ".identity", rule.identity);
  const auto& id = rule.identity;
  const auto cost_field = path + ".cost";
  if (rule.cost < 0) out.add(cost_field, "must be >= 0");
  if (rule.tiered) {
    if (!rule.limits.empty()) {
      out.add(path + ".limits", "a tiered rule takes its limits from its tier");
    }
  } else {
    check_policy(out, path + ".limits", rule.limits, rule.cost, cost_field);
  }
  if (!rule.ip_limits.empty()) {
    if (id.kind == IdentityKind::ip) {
      out.add(path + ".ip_limits", "only for identities that fall back to the IP");
    } else {
      check_policy(out, path + ".ip_limits", rule.ip_limits, rule.cost, cost_field);
    }
  }
  if (rule.tiered) {
    for (const auto& [tier, policy] : tiers.levels) check_cost(out, policy, rule.cost, cost_field);
  }
  check_on_limit(out, path, rule, tiers);
  check_lease(out, path, rule, tiers);
  check_usage(out, path, rule, tiers);
  check_concurrency(out, path, rule, tiers);
  check_parent(out, path, rule);
}

}  // namespace

std::vector<ConfigIssue> validate(const LimiterConfig& config) {
  Issues out;
  if (!valid_name(config.prefix)) out.add("key_prefix", std::string(kNameRule));
  if (config.instances < 1) out.add("store.instances", "must be >= 1");
  const auto& tiers = config.tiers;
  for (const auto& [name, policy] : tiers.levels) {
    const auto field = fmt::format("tiers.levels.{}", name);
    if (!valid_name(name)) {
      out.add(field, "tier names are 1-64 characters of A-Z a-z 0-9 _ - .");
    } else {
      check_policy(out, field, policy, 0, field);
    }
  }
  if (!tiers.levels.contains(tiers.default_tier)) {
    out.add("tiers.default", fmt::format("'{}' is not a tier in levels", tiers.default_tier));
  }
  for (const auto& [user, tier] : tiers.users) {
    if (!tiers.levels.contains(tier)) {
      out.add(fmt::format("tiers.users.{}", user), fmt::format("unknown tier '{}'", tier));
    }
  }
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < config.rules.size(); ++i) {
    const auto& rule = config.rules[i];
    const auto path = fmt::format("rules[{}]", i);
    check_rule(out, path, rule, tiers);
    if (!names.insert(rule.name).second) {
      out.add(path + ".name", fmt::format("duplicate rule name '{}'", rule.name));
    }
  }
  return out.take();
}

}  // namespace ratekeeper::limiter
