// The same store checks against every distributed topology: a standalone redis-server, a
// 3-master cluster with replicas, and a Sentinel-managed master. Every algorithm is compared
// with MemoryStore on the same time sequence; multi-limit checks are atomic; the seed's
// limiter classes behave as specified.

#include <gtest/gtest.h>

#include <array>
#include <atomic>

#include <algorithm>

#include <mutex>

#include <chrono>
#include <future>
#include <memory>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "algorithms/step.hpp"
#include "ratekeeper/limiter/limiter.hpp"
#include "ratekeeper/limiter/rate_limiters.hpp"
#include "redis/key_slot.hpp"
#include "ratekeeper/store/denial_cache.hpp"
#include "ratekeeper/store/leasing_store.hpp"
#include "ratekeeper/store/memory_store.hpp"
#include "ratekeeper/store/open_store.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_sentinel.hpp"
#include "support/redis_server.hpp"

namespace ratekeeper::store {
namespace {

using algorithms::Algorithm;
using namespace std::chrono_literals;

enum class Topology { standalone, cluster, sentinel };

std::string_view name_of(Topology t) {
  switch (t) {
    case Topology::standalone: return "standalone";
    case Topology::cluster: return "cluster";
    case Topology::sentinel: return "sentinel";
  }
  return "?";
}

std::string url_of(Topology t) {
  switch (t) {
    case Topology::standalone: {
      static testing::RedisServer server;
      return server.url();
    }
    case Topology::cluster: return testing::shared_cluster().url();
    case Topology::sentinel: return testing::shared_sentinel_group().url();
  }
  return {};
}

constexpr Micros kT0 = 1'000'000'000'000;  // an explicit `now`, far from 0

class StoreSuite : public ::testing::TestWithParam<Topology> {
 protected:
  void SetUp() override {
    StoreOptions o;
    o.url = url_of(GetParam());
    o.command_timeout = 2 * kMicrosPerSecond;  // correctness here, not latency
    auto opened = open_store(o);
    ASSERT_TRUE(opened) << opened.error().message;
    store_ = std::move(*opened);
    const auto end = std::chrono::steady_clock::now() + 20s;
    while (!store_->health().ready && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(10ms);
    ASSERT_TRUE(store_->health().ready) << store_->health().detail;
  }

  // A key of its own for this test and topology, under `identity`.
  std::string key(std::string_view identity, std::string_view rule = "r") const {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    return fmt::format("suite:{{{}-{}-{}-{}}}:{}", name_of(GetParam()), info->name(), ::getpid(), identity, rule);
  }

  // `n` more stores on the same topology: the instances of a test of several instances.
  void open_instances(std::vector<std::unique_ptr<Store>>& out, int n = 3) const {
    for (int i = 0; i < n; ++i) {
      StoreOptions o;
      o.url = url_of(GetParam());
      o.command_timeout = 5 * kMicrosPerSecond;
      auto opened = open_store(o);
      ASSERT_TRUE(opened) << opened.error().message;
      out.push_back(std::move(*opened));
    }
  }

  std::unique_ptr<Store> store_;
};

TEST_P(StoreSuite, EveryAlgorithmDecidesAsMemoryStoreOnTheSameTimeSequence) {
  MemoryStore memory;
  for (auto algorithm : {Algorithm::token_bucket, Algorithm::sliding_window_log, Algorithm::sliding_window_counter,
                         Algorithm::fixed_window}) {
    auto limit = algorithms::Limit::make(algorithm, 5, algorithm == Algorithm::token_bucket ? 200'000 : kMicrosPerSecond);
    ASSERT_TRUE(limit) << limit.error().message;
    const std::string k = key(algorithms::to_string(algorithm));
    // Bursts, a peek, costs above one, and gaps shorter and longer than the period.
    const std::vector<std::pair<Micros, std::int64_t>> steps = {
        {0, 1},       {0, 1},       {0, 2},       {1, 1},       {2, 1},       {3, 0},
        {150'000, 1}, {400'000, 3}, {999'999, 1}, {1'000'000, 1}, {1'500'000, 2}, {1'700'000, 5},
        {4'000'000, 5}, {4'000'001, 1}, {4'000'002, 0}};
    for (const auto& [dt, cost] : steps) {
      auto redis = store_->check_sync({{k, *limit, cost}}, kT0 + dt);
      auto mem = memory.check_sync({{k, *limit, cost}}, kT0 + dt);
      ASSERT_TRUE(redis) << redis.error().message;
      ASSERT_TRUE(mem) << mem.error().message;
      EXPECT_EQ(redis->decision, mem->decision)
          << algorithms::to_string(algorithm) << " at +" << dt << " cost " << cost;
    }
  }
}

TEST_P(StoreSuite, MultiLimitChecksAreAllOrNothingOnOneSlot) {
  auto per_second = algorithms::Limit::make(Algorithm::fixed_window, 2, kMicrosPerSecond);
  auto per_minute = algorithms::Limit::make(Algorithm::token_bucket, 5, 12 * kMicrosPerSecond);
  ASSERT_TRUE(per_second && per_minute);
  const auto a = key("user", "search:0");
  const auto b = key("user", "search:1");
  auto batch = [&](std::int64_t cost) {
    return std::vector<CheckItem>{{a, *per_second, cost}, {b, *per_minute, cost}};
  };
  for (int i = 0; i < 2; ++i) {
    auto r = store_->check_sync(batch(1), kT0);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_TRUE(r->decision.allowed);
  }
  // The per-second limit denies: the per-minute bucket must not be charged.
  auto denied = store_->check_sync(batch(1), kT0 + 10);
  ASSERT_TRUE(denied) << denied.error().message;
  EXPECT_FALSE(denied->decision.allowed);
  ASSERT_EQ(denied->items.size(), 2u);
  EXPECT_FALSE(denied->items[0].allowed);
  auto peek = store_->check_sync({{b, *per_minute, 0}}, kT0 + 10);
  ASSERT_TRUE(peek) << peek.error().message;
  EXPECT_EQ(peek->decision.remaining, 3);
}

TEST_P(StoreSuite, InvalidArgumentsAreRefusedBeforeTheStoreIsAsked) {
  auto limit = algorithms::Limit::make(Algorithm::token_bucket, 3, kMicrosPerSecond);
  ASSERT_TRUE(limit);
  auto too_big = store_->check_sync({{key("x"), *limit, 4}}, kT0);
  ASSERT_FALSE(too_big);
  EXPECT_EQ(too_big.error().code, ErrorCode::invalid_argument);
  auto twice = store_->check_sync({{key("x"), *limit, 1}, {key("x"), *limit, 1}}, kT0);
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.error().code, ErrorCode::invalid_argument);
}

TEST_P(StoreSuite, ChecksOfSeveralIdentitiesAreAnsweredItemByItem) {
  auto limit = algorithms::Limit::make(Algorithm::fixed_window, 1, 10 * kMicrosPerSecond);
  ASSERT_TRUE(limit);
  const auto ip = key("ip", "global");
  const auto user = key("user", "api");
  auto first = store_->check_sync({{ip, *limit, 1}, {user, *limit, 1}}, kT0);
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_TRUE(first->decision.allowed);
  auto second = store_->check_sync({{ip, *limit, 1}, {user, *limit, 1}}, kT0 + 1);
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_FALSE(second->decision.allowed);
  ASSERT_EQ(second->items.size(), 2u);
  EXPECT_FALSE(second->items[0].allowed);
  EXPECT_FALSE(second->items[1].allowed);
}

TEST_P(StoreSuite, SeedLimiterClassesAllowTheirCapacityThenDeny) {
  limiter::RateLimiterOptions options;
  // A prefix of this test's own; no braces: the identity carries the hash tag.
  options.prefix = fmt::format("suite-{}-{}-{}", name_of(GetParam()),
                               ::testing::UnitTest::GetInstance()->current_test_info()->name(), ::getpid());
  auto bucket = limiter::TokenBucketRateLimiter::create(*store_, 10, 1.0, options);
  auto sliding = limiter::SlidingWindowRateLimiter::create(*store_, 60000, 10, options);
  auto fixed = limiter::FixedWindowRateLimiter::create(*store_, 60, 10, options);
  ASSERT_TRUE(bucket && sliding && fixed);
  for (const limiter::RateLimiter* l : {static_cast<const limiter::RateLimiter*>(&*bucket),
                                        static_cast<const limiter::RateLimiter*>(&*sliding),
                                        static_cast<const limiter::RateLimiter*>(&*fixed)}) {
    for (int i = 0; i < 10; ++i) {
      auto d = l->allow("203.0.113.9", 1, kT0 + i);
      ASSERT_TRUE(d) << d.error().message;
      EXPECT_TRUE(d->allowed) << l->rule() << " request " << i;
      EXPECT_EQ(d->remaining, 9 - i) << l->rule();
    }
    auto d = l->allow("203.0.113.9", 1, kT0 + 10);
    ASSERT_TRUE(d) << d.error().message;
    EXPECT_FALSE(d->allowed) << l->rule();
    EXPECT_GT(d->retry_after, 0) << l->rule();
  }
  limiter::TieredRateLimiter tiers(*store_, options);
  int allowed = 0;
  for (int i = 0; i < 70; ++i) {
    auto d = tiers.allow("user:42", "free", 1, kT0);
    ASSERT_TRUE(d) << d.error().message;
    allowed += d->allowed ? 1 : 0;
  }
  EXPECT_EQ(allowed, 60);
}

TEST_P(StoreSuite, ServerClockIsUsedWithoutAnExplicitNow) {
  auto limit = algorithms::Limit::make(Algorithm::token_bucket, 2, 60 * kMicrosPerSecond);
  ASSERT_TRUE(limit);
  const auto k = key("clock");
  EXPECT_TRUE(store_->check_sync({{k, *limit, 1}})->decision.allowed);
  EXPECT_TRUE(store_->check_sync({{k, *limit, 1}})->decision.allowed);
  auto third = store_->check_sync({{k, *limit, 1}});
  ASSERT_TRUE(third) << third.error().message;
  EXPECT_FALSE(third->decision.allowed);
  EXPECT_GT(third->decision.retry_after, 50 * kMicrosPerSecond);
}

// Many checks in flight at once (coalesced into batch script calls on the stores that do):
// exactly the capacity is admitted, each admission with its own remaining count, and checks
// of other keys in the same calls are answered too.
TEST_P(StoreSuite, ConcurrentChecksAreExact) {
  const Limit hot = *Limit::make(algorithms::Algorithm::token_bucket, 100, 3'600'000'000);
  const Limit other = *Limit::make(algorithms::Algorithm::fixed_window, 1, 3'600'000'000);
  const std::string hot_key = key("hot");
  std::mutex mu;
  std::vector<std::int64_t> remaining;
  int denied = 0, others = 0, errors = 0;
  std::atomic<int> answered{0};
  constexpr int kHot = 250, kOther = 50;
  for (int i = 0; i < kHot + kOther; ++i) {
    std::vector<CheckItem> items;
    const bool is_hot = i % 6 != 5;  // one in six is another identity's key
    if (is_hot) {
      items.push_back({hot_key, hot, 1});
    } else {
      items.push_back({key(fmt::format("other-{}", i)), other, 1});
    }
    store_->check(std::move(items), std::nullopt, [&, is_hot](Result<CheckOutcome> r) {
      std::lock_guard lock(mu);
      if (!r) {
        ++errors;
      } else if (!is_hot) {
        others += r->decision.allowed;
      } else if (r->decision.allowed) {
        remaining.push_back(r->decision.remaining);
      } else {
        ++denied;
      }
      answered.fetch_add(1);
    });
  }
  const auto end = std::chrono::steady_clock::now() + 20s;
  while (answered.load() < kHot + kOther && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(5ms);
  std::lock_guard lock(mu);
  ASSERT_EQ(answered.load(), kHot + kOther);
  EXPECT_EQ(errors, 0);
  EXPECT_EQ(others, kOther);
  ASSERT_EQ(remaining.size(), 100u);
  EXPECT_EQ(denied, kHot - 100);
  std::sort(remaining.begin(), remaining.end());
  for (std::size_t i = 0; i < remaining.size(); ++i) EXPECT_EQ(remaining[i], static_cast<std::int64_t>(i));
}

// A burst of concurrent checks that may wait (max_delay), all at one explicit `now`, on a
// token bucket of capacity C, one token every T: the first C pass at once, the k-th after
// (k + 1 − C)·T, up to max_delay = 2C·T; the 3C + 5 − 3C checks beyond are denied. Every
// prefix window of the send times (check time + delay) conforms to the bucket.
void expect_delayed_burst_is_scheduled_exactly(Store& store, const std::string& key) {
  constexpr std::int64_t kC = 10;
  constexpr Micros kT = 100'000;
  const Limit limit = *Limit::make(Algorithm::token_bucket, kC, kT);
  const Micros max_delay = 2 * kC * kT;
  std::mutex mu;
  std::vector<Micros> delays;
  std::vector<Micros> denied_retry;
  int errors = 0;
  std::atomic<int> answered{0};
  constexpr int kChecks = 3 * kC + 5;
  for (int i = 0; i < kChecks; ++i) {
    store.check({CheckItem{key, limit, 1, max_delay}}, kT0, [&](Result<CheckOutcome> r) {
      std::lock_guard lock(mu);
      if (!r) {
        ++errors;
      } else if (r->decision.allowed) {
        delays.push_back(r->decision.delay);
        EXPECT_EQ(r->items.at(0).delay, r->decision.delay);
      } else {
        EXPECT_EQ(r->decision.delay, 0);
        denied_retry.push_back(r->decision.retry_after);
      }
      answered.fetch_add(1);
    });
  }
  const auto end = std::chrono::steady_clock::now() + 20s;
  while (answered.load() < kChecks && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(1ms);
  std::lock_guard lock(mu);
  ASSERT_EQ(answered.load(), kChecks);
  EXPECT_EQ(errors, 0);
  std::sort(delays.begin(), delays.end());
  std::vector<Micros> expected;
  for (std::int64_t k = 0; k < 3 * kC; ++k) expected.push_back(std::max<std::int64_t>(0, k + 1 - kC) * kT);
  EXPECT_EQ(delays, expected);
  // Denied: the next place is 2C·T + T away, beyond max_delay; nothing consumed by them.
  EXPECT_EQ(denied_retry, std::vector<Micros>(kChecks - 3 * kC, max_delay + kT));
  for (std::size_t i = 0; i < delays.size(); ++i) {
    for (std::size_t j = i; j < delays.size(); ++j) {
      EXPECT_LE(static_cast<std::int64_t>(j - i + 1 - kC) * kT, delays[j] - delays[i]);
    }
  }
}

TEST_P(StoreSuite, DelayedChecksOfABurstAreScheduledExactly) {
  expect_delayed_burst_is_scheduled_exactly(*store_, key("burst"));
  if (GetParam() == Topology::standalone) {
    MemoryStore memory;
    expect_delayed_burst_is_scheduled_exactly(memory, key("burst"));
  }
}

// A delayed admission from Redis is the one MemoryStore makes at the same instants, over two
// limits of one identity (one send time for both).
TEST_P(StoreSuite, DelayedChecksDecideAsMemoryStore) {
  MemoryStore memory;
  const Limit fast = *Limit::make(Algorithm::token_bucket, 3, 50'000);
  const Limit slow = *Limit::make(Algorithm::token_bucket, 5, 400'000);
  const auto a = key("user", "delay:fast");
  const auto b = key("user", "delay:slow");
  for (Micros dt : {0, 0, 0, 0, 0, 1, 10'000, 10'000, 60'000, 500'000, 500'000, 500'001, 2'000'000}) {
    const std::vector<CheckItem> items{{a, fast, 1, 300'000}, {b, slow, 1, 0}};
    auto redis = store_->check_sync(items, kT0 + dt);
    auto mem = memory.check_sync(items, kT0 + dt);
    ASSERT_TRUE(redis) << redis.error().message;
    ASSERT_TRUE(mem) << mem.error().message;
    EXPECT_EQ(redis->decision, mem->decision) << "at +" << dt;
    EXPECT_EQ(redis->items, mem->items) << "at +" << dt;
  }
}

// A check of two identities (two hash tags) waits for its turn as one atomic call on a
// standalone or Sentinel-managed server. On Redis Cluster its keys span slots, the check is
// split into one call per slot, and one send time cannot be agreed atomically across them:
// it never waits (denied as without max_delay, nothing kept), while either key alone, in one
// slot, does.
TEST_P(StoreSuite, ChecksOfTwoIdentitiesWaitUnlessTheySpanClusterSlots) {
  const std::string a = key("delay-a");
  std::string b;
  for (int i = 0; b.empty() || redis::key_slot(b) == redis::key_slot(a); ++i) b = key(fmt::format("delay-b-{}", i));
  const Limit limit = *Limit::make(Algorithm::token_bucket, 1, kMicrosPerSecond);
  const std::vector<CheckItem> both{{a, limit, 1, 10 * kMicrosPerSecond}, {b, limit, 1, 10 * kMicrosPerSecond}};
  auto first = store_->check_sync(both, kT0);
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_TRUE(first->decision.allowed);
  EXPECT_EQ(first->decision.delay, 0);

  auto second = store_->check_sync(both, kT0);
  ASSERT_TRUE(second) << second.error().message;
  const bool across_slots = GetParam() == Topology::cluster;
  EXPECT_EQ(second->decision.allowed, !across_slots);
  EXPECT_EQ(second->decision.delay, across_slots ? 0 : kMicrosPerSecond);
  EXPECT_EQ(second->decision.retry_after, across_slots ? kMicrosPerSecond : 0);

  // Alone, in one slot: the next place, after what the check of both kept (nothing, denied).
  auto alone = store_->check_sync({{a, limit, 1, 10 * kMicrosPerSecond}}, kT0);
  ASSERT_TRUE(alone) << alone.error().message;
  EXPECT_TRUE(alone->decision.allowed);
  EXPECT_EQ(alone->decision.delay, across_slots ? kMicrosPerSecond : 2 * kMicrosPerSecond);
}

// Leases on every topology: a grant consumes in the key's node, a LeasingStore admits from it,
// and its unused units are back once it is gone (the store's own time: no explicit `now`).
TEST_P(StoreSuite, LeasesAreGrantedAndTheirUnusedUnitsReturned) {
  const Limit limit = *Limit::make(Algorithm::fixed_window, 1000, Micros{30} * 86400 * kMicrosPerSecond);
  const std::string k = key("lease");
  const CheckItem item{k, limit, 1, 0, LeasePolicy{64, 3600 * kMicrosPerSecond}};
  auto peek = [&] {
    auto r = store_->check_sync({CheckItem{k, limit, 0}});
    EXPECT_TRUE(r) << r.error().message;
    return r ? r->decision.remaining : -1;
  };
  StoreOptions o;
  o.url = url_of(GetParam());
  o.command_timeout = 2 * kMicrosPerSecond;
  auto inner = open_store(o);
  ASSERT_TRUE(inner) << inner.error().message;
  ASSERT_TRUE((*inner)->supports_leases());
  auto leasing = std::make_unique<LeasingStore>(std::move(*inner));
  for (int i = 0; i < 1 + 2 + 4 + 8 + 1; ++i) {
    auto r = leasing->check_sync({item});
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_TRUE(r->decision.allowed);
  }
  EXPECT_EQ(leasing->stats().leases_taken, 5u);  // 1, 2, 4, 8, then 16 units
  EXPECT_EQ(peek(), 1000 - 31);
  leasing.reset();
  EXPECT_EQ(peek(), 1000 - 16);
}

Result<std::int64_t> reset_sync(Store& store, std::vector<std::string> keys) {
  std::promise<Result<std::int64_t>> promise;
  auto future = promise.get_future();
  store.reset(std::move(keys), [&promise](Result<std::int64_t> r) { promise.set_value(std::move(r)); });
  return future.get();
}

// A reset on every topology, through a denial cache as the server stacks it: one identity's
// keys deleted in one call (how many held state is answered), the denial cached in front of
// the store forgotten, and the next check admitted from full limits; a key never used counts
// for nothing; keys of two identities (two slots of a cluster) are refused there.
TEST_P(StoreSuite, AResetDeletesOneIdentitysKeysAndTheDenialCachedForThem) {
  const Limit limit = *Limit::make(Algorithm::token_bucket, 3, 600 * kMicrosPerSecond);  // no refill meanwhile
  const std::string a = key("reset", "r:0");
  const std::string b = key("reset", "r:1");
  const std::string unused = key("reset", "r:2");
  StoreOptions o;
  o.url = url_of(GetParam());
  o.command_timeout = 2 * kMicrosPerSecond;
  auto inner = open_store(o);
  ASSERT_TRUE(inner) << inner.error().message;
  DenialCache cached(std::move(*inner));
  auto both = [&] { return std::vector<CheckItem>{{a, limit, 1}, {b, limit, 1}}; };
  for (int i = 0; i < 3; ++i) {
    auto r = cached.check_sync(both());
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_TRUE(r->decision.allowed);
  }
  for (int i = 0; i < 2; ++i) {
    auto denied = cached.check_sync(both());
    ASSERT_TRUE(denied) << denied.error().message;
    EXPECT_FALSE(denied->decision.allowed);
  }
  EXPECT_EQ(cached.stats().hits, 1u);  // the second denial came from the cache

  auto deleted = reset_sync(cached, {a, b, unused});
  ASSERT_TRUE(deleted) << deleted.error().message;
  EXPECT_EQ(*deleted, 2);
  auto again = cached.check_sync(both());
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_TRUE(again->decision.allowed);
  ASSERT_EQ(again->items.size(), 2u);
  EXPECT_EQ(again->items[0].remaining, 2);
  EXPECT_EQ(again->items[1].remaining, 2);
  EXPECT_EQ(cached.stats().hits, 1u);

  auto nothing = reset_sync(cached, {unused});
  ASSERT_TRUE(nothing) << nothing.error().message;
  EXPECT_EQ(*nothing, 0);
  if (GetParam() == Topology::cluster) {
    std::string other = key("another-identity");
    for (int i = 0; redis::key_slot(other) == redis::key_slot(a); ++i) other = key(fmt::format("another-{}", i));
    auto refused = reset_sync(cached, {a, other});
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code, ErrorCode::invalid_argument);
  }
}

Result<CheckOutcome> reserve_sync(Store& store, std::string record, Micros ttl, std::vector<CheckItem> items) {
  std::promise<Result<CheckOutcome>> promise;
  auto future = promise.get_future();
  store.reserve(ReservationRecord{std::move(record), ttl}, std::move(items), std::nullopt,
                [&promise](Result<CheckOutcome> r) { promise.set_value(std::move(r)); });
  return future.get();
}

Result<bool> settle_sync(Store& store, std::string record, std::vector<CheckItem> items) {
  std::promise<Result<bool>> promise;
  auto future = promise.get_future();
  store.settle(std::move(record), std::move(items), std::nullopt,
               [&promise](Result<bool> r) { promise.set_value(std::move(r)); });
  return future.get();
}

// Reservations on every topology, through a denial cache as the server stacks it, at the
// server's clock with limits that do not refill meanwhile: a settlement below the estimate
// gives the difference back, one above charges it (a token bucket into debt, a fixed window
// beyond its limit: both deny until it is paid), a reservation settles once, a denied one
// records nothing, one never settled keeps its estimate, and on a cluster the record must
// share the keys' slot.
TEST_P(StoreSuite, AReservationSettlesOnceGivingBackOrChargingTheDifference) {
  const Limit bucket = *Limit::make(Algorithm::token_bucket, 100, 600 * kMicrosPerSecond);
  const Limit window = *Limit::make(Algorithm::fixed_window, 100, algorithms::kMaxWindow);
  const std::string b = key("reserve", "r:bucket");
  const std::string w = key("reserve", "r:window");
  auto record = [&](std::string_view id) { return key("reserve", fmt::format("r:reservation:{}", id)); };
  StoreOptions o;
  o.url = url_of(GetParam());
  o.command_timeout = 2 * kMicrosPerSecond;
  auto inner = open_store(o);
  ASSERT_TRUE(inner) << inner.error().message;
  DenialCache store(std::move(*inner));
  ASSERT_TRUE(store.supports_reservations());
  auto remaining = [&](const std::string& k, const Limit& limit) {
    auto peek = store.check_sync({{k, limit, 0}});
    EXPECT_TRUE(peek) << peek.error().message;
    return peek ? peek->decision.remaining : -1;
  };
  constexpr Micros kTtl = 60 * kMicrosPerSecond;

  auto first = reserve_sync(store, record("1"), kTtl, {{b, bucket, 10}});
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_TRUE(first->decision.allowed);
  EXPECT_TRUE(first->recorded);
  EXPECT_EQ(first->decision.remaining, 90);
  auto settled = settle_sync(store, record("1"), {{b, bucket, 4}});
  ASSERT_TRUE(settled) << settled.error().message;
  EXPECT_TRUE(*settled);
  EXPECT_EQ(remaining(b, bucket), 96);
  auto twice = settle_sync(store, record("1"), {{b, bucket, 0}});
  ASSERT_TRUE(twice) << twice.error().message;
  EXPECT_FALSE(*twice);
  EXPECT_EQ(remaining(b, bucket), 96);

  // Above the estimate: charged, beyond what is left, so the bucket owes and denies.
  ASSERT_TRUE(reserve_sync(store, record("2"), kTtl, {{b, bucket, 10}}));
  auto charged = settle_sync(store, record("2"), {{b, bucket, 150}});
  ASSERT_TRUE(charged) << charged.error().message;
  EXPECT_TRUE(*charged);
  auto owes = store.check_sync({{b, bucket, 1}});
  ASSERT_TRUE(owes) << owes.error().message;
  EXPECT_FALSE(owes->decision.allowed);
  EXPECT_EQ(owes->decision.remaining, 0);
  // 96 − 150 = −54 tokens: 55 refills of 600 s until one is there.
  EXPECT_GT(owes->decision.retry_after, 54 * 600 * kMicrosPerSecond);
  EXPECT_LE(owes->decision.retry_after, 55 * 600 * kMicrosPerSecond);
  auto denied = reserve_sync(store, record("3"), kTtl, {{b, bucket, 1}});
  ASSERT_TRUE(denied) << denied.error().message;
  EXPECT_FALSE(denied->decision.allowed);
  auto nothing = settle_sync(store, record("3"), {{b, bucket, 0}});
  ASSERT_TRUE(nothing) << nothing.error().message;
  EXPECT_FALSE(*nothing);

  // A fixed window: what is given back admits at once (the denial cached before is
  // forgotten); what is charged beyond its limit denies until it ends.
  ASSERT_TRUE(reserve_sync(store, record("4"), kTtl, {{w, window, 60}}));
  ASSERT_TRUE(reserve_sync(store, record("5"), kTtl, {{w, window, 40}}));
  auto full = store.check_sync({{w, window, 1}});
  ASSERT_TRUE(full);
  EXPECT_FALSE(full->decision.allowed);
  auto under = settle_sync(store, record("5"), {{w, window, 0}});
  ASSERT_TRUE(under && *under);
  auto room = store.check_sync({{w, window, 1}});
  ASSERT_TRUE(room);
  EXPECT_TRUE(room->decision.allowed);
  EXPECT_EQ(room->decision.remaining, 39);
  auto over = settle_sync(store, record("4"), {{w, window, 130}});
  ASSERT_TRUE(over && *over);
  EXPECT_EQ(remaining(w, window), 0);  // 131 counted
  auto beyond = store.check_sync({{w, window, 1}});
  ASSERT_TRUE(beyond);
  EXPECT_FALSE(beyond->decision.allowed);

  // Never settled: the record expires and the estimate stays.
  const std::string lapsed = key("reserve", "r:lapsed");
  ASSERT_TRUE(reserve_sync(store, record("6"), 1000, {{lapsed, bucket, 30}}));
  std::this_thread::sleep_for(50ms);
  auto late = settle_sync(store, record("6"), {{lapsed, bucket, 0}});
  ASSERT_TRUE(late) << late.error().message;
  EXPECT_FALSE(*late);
  EXPECT_EQ(remaining(lapsed, bucket), 70);

  // Sliding windows are refused, as is a record among the keys.
  const Limit log = *Limit::make(Algorithm::sliding_window_log, 10, kMicrosPerSecond);
  auto refused = reserve_sync(store, record("7"), kTtl, {{key("reserve", "r:log"), log, 1}});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::invalid_argument);
  auto itself = reserve_sync(store, b, kTtl, {{b, bucket, 1}});
  ASSERT_FALSE(itself);
  EXPECT_EQ(itself.error().code, ErrorCode::invalid_argument);
  // Keys that span slots (on a cluster: several identities' keys) are checked, all-or-nothing
  // as any check, but recorded nowhere: the estimate stays. One slot elsewhere: recorded.
  const std::string fresh = key("reserve-fresh", "r");
  std::string other = key("another-identity", "r");
  for (int i = 0; GetParam() == Topology::cluster && redis::key_slot(other) == redis::key_slot(fresh); ++i) {
    other = key(fmt::format("another-{}", i), "r");
  }
  const std::string fresh_record = key("reserve-fresh", "r:reservation:8");
  auto spanning = reserve_sync(store, fresh_record, kTtl, {{fresh, bucket, 5}, {other, bucket, 5}});
  ASSERT_TRUE(spanning) << spanning.error().message;
  EXPECT_TRUE(spanning->decision.allowed);
  EXPECT_EQ(spanning->recorded, GetParam() != Topology::cluster);
  auto spanned = settle_sync(store, fresh_record, {{fresh, bucket, 0}});
  ASSERT_TRUE(spanned) << spanned.error().message;
  EXPECT_EQ(*spanned, GetParam() != Topology::cluster);
  EXPECT_EQ(remaining(fresh, bucket), GetParam() == Topology::cluster ? 95 : 100);
  EXPECT_EQ(remaining(other, bucket), 95);
}

Result<CheckOutcome> reserve_at(Store& store, std::string record, std::vector<CheckItem> items, Micros now) {
  std::promise<Result<CheckOutcome>> promise;
  auto future = promise.get_future();
  store.reserve(ReservationRecord{std::move(record), 3600 * kMicrosPerSecond}, std::move(items), now,
                [&promise](Result<CheckOutcome> r) { promise.set_value(std::move(r)); });
  return future.get();
}

Result<bool> settle_at(Store& store, std::string record, std::vector<CheckItem> items, Micros now) {
  std::promise<Result<bool>> promise;
  auto future = promise.get_future();
  store.settle(std::move(record), std::move(items), now, [&promise](Result<bool> r) { promise.set_value(std::move(r)); });
  return future.get();
}

// lua/reservation.lua and algorithms::settle (through MemoryStore) on one time sequence:
// random reservations, settlements below, at and far above the estimate (debt), settlements
// repeated, and checks, of a token bucket and a fixed window; every decision is the same.
TEST_P(StoreSuite, ReservationsMatchTheMemoryStoreOnOneTimeSequence) {
  const Limit bucket = *Limit::make(Algorithm::token_bucket, 50, 20'000);
  const Limit window = *Limit::make(Algorithm::fixed_window, 50, 500'000);
  MemoryStore memory;
  std::uint64_t x = 0x2545f4914f6cdd1dull;
  auto next = [&x](std::uint64_t n) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return static_cast<std::int64_t>(x % n);
  };
  for (const Limit& limit : {bucket, window}) {
    const std::string k = key("mirror", fmt::format("r:{}", algorithms::to_string(limit.algorithm)));
    Micros now = kT0;
    std::vector<std::pair<std::string, std::int64_t>> open;
    for (int i = 0; i < 300; ++i) {
      now += next(40'000);
      const auto what = next(3);
      SCOPED_TRACE(fmt::format("{} step {} at {}", algorithms::to_string(limit.algorithm), i, now));
      if (what == 0 || open.empty()) {
        const std::string rec = key("mirror", fmt::format("r:reservation:{}", i));
        const std::int64_t estimate = next(limit.capacity + 1);
        auto r = reserve_at(*store_, rec, {{k, limit, estimate}}, now);
        auto m = reserve_at(memory, rec, {{k, limit, estimate}}, now);
        ASSERT_TRUE(r && m);
        EXPECT_EQ(r->items, m->items);
        if (r->decision.allowed) open.emplace_back(rec, estimate);
      } else if (what == 1) {
        const auto at = static_cast<std::size_t>(next(static_cast<std::uint64_t>(open.size())));
        const std::int64_t actual = next(3 * limit.capacity);
        auto r = settle_at(*store_, open[at].first, {{k, limit, actual}}, now);
        auto m = settle_at(memory, open[at].first, {{k, limit, actual}}, now);
        ASSERT_TRUE(r && m);
        EXPECT_EQ(*r, *m);
        if (next(4) != 0) open.erase(open.begin() + static_cast<std::ptrdiff_t>(at));  // sometimes settled again
      } else {
        const std::int64_t cost = next(3);
        auto r = store_->check_sync({{k, limit, cost}}, now);
        auto m = memory.check_sync({{k, limit, cost}}, now);
        ASSERT_TRUE(r && m);
        EXPECT_EQ(r->items, m->items);
      }
    }
  }
}

// The overshoot bound, with several instances (stores) reserving one fixed window at once:
// a reservation is admitted only while what is counted (settled costs, and estimates not yet
// settled) leaves room for its estimate, so the window ends holding exactly the sum of the
// actual costs of the admitted requests, and that sum exceeds the limit by at most what
// settled above its estimate.
TEST_P(StoreSuite, ReservationsOfSeveralInstancesOvershootAtMostWhatSettledAboveItsEstimate) {
  constexpr std::int64_t kLimit = 200;
  constexpr std::int64_t kEstimate = 10;
  const Limit limit = *Limit::make(Algorithm::fixed_window, kLimit, algorithms::kMaxWindow);
  const std::string counted = key("overshoot", "r");
  std::vector<std::unique_ptr<Store>> instances;
  ASSERT_NO_FATAL_FAILURE(open_instances(instances));
  std::atomic<std::int64_t> actual_sum{0}, above{0}, admitted{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      Store& store = *instances[static_cast<std::size_t>(t) % instances.size()];
      std::uint64_t x = 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(t + 1);
      for (int i = 0; i < 40; ++i) {
        const std::string rec = key("overshoot", fmt::format("r:reservation:{}-{}", t, i));
        auto r = reserve_sync(store, rec, 60 * kMicrosPerSecond, {{counted, limit, kEstimate}});
        if (!r) {
          ++errors;
          continue;
        }
        if (!r->decision.allowed) continue;
        ++admitted;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        const auto actual = static_cast<std::int64_t>(x % 26);  // 0 .. 25, around the estimate
        auto s = settle_sync(store, rec, {{counted, limit, actual}});
        if (!s || !*s) {
          ++errors;
          continue;
        }
        actual_sum += actual;
        above += std::max<std::int64_t>(0, actual - kEstimate);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_GT(admitted.load(), kLimit / kEstimate / 2);
  auto peek = instances[0]->check_sync({{counted, limit, 0}});
  ASSERT_TRUE(peek) << peek.error().message;
  // The window holds every admitted request's actual cost, no more, no less.
  EXPECT_EQ(peek->decision.remaining, std::max<std::int64_t>(0, kLimit - actual_sum.load()));
  EXPECT_LE(actual_sum.load(), kLimit + above.load());
}

Result<CheckOutcome> reserve_at(Store& store, std::string record, Micros ttl, std::vector<CheckItem> items,
                                Micros now) {
  std::promise<Result<CheckOutcome>> promise;
  auto future = promise.get_future();
  store.reserve(ReservationRecord{std::move(record), ttl}, std::move(items), now,
                [&promise](Result<CheckOutcome> r) { promise.set_value(std::move(r)); });
  return future.get();
}

Result<bool> renew_at(Store& store, std::string record, std::vector<CheckItem> items, Micros ttl, Micros now) {
  std::promise<Result<bool>> promise;
  auto future = promise.get_future();
  store.renew(std::move(record), std::move(items), ttl, now,
              [&promise](Result<bool> r) { promise.set_value(std::move(r)); });
  return future.get();
}

// One time sequence of concurrency slots next to a token bucket, in one rule's reservation:
// what each step answered, as "<allowed>/<remaining>/<retry_after>" or "<settled>".
std::vector<std::string> slot_sequence(Store& store, const std::string& prefix) {
  const Limit slots = *Limit::make(Algorithm::concurrency, 2, 10 * kMicrosPerSecond);
  const Limit bucket = *Limit::make(Algorithm::token_bucket, 100, 600 * kMicrosPerSecond);
  const std::string s = prefix + ":slots";
  const std::string b = prefix + ":bucket";
  auto record = [&](int n) { return fmt::format("{}:reservation:{}", prefix, n); };
  auto items = [&](std::int64_t cost) { return std::vector<CheckItem>{{b, bucket, cost}, {s, slots, 1}}; };
  auto held = [&](std::int64_t cost) {
    return std::vector<CheckItem>{{b, bucket, cost}, {s, slots, cost == kAsEstimated ? 1 : cost}};
  };
  std::vector<std::string> out;
  auto reserved = [&](int n, Micros at) {
    auto r = reserve_at(store, record(n), 60 * kMicrosPerSecond, items(5), kT0 + at);
    if (!r) return out.push_back("error: " + r.error().message);
    out.push_back(fmt::format("{}/{}/{}", r->decision.allowed, r->items[1].remaining, r->items[1].retry_after));
  };
  auto peek = [&](Micros at) {
    auto r = store.check_sync({{b, bucket, 0}, {s, slots, 0}}, kT0 + at);
    if (!r) return out.push_back("error: " + r.error().message);
    out.push_back(fmt::format("peek {}/{}", r->items[0].remaining, r->items[1].remaining));
  };
  auto answered = [&](std::string_view what, Result<bool> r) {
    out.push_back(r ? fmt::format("{} {}", what, *r) : "error: " + r.error().message);
  };
  reserved(1, 0);
  reserved(2, 0);
  reserved(3, 0);  // both slots held: denied, nothing taken from the bucket either
  peek(0);
  answered("release", settle_at(store, record(1), held(kAsEstimated), kT0 + kMicrosPerSecond));
  answered("again", settle_at(store, record(1), held(kAsEstimated), kT0 + kMicrosPerSecond));
  peek(kMicrosPerSecond);  // the slot back, the bucket as reserved
  reserved(3, kMicrosPerSecond);
  answered("renew", renew_at(store, record(2), held(0), 60 * kMicrosPerSecond, kT0 + 8 * kMicrosPerSecond));
  // Slot 3 expired at 11 s (never renewed): reclaimed, so slot 4 is admitted.
  reserved(4, 12 * kMicrosPerSecond);
  answered("lost", renew_at(store, record(3), held(0), 60 * kMicrosPerSecond, kT0 + 12 * kMicrosPerSecond));
  // Slots 2 (renewed: until 18 s) and 4 (until 22 s): the oldest frees in 0.5 s.
  reserved(5, 17'500'000);
  // Settled to an actual cost: the bucket gets the difference, the slot goes back.
  answered("settle", settle_at(store, record(4), held(1), kT0 + 19 * kMicrosPerSecond));
  peek(19 * kMicrosPerSecond);
  return out;
}

TEST_P(StoreSuite, ConcurrencySlotsAreHeldUntilReleasedRenewedOrExpired) {
  const auto redis = slot_sequence(*store_, key("slots", "r"));
  MemoryStore memory;
  const auto local = slot_sequence(memory, key("slots", "r"));
  const std::vector<std::string> expected{
      "true/1/0",  "true/0/0",          "false/0/1000000", "peek 90/0",   "release true",   "again false",
      "peek 90/1", "true/0/0",          "renew true",      "true/0/0",    "lost false",     "false/0/500000",
      "settle true", "peek 84/2"};  // slot 2 expired at 18 s, slot 4 released; 20 taken, 4 back
  EXPECT_EQ(redis, expected);
  EXPECT_EQ(local, expected);
}

// lua/concurrency.lua and algorithms::concurrency (through MemoryStore) on one random time
// sequence: reservations taking slots, releases, renewals (some after the slot expired) and
// peeks, with time moving on by up to 3 s a step over slots of 5 s: every answer is the same.
TEST_P(StoreSuite, ConcurrencySlotsMatchTheMemoryStoreOnOneTimeSequence) {
  const Limit slots = *Limit::make(Algorithm::concurrency, 3, 5 * kMicrosPerSecond);
  const Limit bucket = *Limit::make(Algorithm::token_bucket, 1000, kMicrosPerSecond);
  const std::string k = key("slots-mirror", "r:slots");
  const std::string b = key("slots-mirror", "r:rate");
  MemoryStore memory;
  std::vector<std::string> open;
  std::uint64_t x = 0x2545f4914f6cdd1dull;
  auto next = [&](std::uint64_t n) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x % n;
  };
  Micros now = kT0;
  for (int step = 0; step < 300; ++step) {
    now += static_cast<Micros>(next(3'000'000));
    const auto op = next(4);
    std::string redis_answer, memory_answer;
    auto both = [&](auto call) {
      redis_answer = call(*store_);
      memory_answer = call(memory);
    };
    if (op == 0 || open.empty()) {
      const std::string rec = key("slots-mirror", fmt::format("r:reservation:{}", step));
      both([&](Store& s) {
        auto r = reserve_at(s, rec, 60 * kMicrosPerSecond, {{b, bucket, 1}, {k, slots, 1}}, now);
        return r ? fmt::format("reserve {} {} {} {} {}", r->decision.allowed, r->recorded, r->items[1].remaining,
                               r->items[1].retry_after, r->items[1].reset_after)
                 : r.error().message;
      });
      if (redis_answer.starts_with("reserve true")) open.push_back(rec);
    } else if (op == 1) {
      const auto at = next(open.size());
      const std::string rec = open[at];
      open.erase(open.begin() + static_cast<std::ptrdiff_t>(at));
      both([&](Store& s) {
        auto r = settle_at(s, rec, {{b, bucket, kAsEstimated}, {k, slots, kAsEstimated}}, now);
        return r ? fmt::format("release {}", *r) : r.error().message;
      });
    } else if (op == 2) {
      const std::string rec = open[next(open.size())];
      both([&](Store& s) {
        auto r = renew_at(s, rec, {{b, bucket, 0}, {k, slots, 0}}, 60 * kMicrosPerSecond, now);
        return r ? fmt::format("renew {}", *r) : r.error().message;
      });
    } else {
      both([&](Store& s) {
        auto r = s.check_sync({{k, slots, 0}}, now);
        return r ? fmt::format("peek {} {}", r->decision.remaining, r->decision.reset_after) : r.error().message;
      });
    }
    ASSERT_EQ(redis_answer, memory_answer) << "step " << step << " at " << now - kT0;
  }
}

TEST_P(StoreSuite, AConcurrencySlotIsTakenOnlyByAReservation) {
  const Limit slots = *Limit::make(Algorithm::concurrency, 3, 10 * kMicrosPerSecond);
  auto plain = store_->check_sync({{key("unheld", "r"), slots, 1}});
  ASSERT_FALSE(plain);
  EXPECT_EQ(plain.error().code, ErrorCode::invalid_argument);
  auto peek = store_->check_sync({{key("unheld", "r"), slots, 0}});
  ASSERT_TRUE(peek) << peek.error().message;
  EXPECT_TRUE(peek->decision.allowed);
  EXPECT_EQ(peek->decision.remaining, 3);
}

TEST_P(StoreSuite, ConcurrencySlotsOfSeveralInstancesNeverExceedTheLimit) {
  constexpr std::int64_t kSlots = 3;
  const Limit slots = *Limit::make(Algorithm::concurrency, kSlots, 30 * kMicrosPerSecond);
  const std::string held = key("inflight", "r:slots");
  std::vector<std::unique_ptr<Store>> instances;
  ASSERT_NO_FATAL_FAILURE(open_instances(instances));
  std::atomic<std::int64_t> in_flight{0}, most{0}, admitted{0}, denied{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      Store& store = *instances[static_cast<std::size_t>(t) % instances.size()];
      for (int i = 0; i < 25; ++i) {
        const std::string rec = key("inflight", fmt::format("r:reservation:{}-{}", t, i));
        auto r = reserve_sync(store, rec, 60 * kMicrosPerSecond, {{held, slots, 1}});
        if (!r) {
          ++errors;
          continue;
        }
        if (!r->decision.allowed) {
          ++denied;
          continue;
        }
        ++admitted;
        const auto now = ++in_flight;
        for (auto seen = most.load(); now > seen && !most.compare_exchange_weak(seen, now);) {
        }
        std::this_thread::sleep_for(1ms);
        --in_flight;
        auto s = settle_sync(store, rec, {{held, slots, kAsEstimated}});
        if (!s || !*s) ++errors;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_GT(admitted.load(), 0);
  EXPECT_GT(denied.load(), 0);  // six threads on three slots
  EXPECT_LE(most.load(), kSlots);
  auto peek = instances[0]->check_sync({{held, slots, 0}});
  ASSERT_TRUE(peek) << peek.error().message;
  EXPECT_EQ(peek->decision.remaining, kSlots);  // every slot given back
}

TEST_P(StoreSuite, AReservationHoldingSlotsAcrossClusterSlotsIsUndoneWhenAnotherPartDenies) {
  const Limit slots = *Limit::make(Algorithm::concurrency, 1, 10 * kMicrosPerSecond);
  const Limit window = *Limit::make(Algorithm::fixed_window, 1, algorithms::kMaxWindow);
  const std::string held = key("user-1", "r:slots");
  const std::string other = key("ip-1", "r");  // another identity: another slot on a cluster
  const std::string rec = key("user-1", "r:reservation:1");
  // The record holds the second item, the rule's; the first is another rule's, checked with it.
  auto reserve = [&](const std::string& record) {
    std::promise<Result<CheckOutcome>> promise;
    auto future = promise.get_future();
    store_->reserve(ReservationRecord{record, 60 * kMicrosPerSecond, 1, 1}, {{other, window, 1}, {held, slots, 1}},
                    std::nullopt, [&promise](Result<CheckOutcome> r) { promise.set_value(std::move(r)); });
    return future.get();
  };
  auto first = reserve(rec);
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_TRUE(first->decision.allowed);
  EXPECT_TRUE(first->recorded);
  ASSERT_TRUE(settle_sync(*store_, rec, {{held, slots, kAsEstimated}}).value_or(false));
  // The window is spent: the slot taken with it is given back.
  const std::string rec2 = key("user-1", "r:reservation:2");
  auto second = reserve(rec2);
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_FALSE(second->decision.allowed);
  EXPECT_FALSE(second->recorded);
  std::optional<std::int64_t> free;
  for (int i = 0; i < 200 && free != 1; ++i) {  // the undo is sent after the answer
    auto peek = store_->check_sync({{held, slots, 0}});
    ASSERT_TRUE(peek) << peek.error().message;
    free = peek->decision.remaining;
    if (free != 1) std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(free, 1);
}

// A hierarchy (an organisation above its users) on several instances: every key of one
// organisation is in one slot, so each request is one atomic call (no cross-slot check on a
// cluster); the organisation admits exactly its limit over all its users, each user at most
// its own, and a denial by either charges neither.
TEST_P(StoreSuite, AParentAndItsChildrenAreExactAcrossInstances) {
  constexpr std::int64_t kOrg = 20;
  constexpr std::int64_t kUser = 8;
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  limiter::LimiterConfig config;
  config.prefix = fmt::format("h{}", ::getpid());
  limiter::Rule members;
  members.name = fmt::format("members-{}", name_of(GetParam()));
  members.identity = {limiter::IdentityKind::header, "X-User-ID", "", "user"};
  members.limits = {{"", *Limit::make(Algorithm::fixed_window, kUser, algorithms::kMaxWindow)}};
  members.parent = limiter::ParentSpec{{limiter::IdentityKind::header, "X-Org-ID", "", "org"},
                                       {{"", *Limit::make(Algorithm::fixed_window, kOrg, algorithms::kMaxWindow)}}};
  config.rules = {members};
  std::vector<std::unique_ptr<Store>> stores;
  ASSERT_NO_FATAL_FAILURE(open_instances(stores));
  std::vector<std::shared_ptr<limiter::Limiter>> limiters;
  for (const auto& store : stores) limiters.push_back(std::make_shared<limiter::Limiter>(config, *store));
  const std::string org = fmt::format("org:{}", info->name());
  std::atomic<std::int64_t> errors{0};
  std::array<std::atomic<std::int64_t>, 4> admitted{};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      limiter::Limiter& l = *limiters[static_cast<std::size_t>(t) % limiters.size()];
      for (int i = 0; i < 12; ++i) {
        const int user = (t + i) % 4;
        auto app = l.application(members.name, fmt::format("user:{}", user), 1, {}, org);
        if (!app) {
          ++errors;
          continue;
        }
        auto ev = l.evaluate_sync({*app});
        if (!ev || ev->by_failure_policy) {
          ++errors;
          continue;
        }
        std::set<std::uint16_t> slots;
        for (const auto& lo : ev->rules[0].limits) slots.insert(redis::key_slot(lo.key));
        if (slots.size() != 1) ++errors;
        if (ev->allowed) ++admitted[static_cast<std::size_t>(user)];
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(errors.load(), 0);
  std::int64_t total = 0;
  for (const auto& a : admitted) {
    EXPECT_LE(a.load(), kUser);
    total += a.load();
  }
  EXPECT_EQ(total, kOrg);  // 72 asked: the organisation admits exactly its limit
  // What each key holds is what was admitted: the denials charged nothing.
  auto peek = limiters[0]->application(members.name, "user:0", 0, {}, org);
  ASSERT_TRUE(peek);
  auto ev = limiters[0]->evaluate_sync({*peek});
  ASSERT_TRUE(ev) << ev.error().message;
  EXPECT_EQ(ev->rules[0].limits[0].decision.remaining, kUser - admitted[0].load());
  EXPECT_EQ(ev->rules[0].limits[1].decision.remaining, 0);
}

// The answer of a call of `store` (or of a limiter) that takes a callback.
template <class T, class Call>
T answer_of(Call&& call) {
  std::promise<T> promise;
  auto future = promise.get_future();
  call([&promise](T r) { promise.set_value(std::move(r)); });
  return future.get();
}

using TableRead = Result<std::optional<SharedTable>>;

TEST_P(StoreSuite, ASharedTableMovesItsVersionOnEveryChangeAsTheMemoryStore) {
  MemoryStore memory;
  const std::string key = this->key("table", "overrides");
  for (Store* store : {static_cast<Store*>(store_.get()), static_cast<Store*>(&memory)}) {
    SCOPED_TRACE(std::string(store->kind()));
    ASSERT_TRUE(store->supports_tables());
    auto read = [&](std::int64_t known) {
      return answer_of<TableRead>([&](auto done) { store->read_table(key, known, std::move(done)); });
    };
    auto write = [&](std::string field, std::optional<std::string> value, std::size_t max = 10) {
      return answer_of<Result<TableWrite>>(
          [&](auto done) { store->write_table(key, std::move(field), std::move(value), max, std::move(done)); });
    };
    auto empty = read(0);
    ASSERT_TRUE(empty) << empty.error().message;
    EXPECT_FALSE(empty->has_value());  // never written: version 0, as known

    auto first = write("r:user:1", "one");
    ASSERT_TRUE(first) << first.error().message;
    EXPECT_FALSE(first->existed);
    EXPECT_GT(first->version, 0);
    auto whole = read(0);
    ASSERT_TRUE(whole && whole->has_value());
    EXPECT_EQ((*whole)->version, first->version);
    ASSERT_EQ((*whole)->entries.size(), 1u);
    EXPECT_EQ((*whole)->entries[0], (std::pair<std::string, std::string>{"r:user:1", "one"}));
    auto same = read(first->version);
    ASSERT_TRUE(same);
    EXPECT_FALSE(same->has_value());  // unchanged: nothing sent back

    auto replaced = write("r:user:1", "uno");
    ASSERT_TRUE(replaced);
    EXPECT_TRUE(replaced->existed);
    EXPECT_GT(replaced->version, first->version);
    auto second = write("r:user:2", "two", 2);
    ASSERT_TRUE(second);
    EXPECT_GT(second->version, replaced->version);
    auto full = write("r:user:3", "three", 2);
    ASSERT_FALSE(full);
    EXPECT_EQ(full.error().code, ErrorCode::invalid_argument) << full.error().message;
    auto changed = read(first->version);
    ASSERT_TRUE(changed && changed->has_value());
    EXPECT_EQ((*changed)->version, second->version);
    auto entries = (*changed)->entries;
    std::sort(entries.begin(), entries.end());
    EXPECT_EQ(entries, (std::vector<std::pair<std::string, std::string>>{{"r:user:1", "uno"}, {"r:user:2", "two"}}));

    auto removed = write("r:user:1", std::nullopt);
    ASSERT_TRUE(removed);
    EXPECT_TRUE(removed->existed);
    EXPECT_GT(removed->version, second->version);
    auto again = write("r:user:1", std::nullopt);
    ASSERT_TRUE(again);
    EXPECT_FALSE(again->existed);
    EXPECT_EQ(again->version, removed->version);  // nothing changed
    auto emptied = write("r:user:2", std::nullopt);
    ASSERT_TRUE(emptied);
    EXPECT_TRUE(emptied->existed);
    EXPECT_EQ(emptied->version, 0);  // the table is gone, its version with it
    auto gone = read(removed->version);
    ASSERT_TRUE(gone && gone->has_value());
    EXPECT_EQ((*gone)->version, 0);
    EXPECT_TRUE((*gone)->entries.empty());
    auto anew = write("r:user:4", "four");
    ASSERT_TRUE(anew);
    EXPECT_GT(anew->version, removed->version);  // never an old version again
    EXPECT_FALSE(write("", "nameless"));
    ASSERT_TRUE(write("r:user:4", std::nullopt));
  }
}

TEST_P(StoreSuite, AnOverrideSetOnOneInstanceIsExactOnEveryInstanceAfterItsRefresh) {
  constexpr std::int64_t kLimit = 5;
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  limiter::LimiterConfig config;
  config.prefix = fmt::format("o{}-{}", ::getpid(), name_of(GetParam()));
  limiter::Rule api;
  api.name = "api";
  api.identity = {limiter::IdentityKind::header, "X-User-ID", "", "user"};
  api.limits = {{"", *Limit::make(Algorithm::fixed_window, kLimit, algorithms::kMaxWindow)}};
  config.rules = {api};
  std::vector<std::unique_ptr<Store>> stores;
  ASSERT_NO_FATAL_FAILURE(open_instances(stores));
  std::vector<std::shared_ptr<limiter::Limiter>> limiters;
  for (const auto& store : stores) limiters.push_back(std::make_shared<limiter::Limiter>(config, *store));
  const std::string customer = fmt::format("user:{}", info->name());
  // Admitted of `asks` checks of `identity`, from 6 threads over the 3 instances.
  auto burst = [&](const std::string& identity, int asks) {
    std::atomic<std::int64_t> admitted{0};
    std::atomic<std::int64_t> errors{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 6; ++t) {
      threads.emplace_back([&, t] {
        limiter::Limiter& l = *limiters[static_cast<std::size_t>(t) % limiters.size()];
        for (int i = t; i < asks; i += 6) {
          auto v = l.check_sync("api", identity, 1);
          if (!v || v->by_failure_policy) {
            ++errors;
          } else if (v->decision.allowed) {
            ++admitted;
          }
        }
      });
    }
    for (auto& thread : threads) thread.join();
    EXPECT_EQ(errors.load(), 0);
    return admitted.load();
  };
  auto refresh_all = [&] {
    for (auto& l : limiters) {
      auto r = answer_of<Result<bool>>([&](auto done) { l->refresh_overrides(std::move(done)); });
      ASSERT_TRUE(r) << r.error().message;
    }
  };
  refresh_all();
  limiter::Override o{"api", customer, 4, "pays for more", "test", 0};
  auto set = answer_of<Result<TableWrite>>([&](auto done) { limiters[0]->set_override(o, std::move(done)); });
  ASSERT_TRUE(set) << set.error().message;
  EXPECT_FALSE(set->existed);
  refresh_all();
  for (auto& l : limiters) EXPECT_EQ(l->overrides().version(), set->version);
  EXPECT_EQ(burst(customer, 60), 4 * kLimit);  // 60 asked, over 3 instances: 4 × 5 exactly
  EXPECT_EQ(burst("user:someone-else", 30), kLimit);  // others keep the rule's limit

  auto listed = answer_of<Result<std::vector<limiter::Override>>>(
      [&](auto done) { limiters[2]->list_overrides(std::move(done)); });
  ASSERT_TRUE(listed) << listed.error().message;
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].identity, customer);
  EXPECT_EQ((*listed)[0].factor, 4);
  EXPECT_EQ((*listed)[0].note, "pays for more");

  auto removed = answer_of<Result<bool>>(
      [&](auto done) { limiters[1]->remove_override("api", customer, std::move(done)); });
  ASSERT_TRUE(removed) << removed.error().message;
  EXPECT_TRUE(*removed);
  refresh_all();
  // The rule's own limit again: the 20 counted are above it.
  EXPECT_EQ(burst(customer, 12), 0);
  auto peek = limiters[0]->check_sync("api", customer, 0);
  ASSERT_TRUE(peek);
  EXPECT_EQ(peek->decision.limit, kLimit);
}

INSTANTIATE_TEST_SUITE_P(Topologies, StoreSuite,
                         ::testing::Values(Topology::standalone, Topology::cluster, Topology::sentinel),
                         [](const ::testing::TestParamInfo<Topology>& info) {
                           return std::string(name_of(info.param));
                         });

}  // namespace
}  // namespace ratekeeper::store
