// Limits and costs are validated before use; every error names the offending field.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "algorithm_test_support.hpp"
#include "ratekeeper/limiter/keys.hpp"
#include "ratekeeper/limiter/rate_limiters.hpp"
#include "ratekeeper/store/memory_store.hpp"

namespace ratekeeper::testing {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

template <class T>
void expect_invalid(const Result<T>& r, std::string_view field, std::string_view what) {
  ASSERT_FALSE(r) << what << " was accepted";
  EXPECT_EQ(r.error().code, ErrorCode::invalid_argument) << what;
  EXPECT_NE(r.error().message.find(field), std::string::npos)
      << what << ": message '" << r.error().message << "' does not name " << field;
}

TEST(LimitValidation, TokenBucketCapacityMustBeAWholePositiveFiniteNumber) {
  for (double capacity : {0.0, -1.0, -0.0, 0.5, 2.5, kNaN, kInf, -kInf, 1e300}) {
    expect_invalid(Limit::token_bucket(capacity, 1.0), "capacity", std::to_string(capacity));
  }
  EXPECT_TRUE(Limit::token_bucket(1, 1.0));
}

TEST(LimitValidation, TokenBucketRefillRateMustBePositiveAndFinite) {
  for (double rate : {0.0, -1.0, -0.0, kNaN, kInf, -kInf, 2e6}) {
    expect_invalid(Limit::token_bucket(10, rate), "refill_rate", std::to_string(rate));
  }
  // So slow that the interval leaves the exact range.
  expect_invalid(Limit::token_bucket(10, 1e-12), "refill_rate", "1e-12");
  EXPECT_TRUE(Limit::token_bucket(10, 1e6));
  EXPECT_TRUE(Limit::token_bucket(10, 0.001));
}

TEST(LimitValidation, WindowLimitMustBeAWholePositiveFiniteNumber) {
  for (auto algorithm : {Algorithm::sliding_window_log, Algorithm::sliding_window_counter,
                         Algorithm::fixed_window}) {
    for (double limit : {0.0, -5.0, 1.5, kNaN, kInf}) {
      expect_invalid(Limit::window(algorithm, limit, kMicrosPerSecond), "limit",
                     std::string(algorithms::to_string(algorithm)) + " " + std::to_string(limit));
    }
  }
}

TEST(LimitValidation, WindowMustBeAtLeastOneMicrosecond) {
  for (auto algorithm : {Algorithm::sliding_window_log, Algorithm::sliding_window_counter,
                         Algorithm::fixed_window}) {
    for (Micros window : {Micros{0}, Micros{-1}, std::numeric_limits<Micros>::min()}) {
      expect_invalid(Limit::window(algorithm, 10, window), "window", std::to_string(window));
    }
    EXPECT_TRUE(Limit::window(algorithm, 10, 1));
  }
  expect_invalid(Limit::window(Algorithm::token_bucket, 10, kMicrosPerSecond), "algorithm",
                 "token bucket as a window");
}

TEST(LimitValidation, MakeChecksCapacityPeriodAndTheirProduct) {
  expect_invalid(Limit::make(Algorithm::token_bucket, 0, 1000), "capacity", "capacity 0");
  expect_invalid(Limit::make(Algorithm::token_bucket, -3, 1000), "capacity", "capacity -3");
  expect_invalid(Limit::make(Algorithm::token_bucket, 10, 0), "refill interval", "interval 0");
  expect_invalid(Limit::make(Algorithm::fixed_window, 10, -1), "window", "window -1");
  // C·T beyond 2^51 microseconds would leave the range where Lua's doubles are exact.
  expect_invalid(Limit::make(Algorithm::token_bucket, std::int64_t{1} << 30, std::int64_t{1} << 22),
                 "capacity", "C·T = 2^52");
  expect_invalid(Limit::make(Algorithm::sliding_window_log, 1000, std::int64_t{1} << 51), "window",
                 "window above 2^45");
  EXPECT_TRUE(Limit::make(Algorithm::token_bucket, std::int64_t{1} << 30, std::int64_t{1} << 21));
}

TEST(LimitValidation, CostMustBeBetweenZeroAndCapacity) {
  const Limit limit = make_limit(Algorithm::token_bucket, 5, 1000);
  expect_invalid(algorithms::validate_cost(limit, -1), "cost", "cost -1");
  expect_invalid(algorithms::validate_cost(limit, std::numeric_limits<std::int64_t>::min()), "cost",
                 "cost min");
  expect_invalid(algorithms::validate_cost(limit, 6), "cost", "cost 6");
  expect_invalid(algorithms::validate_cost(limit, 6), "capacity", "cost 6");
  EXPECT_TRUE(algorithms::validate_cost(limit, 0));
  EXPECT_TRUE(algorithms::validate_cost(limit, 5));
}

TEST(LimitValidation, NowMustNotBeNegative) {
  for (auto algorithm : {Algorithm::token_bucket, Algorithm::sliding_window_log,
                         Algorithm::sliding_window_counter, Algorithm::fixed_window}) {
    expect_invalid(algorithms::step(make_limit(algorithm, 5, 1000), State{}, -1, 1), "now",
                   std::string(algorithms::to_string(algorithm)));
  }
}

TEST(LimitValidation, AlgorithmNamesRoundTrip) {
  for (auto algorithm : {Algorithm::token_bucket, Algorithm::sliding_window_log,
                         Algorithm::sliding_window_counter, Algorithm::fixed_window}) {
    EXPECT_EQ(algorithms::parse_algorithm(algorithms::to_string(algorithm)), algorithm);
  }
  EXPECT_EQ(algorithms::parse_algorithm("leaky_bucket"), std::nullopt);
  EXPECT_EQ(algorithms::parse_algorithm(""), std::nullopt);
}

TEST(LimitValidation, EmptyIdentifierIsAnInvalidArgumentNamingTheIdentity) {
  expect_invalid(limiter::escape_identity(""), "identity", "empty identity");
  expect_invalid(limiter::make_key("ratelimit", "", "api"), "identity", "empty identity");
  store::MemoryStore store;
  auto limiter = limiter::TokenBucketRateLimiter::create(store);
  ASSERT_TRUE(limiter);
  expect_invalid(limiter->allow(""), "identity", "empty identifier");
}

TEST(LimitValidation, SeedLimiterArgumentsAreChecked) {
  store::MemoryStore store;
  expect_invalid(limiter::TokenBucketRateLimiter::create(store, 0, 10), "capacity", "capacity 0");
  expect_invalid(limiter::TokenBucketRateLimiter::create(store, 100, 0), "refill_rate", "rate 0");
  expect_invalid(limiter::TokenBucketRateLimiter::create(store, kNaN, 10), "capacity", "NaN");
  expect_invalid(limiter::SlidingWindowRateLimiter::create(store, 0, 100), "window_ms", "window 0");
  expect_invalid(limiter::SlidingWindowRateLimiter::create(store, 1000, -1), "limit", "limit -1");
  expect_invalid(limiter::SlidingWindowRateLimiter::create(store, std::numeric_limits<std::int64_t>::max(), 10),
                 "window_ms", "window_ms max");
  expect_invalid(limiter::FixedWindowRateLimiter::create(store, 0, 100), "window_seconds", "window 0");
  expect_invalid(limiter::FixedWindowRateLimiter::create(store, 60, kInf), "limit", "limit inf");
  expect_invalid(limiter::FixedWindowRateLimiter::create(store, std::numeric_limits<std::int64_t>::max(), 10),
                 "window_seconds", "window_seconds max");
  auto tb = limiter::TokenBucketRateLimiter::create(store, 5, 1);
  ASSERT_TRUE(tb);
  expect_invalid(tb->allow("user:1", 6), "cost", "cost above capacity");
  expect_invalid(tb->allow("user:1", -1), "cost", "negative cost");
  expect_invalid(limiter::TieredRateLimiter::create(store, {{"free", *Limit::token_bucket(1, 1)}}, "gold"),
                 "default_tier", "unknown default tier");
}

// A sliding window log takes one entry per unit: one check takes at most kMaxLogCost, so that
// no single check holds the store for long; the other algorithms take any cost up to capacity.
TEST(LimitValidation, ASlidingWindowLogCheckTakesAtMostMaxLogCost) {
  using namespace algorithms;
  const auto log = *Limit::make(Algorithm::sliding_window_log, 200'000, 60 * kMicrosPerSecond);
  EXPECT_TRUE(validate_cost(log, kMaxLogCost));
  const auto over = validate_cost(log, kMaxLogCost + 1);
  ASSERT_FALSE(over);
  EXPECT_NE(over.error().message.find("sliding_window_counter"), std::string::npos) << over.error().message;
  for (const auto a : {Algorithm::token_bucket, Algorithm::sliding_window_counter, Algorithm::fixed_window}) {
    EXPECT_TRUE(validate_cost(*Limit::make(a, 200'000, 60 * kMicrosPerSecond), 100'000)) << to_string(a);
  }
}

}  // namespace
}  // namespace ratekeeper::testing
