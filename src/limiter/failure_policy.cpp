#include "ratekeeper/limiter/failure_policy.hpp"

#include <algorithm>

namespace ratekeeper::limiter {

std::string_view to_string(FailureMode mode) noexcept {
  switch (mode) {
    case FailureMode::allow: return "allow";
    case FailureMode::deny: return "deny";
    case FailureMode::local: return "local";
    case FailureMode::error: return "error";
  }
  return "unknown";
}

std::optional<FailureMode> parse_failure_mode(std::string_view name) noexcept {
  for (auto m : {FailureMode::allow, FailureMode::deny, FailureMode::local}) {
    if (name == to_string(m)) return m;
  }
  return std::nullopt;
}

algorithms::Limit divide_limit(const algorithms::Limit& limit, int instances) {
  if (instances <= 1) return limit;
  algorithms::Limit out = limit;
  out.capacity = std::max<std::int64_t>(1, limit.capacity / instances);
  if (limit.algorithm == algorithms::Algorithm::token_bucket) {
    // Each instance refills at 1/instances of the rate: one token every period·instances.
    out.period = limit.period * instances;
  }
  return out;
}

Result<std::vector<Decision>> answer_by_policy(std::span<const store::CheckItem> items,
                                               const Error& error, FailureMode mode,
                                               const FailurePolicy& policy,
                                               std::optional<Micros> now) {
  if (!error.is_store_failure()) return std::unexpected(error);
  std::vector<Decision> out;
  switch (mode) {
    case FailureMode::error: return std::unexpected(error);
    case FailureMode::allow:
    case FailureMode::deny: {
      const bool allow = mode == FailureMode::allow;
      out.reserve(items.size());
      for (const auto& item : items) {
        Decision d;
        d.allowed = allow;
        d.limit = item.limit.capacity;
        d.remaining = allow ? item.limit.capacity : 0;
        d.retry_after = allow ? 0 : policy.deny_retry_after;
        out.push_back(d);
      }
      return out;
    }
    case FailureMode::local: {
      if (policy.local == nullptr) return std::unexpected(error);
      std::vector<store::CheckItem> divided(items.begin(), items.end());
      for (auto& item : divided) {
        item.limit = divide_limit(item.limit, policy.instances);
        item.cost = std::min(item.cost, item.limit.capacity);
      }
      auto outcome = policy.local->check_batch(divided, now);
      if (!outcome) return std::unexpected(outcome.error());
      return std::move(outcome->items);
    }
  }
  return out;
}

}  // namespace ratekeeper::limiter
