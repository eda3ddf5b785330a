#pragma once
// The classic Redis rate limiter classes (as the Python recipe they come from names them),
// over any Store, answering a Decision instead of a bare bool.
// Keys: <prefix>:{<identifier>}:<rule>, rule "token_bucket", "sliding_window",
// "fixed_window", or the tier name. Thread-safe when the store is.

#include <map>
#include <string>

#include "ratekeeper/store/store.hpp"

namespace ratekeeper::limiter {

using algorithms::Decision;
using algorithms::Limit;

struct RateLimiterOptions {
  std::string prefix = "ratelimit";
};

// One limit for every identifier under one rule name.
class RateLimiter {
 public:
  RateLimiter(store::Store& store, Limit limit, std::string rule, RateLimiterOptions options = {});

  // Consumes `cost` units for `identifier`. Blocking; cost 0 peeks. `now` overrides the
  // store's clock (tests, time_source: client).
  Result<Decision> allow(std::string_view identifier, std::int64_t cost = 1,
                         std::optional<Micros> now = {}) const;

  const Limit& limit() const noexcept { return limit_; }
  const std::string& rule() const noexcept { return rule_; }

 private:
  store::Store* store_;
  Limit limit_;
  std::string rule_;
  RateLimiterOptions options_;
};

// TokenBucketRateLimiter(redis, capacity=100, refill_rate=10.0).
class TokenBucketRateLimiter : public RateLimiter {
 public:
  static Result<TokenBucketRateLimiter> create(store::Store& store, double capacity = 100,
                                               double refill_rate = 10.0,
                                               RateLimiterOptions options = {});

 private:
  using RateLimiter::RateLimiter;
};

// SlidingWindowRateLimiter(redis, window_ms=60000, limit=100), exact (log) form.
class SlidingWindowRateLimiter : public RateLimiter {
 public:
  static Result<SlidingWindowRateLimiter> create(store::Store& store, std::int64_t window_ms = 60000,
                                                 double limit = 100, RateLimiterOptions options = {});

 private:
  using RateLimiter::RateLimiter;
};

// FixedWindowRateLimiter(redis, window_seconds=60, limit=100), atomic.
class FixedWindowRateLimiter : public RateLimiter {
 public:
  static Result<FixedWindowRateLimiter> create(store::Store& store, std::int64_t window_seconds = 60,
                                               double limit = 100, RateLimiterOptions options = {});

 private:
  using RateLimiter::RateLimiter;
};

// TieredRateLimiter: the tiers of Tiers::standard (free 60 / 1 per s, pro
// 600 / 10 per s, enterprise 6000 / 100 per s). An unknown tier is charged as the default
// tier ("free"), under the default's key.
class TieredRateLimiter {
 public:
  explicit TieredRateLimiter(store::Store& store, const RateLimiterOptions& options = {});
  // Custom tiers; `default_tier` must be one of them.
  static Result<TieredRateLimiter> create(store::Store& store,
                                          const std::map<std::string, Limit>& tiers,
                                          std::string default_tier,
                                          const RateLimiterOptions& options = {});

  Result<Decision> allow(std::string_view identifier, std::string_view tier = "free",
                         std::int64_t cost = 1, std::optional<Micros> now = {}) const;
  const RateLimiter& tier(std::string_view name) const;

 private:
  TieredRateLimiter(std::map<std::string, RateLimiter, std::less<>> tiers, std::string default_tier);
  std::map<std::string, RateLimiter, std::less<>> tiers_;
  std::string default_tier_;
};

}  // namespace ratekeeper::limiter
