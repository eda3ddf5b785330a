// MemoryStore: decisions as the algorithms define them, TTL reclamation, the max_keys bound,
// all-or-nothing batches, and the asynchronous interface.

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <fmt/format.h>

#include <map>
#include <string>
#include <vector>

#include "algorithm_test_support.hpp"
#include "ratekeeper/store/memory_store.hpp"

namespace ratekeeper::testing {
namespace {

using store::CheckItem;
using store::CheckOutcome;
using store::MemoryStore;
using store::MemoryStoreOptions;

constexpr Micros kT0 = 1'700'000'000'000'000;

Decision must_check(MemoryStore& store, std::string_view key, const Limit& limit, std::int64_t cost,
                    std::optional<Micros> now = {}) {
  auto d = store.check_one(key, limit, cost, now);
  EXPECT_TRUE(d) << d.error().message;
  return d.value_or(Decision{});
}

std::string user_key(int i) { return fmt::format("ratelimit:{{user:{}}}:api", i); }

std::vector<CheckItem> items_for(const std::vector<std::string>& keys, const Limit& limit,
                                 std::int64_t cost = 1) {
  std::vector<CheckItem> items;
  for (const auto& k : keys) items.push_back({k, limit, cost});
  return items;
}

TEST(MemoryStore, DecidesExactlyAsTheAlgorithm) {
  for (auto algorithm : {Algorithm::token_bucket, Algorithm::sliding_window_log,
                         Algorithm::sliding_window_counter, Algorithm::fixed_window}) {
    const Limit limit = make_limit(algorithm, 5, 1'000);
    MemoryStore store;
    Key model(limit);
    Micros now = kT0;
    for (int i = 0; i < 200; ++i) {
      now += (i * 37) % 450;
      const std::int64_t cost = (i * 7) % 6;
      EXPECT_EQ(must_check(store, "k", limit, cost, now), model.at(now, cost))
          << describe(limit) << " step " << i;
    }
  }
}

TEST(MemoryStore, ReadsItsClockWhenNoTimeIsGiven) {
  ManualClock clock(kT0);
  MemoryStore store(MemoryStoreOptions{.clock = &clock});
  const Limit limit = make_limit(Algorithm::token_bucket, 2, kMicrosPerSecond);
  EXPECT_TRUE(must_check(store, "k", limit, 2).allowed);
  const Decision denied = must_check(store, "k", limit, 1);
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.retry_after, kMicrosPerSecond);
  clock.advance(kMicrosPerSecond - 1);
  EXPECT_FALSE(must_check(store, "k", limit, 1).allowed);
  clock.advance(1);
  EXPECT_TRUE(must_check(store, "k", limit, 1).allowed);
  EXPECT_EQ(store.kind(), "memory");
}

TEST(MemoryStore, KeysAreIndependent) {
  MemoryStore store;
  const Limit limit = make_limit(Algorithm::fixed_window, 1, kMicrosPerSecond);
  EXPECT_TRUE(must_check(store, "a", limit, 1, kT0).allowed);
  EXPECT_FALSE(must_check(store, "a", limit, 1, kT0).allowed);
  EXPECT_TRUE(must_check(store, "b", limit, 1, kT0).allowed);
}

TEST(MemoryStore, AKeyReusedWithAnotherAlgorithmStartsFromAbsent) {
  MemoryStore store;
  const Limit log = make_limit(Algorithm::sliding_window_log, 3, kMicrosPerSecond);
  const Limit bucket = make_limit(Algorithm::token_bucket, 3, kMicrosPerSecond);
  ASSERT_TRUE(must_check(store, "k", log, 3, kT0).allowed);
  EXPECT_EQ(must_check(store, "k", bucket, 1, kT0).remaining, 2);
}

TEST(MemoryStore, APeekCreatesNoKey) {
  MemoryStore store;
  const Limit limit = make_limit(Algorithm::token_bucket, 3, kMicrosPerSecond);
  const Decision d = must_check(store, "k", limit, 0, kT0);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 3);
  EXPECT_EQ(store.stats().keys, 0u);
}

// A reset erases the keys; only those live at the store's clock count as held.
// Reservation records are bounded by max_keys: a full store sweeps the expired ones, then
// refuses a new reservation before consuming anything (the failure policy decides).
TEST(MemoryStore, ReservationRecordsAreBoundedAndARefusedOneConsumesNothing) {
  ManualClock clock(kT0);
  MemoryStore store(MemoryStoreOptions{.max_keys = 2, .clock = &clock});
  const Limit limit = make_limit(Algorithm::token_bucket, 10, kMicrosPerSecond * 1000);
  auto reserve = [&](std::string record, Micros ttl) {
    Result<CheckOutcome> out = make_error(ErrorCode::unavailable, "not answered");
    store.reserve(store::ReservationRecord{std::move(record), ttl}, {{"k", limit, 1}}, std::nullopt,
                  [&](Result<CheckOutcome> r) { out = std::move(r); });
    return out;
  };
  ASSERT_TRUE(reserve("r1", kMicrosPerSecond));
  ASSERT_TRUE(reserve("r2", 10 * kMicrosPerSecond));
  auto full = reserve("r3", kMicrosPerSecond);
  ASSERT_FALSE(full);
  EXPECT_EQ(full.error().code, ErrorCode::store_full);
  EXPECT_EQ(must_check(store, "k", limit, 0).remaining, 8);
  clock.advance(kMicrosPerSecond);  // r1 expired: its room is taken again
  ASSERT_TRUE(reserve("r3", kMicrosPerSecond));
  EXPECT_EQ(must_check(store, "k", limit, 0).remaining, 7);
}

TEST(MemoryStore, AResetErasesTheKeysAndCountsTheLiveOnes) {
  ManualClock clock(kT0);
  MemoryStore store(MemoryStoreOptions{.clock = &clock});
  const Limit limit = make_limit(Algorithm::token_bucket, 3, kMicrosPerSecond);
  const Decision old = must_check(store, "old", limit, 1);
  clock.advance(old.reset_after);  // "old" has expired, not yet reclaimed
  ASSERT_TRUE(must_check(store, "a", limit, 3).allowed);
  ASSERT_EQ(store.stats().keys, 2u);
  std::optional<Result<std::int64_t>> out;
  store.reset({"a", "old", "never"}, [&](Result<std::int64_t> r) { out = std::move(r); });
  ASSERT_TRUE(out.has_value());
  ASSERT_TRUE(*out);
  EXPECT_EQ(**out, 1);
  EXPECT_EQ(store.stats().keys, 0u);
  EXPECT_EQ(must_check(store, "a", limit, 0).remaining, 3);
}

TEST(MemoryStore, AnExpiredKeyAnswersAsAbsentAndIsErasedWhenTouched) {
  ManualClock clock(kT0);
  MemoryStore store(MemoryStoreOptions{.clock = &clock});
  const Limit limit = make_limit(Algorithm::token_bucket, 3, kMicrosPerSecond);
  const Decision first = must_check(store, "k", limit, 3);
  ASSERT_TRUE(first.allowed);
  EXPECT_EQ(store.stats().keys, 1u);
  clock.advance(first.reset_after);
  // At expires_at the key is as if never used...
  EXPECT_EQ(must_check(store, "k", limit, 0), must_step(limit, State{}, clock.now(), 0).decision);
  // ...and a peek, which leaves nothing to store, removes it.
  EXPECT_EQ(store.stats().keys, 0u);
}

TEST(MemoryStore, ExpiredKeysAreReclaimedByTheIncrementalSweep) {
  ManualClock clock(kT0);
  MemoryStore store(MemoryStoreOptions{.clock = &clock});
  const Limit limit = make_limit(Algorithm::token_bucket, 1, kMicrosPerSecond);
  constexpr int kKeys = 2000;
  for (int i = 0; i < kKeys; ++i) ASSERT_TRUE(must_check(store, user_key(i), limit, 1).allowed);
  EXPECT_EQ(store.stats().keys, static_cast<std::uint64_t>(kKeys));
  EXPECT_EQ(store.stats().reclaimed, 0u);

  // Live keys are never reclaimed, however many keys arrive.
  for (int i = kKeys; i < 2 * kKeys; ++i) ASSERT_TRUE(must_check(store, user_key(i), limit, 1).allowed);
  EXPECT_EQ(store.stats().reclaimed, 0u);
  EXPECT_EQ(store.stats().keys, static_cast<std::uint64_t>(2 * kKeys));

  // Once they have expired, new insertions sweep them away.
  clock.advance(2 * kMicrosPerSecond);
  for (int i = 2 * kKeys; i < 4 * kKeys; ++i) ASSERT_TRUE(must_check(store, user_key(i), limit, 1).allowed);
  const auto stats = store.stats();
  EXPECT_GE(stats.reclaimed, static_cast<std::uint64_t>(kKeys));
  EXPECT_EQ(stats.keys, 4 * kKeys - stats.reclaimed);
  EXPECT_LT(stats.keys, static_cast<std::uint64_t>(3 * kKeys));
}

TEST(MemoryStore, WhenFullNewKeysAreRefusedAndExistingKeysKeepWorking) {
  ManualClock clock(kT0);
  MemoryStore store(MemoryStoreOptions{.max_keys = 100, .clock = &clock});
  const Limit limit = make_limit(Algorithm::token_bucket, 2, kMicrosPerSecond);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(must_check(store, user_key(i), limit, 1).allowed) << i;

  auto refused = store.check_one(user_key(100), limit, 1);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::store_full);
  EXPECT_TRUE(refused.error().is_store_failure());
  EXPECT_EQ(store.stats().rejected_full, 1u);
  EXPECT_EQ(store.stats().keys, 100u);

  // Keys already present are still limited as before.
  EXPECT_TRUE(must_check(store, user_key(7), limit, 1).allowed);
  EXPECT_FALSE(must_check(store, user_key(7), limit, 1).allowed);
  // A peek of an unknown key needs no room.
  EXPECT_EQ(must_check(store, user_key(100), limit, 0).remaining, 2);

  // Once the keys have expired, room is made for new ones.
  clock.advance(10 * kMicrosPerSecond);
  EXPECT_TRUE(must_check(store, user_key(100), limit, 1).allowed);
  EXPECT_GE(store.stats().reclaimed, 1u);
  EXPECT_EQ(store.stats().rejected_full, 1u);
}

TEST(MemoryStore, ASmallMaxKeysIsNotRefusedFarBelowItsBound) {
  MemoryStore store(MemoryStoreOptions{.max_keys = 1000});
  const Limit limit = make_limit(Algorithm::token_bucket, 1, kMicrosPerSecond);
  int admitted = 0;
  for (int i = 0; i < 1000; ++i) admitted += store.check_one(user_key(i), limit, 1, kT0).has_value();
  EXPECT_GE(admitted, 900);
  EXPECT_LE(store.stats().keys, 1000u);
}

// Sixteen keys spread over many of the 64 shards.
std::vector<std::string> spread_keys() {
  std::vector<std::string> keys;
  for (int i = 0; i < 16; ++i) keys.push_back(user_key(i));
  return keys;
}

TEST(MemoryStore, ABatchConsumesFromEveryKeyOrFromNone) {
  MemoryStore store;
  const Limit limit = make_limit(Algorithm::token_bucket, 3, kMicrosPerSecond);
  const auto keys = spread_keys();
  ASSERT_TRUE(must_check(store, keys[5], limit, 3, kT0).allowed);

  auto denied = store.check_batch(items_for(keys, limit), kT0);
  ASSERT_TRUE(denied) << denied.error().message;
  EXPECT_FALSE(denied->decision.allowed);
  ASSERT_EQ(denied->items.size(), keys.size());
  EXPECT_FALSE(denied->items[5].allowed);
  EXPECT_EQ(denied->decision.retry_after, limit.period);  // key 5 waits for one token
  for (std::size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(must_check(store, keys[i], limit, 0, kT0).remaining, i == 5 ? 0 : 3) << keys[i];
  }
  EXPECT_EQ(store.stats().keys, 1u);  // a denial creates no key

  std::vector<std::string> others = keys;
  others.erase(others.begin() + 5);
  auto allowed = store.check_batch(items_for(others, limit), kT0);
  ASSERT_TRUE(allowed) << allowed.error().message;
  EXPECT_TRUE(allowed->decision.allowed);
  for (const auto& k : others) EXPECT_EQ(must_check(store, k, limit, 0, kT0).remaining, 2) << k;
  EXPECT_EQ(store.stats().keys, keys.size());
}

TEST(MemoryStore, ABatchNamingAKeyTwiceIsAnInvalidArgument) {
  MemoryStore store;
  const Limit limit = make_limit(Algorithm::token_bucket, 3, kMicrosPerSecond);
  auto r = store.check_batch(items_for({"a", "b", "a"}, limit), kT0);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(r.error().message.find("twice"), std::string::npos) << r.error().message;
  EXPECT_EQ(store.stats().keys, 0u);
}

TEST(MemoryStore, ABatchThatDoesNotFitCreatesNoKey) {
  MemoryStore store(MemoryStoreOptions{.max_keys = 100});
  const Limit limit = make_limit(Algorithm::token_bucket, 2, kMicrosPerSecond);
  for (int i = 0; i < 99; ++i) ASSERT_TRUE(must_check(store, user_key(i), limit, 1, kT0).allowed);
  auto refused = store.check_batch(items_for({user_key(1000), user_key(1001)}, limit), kT0);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::store_full);
  EXPECT_EQ(store.stats().keys, 99u);
  EXPECT_EQ(store.stats().rejected_full, 1u);
  EXPECT_EQ(must_check(store, user_key(3), limit, 0, kT0).remaining, 1);  // not consumed

  auto fits = store.check_batch(items_for({user_key(3), user_key(1000)}, limit), kT0);
  ASSERT_TRUE(fits) << fits.error().message;
  EXPECT_TRUE(fits->decision.allowed);
  EXPECT_EQ(store.stats().keys, 100u);
}

TEST(MemoryStore, AFullStoreTakesBatchesAgainOnceKeysHaveExpired) {
  ManualClock clock(kT0);
  MemoryStore store(MemoryStoreOptions{.max_keys = 100, .clock = &clock});
  const Limit limit = make_limit(Algorithm::token_bucket, 2, kMicrosPerSecond);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(must_check(store, user_key(i), limit, 1).allowed);
  auto refused = store.check_batch(items_for({user_key(0), user_key(500)}, limit));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::store_full);

  clock.advance(2 * kMicrosPerSecond);
  auto fits = store.check_batch(items_for({user_key(0), user_key(500), user_key(501)}, limit));
  ASSERT_TRUE(fits) << fits.error().message;
  EXPECT_TRUE(fits->decision.allowed);
  EXPECT_EQ(fits->decision.remaining, 1);
  const auto stats = store.stats();
  EXPECT_LE(stats.keys, 100u);
  // 100 keys, then user_key(0) again once expired, 500 and 501.
  EXPECT_EQ(stats.keys + stats.reclaimed, 103u);
}

TEST(MemoryStore, ABatchMixesAlgorithmsAndCosts) {
  MemoryStore store;
  const std::vector<CheckItem> items{
      {"ratelimit:{user:1}:api:per_second", make_limit(Algorithm::token_bucket, 10, 100'000), 2},
      {"ratelimit:{user:1}:api:per_minute", make_limit(Algorithm::sliding_window_log, 5, 60 * kMicrosPerSecond), 2},
      {"ratelimit:{user:1}:api:per_hour", make_limit(Algorithm::fixed_window, 100, 3600 * kMicrosPerSecond), 2}};
  for (int i = 0; i < 2; ++i) {
    auto ok = store.check_batch(items, kT0);
    ASSERT_TRUE(ok);
    EXPECT_TRUE(ok->decision.allowed);
  }
  auto denied = store.check_batch(items, kT0);
  ASSERT_TRUE(denied);
  EXPECT_FALSE(denied->decision.allowed);
  EXPECT_EQ(denied->decision.limit, 5);  // the minute frees up last
  EXPECT_EQ(must_check(store, items[0].key, items[0].limit, 0, kT0).remaining, 6);
  EXPECT_EQ(must_check(store, items[2].key, items[2].limit, 0, kT0).remaining, 96);
}

TEST(MemoryStore, CheckAnswersThroughTheCallbackExactlyOnceBeforeReturning) {
  MemoryStore store;
  const Limit limit = make_limit(Algorithm::token_bucket, 3, kMicrosPerSecond);
  int calls = 0;
  Result<CheckOutcome> seen = make_error(ErrorCode::unavailable, "not called");
  store.check(items_for({"a", "b"}, limit), kT0, [&](Result<CheckOutcome> r) {
    ++calls;
    seen = std::move(r);
  });
  EXPECT_EQ(calls, 1);
  ASSERT_TRUE(seen);
  EXPECT_TRUE(seen->decision.allowed);
  EXPECT_EQ(seen->items.size(), 2u);

  auto sync = store.check_sync(items_for({"a"}, limit), kT0);
  ASSERT_TRUE(sync);
  EXPECT_EQ(sync->decision.remaining, 1);
  ASSERT_EQ(sync->items.size(), 1u);
  EXPECT_EQ(sync->items[0], sync->decision);
}

TEST(MemoryStore, InvalidCostsAndTimesAreInvalidArguments) {
  MemoryStore store;
  const Limit limit = make_limit(Algorithm::token_bucket, 3, kMicrosPerSecond);
  for (std::int64_t cost : {std::int64_t{-1}, std::int64_t{4}}) {
    auto one = store.check_one("k", limit, cost, kT0);
    ASSERT_FALSE(one);
    EXPECT_EQ(one.error().code, ErrorCode::invalid_argument);
    EXPECT_NE(one.error().message.find("cost"), std::string::npos);
    auto batch = store.check_sync({{"a", limit, 1}, {"b", limit, cost}}, kT0);
    ASSERT_FALSE(batch);
    EXPECT_EQ(batch.error().code, ErrorCode::invalid_argument);
  }
  auto past = store.check_one("k", limit, 1, -5);
  ASSERT_FALSE(past);
  EXPECT_NE(past.error().message.find("now"), std::string::npos);
  EXPECT_EQ(store.stats().keys, 0u);
}

// The store forgets a key at expires_at; a model that never forgets must answer the same,
// because at expires_at the state is indistinguishable from absent.
RC_GTEST_PROP(MemoryStoreProperty, AnswersAsTheAlgorithmsWithStatesKeptForever, ()) {
  const auto algorithm = *rc::gen::element(Algorithm::token_bucket, Algorithm::sliding_window_log,
                                           Algorithm::sliding_window_counter, Algorithm::fixed_window);
  const auto capacity = *rc::gen::inRange<std::int64_t>(1, 6);
  const auto period = *rc::gen::inRange<Micros>(1, 50);
  const Limit limit = *Limit::make(algorithm, capacity, period);
  const auto ops = *rc::gen::container<std::vector<std::tuple<int, Micros, std::int64_t>>>(
      rc::gen::tuple(rc::gen::inRange(0, 3), rc::gen::inRange<Micros>(0, 3 * capacity * period),
                     rc::gen::inRange<std::int64_t>(0, capacity + 1)));
  MemoryStore store(MemoryStoreOptions{.shards = 2});
  std::map<int, State> model;
  Micros now = 1'000'000;
  for (const auto& [key, dt, cost] : ops) {
    now += dt;
    auto got = store.check_one(std::to_string(key), limit, cost, now);
    RC_ASSERT(got.has_value());
    auto want = algorithms::step(limit, model[key], now, cost);
    RC_ASSERT(want.has_value());
    model[key] = want->state;
    RC_ASSERT(*got == want->decision);
  }
}

}  // namespace
}  // namespace ratekeeper::testing
