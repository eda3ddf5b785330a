// RedisSentinelStore against a real Sentinel deployment (1 master, 1 replica, 3 sentinels):
// the store finds the master by name and follows it when the master is killed and the
// sentinels promote the replica.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "ratekeeper/redis/sentinel.hpp"
#include "ratekeeper/store/open_store.hpp"
#include "ratekeeper/store/redis_sentinel_store.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_sentinel.hpp"
#include "support/redis_server.hpp"

namespace ratekeeper::store {
namespace {

using algorithms::Algorithm;
using namespace std::chrono_literals;

template <class F>
bool eventually(F ok, std::chrono::milliseconds limit = 20s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (ok()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return ok();
}

std::unique_ptr<Store> open(const std::string& url, Micros command_timeout) {
  StoreOptions o;
  o.url = url;
  o.command_timeout = command_timeout;
  o.reconnect_min = 10 * kMicrosPerMilli;
  o.reconnect_max = 200 * kMicrosPerMilli;
  auto store = open_store(o);
  EXPECT_TRUE(store) << store.error().message;
  EXPECT_TRUE(eventually([&] { return (*store)->health().ready; })) << (*store)->health().detail;
  return std::move(*store);
}

TEST(RedisSentinelStore, OpenStoreFindsTheMasterByName) {
  auto& group = testing::shared_sentinel_group();
  auto store = open(group.url(), 2 * kMicrosPerSecond);
  EXPECT_EQ(store->kind(), "redis-sentinel");
  auto* sentinel_store = dynamic_cast<RedisSentinelStore*>(store.get());
  ASSERT_NE(sentinel_store, nullptr);
  ASSERT_TRUE(sentinel_store->sentinel().master());
  EXPECT_EQ(sentinel_store->sentinel().master()->port, group.master_port());
  auto limit = algorithms::Limit::make(Algorithm::token_bucket, 2, kMicrosPerSecond);
  const auto key = fmt::format("s:{{{}}}:r", ::getpid());
  EXPECT_TRUE(store->check_sync({{key, *limit, 2}})->decision.allowed);
  EXPECT_FALSE(store->check_sync({{key, *limit, 1}})->decision.allowed);
  EXPECT_EQ(group.current_master().command({"EXISTS", key}), "1");
}

TEST(RedisSentinelStore, AnUnknownMasterNameIsNotReadyAndFailsWithinTheDeadline) {
  auto& group = testing::shared_sentinel_group();
  StoreOptions o;
  o.url = group.url().substr(0, group.url().rfind('/')) + "/no-such-master";
  o.command_timeout = 100 * kMicrosPerMilli;
  auto store = open_store(o);
  ASSERT_TRUE(store) << store.error().message;
  auto limit = algorithms::Limit::make(Algorithm::token_bucket, 2, kMicrosPerSecond);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = (*store)->check_sync({{"s:{x}:r", *limit, 1}});
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is_store_failure());
  EXPECT_LT(took, 600ms);
  EXPECT_FALSE((*store)->health().ready);
  EXPECT_NE((*store)->health().detail.find("no-such-master"), std::string::npos) << (*store)->health().detail;
}

// A master whose ACL refuses TIME to the scripts: every check on the server's clock fails
// with an error reply while the connection is fine. The store is not ready while such errors
// come, and ready again once error_window has passed without one (on a manual clock).
TEST(RedisSentinelStore, ErrorRepliesMakeTheStoreNotReadyUntilChecksSucceedAgain) {
  auto& group = testing::shared_sentinel_group();
  ManualClock clock(0);
  StoreOptions o;
  o.url = group.url();
  o.command_timeout = 2 * kMicrosPerSecond;
  o.clock = &clock;
  o.error_window = 10 * kMicrosPerSecond;
  auto opened = open_store(o);
  ASSERT_TRUE(opened) << opened.error().message;
  auto& store = **opened;
  ASSERT_TRUE(eventually([&] { return store.health().ready; })) << store.health().detail;
  const auto limit = *algorithms::Limit::make(Algorithm::token_bucket, 1'000, kMicrosPerSecond);
  const auto key = fmt::format("s:{{{}}}:acl", ::getpid());

  auto& master = group.current_master();
  struct TimeBack {
    testing::RedisServer& master;
    ~TimeBack() { master.command({"ACL", "SETUSER", "default", "+time"}); }
  } restore{master};
  ASSERT_EQ(master.command({"ACL", "SETUSER", "default", "-time"}), "OK");
  auto r = store.check_sync({{key, limit, 1}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::reply);
  EXPECT_FALSE(store.health().ready);
  EXPECT_NE(store.health().detail.find("can't run this command"), std::string::npos) << store.health().detail;

  ASSERT_EQ(master.command({"ACL", "SETUSER", "default", "+time"}), "OK");
  auto ok = store.check_sync({{key, limit, 1}});
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_FALSE(store.health().ready) << "within the window of the last error";
  clock.advance(o.error_window);
  EXPECT_TRUE(store.health().ready) << store.health().detail;
}

TEST(RedisSentinelStore, FollowsTheMasterWhenSentinelsPromoteTheReplica) {
  testing::RedisSentinelGroup group;  // its own: this one loses its master
  constexpr Micros kDeadline = 100 * kMicrosPerMilli;
  auto store_ptr = open(group.url(), kDeadline);
  auto& store = dynamic_cast<RedisSentinelStore&>(*store_ptr);
  auto& old_master = group.current_master();
  const int old_port = old_master.port();
  auto made = algorithms::Limit::make(Algorithm::fixed_window, 100'000, 3600 * kMicrosPerSecond);
  ASSERT_TRUE(made) << made.error().message;
  const auto limit = *made;
  const auto key = fmt::format("s:{{{}}}:failover", ::getpid());

  std::atomic<bool> stop{false};
  std::atomic<bool> killed{false};
  std::atomic<std::uint64_t> ok{0}, ok_after_switch{0};
  std::mutex mu;
  std::vector<std::pair<std::chrono::steady_clock::time_point, Micros>> failures;
  std::vector<Error> errors;
  auto traffic = [&] {
    while (!stop.load()) {
      const auto t0 = std::chrono::steady_clock::now();
      auto r = store.check_sync({{key, limit, 1}});
      const auto took = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
      if (r) {
        ok.fetch_add(1);
        auto m = store.sentinel().master();
        if (killed.load() && m && m->port != old_port) ok_after_switch.fetch_add(1);
      } else {
        std::lock_guard lock(mu);
        failures.emplace_back(t0, took);
        errors.push_back(r.error());
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
  auto last_error = [&] {
    std::lock_guard lock(mu);
    return errors.empty() ? std::string("none") : fmt::format("{} errors, last: {}", errors.size(), errors.back().message);
  };
  for (int t = 0; t < 2; ++t) threads.emplace_back(traffic);
  ASSERT_TRUE(eventually([&] { return ok.load() >= 200; })) << ok.load() << " ok; " << last_error();
  const auto kill_at = std::chrono::steady_clock::now();
  old_master.kill();
  killed = true;
  const bool recovered = eventually([&] { return ok_after_switch.load() >= 100; }, 40s);
  const auto recovered_at = std::chrono::steady_clock::now();
  stop = true;
  for (auto& t : threads) t.join();
  ASSERT_TRUE(recovered) << "the store never answered from a new master; " << store.health().detail << "; "
                         << last_error();

  std::lock_guard lock(mu);
  double window = 0;
  if (!failures.empty()) window = std::chrono::duration<double>(failures.back().first - failures.front().first).count();
  Micros slowest = 0;
  for (const auto& f : failures) slowest = std::max(slowest, f.second);
  std::cout << fmt::format("sentinel failover: {} ok, {} failed over {:.2f} s (kill → recovery {:.2f} s), "
                           "slowest failed call {} us, switches {}, NOSCRIPT reloads {}\n",
                           ok.load(), failures.size(), window,
                           std::chrono::duration<double>(recovered_at - kill_at).count(), slowest,
                           store.sentinel().stats().switches, store.noscript_reloads());
  for (std::size_t i = 0; i < failures.size(); ++i) {
    EXPECT_TRUE(errors[i].is_store_failure()) << errors[i].message;
    EXPECT_LE(failures[i].second, kDeadline + 400 * kMicrosPerMilli) << errors[i].message;
  }
  EXPECT_GE(store.sentinel().stats().switches, 1u);
  EXPECT_EQ(store.sentinel().master()->port, group.master_port());
  EXPECT_NE(store.sentinel().master()->port, old_port);
  // The promoted replica had the state: the counter carried on rather than starting over.
  auto peek = store.check_sync({{key, limit, 0}});
  ASSERT_TRUE(peek) << peek.error().message;
  EXPECT_LT(peek->decision.remaining, 100'000 - 100);
}

// A Sentinel client whose periodic re-resolution never runs within a test: a new master can
// only be found through +switch-master (or a command error, and these tests send none while
// the master changes).
redis::SentinelOptions client_options(testing::RedisSentinelGroup& group) {
  redis::SentinelOptions o;
  for (std::size_t i = 0; i < group.sentinel_count(); ++i) {
    o.sentinels.push_back(redis::Endpoint{"127.0.0.1", group.sentinel(i).port(), ""});
  }
  o.master_name = group.master_name();
  o.master.command_timeout = 2 * kMicrosPerSecond;
  o.sentinel.command_timeout = 2 * kMicrosPerSecond;
  o.sentinel.reconnect_min = 10 * kMicrosPerMilli;
  o.sentinel.reconnect_max = 200 * kMicrosPerMilli;
  o.poll_interval = 3600 * kMicrosPerSecond;
  return o;
}

TEST(RedisSentinel, FollowsAFailoverThroughSwitchMasterWithPollingOff) {
  testing::RedisSentinelGroup group;  // its own: this one fails over
  redis::Sentinel client(client_options(group));
  ASSERT_TRUE(eventually([&] { return client.ready(); })) << client.status();
  ASSERT_TRUE(eventually([&] { return client.stats().subscriptions >= 1; })) << client.subscription_status();
  const int old_port = group.master_port();
  ASSERT_EQ(client.master()->port, old_port);
  EXPECT_EQ(client.subscription_status(), fmt::format("subscribed to 127.0.0.1:{}", group.sentinel(0).port()));

  // The subscribed sentinel dies: the subscription moves on to the next one.
  group.sentinel(0).kill();
  ASSERT_TRUE(eventually([&] { return client.stats().subscriptions >= 2; })) << client.subscription_status();
  EXPECT_GE(client.stats().subscription_failures, 1u);
  EXPECT_EQ(client.subscription_status(), fmt::format("subscribed to 127.0.0.1:{}", group.sentinel(1).port()));
  EXPECT_EQ(client.stats().switch_messages, 0u);

  // A forced failover (no quorum needed) run by a live sentinel; it refuses while it does
  // not yet consider the replica a good candidate.
  std::string answer;
  ASSERT_TRUE(eventually([&] {
    try {
      answer = testing::command_on(group.sentinel(1).port(), {"SENTINEL", "FAILOVER", group.master_name()});
    } catch (const std::exception& e) {
      answer = e.what();
    }
    return answer == "OK";
  })) << answer;
  const auto failover_at = std::chrono::steady_clock::now();

  ASSERT_TRUE(eventually([&] {
    auto m = client.master();
    return m && m->port != old_port;
  }, 40s)) << "the client never switched; " << client.status() << "; " << client.subscription_status();
  std::cout << fmt::format("SENTINEL FAILOVER → client on the new master: {:.2f} s (poll interval {} s)\n",
                           std::chrono::duration<double>(std::chrono::steady_clock::now() - failover_at).count(),
                           client_options(group).poll_interval / kMicrosPerSecond);
  EXPECT_GE(client.stats().switch_messages, 1u);
  EXPECT_EQ(client.stats().switches, 1u);
  EXPECT_EQ(client.master()->port, group.master_port());
  EXPECT_NE(testing::command_on(client.master()->port, {"ROLE"}).find("master"), std::string::npos);

  // Commands reach the new master.
  const auto key = fmt::format("sentinel-switch-{}", ::getpid());
  std::string_view set[] = {"SET", key, "1"};
  std::promise<Result<redis::Reply>> done;
  auto reply_future = done.get_future();
  client.command(set, [&done](Result<redis::Reply> r) { done.set_value(std::move(r)); });
  auto reply = reply_future.get();
  ASSERT_TRUE(reply) << reply.error().message;
  EXPECT_EQ(reply->str, "OK") << reply->to_string();
  EXPECT_EQ(testing::command_on(group.master_port(), {"GET", key}), "1");
}

TEST(RedisSentinel, SubscribesThroughTheNextSentinelWhenTheFirstIsUnreachable) {
  auto& group = testing::shared_sentinel_group();
  auto o = client_options(group);
  o.sentinels.insert(o.sentinels.begin(), redis::Endpoint{"127.0.0.1", testing::free_port(), ""});
  redis::Sentinel client(o);
  ASSERT_TRUE(eventually([&] { return client.stats().subscriptions >= 1; })) << client.subscription_status();
  EXPECT_GE(client.stats().subscription_failures, 1u);
  EXPECT_EQ(client.subscription_status(), fmt::format("subscribed to 127.0.0.1:{}", group.sentinel(0).port()));
  EXPECT_TRUE(eventually([&] { return client.ready(); })) << client.status();
  EXPECT_EQ(client.master()->port, group.master_port());
}

// Plain Redis servers stand in for sentinels here: they carry pub/sub (PUBLISH reaches the
// subscription) but do not know SENTINEL, so no master is ever resolved through them.
redis::SentinelOptions stand_in_options(std::vector<int> ports) {
  redis::SentinelOptions o;
  for (int port : ports) o.sentinels.push_back(redis::Endpoint{"127.0.0.1", port, ""});
  o.master_name = "mymaster";
  o.sentinel.command_timeout = 500 * kMicrosPerMilli;
  o.sentinel.reconnect_min = 10 * kMicrosPerMilli;
  o.sentinel.reconnect_max = 200 * kMicrosPerMilli;
  o.poll_interval = 3600 * kMicrosPerSecond;
  return o;
}

TEST(RedisSentinel, SwitchMessagesAreAuthenticatedFilteredByNameAndNotTrustedBlindly) {
  testing::RedisServer::Options so;
  so.args = {"--requirepass", "s3cret"};
  so.password = "s3cret";
  testing::RedisServer server(so);
  auto o = stand_in_options({server.port()});
  o.sentinel.credentials.password = "s3cret";
  redis::Sentinel client(o);
  ASSERT_TRUE(eventually([&] { return client.stats().subscriptions >= 1; })) << client.subscription_status();
  EXPECT_EQ(client.stats().subscription_failures, 0u);

  EXPECT_EQ(server.command({"PUBLISH", "+switch-master", "othermaster 127.0.0.1 1 127.0.0.1 2"}), "1");
  EXPECT_EQ(server.command({"PUBLISH", "+switch-master", "mymaster 127.0.0.1 1 127.0.0.1 2"}), "1");
  // Delivered in order on one connection: once the second is counted, the first was skipped.
  ASSERT_TRUE(eventually([&] { return client.stats().switch_messages >= 1; }));
  EXPECT_EQ(client.stats().switch_messages, 1u);
  // The message only triggered a resolution, which these servers cannot answer.
  EXPECT_FALSE(client.master());
  EXPECT_FALSE(client.ready());

  auto wrong = stand_in_options({server.port()});
  wrong.sentinel.credentials.password = "wrong";
  redis::Sentinel refused(wrong);
  ASSERT_TRUE(eventually([&] { return refused.stats().subscription_failures >= 1; }));
  EXPECT_EQ(refused.stats().subscriptions, 0u);
  EXPECT_NE(refused.subscription_status().find("AUTH"), std::string::npos) << refused.subscription_status();
}

TEST(RedisSentinel, ASilentSentinelIsLeftForTheNextOne) {
  testing::RedisServer first, second;
  struct Resume {
    testing::RedisServer& server;
    ~Resume() { server.resume(); }
  } resume{first};
  redis::Sentinel client(stand_in_options({first.port(), second.port()}));
  ASSERT_TRUE(eventually([&] { return client.stats().subscriptions >= 1; })) << client.subscription_status();
  EXPECT_EQ(client.subscription_status(), fmt::format("subscribed to 127.0.0.1:{}", first.port()));
  first.pause();  // the connection stays open, nothing answers the PINGs
  ASSERT_TRUE(eventually([&] { return client.stats().subscriptions >= 2; })) << client.subscription_status();
  EXPECT_EQ(client.subscription_status(), fmt::format("subscribed to 127.0.0.1:{}", second.port()));
  EXPECT_GE(client.stats().subscription_failures, 1u);
  EXPECT_EQ(second.command({"PUBLISH", "+switch-master", "mymaster 127.0.0.1 1 127.0.0.1 2"}), "1");
  EXPECT_TRUE(eventually([&] { return client.stats().switch_messages == 1; }));
}

// Destroyed at every stage of resolving and subscribing: no callback runs on freed memory
// (what the sanitizer build checks) and no destructor hangs.
TEST(RedisSentinel, ClosesWhileTheSubscriptionIsStillConnecting) {
  auto& group = testing::shared_sentinel_group();
  for (int i = 0; i < 20; ++i) {
    redis::Sentinel client(client_options(group));
    if (i % 2) std::this_thread::sleep_for(std::chrono::milliseconds(i));
  }
  SUCCEED();
}

}  // namespace
}  // namespace ratekeeper::store
