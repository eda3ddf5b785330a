// DenialCache in front of a MemoryStore, both on one manual clock: a known denial is answered
// without the store, only for the same limit and an equal or larger cost, never for peeks,
// explicit-`now` checks or checks with a key not known to be denied; and a denial lasts
// retry_after from when its check was sent, not from when the store answered.

#include <gtest/gtest.h>

#include <atomic>
#include <deque>

#include "ratekeeper/store/denial_cache.hpp"
#include "ratekeeper/store/memory_store.hpp"

namespace ratekeeper::store {
namespace {

using algorithms::Algorithm;

// Counts the checks that reach the store behind it.
class CountingStore final : public Store {
 public:
  explicit CountingStore(const Clock* clock) : inner(MemoryStoreOptions{.clock = clock}) {}
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
    auto s = std::make_unique<CountingStore>(&clock);
    counting = s.get();
    cache = std::make_unique<DenialCache>(std::move(s), DenialCacheOptions{.clock = &clock});
  }
  ManualClock clock{1'000'000'000};
  CountingStore* counting = nullptr;
  std::unique_ptr<DenialCache> cache;
};

// Answers each check only when the test says so, with the outcome the test gives.
class HeldStore final : public Store {
 public:
  void check(std::vector<CheckItem>, std::optional<Micros>, CheckCallback done) override {
    held.push_back(std::move(done));
  }
  std::string_view kind() const noexcept override { return "held"; }
  void answer(const Decision& d) {
    auto done = std::move(held.front());
    held.pop_front();
    done(CheckOutcome{d, {d}});
  }
  std::deque<CheckCallback> held;
};

Limit limit(std::int64_t capacity, Micros period) { return *Limit::make(Algorithm::token_bucket, capacity, period); }

// Checks one after the other, of other keys and other numbers of items: each records its own
// denial (the cache keeps what a check passed on for the next one, and must not mix them).
TEST(DenialCache, EachCheckRecordsItsOwnItems) {
  Fixture f;
  const Limit big = limit(100, 60 * kMicrosPerSecond);
  const Limit one = limit(1, 60 * kMicrosPerSecond);
  ASSERT_TRUE(f.cache->check_sync({{"a", big, 1}, {"b", big, 1}})->decision.allowed);
  ASSERT_TRUE(f.cache->check_sync({{"c", one, 1}})->decision.allowed);
  ASSERT_FALSE(f.cache->check_sync({{"c", one, 1}})->decision.allowed);
  EXPECT_EQ(f.cache->stats().recorded, 1u);
  const int calls = f.counting->calls.load();
  EXPECT_FALSE(f.cache->check_sync({{"c", one, 1}})->decision.allowed);  // c's denial, known
  EXPECT_EQ(f.counting->calls.load(), calls);
  EXPECT_TRUE(f.cache->check_sync({{"a", big, 1}})->decision.allowed);  // a was never denied
  EXPECT_EQ(f.counting->calls.load(), calls + 1);
  // A two-item check denied by its second item, after the one-item checks.
  ASSERT_FALSE(f.cache->check_sync({{"d", big, 1}, {"c", one, 1}})->decision.allowed);
  EXPECT_EQ(f.cache->stats().recorded, 2u);  // c again (d admitted is not recorded)
}

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

// A check that may wait for its turn is admitted (later) where a plain one is denied: the
// store decides it, even with a live denial of its key.
TEST(DenialCache, ClearForgetsEveryDenial) {
  Fixture f;
  const Limit l = limit(1, 60 * kMicrosPerSecond);
  for (const char* key : {"a", "b"}) {
    ASSERT_TRUE(f.cache->check_sync({{key, l, 1}})->decision.allowed);
    ASSERT_FALSE(f.cache->check_sync({{key, l, 1}})->decision.allowed);
  }
  EXPECT_EQ(f.cache->stats().size, 2u);
  f.cache->clear();
  EXPECT_EQ(f.cache->stats().size, 0u);
  const int calls = f.counting->calls.load();
  EXPECT_FALSE(f.cache->check_sync({{"a", l, 1}})->decision.allowed);
  EXPECT_EQ(f.counting->calls.load(), calls + 1);  // asked the store again
  EXPECT_EQ(f.cache->stats().hits, 0u);
}

TEST(DenialCache, ChecksThatMayWaitAlwaysReachTheStore) {
  Fixture f;
  const Limit l = limit(2, 60 * kMicrosPerSecond);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(f.cache->check_sync({{"k", l, 1}})->decision.allowed);
  ASSERT_FALSE(f.cache->check_sync({{"k", l, 1}})->decision.allowed);
  ASSERT_EQ(f.cache->stats().recorded, 1u);
  const int asked = f.counting->calls.load();

  auto waited = f.cache->check_sync({{"k", l, 1, 60 * kMicrosPerSecond}});
  ASSERT_TRUE(waited);
  EXPECT_TRUE(waited->decision.allowed);
  EXPECT_EQ(waited->decision.delay, 60 * kMicrosPerSecond);
  EXPECT_EQ(f.counting->calls.load(), asked + 1);
  EXPECT_EQ(f.cache->stats().hits, 0u);
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
  ASSERT_GT(denied->decision.retry_after, 1);
  f.clock.advance(denied->decision.retry_after - 1);
  int asked = f.counting->calls.load();
  EXPECT_FALSE(f.cache->check_sync({{"k", l, 1}})->decision.allowed);
  EXPECT_EQ(f.counting->calls.load(), asked);  // still known denied
  f.clock.advance(1);
  asked = f.counting->calls.load();
  EXPECT_TRUE(f.cache->check_sync({{"k", l, 1}})->decision.allowed);
  EXPECT_EQ(f.counting->calls.load(), asked + 1);
}

// The store answers 300 ms after the check was sent, denying for 1 s: the denial is known
// until 1 s after the sending (what the store itself would answer then), not after the reply.
TEST(DenialCache, DenialIsTimedFromWhenTheCheckWasSent) {
  ManualClock clock(1'000'000'000);
  auto held = std::make_unique<HeldStore>();
  HeldStore& store = *held;
  DenialCache cache(std::move(held), DenialCacheOptions{.clock = &clock});
  const Limit l = limit(1, kMicrosPerSecond);
  std::optional<Result<CheckOutcome>> first;
  cache.check({{"k", l, 1}}, std::nullopt, [&](Result<CheckOutcome> r) { first = std::move(r); });
  ASSERT_EQ(store.held.size(), 1u);
  clock.advance(300 * kMicrosPerMilli);
  store.answer(Decision{.allowed = false, .limit = 1, .remaining = 0, .retry_after = kMicrosPerSecond,
                        .reset_after = 2 * kMicrosPerSecond});
  ASSERT_TRUE(first && *first);
  EXPECT_EQ(cache.stats().recorded, 1u);

  std::optional<Result<CheckOutcome>> local;
  cache.check({{"k", l, 1}}, std::nullopt, [&](Result<CheckOutcome> r) { local = std::move(r); });
  EXPECT_TRUE(store.held.empty());
  ASSERT_TRUE(local && *local);
  EXPECT_FALSE((*local)->decision.allowed);
  EXPECT_EQ((*local)->decision.retry_after, 700 * kMicrosPerMilli);
  EXPECT_EQ((*local)->decision.reset_after, 1700 * kMicrosPerMilli);

  clock.advance(700 * kMicrosPerMilli - 1);
  cache.check({{"k", l, 1}}, std::nullopt, [](Result<CheckOutcome>) {});
  EXPECT_TRUE(store.held.empty());
  EXPECT_EQ(cache.stats().hits, 2u);
  // 1 s after the first check was sent: the store decides again.
  clock.advance(1);
  cache.check({{"k", l, 1}}, std::nullopt, [](Result<CheckOutcome>) {});
  EXPECT_EQ(store.held.size(), 1u);
  EXPECT_EQ(cache.stats().hits, 2u);
  store.answer(Decision{.allowed = true, .limit = 1});
}

TEST(DenialCache, HoldsAtMostMaxKeysDenials) {
  ManualClock clock(0);
  auto s = std::make_unique<CountingStore>(&clock);
  DenialCache cache(std::move(s), DenialCacheOptions{8, 2, &clock});
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
