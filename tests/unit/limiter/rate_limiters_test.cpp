// The seed's limiter classes on a MemoryStore driven by a manual clock.

#include <gtest/gtest.h>

#include "ratekeeper/limiter/rate_limiters.hpp"
#include "ratekeeper/store/memory_store.hpp"

namespace ratekeeper::limiter {
namespace {

using algorithms::Algorithm;
using store::MemoryStore;
using store::MemoryStoreOptions;

constexpr Micros kT0 = 1'700'000'000'000'000;

class SeedLimiters : public ::testing::Test {
 protected:
  ManualClock clock_{kT0};
  MemoryStore store_{MemoryStoreOptions{.clock = &clock_}};

  // What the store holds under `key` for `limit`, read without consuming.
  std::int64_t remaining_at(const std::string& key, const Limit& limit) {
    auto d = store_.check_one(key, limit, 0);
    EXPECT_TRUE(d) << d.error().message;
    return d ? d->remaining : -1;
  }

  static Decision must(const Result<Decision>& r) {
    EXPECT_TRUE(r) << r.error().message;
    return r.value_or(Decision{});
  }
};

TEST_F(SeedLimiters, TokenBucketDefaultsToHundredTokensTenPerSecond) {
  auto limiter = TokenBucketRateLimiter::create(store_);
  ASSERT_TRUE(limiter) << limiter.error().message;
  EXPECT_EQ(limiter->limit().algorithm, Algorithm::token_bucket);
  EXPECT_EQ(limiter->limit().capacity, 100);
  EXPECT_EQ(limiter->limit().period, 100'000);
  EXPECT_EQ(limiter->rule(), "token_bucket");
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(must(limiter->allow("user:1")).allowed) << i;
  const Decision denied = must(limiter->allow("user:1"));
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.limit, 100);
  EXPECT_EQ(denied.retry_after, 100'000);
  clock_.advance(100'000);
  EXPECT_TRUE(must(limiter->allow("user:1")).allowed);
  // Another identifier has its own bucket.
  EXPECT_EQ(must(limiter->allow("user:2")).remaining, 99);
}

TEST_F(SeedLimiters, TokenBucketKeyIsPrefixIdentifierRule) {
  auto limiter = TokenBucketRateLimiter::create(store_, 10, 1);
  ASSERT_TRUE(limiter);
  ASSERT_TRUE(must(limiter->allow("ip:192.0.2.7", 3)).allowed);
  EXPECT_EQ(remaining_at("ratelimit:{ip:192.0.2.7}:token_bucket", limiter->limit()), 7);
  EXPECT_EQ(store_.stats().keys, 1u);
}

TEST_F(SeedLimiters, CustomPrefix) {
  auto limiter = TokenBucketRateLimiter::create(store_, 10, 1, RateLimiterOptions{.prefix = "rk"});
  ASSERT_TRUE(limiter);
  ASSERT_TRUE(must(limiter->allow("user:1")).allowed);
  EXPECT_EQ(remaining_at("rk:{user:1}:token_bucket", limiter->limit()), 9);
}

TEST_F(SeedLimiters, CostZeroPeeks) {
  auto limiter = TokenBucketRateLimiter::create(store_, 5, 1);
  ASSERT_TRUE(limiter);
  ASSERT_TRUE(must(limiter->allow("user:1", 2)).allowed);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(must(limiter->allow("user:1", 0)).remaining, 3);
}

TEST_F(SeedLimiters, SlidingWindowDefaultsToHundredPerMinuteExact) {
  auto limiter = SlidingWindowRateLimiter::create(store_);
  ASSERT_TRUE(limiter) << limiter.error().message;
  EXPECT_EQ(limiter->limit().algorithm, Algorithm::sliding_window_log);
  EXPECT_EQ(limiter->limit().capacity, 100);
  EXPECT_EQ(limiter->limit().period, 60 * kMicrosPerSecond);
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(must(limiter->allow("user:1")).allowed) << i;
    clock_.advance(100'000);
  }
  const Decision denied = must(limiter->allow("user:1"));
  EXPECT_FALSE(denied.allowed);
  // The first request was 10 s ago: it leaves the window in 50 s.
  EXPECT_EQ(denied.retry_after, 50 * kMicrosPerSecond);
  clock_.advance(denied.retry_after);
  EXPECT_TRUE(must(limiter->allow("user:1")).allowed);
  EXPECT_FALSE(must(limiter->allow("user:1")).allowed);
  EXPECT_EQ(remaining_at("ratelimit:{user:1}:sliding_window", limiter->limit()), 0);
}

TEST_F(SeedLimiters, FixedWindowDefaultsToHundredPerMinuteAligned) {
  auto limiter = FixedWindowRateLimiter::create(store_);
  ASSERT_TRUE(limiter) << limiter.error().message;
  EXPECT_EQ(limiter->limit().algorithm, Algorithm::fixed_window);
  EXPECT_EQ(limiter->limit().period, 60 * kMicrosPerSecond);
  const Micros window = 60 * kMicrosPerSecond;
  clock_.set((kT0 / window + 1) * window + 10 * kMicrosPerSecond);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(must(limiter->allow("user:1")).allowed) << i;
  const Decision denied = must(limiter->allow("user:1"));
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.retry_after, 50 * kMicrosPerSecond);
  EXPECT_EQ(remaining_at("ratelimit:{user:1}:fixed_window", limiter->limit()), 0);
  clock_.advance(denied.retry_after);
  EXPECT_EQ(must(limiter->allow("user:1")).remaining, 99);
}

TEST_F(SeedLimiters, TiersAreFreeProAndEnterprise) {
  TieredRateLimiter tiers(store_);
  struct Expect {
    const char* tier;
    std::int64_t capacity;
    Micros interval;
  };
  for (Expect e : {Expect{"free", 60, 1'000'000}, Expect{"pro", 600, 100'000},
                   Expect{"enterprise", 6000, 10'000}}) {
    const RateLimiter& limiter = tiers.tier(e.tier);
    EXPECT_EQ(limiter.rule(), e.tier);
    EXPECT_EQ(limiter.limit().algorithm, Algorithm::token_bucket);
    EXPECT_EQ(limiter.limit().capacity, e.capacity);
    EXPECT_EQ(limiter.limit().period, e.interval);
    const std::string id = std::string("user:") + e.tier;
    for (std::int64_t i = 0; i < e.capacity; ++i) {
      ASSERT_TRUE(must(tiers.allow(id, e.tier)).allowed) << e.tier << " " << i;
    }
    const Decision denied = must(tiers.allow(id, e.tier));
    EXPECT_FALSE(denied.allowed) << e.tier;
    EXPECT_EQ(denied.limit, e.capacity);
    EXPECT_EQ(denied.retry_after, e.interval) << e.tier;
    EXPECT_EQ(remaining_at("ratelimit:{" + id + "}:" + e.tier, limiter.limit()), 0);
  }
}

TEST_F(SeedLimiters, AnUnknownTierIsChargedAsFreeUnderFreesKey) {
  TieredRateLimiter tiers(store_);
  EXPECT_EQ(tiers.tier("gold").rule(), "free");
  EXPECT_EQ(tiers.tier("").rule(), "free");
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(must(tiers.allow("user:9", "free")).allowed);
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(must(tiers.allow("user:9", "gold")).allowed);
  EXPECT_FALSE(must(tiers.allow("user:9", "free")).allowed);
  EXPECT_FALSE(must(tiers.allow("user:9", "gold")).allowed);
  EXPECT_EQ(remaining_at("ratelimit:{user:9}:free", tiers.tier("free").limit()), 0);
  EXPECT_EQ(store_.stats().keys, 1u);
  // A known tier still has its own key.
  EXPECT_TRUE(must(tiers.allow("user:9", "pro")).allowed);
  EXPECT_EQ(store_.stats().keys, 2u);
}

TEST_F(SeedLimiters, CustomTiersWithTheirOwnDefault) {
  auto tiers = TieredRateLimiter::create(
      store_, {{"basic", *Limit::token_bucket(2, 1)}, {"plus", *Limit::token_bucket(5, 1)}}, "basic");
  ASSERT_TRUE(tiers) << tiers.error().message;
  EXPECT_EQ(tiers->tier("unknown").rule(), "basic");
  EXPECT_EQ(must(tiers->allow("user:1", "plus")).remaining, 4);
  EXPECT_EQ(must(tiers->allow("user:1", "unknown")).remaining, 1);
  EXPECT_EQ(must(tiers->allow("user:1", "basic")).remaining, 0);
  auto unnamed = TieredRateLimiter::create(store_, {{"", *Limit::token_bucket(2, 1)}}, "");
  ASSERT_FALSE(unnamed);
  EXPECT_EQ(unnamed.error().code, ErrorCode::invalid_argument);
}

TEST_F(SeedLimiters, IdentifiersAreEscapedInKeys) {
  auto limiter = TokenBucketRateLimiter::create(store_, 10, 1);
  ASSERT_TRUE(limiter);
  ASSERT_TRUE(must(limiter->allow("evil}:x")).allowed);
  EXPECT_EQ(remaining_at("ratelimit:{evil%7D:x}:token_bucket", limiter->limit()), 9);
}

}  // namespace
}  // namespace ratekeeper::limiter
