// Leases on a real redis-server: lua/lease.lua grants as algorithms::lease_grant does (random
// sequences, explicit `now`, and the return through lua/refund.lua as
// algorithms::lease_return); several instances, each a LeasingStore over its own RedisStore
// connection, admitting from threads on one hot key never admit more than the limit, and once
// every lease is returned the key holds exactly what the admissions alone consumed; a
// LeasingStore's unused units are back in Redis after it is destroyed.

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <atomic>
#include <thread>

#include <fmt/format.h>

#include "ratekeeper/algorithms/lease.hpp"
#include "algorithms/step.hpp"
#include "ratekeeper/store/leasing_store.hpp"
#include "ratekeeper/store/open_store.hpp"
#include "store/redis/redis_store.hpp"
#include "support/redis_server.hpp"
#include "support/script_runner.hpp"

namespace ratekeeper::store {
namespace {

using algorithms::Algorithm;
using testing::RedisServer;

RedisServer& server() {
  static RedisServer s;
  return s;
}

std::unique_ptr<Store> open_redis() {
  StoreOptions o;
  o.url = server().url();
  o.command_timeout = 2 * kMicrosPerSecond;
  auto store = open_store(o);
  EXPECT_TRUE(store) << store.error().message;
  return std::move(*store);
}

std::string fresh_key(std::string_view what) {
  static std::atomic<int> n{0};
  return fmt::format("lease-test:{}:{}:{}", what, ::getpid(), n.fetch_add(1));
}

// Units still available on `key`: a peek through a plain RedisStore.
std::int64_t remaining(Store& store, const std::string& key, const Limit& limit) {
  auto r = store.check_sync({CheckItem{key, limit, 0}});
  EXPECT_TRUE(r) << r.error().message;
  return r ? r->decision.remaining : -1;
}

RC_GTEST_PROP(LeaseScript, GrantsAndReturnsAsTheCppTwin, ()) {
  testing::RedisConnection connection(server().host(), server().port());
  testing::ScriptRunner runner(connection);
  const bool fixed = *rc::gen::arbitrary<bool>();
  const std::int64_t capacity = *rc::gen::inRange<std::int64_t>(1, 50);
  // Periods of 1000 s and more: the keys (with lifetimes relative to the explicit `now`) never
  // expire in real time while the test runs.
  const Micros period = *rc::gen::inRange<Micros>(1'000'000'000, 100'000'000'000);
  const Limit limit = *Limit::make(fixed ? Algorithm::fixed_window : Algorithm::token_bucket, capacity, period);
  const std::string key = fresh_key("twin");
  algorithms::State state;
  Micros now = *rc::gen::inRange<Micros>(0, 1'000'000'000);
  for (int step = 0; step < 20; ++step) {
    now += *rc::gen::inRange<Micros>(0, 3 * period);
    const std::int64_t min = *rc::gen::inRange<std::int64_t>(1, capacity + 1);
    const std::int64_t want = *rc::gen::inRange<std::int64_t>(min, capacity + 1);
    auto cpp = algorithms::lease_grant(limit, state, now, min, want);
    const auto lua = runner.run_integers(
        "lease", {key},
        {std::to_string(static_cast<int>(limit.algorithm)), std::to_string(capacity), std::to_string(period),
         std::to_string(min), std::to_string(want), std::to_string(now)});
    RC_ASSERT(lua.size() == 7u);
    RC_ASSERT(lua[0] == cpp.granted);
    RC_ASSERT(testing::decision_at(lua, 1) == cpp.step.decision);
    RC_ASSERT(lua[6] == now);
    state = cpp.step.state;
    if (cpp.granted > 0 && *rc::gen::arbitrary<bool>()) {
      // Part of it back, a little later, as LeasingStore returns it.
      const std::int64_t units = *rc::gen::inRange<std::int64_t>(1, cpp.granted + 1);
      const Micros later = now + *rc::gen::inRange<Micros>(0, 2 * period);
      const Micros at = now;
      const Micros reset_after = cpp.step.decision.reset_after;
      auto back = algorithms::lease_return(limit, state, later, units, at, reset_after);
      const Limit limits[] = {limit};
      const std::int64_t costs[] = {units};
      const std::int64_t resets[] = {reset_after};
      runner.run_integers("refund", {key}, testing::refund_args(limits, costs, resets, at, later));
      state = back.state;
      now = later;
    }
    // Both agree on what the key holds: a peek at `now` on each.
    const auto peek_lua = runner.check(key, limit, 0, now);
    const auto peek_cpp = algorithms::step_unchecked(limit, state, now, 0).decision;
    RC_ASSERT(peek_lua == peek_cpp);
  }
}

// Several instances on one key, from threads: admitted <= limit, and after every lease is
// returned the key counts exactly the admissions.
void run_instances(const Limit& limit, std::int64_t lease_max, int instances, int threads, int per_thread) {
  const std::string key = fresh_key(algorithms::to_string(limit.algorithm));
  std::vector<std::unique_ptr<LeasingStore>> stores;
  for (int i = 0; i < instances; ++i) {
    stores.push_back(std::make_unique<LeasingStore>(open_redis(), LeasingStoreOptions{}));
  }
  const CheckItem item{key, limit, 1, 0, LeasePolicy{lease_max, 3600 * kMicrosPerSecond}};
  std::atomic<std::int64_t> admitted{0};
  std::atomic<int> errors{0};
  std::vector<std::thread> pool;
  for (int i = 0; i < instances; ++i) {
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, i] {
        for (int k = 0; k < per_thread; ++k) {
          auto r = stores[static_cast<std::size_t>(i)]->check_sync({item});
          if (!r) {
            errors.fetch_add(1);
          } else if (r->decision.allowed) {
            admitted.fetch_add(1);
          }
        }
      });
    }
  }
  for (auto& t : pool) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_LE(admitted.load(), limit.capacity);
  // Every unit was asked for more than once over: at most the units parked in leases stay
  // unadmitted.
  EXPECT_GE(admitted.load(), limit.capacity - instances * lease_max);
  std::int64_t granted = 0, local = 0;
  for (auto& s : stores) {
    granted += static_cast<std::int64_t>(s->stats().units_granted);
    local += static_cast<std::int64_t>(s->stats().local_admissions);
  }
  EXPECT_EQ(local, admitted.load());  // every admission came from a lease
  stores.clear();  // each returns its leases' unused units
  auto plain = open_redis();
  EXPECT_EQ(remaining(*plain, key, limit), limit.capacity - admitted.load());
}

TEST(LeasingStoreRedis, SeveralInstancesOnOneFixedWindowKeyNeverOverAdmit) {
  // A window of 30 days: one window for the whole test.
  run_instances(*Limit::make(Algorithm::fixed_window, 3000, Micros{30} * 86400 * kMicrosPerSecond), 64, 3, 3, 1500);
}

TEST(LeasingStoreRedis, SeveralInstancesOnOneTokenBucketKeyNeverOverAdmit) {
  // One token an hour: the refill during the test is nothing.
  run_instances(*Limit::make(Algorithm::token_bucket, 3000, 3600 * kMicrosPerSecond), 64, 3, 3, 1500);
}

TEST(LeasingStoreRedis, UnusedUnitsAreBackInRedisAfterShutdown) {
  const std::string key = fresh_key("shutdown");
  const Limit limit = *Limit::make(Algorithm::fixed_window, 1000, Micros{30} * 86400 * kMicrosPerSecond);
  const CheckItem item{key, limit, 1, 0, LeasePolicy{64, 3600 * kMicrosPerSecond}};
  auto leasing = std::make_unique<LeasingStore>(open_redis(), LeasingStoreOptions{});
  for (int i = 0; i < 1 + 2 + 4 + 8 + 1; ++i) {
    auto r = leasing->check_sync({item});
    ASSERT_TRUE(r && r->decision.allowed);
  }
  // Leases of 1, 2, 4, 8 and 16 units were consumed in Redis, 15 of them unused.
  const auto count = [&] {
    const auto value = server().command({"GET", key});
    return value.substr(value.find(':') + 1);
  };
  EXPECT_EQ(count(), "31");
  leasing.reset();
  EXPECT_EQ(count(), "16");
}

}  // namespace
}  // namespace ratekeeper::store
