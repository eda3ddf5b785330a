// RedisClusterStore against real 3-master clusters with one replica each: keys spread over
// every master, per-node script loading, checks spanning slots, a slot migrated under
// traffic (ASK and MOVED), and a master killed under traffic (automatic failover).

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <latch>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "ratekeeper/core/event_loop.hpp"
#include "redis/key_slot.hpp"
#include "store/redis/lua_scripts.hpp"
#include "ratekeeper/store/open_store.hpp"
#include "ratekeeper/core/metrics_writer.hpp"
#include "store/redis/redis_store.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/redis_cluster.hpp"

namespace ratekeeper::store {
namespace {

using algorithms::Algorithm;
using testing::RedisCluster;
using testing::RedisServer;
using namespace std::chrono_literals;

using testing::eventually;

std::unique_ptr<RedisStore> open_cluster(const std::string& url, Micros command_timeout,
                                                bool reject_cross_slot = false, bool functions = true) {
  StoreOptions o;
  o.url = url;
  o.redis_functions = functions;
  o.command_timeout = command_timeout;
  o.reconnect_min = 10 * kMicrosPerMilli;
  o.reconnect_max = 200 * kMicrosPerMilli;
  auto parsed = redis::parse_url(url);
  EXPECT_TRUE(parsed) << parsed.error().message;
  auto options = redis_store_options(o, *parsed);
  options.reject_cross_slot = reject_cross_slot;
  auto store = std::make_unique<RedisStore>(options);
  EXPECT_TRUE(eventually([&] { return store->health().ready; })) << store->health().detail;
  return store;
}

// Never denies in these tests: capacity 10^9, refilled every microsecond.
algorithms::Limit big_limit() {
  auto limit = algorithms::Limit::make(Algorithm::token_bucket, 1'000'000'000, 1);
  EXPECT_TRUE(limit) << limit.error().message;
  return *limit;
}

std::string unique(std::string_view what) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return fmt::format("{}-{}-{}", info->name(), ::getpid(), what);
}

// Given the server's event loop, the cluster client runs on it (as RedisStore does): answers
// come on the loop's threads, not on threads of the client's own.
TEST(RedisClusterStore, RunsOnTheEventLoopItIsGiven) {
  auto loop = std::make_shared<EventLoop>(2);
  StoreOptions o;
  o.url = testing::shared_cluster().url();
  o.command_timeout = 2 * kMicrosPerSecond;
  o.loop = loop;
  auto store = open_store(o);
  ASSERT_TRUE(store) << store.error().message;
  ASSERT_TRUE(eventually([&] { return (*store)->health().ready; })) << (*store)->health().detail;
  std::promise<bool> answered_on_loop;
  (*store)->check({{"lp:{" + unique("k") + "}:r", big_limit(), 1}}, std::nullopt, [&](Result<CheckOutcome> r) {
    EXPECT_TRUE(r) << r.error().message;
    answered_on_loop.set_value(loop->on_loop_thread());
  });
  EXPECT_TRUE(answered_on_loop.get_future().get());
}

TEST(RedisClusterStore, OpenStoreBuildsItFromTheUrl) {
  StoreOptions o;
  o.url = testing::shared_cluster().url();
  auto store = open_store(o);
  ASSERT_TRUE(store) << store.error().message;
  EXPECT_EQ((*store)->kind(), "redis-cluster");
  ASSERT_TRUE(eventually([&] { return (*store)->health().ready; })) << (*store)->health().detail;
  auto limit = algorithms::Limit::make(Algorithm::token_bucket, 1, kMicrosPerSecond);
  auto r = (*store)->check_sync({{fmt::format("t:{{{}}}:r", unique("id")), *limit, 1}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->decision.allowed);
}

TEST(RedisClusterStore, KeysOfManyIdentitiesSpreadOverEveryMaster) {
  auto& cluster = testing::shared_cluster();
  auto store = open_cluster(cluster.url(), 2 * kMicrosPerSecond);
  auto masters = cluster.masters();
  ASSERT_EQ(masters.size(), 3u);
  std::vector<long long> before;
  for (auto* m : masters) before.push_back(std::stoll(testing::command_on(m->port(), {"DBSIZE"})));
  auto limit = algorithms::Limit::make(Algorithm::sliding_window_counter, 10, 60 * kMicrosPerSecond);
  for (int i = 0; i < 300; ++i) {
    auto r = store->check_sync({{fmt::format("spread:{{ip:{}-{}}}:api", unique("ip"), i), *limit, 1}});
    ASSERT_TRUE(r) << r.error().message;
  }
  for (std::size_t i = 0; i < masters.size(); ++i) {
    EXPECT_GT(std::stoll(testing::command_on(masters[i]->port(), {"DBSIZE"})), before[i])
        << "master 127.0.0.1:" << masters[i]->port();
  }
  EXPECT_EQ(store->cluster().masters().size(), 3u);
}

// With functions off (EVALSHA), a SCRIPT FLUSH on every master is answered by EVAL there.
TEST(RedisClusterStore, ScriptsAreLoadedAgainOnEveryNodeAfterAFlush) {
  auto& cluster = testing::shared_cluster();
  auto store = open_cluster(cluster.url(), 2 * kMicrosPerSecond, false, false);
  auto limit = algorithms::Limit::make(Algorithm::fixed_window, 5, kMicrosPerSecond);
  auto check_many = [&](std::string_view round) {
    for (int i = 0; i < 60; ++i) {
      auto r = store->check_sync({{fmt::format("flush:{{{}-{}}}:r", unique(round), i), *limit, 1}});
      ASSERT_TRUE(r) << r.error().message;
      EXPECT_TRUE(r->decision.allowed);
    }
  };
  check_many("a");
  for (auto* m : cluster.masters()) testing::command_on(m->port(), {"SCRIPT", "FLUSH"});
  const auto reloads = store->stats().noscript_reloads;
  check_many("b");
  EXPECT_GE(store->stats().noscript_reloads, reloads + 3) << "one reload per master at least";
  EXPECT_EQ(store->stats().library_loads, 0u);
}

// With functions (the default), the library is loaded on each master at first use, and again
// on each after a FUNCTION FLUSH; no script is evaluated.
TEST(RedisClusterStore, LibraryIsLoadedAgainOnEveryNodeAfterAFunctionFlush) {
  auto& cluster = testing::shared_cluster();
  auto store = open_cluster(cluster.url(), 2 * kMicrosPerSecond);
  auto limit = algorithms::Limit::make(Algorithm::fixed_window, 5, kMicrosPerSecond);
  auto check_many = [&](std::string_view round) {
    for (int i = 0; i < 60; ++i) {
      auto r = store->check_sync({{fmt::format("fflush:{{{}-{}}}:r", unique(round), i), *limit, 1}});
      ASSERT_TRUE(r) << r.error().message;
      EXPECT_TRUE(r->decision.allowed);
    }
  };
  for (auto* m : cluster.masters()) testing::command_on(m->port(), {"FUNCTION", "FLUSH"});
  check_many("a");
  EXPECT_GE(store->stats().library_loads, 3u) << "once per master at least";
  for (auto* m : cluster.masters()) testing::command_on(m->port(), {"FUNCTION", "FLUSH"});
  const auto loads = store->stats().library_loads;
  check_many("b");
  EXPECT_GE(store->stats().library_loads, loads + 3) << "once per master at least";
  EXPECT_EQ(store->stats().noscript_reloads, 0u);
}

TEST(RedisClusterStore, ChecksSpanningSlotsAreSplitPerSlotOrRejectedWhenAsked) {
  auto& cluster = testing::shared_cluster();
  const auto ip = fmt::format("span:{{ip-{}}}:global", unique("x"));
  const auto user = fmt::format("span:{{user-{}}}:api", unique("x"));
  ASSERT_NE(redis::key_slot(ip), redis::key_slot(user));
  auto tight = algorithms::Limit::make(Algorithm::fixed_window, 1, 60 * kMicrosPerSecond);
  auto loose = algorithms::Limit::make(Algorithm::fixed_window, 100, 60 * kMicrosPerSecond);

  auto strict = open_cluster(cluster.url(), 2 * kMicrosPerSecond, /*reject_cross_slot=*/true);
  auto rejected = strict->check_sync({{ip, *loose, 1}, {user, *tight, 1}});
  ASSERT_FALSE(rejected);
  EXPECT_EQ(rejected.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(rejected.error().message.find("keys span slots"), std::string::npos);

  auto store = open_cluster(cluster.url(), 2 * kMicrosPerSecond);
  auto first = store->check_sync({{ip, *loose, 1}, {user, *tight, 1}});
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_TRUE(first->decision.allowed);
  auto second = store->check_sync({{ip, *loose, 1}, {user, *tight, 1}});
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_FALSE(second->decision.allowed);
  ASSERT_EQ(second->items.size(), 2u);
  // The IP's slot admitted and consumed, then got its unit back: it reports a peek.
  EXPECT_TRUE(second->items[0].allowed);
  EXPECT_EQ(second->items[0].remaining, 99);
  EXPECT_FALSE(second->items[1].allowed);
  // The denied check consumed nothing: the IP's window holds the first check only.
  auto peek = store->check_sync({{ip, *loose, 0}});
  ASSERT_TRUE(peek) << peek.error().message;
  EXPECT_EQ(peek->decision.remaining, 99);
  const auto stats = store->stats();
  EXPECT_EQ(stats.cross_slot_checks, 2u);
  EXPECT_EQ(stats.cross_slot_partial, 1u);
  EXPECT_EQ(stats.refunds_sent, 1u);
  EXPECT_EQ(stats.refunds_failed, 0u);
}

// A check across slots denied by one slot: every other slot's key is left as it was, for
// each algorithm, on an explicit instant and on the servers' clocks; each slot that consumed
// gets one refund, the slots that did not consume none.
class RedisClusterRefund : public ::testing::TestWithParam<Algorithm> {};

TEST_P(RedisClusterRefund, ADeniedCheckLeavesTheOtherSlotsAsTheyWere) {
  auto& cluster = testing::shared_cluster();
  auto store = open_cluster(cluster.url(), 2 * kMicrosPerSecond);
  const Algorithm a = GetParam();
  const std::string name(algorithms::to_string(a));
  // Clock-free shapes on the servers' clocks: a slow bucket, a long log (a window that ends
  // during the test would change the windows' figures between two peeks).
  const bool server_clock_too = a == Algorithm::token_bucket || a == Algorithm::sliding_window_log;
  for (const bool explicit_now : {true, false}) {
    if (!explicit_now && !server_clock_too) continue;
    SCOPED_TRACE(name + (explicit_now ? " at an explicit instant" : " on the servers' clocks"));
    const std::optional<Micros> now =
        explicit_now ? std::optional<Micros>(1'700'000'000'000'000) : std::nullopt;
    const std::string run = unique(name + (explicit_now ? "-at" : "-time"));
    // Two keys of one identity (one slot), another identity's key that admits without
    // consuming (cost 0), and a third identity's key that is full.
    const std::string a1 = fmt::format("cr:{{ip-{}}}:one", run), a2 = fmt::format("cr:{{ip-{}}}:two", run);
    const std::string peeked = fmt::format("cr:{{key-{}}}:r", run);
    const std::string full = fmt::format("cr:{{user-{}}}:r", run);
    ASSERT_NE(redis::key_slot(a1), redis::key_slot(full));
    ASSERT_NE(redis::key_slot(a1), redis::key_slot(peeked));
    ASSERT_NE(redis::key_slot(peeked), redis::key_slot(full));
    const auto limit = *algorithms::Limit::make(a, 10, 60 * kMicrosPerSecond);
    const auto tight = *algorithms::Limit::make(Algorithm::fixed_window, 1, 3600 * kMicrosPerSecond);
    // Earlier use of every key, and the user's window is then full.
    auto warm = store->check_sync({{a1, limit, 3}, {a2, limit, 1}, {peeked, limit, 2}, {full, tight, 1}}, now);
    ASSERT_TRUE(warm) << warm.error().message;
    ASSERT_TRUE(warm->decision.allowed);
    auto peek = [&](const std::string& key) {
      auto r = store->check_sync({{key, limit, 0}}, now);
      EXPECT_TRUE(r) << r.error().message;
      return r ? r->decision.remaining : -1;
    };
    ASSERT_EQ(peek(a1), 7);
    ASSERT_EQ(peek(a2), 9);
    ASSERT_EQ(peek(peeked), 8);
    const auto before = store->stats();

    auto denied = store->check_sync({{a1, limit, 2}, {peeked, limit, 0}, {a2, limit, 4}, {full, tight, 1}}, now);
    ASSERT_TRUE(denied) << denied.error().message;
    EXPECT_FALSE(denied->decision.allowed);
    ASSERT_EQ(denied->items.size(), 4u);
    // The refunded keys report a peek after their refund.
    EXPECT_TRUE(denied->items[0].allowed);
    EXPECT_EQ(denied->items[0].remaining, 7);
    EXPECT_EQ(denied->items[1].remaining, 8);
    EXPECT_EQ(denied->items[2].remaining, 9);
    EXPECT_FALSE(denied->items[3].allowed);
    EXPECT_EQ(denied->decision.retry_after, denied->items[3].retry_after);

    EXPECT_EQ(peek(a1), 7);
    EXPECT_EQ(peek(a2), 9);
    EXPECT_EQ(peek(peeked), 8);
    const auto after = store->stats();
    EXPECT_EQ(after.cross_slot_partial, before.cross_slot_partial + 1);
    EXPECT_EQ(after.refunds_sent, before.refunds_sent + 1) << "one refund, to the slot that consumed";
    EXPECT_EQ(after.refunds_failed, before.refunds_failed);

    // An admitted check across slots keeps what it consumed, and needs no refund.
    auto admitted = store->check_sync({{a1, limit, 2}, {peeked, limit, 1}}, now);
    ASSERT_TRUE(admitted) << admitted.error().message;
    EXPECT_TRUE(admitted->decision.allowed);
    EXPECT_EQ(peek(a1), 5);
    EXPECT_EQ(peek(peeked), 7);
    EXPECT_EQ(store->stats().refunds_sent, after.refunds_sent);
    EXPECT_EQ(store->stats().cross_slot_partial, after.cross_slot_partial);
  }
}

INSTANTIATE_TEST_SUITE_P(EveryAlgorithm, RedisClusterRefund,
                         ::testing::Values(Algorithm::token_bucket, Algorithm::sliding_window_log,
                                           Algorithm::sliding_window_counter, Algorithm::fixed_window),
                         [](const ::testing::TestParamInfo<Algorithm>& info) {
                           return std::string(algorithms::to_string(info.param));
                         });

// The scripts of checks across slots ("multi_at", "refund") are loaded on NOSCRIPT as the
// others are (functions off: EVALSHA).
TEST(RedisClusterStore, CrossSlotScriptsAreLoadedAgainAfterAFlush) {
  auto& cluster = testing::shared_cluster();
  auto store = open_cluster(cluster.url(), 2 * kMicrosPerSecond, false, false);
  const auto ip = fmt::format("flush-span:{{ip-{}}}:r", unique("x"));
  const auto user = fmt::format("flush-span:{{user-{}}}:r", unique("x"));
  ASSERT_NE(redis::key_slot(ip), redis::key_slot(user));
  const auto limit = *algorithms::Limit::make(Algorithm::sliding_window_log, 5, 60 * kMicrosPerSecond);
  ASSERT_TRUE(store->check_sync({{user, limit, 5}}));
  for (auto* m : cluster.masters()) testing::command_on(m->port(), {"SCRIPT", "FLUSH"});
  const auto before = store->stats();
  auto denied = store->check_sync({{ip, limit, 2}, {user, limit, 1}});
  ASSERT_TRUE(denied) << denied.error().message;
  EXPECT_FALSE(denied->decision.allowed);
  auto peek = store->check_sync({{ip, limit, 0}});
  ASSERT_TRUE(peek) << peek.error().message;
  EXPECT_EQ(peek->decision.remaining, 5);
  const auto after = store->stats();
  EXPECT_EQ(after.refunds_sent, before.refunds_sent + 1);
  EXPECT_EQ(after.refunds_failed, before.refunds_failed);
  EXPECT_GE(after.noscript_reloads, before.noscript_reloads + 2) << "multi_at on both slots' masters";
}

// A refund that fails is counted, not retried, and the consumption it was to give back
// stays (functions off: EVALSHA). The refund fails here because its script cannot be loaded: the scripts are flushed,
// "multi_at" is loaded again by hand, and EVAL is refused to the store's user, so the
// refund's EVALSHA answers NOSCRIPT and its EVAL an error.
TEST(RedisClusterStore, AFailedRefundIsCountedAndItsConsumptionStays) {
  auto& cluster = testing::shared_cluster();
  auto store = open_cluster(cluster.url(), 2 * kMicrosPerSecond, false, false);
  const auto ip = fmt::format("fail-span:{{ip-{}}}:r", unique("x"));
  const auto user = fmt::format("fail-span:{{user-{}}}:r", unique("x"));
  ASSERT_NE(redis::key_slot(ip), redis::key_slot(user));
  const auto limit = *algorithms::Limit::make(Algorithm::token_bucket, 10, 60 * kMicrosPerSecond);
  ASSERT_TRUE(store->check_sync({{user, limit, 10}}));
  const auto masters = cluster.masters();
  struct EvalAllowedAgain {
    std::vector<RedisServer*> masters;
    ~EvalAllowedAgain() {
      for (auto* m : masters) testing::command_on(m->port(), {"ACL", "SETUSER", "default", "+eval"});
    }
  } restore{masters};
  for (auto* m : masters) {
    testing::command_on(m->port(), {"SCRIPT", "FLUSH"});
    testing::command_on(m->port(), {"SCRIPT", "LOAD", std::string(*lua_script("multi_at"))});
    testing::command_on(m->port(), {"ACL", "SETUSER", "default", "-eval"});
  }
  const auto before = store->stats();
  auto denied = store->check_sync({{ip, limit, 3}, {user, limit, 1}});
  ASSERT_TRUE(denied) << denied.error().message;
  EXPECT_FALSE(denied->decision.allowed);
  // The IP's item reports what its slot consumed: it was not given back.
  EXPECT_TRUE(denied->items[0].allowed);
  EXPECT_EQ(denied->items[0].remaining, 7);
  const auto after = store->stats();
  EXPECT_EQ(after.cross_slot_partial, before.cross_slot_partial + 1);
  EXPECT_EQ(after.refunds_sent, before.refunds_sent + 1);
  EXPECT_EQ(after.refunds_failed, before.refunds_failed + 1);
  // ... and in /metrics.
  MetricsWriter metrics;
  store->write_metrics(metrics);
  EXPECT_NE(metrics.text().find(fmt::format("\nratekeeper_cluster_refund_failures_total {}\n", after.refunds_failed)),
            std::string::npos)
      << metrics.text();

  for (auto* m : masters) testing::command_on(m->port(), {"ACL", "SETUSER", "default", "+eval"});
  auto peek = store->check_sync({{ip, limit, 0}});
  ASSERT_TRUE(peek) << peek.error().message;
  EXPECT_EQ(peek->decision.remaining, 7);
}

// Concurrent checks across slots, each consuming from a slow bucket and denied by another
// slot: the refunds, in whatever order they run, give every consumption back (the issue's
// figures: a bucket of 20 refilled 0.01 per second, 24 checks).
TEST(RedisClusterStore, ConcurrentChecksDeniedByAnotherSlotLeaveTheBucketFull) {
  auto& cluster = testing::shared_cluster();
  auto store = open_cluster(cluster.url(), 5 * kMicrosPerSecond);
  const auto ip = fmt::format("order-span:{{ip-{}}}:r", unique("x"));
  const auto user = fmt::format("order-span:{{user-{}}}:r", unique("x"));
  ASSERT_NE(redis::key_slot(ip), redis::key_slot(user));
  const auto bucket = *algorithms::Limit::token_bucket(20, 0.01);
  const auto tight = *algorithms::Limit::make(Algorithm::fixed_window, 1, 3600 * kMicrosPerSecond);
  auto full = store->check_sync({{user, tight, 1}});
  ASSERT_TRUE(full && full->decision.allowed);

  constexpr int kChecks = 24;
  std::mutex mu;
  std::vector<Result<CheckOutcome>> outcomes;
  std::latch answered(kChecks);
  for (int i = 0; i < kChecks; ++i) {
    store->check({{ip, bucket, 1}, {user, tight, 1}}, std::nullopt, [&](Result<CheckOutcome> r) {
      {
        std::lock_guard lock(mu);
        outcomes.push_back(std::move(r));
      }
      answered.count_down();
    });
  }
  answered.wait();
  for (const auto& r : outcomes) {
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_FALSE(r->decision.allowed);
  }
  EXPECT_EQ(store->stats().refunds_failed, 0u);
  auto peek = store->check_sync({{ip, bucket, 0}});
  ASSERT_TRUE(peek) << peek.error().message;
  EXPECT_EQ(peek->decision.remaining, 20);
}

// A master that answers scripts with errors (out of memory under noeviction) while every
// connection is up: the store is not ready while such errors come, whichever kind of call
// got them (one slot, or a part of a check across slots), and ready again once
// error_window has passed without one (on a manual clock).
TEST(RedisClusterStore, ErrorRepliesMakeTheStoreNotReadyUntilChecksSucceedAgain) {
  auto& cluster = testing::shared_cluster();
  ManualClock clock(0);
  StoreOptions o;
  o.url = cluster.url();
  o.command_timeout = 2 * kMicrosPerSecond;
  o.clock = &clock;
  o.error_window = 10 * kMicrosPerSecond;
  auto parsed = redis::parse_url(o.url);
  ASSERT_TRUE(parsed) << parsed.error().message;
  RedisStore store(redis_store_options(o, *parsed));
  ASSERT_TRUE(eventually([&] { return store.health().ready; })) << store.health().detail;
  const auto ip = fmt::format("oom:{{ip-{}}}:r", unique("x"));
  const auto user = fmt::format("oom:{{user-{}}}:r", unique("x"));
  ASSERT_NE(redis::key_slot(ip), redis::key_slot(user));
  const auto limit = *algorithms::Limit::make(Algorithm::token_bucket, 10, 60 * kMicrosPerSecond);

  auto& master = cluster.master_of_slot(redis::key_slot(ip));
  struct MemoryBack {
    RedisServer& master;
    ~MemoryBack() { master.command({"CONFIG", "SET", "maxmemory", "0"}); }
  } restore{master};
  ASSERT_EQ(master.command({"CONFIG", "SET", "maxmemory-policy", "noeviction"}), "OK");
  ASSERT_EQ(master.command({"CONFIG", "SET", "maxmemory", "1"}), "OK");
  for (const std::vector<CheckItem>& items :
       {std::vector<CheckItem>{{ip, limit, 1}}, std::vector<CheckItem>{{ip, limit, 1}, {user, limit, 1}}}) {
    auto r = store.check_sync(items);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::reply);
    EXPECT_FALSE(store.health().ready);
    EXPECT_NE(store.health().detail.find("OOM"), std::string::npos) << store.health().detail;
    clock.advance(o.error_window);
    EXPECT_TRUE(store.health().ready) << store.health().detail;
  }
  ASSERT_EQ(master.command({"CONFIG", "SET", "maxmemory", "0"}), "OK");
  auto r = store.check_sync({{ip, limit, 1}, {user, limit, 1}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->decision.allowed);
  EXPECT_TRUE(store.health().ready) << store.health().detail;
}

TEST(RedisClusterStore, ServeOnTheClusterAdmitsExactlyCapacityOfAConcurrentBurst) {
  auto& cluster = testing::shared_cluster();
  testing::ServerProcess::Options o;
  // A rule name of its own: the shared cluster may hold this IP's keys of other tests.
  o.config_yaml = fmt::format(R"(
store:
  url: {}
  command_timeout: 2s
rules:
  - name: burst{}
    match: {{path_prefix: /api/}}
    limits:
      - capacity: 100
        refill_rate: 0.001
)",
                              cluster.url(), ::getpid());
  o.store_url = cluster.url();
  o.threads = 4;
  testing::ServerProcess server(o);
  constexpr int kRequests = 200;
  std::mutex mu;
  std::vector<int> statuses;
  std::latch start(kRequests);
  std::vector<std::thread> threads;
  for (int t = 0; t < kRequests; ++t) {
    threads.emplace_back([&] {
      testing::HttpClient client(server.port());
      start.arrive_and_wait();
      const int status = client.get("/api/data").status;
      std::lock_guard lock(mu);
      statuses.push_back(status);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(std::count(statuses.begin(), statuses.end(), 200), 100);
  EXPECT_EQ(std::count(statuses.begin(), statuses.end(), 429), 100);
}

TEST(RedisClusterStore, ASlotMigratedUnderTrafficLosesNoRequestAndUsesAskThenMoved) {
  auto& cluster = testing::shared_cluster();
  auto store = open_cluster(cluster.url(), 3 * kMicrosPerSecond);
  const std::string tag = unique("migrating");
  const auto slot = redis::key_slot(fmt::format("{{{}}}", tag));
  auto& from = cluster.master_of_slot(slot);
  RedisServer* to = nullptr;
  for (auto* m : cluster.masters()) {
    if (m != &from) to = m;
  }
  ASSERT_NE(to, nullptr);
  // Keys that live for the whole test (a token bucket refilled every microsecond would
  // expire at once), so that there is something to migrate.
  const auto limit = *algorithms::Limit::make(Algorithm::fixed_window, 100'000, 3600 * kMicrosPerSecond);
  const std::string a = fmt::format("mig:{{{}}}:a", tag);
  const std::string b = fmt::format("mig:{{{}}}:b", tag);
  ASSERT_TRUE(store->check_sync({{a, limit, 1}, {b, limit, 1}}));

  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> ok{0};
  std::mutex failures_mu;
  std::vector<std::string> failures;
  auto traffic = [&](int id) {
    for (std::uint64_t i = 0; !stop.load(); ++i) {
      // New keys (created wherever the slot's keys currently are) and the same two keys.
      auto r = (i % 2 == 0) ? store->check_sync({{fmt::format("mig:{{{}}}:n{}-{}", tag, id, i % 400), limit, 1}})
                            : store->check_sync({{a, limit, 1}, {b, limit, 1}});
      if (r) {
        ok.fetch_add(1);
      } else {
        std::lock_guard lock(failures_mu);
        failures.push_back(r.error().message);
      }
    }
  };
  std::vector<std::thread> threads;
  struct Joiner {
    std::atomic<bool>& stop;
    std::vector<std::thread>& threads;
    ~Joiner() {
      stop = true;
      for (auto& t : threads) {
        if (t.joinable()) t.join();
      }
    }
  } joiner{stop, threads};
  for (int t = 0; t < 3; ++t) threads.emplace_back(traffic, t);
  auto wait_ok = [&](std::uint64_t more) {
    const auto target = ok.load() + more;
    return eventually([&] { return ok.load() >= target; });
  };
  ASSERT_TRUE(wait_ok(100));

  cluster.begin_migration(slot, from, *to);
  ASSERT_TRUE(wait_ok(100));
  const auto moved_keys = cluster.migrate_keys(slot, from, *to);
  EXPECT_GT(moved_keys, 0u);
  // Keys now live on the importing node: every access goes through ASK.
  EXPECT_TRUE(eventually([&] { return store->cluster().stats().ask > 0; }));
  ASSERT_TRUE(wait_ok(100));
  cluster.migrate_keys(slot, from, *to);  // anything created on the source meanwhile
  cluster.finish_migration(slot, *to);
  // The store's map still names the old owner until it is redirected and refreshes.
  EXPECT_TRUE(eventually([&] { return store->cluster().stats().moved > 0; }));
  EXPECT_TRUE(eventually([&] {
    auto owner = store->cluster().master_of(slot);
    return owner && owner->port == to->port();
  }));
  ASSERT_TRUE(wait_ok(100));
  stop = true;
  for (auto& t : threads) t.join();
  threads.clear();

  const auto stats = store->cluster().stats();
  std::cout << fmt::format("migration: {} requests ok, {} failed, ASK {}, MOVED {}, TRYAGAIN {}, refreshes {}\n",
                           ok.load(), failures.size(), stats.ask, stats.moved, stats.tryagain, stats.refreshes);
  EXPECT_TRUE(failures.empty()) << failures.size() << " failed, first: " << failures.front();
  EXPECT_GT(stats.ask, 0u);
  EXPECT_GT(stats.moved, 0u);
  EXPECT_EQ(testing::command_on(from.port(), {"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot)}), "0");
  EXPECT_NE(testing::command_on(to->port(), {"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot)}), "0");
  cluster.wait_ok();
}

// Checks across slots while the master of one slot is stopped (SIGSTOP): the part sent to the
// stopped master misses its deadline, the other part is refunded. When the master wakes up
// and runs the part it was sent, that part must consume nothing (it carries its deadline on
// the server's clock), so that both keys are as full as before.
TEST(RedisClusterStore, PartsThatMissedTheirDeadlineOnAStoppedMasterConsumeNothing) {
  RedisCluster::Options options;
  options.replicas_per_master = 0;
  RedisCluster cluster(options);  // its own: no replica takes over the stopped master
  auto store = open_cluster(cluster.url(), 200 * kMicrosPerMilli);
  const auto ip = fmt::format("stopped:{{ip-{}}}:r", unique("x"));
  std::string user;
  auto& alive = cluster.master_of_slot(redis::key_slot(ip));
  for (int i = 0; user.empty(); ++i) {
    auto k = fmt::format("stopped:{{user-{}}}:r", i);
    if (cluster.master_of_slot(redis::key_slot(k)).port() != alive.port()) user = k;
  }
  auto& stopped = cluster.master_of_slot(redis::key_slot(user));
  const auto limit = *algorithms::Limit::make(Algorithm::token_bucket, 100, 3600 * kMicrosPerSecond);
  // The server's clock sampled, on both masters' slots.
  ASSERT_TRUE(store->check_sync({{fmt::format("warm:{{ip-{}}}", unique("x")), limit, 1}}));
  ASSERT_TRUE(store->check_sync({{user + ":warm", limit, 0}}));

  stopped.pause();
  auto last_sent = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) {
    last_sent = std::chrono::steady_clock::now();
    auto r = store->check_sync({{ip, limit, 1}, {user, limit, 1}});
    EXPECT_TRUE(!r || !r->decision.allowed);
  }
  // Resumed once every part's deadline has passed (one answered early may run until then).
  std::this_thread::sleep_until(last_sent + std::chrono::milliseconds(205));
  stopped.resume();
  ASSERT_TRUE(testing::eventually([&] {
    auto r = store->check_sync({{user, limit, 0}});
    return r.has_value();
  }, std::chrono::seconds(10)));
  EXPECT_EQ(testing::command_on(stopped.port(), {"EXISTS", user}), "0");
  for (const auto& key : {ip, user}) {
    auto peek = store->check_sync({{key, limit, 0}});
    ASSERT_TRUE(peek) << peek.error().message;
    EXPECT_EQ(peek->decision.remaining, 100) << key;
  }
}

TEST(RedisClusterStore, AKilledMasterIsReplacedByItsReplicaAndTheStoreCarriesOn) {
  RedisCluster cluster;  // its own: this one loses a master
  constexpr Micros kDeadline = 100 * kMicrosPerMilli;
  auto store = open_cluster(cluster.url(), kDeadline);
  // One identity per master, so that traffic touches every shard.
  std::vector<std::string> keys;
  std::vector<int> owners;
  for (int i = 0; keys.size() < 3 && i < 10000; ++i) {
    auto k = fmt::format("fo:{{id{}}}:r", i);
    const int port = cluster.master_of_slot(redis::key_slot(k)).port();
    if (std::find(owners.begin(), owners.end(), port) == owners.end()) {
      owners.push_back(port);
      keys.push_back(k);
    }
  }
  ASSERT_EQ(keys.size(), 3u);
  const auto victim_key = keys[0];
  auto& victim = cluster.master_of_slot(redis::key_slot(victim_key));
  const auto limit = big_limit();

  struct Failure {
    std::chrono::steady_clock::time_point at;
    Micros took = 0;
    Error error;
  };
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> ok{0};
  std::atomic<std::uint64_t> victim_ok_after_kill{0};
  std::atomic<bool> killed{false};
  std::mutex mu;
  std::vector<Failure> failures;
  Micros slowest = 0;
  auto traffic = [&] {
    for (std::uint64_t i = 0; !stop.load(); ++i) {
      const auto& k = keys[i % keys.size()];
      const auto t0 = std::chrono::steady_clock::now();
      auto r = store->check_sync({{k, limit, 1}});
      const auto took = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
      std::lock_guard lock(mu);
      slowest = std::max<Micros>(slowest, took);
      if (r) {
        ok.fetch_add(1);
        if (killed.load() && k == victim_key) victim_ok_after_kill.fetch_add(1);
      } else {
        failures.push_back({t0, took, r.error()});
      }
    }
  };
  std::vector<std::thread> threads;
  struct Joiner {
    std::atomic<bool>& stop;
    std::vector<std::thread>& threads;
    ~Joiner() {
      stop = true;
      for (auto& t : threads) {
        if (t.joinable()) t.join();
      }
    }
  } joiner{stop, threads};
  for (int t = 0; t < 2; ++t) threads.emplace_back(traffic);
  ASSERT_TRUE(eventually([&] { return ok.load() >= 200; }));

  const auto kill_at = std::chrono::steady_clock::now();
  victim.kill();
  killed = true;
  // Automatic failover (cluster-node-timeout 1000 ms): the replica takes over the slots.
  const bool recovered = eventually([&] { return victim_ok_after_kill.load() >= 50; }, 30s);
  const auto recovered_at = std::chrono::steady_clock::now();
  stop = true;
  for (auto& t : threads) t.join();
  ASSERT_TRUE(recovered) << "the victim's keys were never answered again; store: " << store->health().detail
                         << "; last error: " << (failures.empty() ? "" : failures.back().error.message)
                         << "; cluster:\n"
                         << testing::command_on(cluster.masters().front()->port(), {"CLUSTER", "NODES"});

  std::lock_guard lock(mu);
  double window = 0;
  if (!failures.empty()) {
    window = std::chrono::duration<double>(failures.back().at - failures.front().at).count();
  }
  std::cout << fmt::format(
      "failover: {} ok, {} failed over {:.2f} s (kill → recovery {:.2f} s), slowest call {} us, "
      "store map changes {}, refreshes {}\n",
      ok.load(), failures.size(), window, std::chrono::duration<double>(recovered_at - kill_at).count(), slowest,
      store->cluster().stats().map_changes, store->cluster().stats().refreshes);
  ::testing::Test::RecordProperty("failed_calls", static_cast<int>(failures.size()));
  for (const auto& f : failures) {
    EXPECT_TRUE(f.error.is_store_failure()) << f.error.message;
    // At the deadline, not hung past it: the margin is generous for a loaded 2-core machine
    // (failover detection is Redis' time, not the client's).
    EXPECT_LE(f.took, kDeadline + 2 * kMicrosPerSecond) << f.error.message;
  }
  EXPECT_NE(store->cluster().master_of(redis::key_slot(victim_key))->port, victim.port());
}

}  // namespace
}  // namespace ratekeeper::store
