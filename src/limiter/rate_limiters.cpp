#include "ratekeeper/limiter/rate_limiters.hpp"

#include <fmt/format.h>

#include "ratekeeper/limiter/keys.hpp"
#include "ratekeeper/limiter/rule.hpp"

namespace ratekeeper::limiter {

// Windows are converted to microseconds; beyond algorithms::kMaxHorizon no limit is valid
// anyway, and the conversion itself must not overflow.
using algorithms::kMaxHorizon;

namespace {

// The standard tiers (Tiers::standard), one limit each.
std::map<std::string, Limit> standard_limits() {
  std::map<std::string, Limit> out;
  for (const auto& [name, policy] : Tiers::standard().levels) {
    out.emplace(name, policy.front().limit);
  }
  return out;
}

}  // namespace

RateLimiter::RateLimiter(store::Store& store, Limit limit, std::string rule, RateLimiterOptions options)
    : store_(&store), limit_(limit), rule_(std::move(rule)), options_(std::move(options)) {}

Result<Decision> RateLimiter::allow(std::string_view identifier, std::int64_t cost,
                                    std::optional<Micros> now) const {
  auto key = make_key(options_.prefix, identifier, rule_);
  if (!key) return std::unexpected(key.error());
  std::vector<store::CheckItem> items;
  items.push_back({std::move(*key), limit_, cost});
  auto outcome = store_->check_sync(std::move(items), now);
  if (!outcome) return std::unexpected(outcome.error());
  return outcome->decision;
}

Result<TokenBucketRateLimiter> TokenBucketRateLimiter::create(store::Store& store, double capacity,
                                                              double refill_rate,
                                                              RateLimiterOptions options) {
  auto limit = Limit::token_bucket(capacity, refill_rate);
  if (!limit) return std::unexpected(limit.error());
  return TokenBucketRateLimiter(store, *limit, "token_bucket", std::move(options));
}

Result<SlidingWindowRateLimiter> SlidingWindowRateLimiter::create(store::Store& store,
                                                                  std::int64_t window_ms, double limit,
                                                                  RateLimiterOptions options) {
  if (window_ms < 1 || window_ms > kMaxHorizon / kMicrosPerMilli) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("window_ms must be between 1 and {}, got {}",
                                  kMaxHorizon / kMicrosPerMilli, window_ms));
  }
  auto l = Limit::window(algorithms::Algorithm::sliding_window_log, limit, window_ms * kMicrosPerMilli);
  if (!l) return std::unexpected(l.error());
  return SlidingWindowRateLimiter(store, *l, "sliding_window", std::move(options));
}

Result<FixedWindowRateLimiter> FixedWindowRateLimiter::create(store::Store& store,
                                                              std::int64_t window_seconds,
                                                              double limit, RateLimiterOptions options) {
  if (window_seconds < 1 || window_seconds > kMaxHorizon / kMicrosPerSecond) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("window_seconds must be between 1 and {}, got {}",
                                  kMaxHorizon / kMicrosPerSecond, window_seconds));
  }
  auto l = Limit::window(algorithms::Algorithm::fixed_window, limit, window_seconds * kMicrosPerSecond);
  if (!l) return std::unexpected(l.error());
  return FixedWindowRateLimiter(store, *l, "fixed_window", std::move(options));
}

TieredRateLimiter::TieredRateLimiter(std::map<std::string, RateLimiter, std::less<>> tiers,
                                     std::string default_tier)
    : tiers_(std::move(tiers)), default_tier_(std::move(default_tier)) {}

TieredRateLimiter::TieredRateLimiter(store::Store& store, const RateLimiterOptions& options)
    : TieredRateLimiter(*create(store, standard_limits(), Tiers::standard().default_tier,
                                options)) {}

Result<TieredRateLimiter> TieredRateLimiter::create(store::Store& store,
                                                    const std::map<std::string, Limit>& tiers,
                                                    std::string default_tier,
                                                    const RateLimiterOptions& options) {
  if (!tiers.contains(default_tier)) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("default_tier '{}' is not one of the tiers", default_tier));
  }
  std::map<std::string, RateLimiter, std::less<>> limiters;
  for (auto& [name, limit] : tiers) {
    if (name.empty()) return make_error(ErrorCode::invalid_argument, "tier name must not be empty");
    limiters.emplace(name, RateLimiter(store, limit, name, options));
  }
  return TieredRateLimiter(std::move(limiters), std::move(default_tier));
}

const RateLimiter& TieredRateLimiter::tier(std::string_view name) const {
  auto it = tiers_.find(name);
  return it != tiers_.end() ? it->second : tiers_.find(default_tier_)->second;
}

Result<Decision> TieredRateLimiter::allow(std::string_view identifier, std::string_view tier_name,
                                          std::int64_t cost, std::optional<Micros> now) const {
  return tier(tier_name).allow(identifier, cost, now);
}

}  // namespace ratekeeper::limiter
