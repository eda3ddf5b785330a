// RedisSentinelStore and the Sentinel client against real Sentinel deployments (a master, 1
// or 2 replicas, 3 sentinels): the master is found by name and followed when the sentinels
// promote a replica, whichever sentinel announces it first.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "ratekeeper/core/event_loop.hpp"
#include "redis/sentinel.hpp"
#include "ratekeeper/store/open_store.hpp"
#include "store/redis/redis_store.hpp"
#include "support/eventually.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_sentinel.hpp"
#include "support/redis_server.hpp"

namespace ratekeeper::store {
namespace {

using algorithms::Algorithm;
using namespace std::chrono_literals;

using testing::eventually;

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
  auto* sentinel_store = dynamic_cast<RedisStore*>(store.get());
  ASSERT_NE(sentinel_store, nullptr);
  ASSERT_TRUE(sentinel_store->sentinel().master());
  EXPECT_EQ(sentinel_store->sentinel().master()->port, group.master_port());
  auto limit = algorithms::Limit::make(Algorithm::token_bucket, 2, kMicrosPerSecond);
  const auto key = fmt::format("s:{{{}}}:r", ::getpid());
  EXPECT_TRUE(store->check_sync({{key, *limit, 2}})->decision.allowed);
  EXPECT_FALSE(store->check_sync({{key, *limit, 1}})->decision.allowed);
  EXPECT_EQ(group.current_master().command({"EXISTS", key}), "1");
}

// Given the server's event loop, the sentinel client runs on it (as RedisStore does): answers
// come on the loop's threads, not on threads of the client's own.
TEST(RedisSentinelStore, RunsOnTheEventLoopItIsGiven) {
  auto& group = testing::shared_sentinel_group();
  auto loop = std::make_shared<EventLoop>(2);
  StoreOptions o;
  o.url = group.url();
  o.command_timeout = 2 * kMicrosPerSecond;
  o.loop = loop;
  auto store = open_store(o);
  ASSERT_TRUE(store) << store.error().message;
  ASSERT_TRUE(eventually([&] { return (*store)->health().ready; })) << (*store)->health().detail;
  auto limit = algorithms::Limit::make(Algorithm::token_bucket, 2, kMicrosPerSecond);
  std::promise<bool> answered_on_loop;
  (*store)->check({{fmt::format("lp:{{{}}}:r", ::getpid()), *limit, 1}}, std::nullopt,
                  [&](Result<CheckOutcome> r) {
                    EXPECT_TRUE(r) << r.error().message;
                    answered_on_loop.set_value(loop->on_loop_thread());
                  });
  EXPECT_TRUE(answered_on_loop.get_future().get());
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
  // Failed at its deadline, not hung: the bound is generous for a loaded 2-core machine.
  EXPECT_GE(took, std::chrono::microseconds(o.command_timeout));
  EXPECT_LT(took, std::chrono::microseconds(o.command_timeout) + 2s);
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
  auto& store = dynamic_cast<RedisStore&>(*store_ptr);
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
    // At the deadline, not hung past it: the margin is generous for a loaded 2-core machine
    // (failover detection is Redis' time, not the client's).
    EXPECT_LE(failures[i].second, kDeadline + 2 * kMicrosPerSecond) << errors[i].message;
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
// only be found through +switch-master (or a command error: the old master of a forced
// failover stays writable until the sentinels reconfigure it, well after they announce it).
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

// SENTINEL FAILOVER (forced: no quorum, the sentinel asked leads it), repeated while the
// sentinel refuses because it does not yet consider a replica a good candidate. Returns
// when it was accepted.
std::chrono::steady_clock::time_point force_failover(testing::RedisSentinelGroup& group, std::size_t sentinel) {
  std::string answer;
  EXPECT_TRUE(eventually([&] {
    try {
      answer = testing::command_on(group.sentinel(sentinel).port(), {"SENTINEL", "FAILOVER", group.master_name()});
    } catch (const std::exception& e) {
      answer = e.what();
    }
    return answer == "OK";
  })) << answer;
  return std::chrono::steady_clock::now();
}

Result<redis::Reply> command_sync(redis::Sentinel& client, std::span<const std::string_view> argv,
                                  Micros timeout = 0) {
  std::promise<Result<redis::Reply>> done;
  auto reply = done.get_future();
  client.command(argv, [&done](Result<redis::Reply> r) { done.set_value(std::move(r)); }, timeout);
  return reply.get();
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

TEST(RedisSentinel, FollowsAFailoverThroughSwitchMasterWithPollingOff) {
  testing::RedisSentinelGroup group;  // its own: this one fails over
  redis::Sentinel client(client_options(group));
  ASSERT_TRUE(eventually([&] { return client.ready(); })) << client.status();
  ASSERT_TRUE(eventually([&] { return client.stats().subscribed == 3; })) << client.subscription_status();
  EXPECT_EQ(client.subscription_status(), "subscribed to 3 of 3 sentinels");
  const int old_port = group.master_port();
  ASSERT_EQ(client.master()->port, old_port);

  // A sentinel dies: its subscription is down and says why, the others stay up.
  group.sentinel(0).kill();
  ASSERT_TRUE(eventually([&] { return client.stats().subscribed == 2; })) << client.subscription_status();
  EXPECT_GE(client.stats().subscription_failures, 1u);
  EXPECT_TRUE(client.subscription_status().starts_with(
      fmt::format("subscribed to 2 of 3 sentinels; redis 127.0.0.1:{}: ", group.sentinel(0).port())))
      << client.subscription_status();
  EXPECT_EQ(client.stats().switch_messages, 0u);

  const auto failover_at = force_failover(group, 1);
  ASSERT_TRUE(eventually([&] {
    auto m = client.master();
    return m && m->port != old_port;
  }, 40s)) << "the client never switched; " << client.status() << "; " << client.subscription_status();
  std::cout << fmt::format("SENTINEL FAILOVER → client on the new master: {:.2f} s (poll interval {} s)\n",
                           seconds_since(failover_at), client_options(group).poll_interval / kMicrosPerSecond);
  EXPECT_GE(client.stats().switch_messages, 1u);
  EXPECT_EQ(client.stats().switch_announcements, 1u);
  EXPECT_EQ(client.stats().switches, 1u);
  EXPECT_EQ(client.master()->port, group.master_port());
  EXPECT_NE(testing::command_on(client.master()->port, {"ROLE"}).find("master"), std::string::npos);

  // Commands reach the new master.
  const auto key = fmt::format("sentinel-switch-{}", ::getpid());
  std::string_view set[] = {"SET", key, "1"};
  auto reply = command_sync(client, set);
  ASSERT_TRUE(reply) << reply.error().message;
  EXPECT_EQ(reply->str, "OK") << reply->to_string();
  EXPECT_EQ(testing::command_on(group.master_port(), {"GET", key}), "1");
}

// The sentinel listed first monitors another master: it never announces this one's switch.
// Listening to it alone (with polling off) the client would never learn of the failover.
TEST(RedisSentinel, LearnsTheSwitchFromASentinelOtherThanTheFirst) {
  testing::RedisServer other_master;
  testing::SentinelProcess elsewhere("othermaster", other_master.port());
  testing::RedisSentinelGroup group;  // its own: this one fails over
  auto o = client_options(group);
  o.sentinels.insert(o.sentinels.begin(), redis::Endpoint{"127.0.0.1", elsewhere.port(), ""});
  redis::Sentinel client(o);
  ASSERT_TRUE(eventually([&] { return client.ready(); })) << client.status();
  ASSERT_TRUE(eventually([&] { return client.stats().subscribed == 4; })) << client.subscription_status();
  const int old_port = group.master_port();
  ASSERT_EQ(client.master()->port, old_port);

  const auto failover_at = force_failover(group, 0);
  ASSERT_TRUE(eventually([&] {
    auto m = client.master();
    return m && m->port != old_port;
  }, 20s)) << "the client never switched; " << client.status() << "; " << client.subscription_status();
  std::cout << fmt::format("SENTINEL FAILOVER → client on the new master: {:.2f} s\n", seconds_since(failover_at));
  EXPECT_EQ(client.master()->port, group.master_port());
  EXPECT_EQ(client.stats().switches, 1u);

  // Each of the three sentinels of the group announces the switch: acted on once.
  ASSERT_TRUE(eventually([&] { return client.stats().switch_messages >= 3; }))
      << client.stats().switch_messages << " announcements";
  EXPECT_EQ(client.stats().switch_announcements, 1u);
  EXPECT_EQ(client.stats().switches, 1u);
}

// The first sentinel hangs (its connections stay open, nothing is answered) while another
// leads a failover. The switch is asked of the sentinel that announced it, not of the hung
// one, whose answer the client would wait for up to the sentinel command timeout (here far
// longer than the test waits).
TEST(RedisSentinel, AHungSentinelDoesNotHoldUpASwitchAnotherAnnounced) {
  testing::RedisSentinelGroup group;  // its own: this one fails over
  auto o = client_options(group);
  o.sentinel.command_timeout = 3600 * kMicrosPerSecond;
  redis::Sentinel client(o);
  struct Resume {
    testing::SentinelProcess& sentinel;
    ~Resume() { sentinel.resume(); }  // before the client closes: its resolver may be waiting on it
  } resume{group.sentinel(0)};
  ASSERT_TRUE(eventually([&] { return client.ready(); })) << client.status();
  ASSERT_TRUE(eventually([&] { return client.stats().subscribed == 3; })) << client.subscription_status();
  const int old_port = group.master_port();

  group.sentinel(0).pause();
  const auto failover_at = force_failover(group, 1);
  ASSERT_TRUE(eventually([&] {
    auto m = client.master();
    return m && m->port != old_port;
  }, 20s)) << "the client never switched; " << client.status() << "; " << client.subscription_status();
  std::cout << fmt::format("SENTINEL FAILOVER → client on the new master: {:.2f} s\n", seconds_since(failover_at));
  EXPECT_GE(client.stats().switch_announcements, 1u);
  EXPECT_EQ(client.master()->port, group.master_port());
}

// 3 instances (a master, 2 replicas) and 3 sentinels, a failover forced through the first
// sentinel, which leads it: it announces the switch only once it has also reconfigured the
// other replica, seconds after the promotion; the other sentinels announce it as soon as they
// learn it. Meanwhile the old master stays writable, and what it takes is lost. Prints how
// soon the client moved, when the last announcement (the leader's) came, and how many
// acknowledged writes were lost.
TEST(RedisSentinel, LearnsAFailoverOfThreeInstancesFromTheFirstAnnouncement) {
  testing::RedisSentinelGroup group("mymaster", 2);  // its own: this one fails over
  redis::Sentinel client(client_options(group));
  ASSERT_TRUE(eventually([&] { return client.ready(); })) << client.status();
  ASSERT_TRUE(eventually([&] { return client.stats().subscribed == 3; })) << client.subscription_status();
  const int old_port = group.master_port();
  const auto key = fmt::format("sentinel-writes-{}", ::getpid());

  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> acknowledged{0}, failed{0};
  std::thread writer([&] {
    std::string_view incr[] = {"INCR", key};
    while (!stop.load()) {
      auto r = command_sync(client, incr, 500 * kMicrosPerMilli);
      if (r && !r->is_error()) {
        acknowledged.fetch_add(1);
      } else {
        failed.fetch_add(1);
      }
    }
  });
  struct Joiner {
    std::atomic<bool>& stop;
    std::thread& thread;
    ~Joiner() {
      stop = true;
      if (thread.joinable()) thread.join();
    }
  } joiner{stop, writer};
  ASSERT_TRUE(eventually([&] { return acknowledged.load() >= 100; })) << failed.load() << " failed";

  const auto failover_at = force_failover(group, 0);
  ASSERT_TRUE(eventually([&] {
    auto m = client.master();
    return m && m->port != old_port;
  }, 40s)) << "the client never switched; " << client.status() << "; " << client.subscription_status();
  const double switched_after = seconds_since(failover_at);
  EXPECT_EQ(client.master()->port, group.master_port());
  ASSERT_TRUE(eventually([&] { return client.stats().switch_messages >= 3; }, 40s))
      << client.stats().switch_messages << " announcements";
  const double last_announcement_after = seconds_since(failover_at);
  EXPECT_EQ(client.stats().switch_announcements, 1u);
  EXPECT_EQ(client.stats().switches, 1u);

  // Writes go on reaching the new master. What the old master took after the promotion never
  // reaches it (and is dropped when the old master becomes its replica).
  const auto before = acknowledged.load();
  ASSERT_TRUE(eventually([&] { return acknowledged.load() >= before + 100; })) << failed.load() << " failed";
  stop = true;
  writer.join();
  // A write that failed (timed out) may have run: the figure is exact only when none failed.
  const auto lost = static_cast<std::int64_t>(acknowledged.load()) -
                    std::stoll(testing::command_on(group.master_port(), {"GET", key}));
  std::cout << fmt::format(
      "3 instances, SENTINEL FAILOVER → client on the new master: {:.2f} s; last (leader's) announcement: "
      "{:.2f} s; {} writes acknowledged, {} lost, {} failed\n",
      switched_after, last_announcement_after, acknowledged.load(), lost, failed.load());
}

TEST(RedisSentinel, AnUnreachableSentinelDoesNotKeepTheOthersFromSubscribing) {
  auto& group = testing::shared_sentinel_group();
  auto o = client_options(group);
  const int nobody = testing::free_port();
  o.sentinels.insert(o.sentinels.begin(), redis::Endpoint{"127.0.0.1", nobody, ""});
  redis::Sentinel client(o);
  ASSERT_TRUE(eventually([&] { return client.stats().subscribed == 3; })) << client.subscription_status();
  ASSERT_TRUE(eventually([&] { return client.stats().subscription_failures >= 1; })) << client.subscription_status();
  EXPECT_TRUE(client.subscription_status().starts_with(
      fmt::format("subscribed to 3 of 4 sentinels; redis 127.0.0.1:{}: ", nobody)))
      << client.subscription_status();
  EXPECT_TRUE(eventually([&] { return client.ready(); })) << client.status();
  EXPECT_EQ(client.master()->port, group.master_port());
}

// The master refuses writes (min-replicas-to-write above the replicas it has): NOREPLICAS
// means the command did not run, as READONLY does. It is retried until its deadline, the
// master re-resolved meanwhile, and runs once the master takes writes again.
TEST(RedisSentinel, WritesRefusedForLackOfReplicasAreRetriedWithinTheDeadline) {
  auto& group = testing::shared_sentinel_group();
  redis::Sentinel client(client_options(group));
  ASSERT_TRUE(eventually([&] { return client.ready(); })) << client.status();
  const int master = group.master_port();
  struct Restore {
    int port;
    ~Restore() { testing::command_on(port, {"CONFIG", "SET", "min-replicas-to-write", "0"}); }
  } restore{master};
  ASSERT_EQ(testing::command_on(master, {"CONFIG", "SET", "min-replicas-to-write", "2"}), "OK");
  const auto key = fmt::format("sentinel-noreplicas-{}", ::getpid());
  std::string_view set[] = {"SET", key, "1"};

  const auto resolutions = client.stats().resolutions;
  auto refused = command_sync(client, set, 200 * kMicrosPerMilli);
  ASSERT_FALSE(refused) << refused->to_string();
  EXPECT_EQ(refused.error().code, ErrorCode::unavailable) << refused.error().message;
  EXPECT_NE(refused.error().message.find("NOREPLICAS"), std::string::npos) << refused.error().message;
  EXPECT_GE(client.stats().topology_errors, 1u);
  EXPECT_TRUE(eventually([&] { return client.stats().resolutions > resolutions; }));

  std::promise<Result<redis::Reply>> done;
  auto later = done.get_future();
  const auto errors = client.stats().topology_errors;
  client.command(set, [&done](Result<redis::Reply> r) { done.set_value(std::move(r)); }, 20 * kMicrosPerSecond);
  ASSERT_TRUE(eventually([&] { return client.stats().topology_errors > errors; }));
  ASSERT_EQ(testing::command_on(master, {"CONFIG", "SET", "min-replicas-to-write", "0"}), "OK");
  auto reply = later.get();
  ASSERT_TRUE(reply) << reply.error().message;
  EXPECT_EQ(reply->str, "OK") << reply->to_string();
  EXPECT_EQ(testing::command_on(master, {"GET", key}), "1");
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

TEST(RedisSentinel, EverySentinelIsHeardAndASwitchIsActedOnOnce) {
  testing::RedisServer first, second;
  redis::Sentinel client(stand_in_options({first.port(), second.port()}));
  ASSERT_TRUE(eventually([&] { return client.stats().subscribed == 2; })) << client.subscription_status();
  EXPECT_EQ(client.subscription_status(), "subscribed to 2 of 2 sentinels");

  // The second sentinel announces first, the first one repeats it: one switch.
  EXPECT_EQ(second.command({"PUBLISH", "+switch-master", "mymaster 127.0.0.1 1 127.0.0.1 2"}), "1");
  ASSERT_TRUE(eventually([&] { return client.stats().switch_messages == 1; }));
  EXPECT_EQ(client.stats().switch_announcements, 1u);
  EXPECT_EQ(first.command({"PUBLISH", "+switch-master", "mymaster 127.0.0.1 1 127.0.0.1 2"}), "1");
  ASSERT_TRUE(eventually([&] { return client.stats().switch_messages == 2; }));
  // One event-loop thread runs both subscriptions: the repetition was handled in full.
  EXPECT_EQ(client.stats().switch_announcements, 1u);

  // The next switch (back again) is a new one, whoever announces it.
  EXPECT_EQ(first.command({"PUBLISH", "+switch-master", "mymaster 127.0.0.1 2 127.0.0.1 1"}), "1");
  ASSERT_TRUE(eventually([&] { return client.stats().switch_messages == 3; }));
  EXPECT_TRUE(eventually([&] { return client.stats().switch_announcements == 2; }));

  // A subscription lost and made again may have missed switches (here, say, back to
  // 127.0.0.1:2): the same announcement as the last one is then a new switch.
  const auto subscriptions = client.stats().subscriptions;
  EXPECT_EQ(first.command({"CLIENT", "KILL", "TYPE", "pubsub"}), "1");
  ASSERT_TRUE(eventually([&] { return client.stats().subscriptions > subscriptions; }))
      << client.subscription_status();
  EXPECT_EQ(first.command({"PUBLISH", "+switch-master", "mymaster 127.0.0.1 2 127.0.0.1 1"}), "1");
  ASSERT_TRUE(eventually([&] { return client.stats().switch_messages == 4; }));
  EXPECT_EQ(client.stats().switch_announcements, 3u);
}

TEST(RedisSentinel, ASilentSentinelIsNoticedAndTheOthersStillAnnounce) {
  testing::RedisServer first, second;
  struct Resume {
    testing::RedisServer& server;
    ~Resume() { server.resume(); }
  } resume{first};
  redis::Sentinel client(stand_in_options({first.port(), second.port()}));
  ASSERT_TRUE(eventually([&] { return client.stats().subscribed == 2; })) << client.subscription_status();
  first.pause();  // the connection stays open, nothing answers the PINGs
  ASSERT_TRUE(eventually([&] { return client.stats().subscribed == 1; })) << client.subscription_status();
  EXPECT_GE(client.stats().subscription_failures, 1u);
  EXPECT_TRUE(client.subscription_status().starts_with(
      fmt::format("subscribed to 1 of 2 sentinels; redis 127.0.0.1:{}: ", first.port())))
      << client.subscription_status();
  EXPECT_EQ(second.command({"PUBLISH", "+switch-master", "mymaster 127.0.0.1 1 127.0.0.1 2"}), "1");
  EXPECT_TRUE(eventually([&] { return client.stats().switch_messages == 1; }));
  EXPECT_EQ(client.stats().switch_announcements, 1u);
}

// Destroyed at every stage of resolving and subscribing, with a command in flight or waiting
// for a retry: the command is answered exactly once before the destructor returns, no callback
// runs on freed memory (what the sanitizer build checks) and no destructor hangs.
TEST(RedisSentinel, ClosesWhileTheSubscriptionIsStillConnecting) {
  auto& group = testing::shared_sentinel_group();
  static constexpr std::string_view kPing[] = {"PING"};
  for (int i = 0; i < 20; ++i) {
    std::atomic<int> answered{0};
    {
      redis::Sentinel client(client_options(group));
      client.command(
          kPing,
          [&](Result<redis::Reply>) { answered.fetch_add(1); },
          3600 * kMicrosPerSecond);
      if (i % 2) std::this_thread::sleep_for(std::chrono::milliseconds(i));
    }
    EXPECT_EQ(answered.load(), 1) << "round " << i;
  }
}

}  // namespace
}  // namespace ratekeeper::store
