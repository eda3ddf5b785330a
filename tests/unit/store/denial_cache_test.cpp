// DenialCache in front of a MemoryStore on the system clock: a known denial is answered
// without the store, only for the same limit and an equal or larger cost, never for peeks,
// explicit-`now` checks or checks with a key not known to be denied.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "ratekeeper/store/denial_cache.hpp"
#include "ratekeeper/store/memory_store.hpp"

namespace ratekeeper::store {
namespace {

using algorithms::Algorithm;

// Counts the checks that reach the store behind it.
class CountingStore final : public Store {
 public:
  void check(std::vector<CheckItem> items, std::optional<Micros> now, CheckCallback done) override {
    calls.fetch_add(1);
    inner.check(std::move(items), now, std::move(done));
  }
  std::string_view kind() const noexcept override { return "counting"; }
  MemoryStore inner;
  std::atomic<int> calls{0};
};

struct Fixture {
  Fixture() {
    auto s = std::make_unique<CountingStore>();
    counting = s.get();
    cache = std::make_unique<DenialCache>(std::move(s));
  }
  CountingStore* counting = nullptr;
  std::unique_ptr<DenialCache> cache;
};

Limit limit(std::int64_t capacity, Micros period) { return *Limit::make(Algorithm::token_bucket, capacity, period); }

TEST(DenialCache, KnownDenialIsAnsweredWithoutTheStore) {
  Fixture f;
  const Limit l = limit(2, 60 * kMicrosPerSecond);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(f.cache->check_sync({{"k", l, 1}})->decision.allowed);
  auto denied = f.cache->check_sync({{"k", l, 1}});
  ASSERT_TRUE(denied);
  EXPECT_FALSE(denied->decision.allowed);
  EXPECT_EQ(f.counting->calls.load(), 3);
  EXPECT_EQ(f.cache->stats().recorded, 1u);

  auto local = f.cache->check_sync({{"k", l, 1}});
  ASSERT_TRUE(local);
  EXPECT_FALSE(local->decision.allowed);
  EXPECT_EQ(f.counting->calls.load(), 3);  // not asked
  EXPECT_EQ(f.cache->stats().hits, 1u);
  EXPECT_EQ(local->decision.limit, 2);
  EXPECT_GT(local->decision.retry_after, 0);
  EXPECT_LE(local->decision.retry_after, denied->decision.retry_after);
  ASSERT_EQ(local->items.size(), 1u);
  EXPECT_FALSE(local->items[0].allowed);
}

TEST(DenialCache, OnlyTheSameLimitAndAnEqualOrLargerCostIsAnsweredLocally) {
  Fixture f;
  const Limit l = limit(4, 60 * kMicrosPerSecond);
  ASSERT_TRUE(f.cache->check_sync({{"k", l, 3}})->decision.allowed);
  ASSERT_FALSE(f.cache->check_sync({{"k", l, 2}})->decision.allowed);  // recorded for cost 2
  const int asked = f.counting->calls.load();

  EXPECT_FALSE(f.cache->check_sync({{"k", l, 3}})->decision.allowed);  // larger: local
  EXPECT_EQ(f.counting->calls.load(), asked);
  EXPECT_TRUE(f.cache->check_sync({{"k", l, 1}})->decision.allowed);   // smaller: the store admits it
  EXPECT_EQ(f.counting->calls.load(), asked + 1);
  EXPECT_TRUE(f.cache->check_sync({{"k", l, 0}})->decision.allowed);   // a peek: the store
  EXPECT_EQ(f.counting->calls.load(), asked + 2);
  EXPECT_FALSE(f.cache->check_sync({{"k", limit(5, 60 * kMicrosPerSecond), 2}})->decision.allowed);
  EXPECT_EQ(f.counting->calls.load(), asked + 3);  // another limit: the store
}

TEST(DenialCache, ExplicitNowAndPartlyKnownChecksGoToTheStore) {
  Fixture f;
  const Limit l = limit(1, 60 * kMicrosPerSecond);
  ASSERT_TRUE(f.cache->check_sync({{"k", l, 1}})->decision.allowed);
  ASSERT_FALSE(f.cache->check_sync({{"k", l, 1}})->decision.allowed);
  const int asked = f.counting->calls.load();
  // Explicit `now`: the store's answer, whatever it is.
  (void)f.cache->check_sync({{"k", l, 1}}, Micros{1});
  EXPECT_EQ(f.counting->calls.load(), asked + 1);
  // "k" is known denied, "other" is not: the store decides (and denies, all-or-nothing).
  auto both = f.cache->check_sync({{"k", l, 1}, {"other", l, 1}});
  ASSERT_TRUE(both);
  EXPECT_FALSE(both->decision.allowed);
  EXPECT_TRUE(both->items[1].allowed);
  EXPECT_EQ(f.counting->calls.load(), asked + 2);
}

TEST(DenialCache, DenialEndsWhenTheStoreCouldAdmitAgain) {
  Fixture f;
  const Limit l = limit(1, 200 * kMicrosPerMilli);  // one unit per 200 ms
  ASSERT_TRUE(f.cache->check_sync({{"k", l, 1}})->decision.allowed);
  auto denied = f.cache->check_sync({{"k", l, 1}});
  ASSERT_FALSE(denied->decision.allowed);
  std::this_thread::sleep_for(std::chrono::microseconds(denied->decision.retry_after + 20 * kMicrosPerMilli));
  const int asked = f.counting->calls.load();
  EXPECT_TRUE(f.cache->check_sync({{"k", l, 1}})->decision.allowed);
  EXPECT_EQ(f.counting->calls.load(), asked + 1);
}

TEST(DenialCache, HoldsAtMostMaxKeysDenials) {
  auto s = std::make_unique<CountingStore>();
  DenialCache cache(std::move(s), DenialCacheOptions{8, 2});
  const Limit l = limit(1, 60 * kMicrosPerSecond);
  for (int i = 0; i < 50; ++i) {
    const std::string key = "k" + std::to_string(i);
    ASSERT_TRUE(cache.check_sync({{key, l, 1}})->decision.allowed);
    ASSERT_FALSE(cache.check_sync({{key, l, 1}})->decision.allowed);
  }
  EXPECT_LE(cache.stats().size, 8u);
}

}  // namespace
}  // namespace ratekeeper::store
