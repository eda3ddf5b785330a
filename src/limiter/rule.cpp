#include "ratekeeper/limiter/rule.hpp"

#include <algorithm>

namespace ratekeeper::limiter {

bool valid_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-' || c == '.';
  });
}

std::string_view to_string(IdentityKind kind) noexcept {
  switch (kind) {
    case IdentityKind::ip:
      return "ip";
    case IdentityKind::header:
      return "header";
    case IdentityKind::api_key:
      return "api_key";
    case IdentityKind::user_or_ip:
      return "user_or_ip";
  }
  return "unknown";
}

std::string_view to_string(OnLimit on_limit) noexcept {
  return on_limit == OnLimit::delay ? "delay" : "reject";
}

bool any_leased(std::span<const Rule> rules) noexcept {
  return std::any_of(rules.begin(), rules.end(), [](const Rule& rule) { return rule.lease.enabled(); });
}

const std::string& Tiers::resolve(std::string_view user_id,
                                  std::optional<std::string_view> header_value) const {
  if (trust_header && header_value) {
    if (auto it = levels.find(*header_value); it != levels.end()) return it->first;
    return default_tier;
  }
  if (!user_id.empty()) {
    if (auto it = users.find(user_id); it != users.end() && levels.contains(it->second)) {
      return it->second;
    }
  }
  return default_tier;
}

const Policy* Tiers::policy(std::string_view tier) const {
  auto it = levels.find(tier);
  if (it == levels.end()) it = levels.find(default_tier);
  return it == levels.end() ? nullptr : &it->second;
}

Tiers Tiers::standard() {
  Tiers t;
  auto add = [&t](const std::string& name, double capacity, double rate) {
    t.levels[name] = Policy{NamedLimit{"bucket", *algorithms::Limit::token_bucket(capacity, rate)}};
  };
  add("free", 60, 1);
  add("pro", 600, 10);
  add("enterprise", 6000, 100);
  return t;
}

Micros shortest_slot_ttl(const Rule& rule, const Tiers& tiers) noexcept {
  Micros shortest = 0;
  auto scan = [&](const Policy& policy) {
    for (const auto& named : policy) {
      if (named.limit.algorithm != algorithms::Algorithm::concurrency) continue;
      if (shortest == 0 || named.limit.period < shortest) shortest = named.limit.period;
    }
  };
  scan(rule.limits);
  scan(rule.ip_limits);
  if (rule.parent) scan(rule.parent->limits);
  if (rule.tiered) {
    for (const auto& [name, policy] : tiers.levels) scan(policy);
  }
  return shortest;
}

}  // namespace ratekeeper::limiter
