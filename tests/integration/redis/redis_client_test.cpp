// The Redis client against real redis-server processes: URL parsing, auto-pipelining,
// deadlines, AUTH and SELECT, unreachable servers, unix sockets, reconnection and the
// circuit breaker.

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include <fmt/format.h>

#include "ratekeeper/core/clock.hpp"
#include "redis/connection.hpp"
#include "ratekeeper/core/event_loop.hpp"
#include "ratekeeper/redis/url.hpp"
#include "support/eventually.hpp"
#include "support/redis_server.hpp"

namespace ratekeeper::redis {
namespace {

using testing::RedisServer;
using namespace std::chrono_literals;

ConnectionOptions options_for(const std::string& url) {
  auto parsed = parse_url(url);
  EXPECT_TRUE(parsed.has_value()) << parsed.error().message;
  ConnectionOptions o;
  o.endpoint = parsed->endpoints.at(0);
  o.credentials = parsed->credentials;
  o.db = parsed->db;
  o.connect_timeout = 1 * kMicrosPerSecond;
  o.command_timeout = 2 * kMicrosPerSecond;
  o.reconnect_min = 10 * kMicrosPerMilli;
  o.reconnect_max = 100 * kMicrosPerMilli;
  return o;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

using testing::eventually;

TEST(RedisUrl, ParsesEverySchemeAndNamesTheWrongPart) {
  auto tcp = parse_url("redis://user:p%40ss@example.com:6380/3");
  ASSERT_TRUE(tcp) << tcp.error().message;
  EXPECT_EQ(tcp->scheme, UrlScheme::redis);
  EXPECT_EQ(tcp->endpoints.at(0), (Endpoint{"example.com", 6380, ""}));
  EXPECT_EQ(tcp->credentials, (Credentials{"user", "p@ss"}));
  EXPECT_EQ(tcp->db, 3);

  auto pass_only = parse_url("redis://:secret@[::1]");
  ASSERT_TRUE(pass_only) << pass_only.error().message;
  EXPECT_EQ(pass_only->endpoints.at(0), (Endpoint{"::1", 6379, ""}));
  EXPECT_EQ(pass_only->credentials, (Credentials{"", "secret"}));
  EXPECT_EQ(pass_only->endpoints.at(0).to_string(), "[::1]:6379");

  auto sock = parse_url("unix:///var/run/redis.sock?db=2");
  ASSERT_TRUE(sock) << sock.error().message;
  EXPECT_EQ(sock->scheme, UrlScheme::unix_socket);
  EXPECT_EQ(sock->endpoints.at(0).path, "/var/run/redis.sock");
  EXPECT_EQ(sock->db, 2);

  auto cluster = parse_url("redis-cluster://a:7000,b:7001,[::1]:7002");
  ASSERT_TRUE(cluster) << cluster.error().message;
  EXPECT_EQ(cluster->endpoints.size(), 3u);
  EXPECT_EQ(cluster->endpoints[2].port, 7002);

  auto sentinel = parse_url("redis-sentinel://s1:26379,s2:26379/mymaster");
  ASSERT_TRUE(sentinel) << sentinel.error().message;
  EXPECT_EQ(sentinel->master, "mymaster");
  EXPECT_EQ(sentinel->endpoints.size(), 2u);

  struct Bad {
    const char* url;
    const char* part;
  };
  for (const Bad& bad : {Bad{"redis://host:99999", "host"}, Bad{"redis://host:6379/x", "db"},
                         Bad{"redis://", "host"}, Bad{"http://host", "scheme"},
                         Bad{"unix://relative.sock", "path"}, Bad{"unix:///s.sock?db=-1", "db"},
                         Bad{"unix:///s.sock?color=red", "query"}, Bad{"redis://u:%zz@h", "password"},
                         Bad{"redis-sentinel://h:1", "master"}, Bad{"redis-cluster://h:1/2", "path"},
                         Bad{"redis://a:1,b:2", "host"}}) {
    auto r = parse_url(bad.url);
    ASSERT_FALSE(r) << bad.url;
    EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
    EXPECT_NE(r.error().message.find(bad.part), std::string::npos) << bad.url << ": " << r.error().message;
  }
}

TEST(RedisConnection, PipelinesThousandConcurrentCommandsFromSeveralThreadsInOrder) {
  RedisServer server;
  EventLoop loop(1);
  Connection conn(loop, options_for(server.url()));
  constexpr int kThreads = 4;
  constexpr int kPerThread = 250;
  std::atomic<int> answered{0};
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  std::promise<void> all_done;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // INCR replies must arrive in issue order: 1, 2, 3... per thread; ECHO must echo.
      auto next_expected = std::make_shared<std::atomic<long long>>(1);
      const std::string key = fmt::format("pipeline:{}", t);
      for (int i = 0; i < kPerThread; ++i) {
        const std::string token = fmt::format("{}-{}", t, i);
        conn.command({"ECHO", token}, [&, token](Result<Reply> r) {
          if (!r || r->str != token) wrong.fetch_add(1);
          if (answered.fetch_add(1) + 1 == 2 * kThreads * kPerThread) all_done.set_value();
        });
        conn.command({"INCR", key}, [&, next_expected](Result<Reply> r) {
          if (!r || !r->is_integer() || r->integer != next_expected->fetch_add(1)) wrong.fetch_add(1);
          if (answered.fetch_add(1) + 1 == 2 * kThreads * kPerThread) all_done.set_value();
        });
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(all_done.get_future().wait_for(30s), std::future_status::ready);
  EXPECT_EQ(wrong.load(), 0);
  const auto stats = conn.stats();
  EXPECT_EQ(stats.commands, 2u * kThreads * kPerThread);
  // Commands issued while a write was in flight joined later writes.
  EXPECT_LT(stats.writes, stats.commands);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(server.command({"GET", fmt::format("pipeline:{}", t)}), std::to_string(kPerThread));
  }
}

TEST(RedisConnection, CommandPastItsDeadlineTimesOutAndItsLateReplyIsDiscarded) {
  RedisServer server;
  EventLoop loop(1);
  auto o = options_for(server.url());
  o.broken_after = 5 * kMicrosPerSecond;  // keep the connection: the late reply must be skipped
  Connection conn(loop, o);
  ASSERT_TRUE(conn.command_sync({"PING"}));
  // BLPOP answers nil after 1 s; the caller gives up after 50 ms.
  const auto start = std::chrono::steady_clock::now();
  auto slow = conn.command_sync({"BLPOP", "nothing-here", "1"}, 50 * kMicrosPerMilli);
  ASSERT_FALSE(slow);
  EXPECT_EQ(slow.error().code, ErrorCode::timeout);
  EXPECT_LT(seconds_since(start), 0.9);
  // The next command gets its own reply, not BLPOP's nil.
  auto echo = conn.command_sync({"ECHO", "after"});
  ASSERT_TRUE(echo) << echo.error().message;
  EXPECT_EQ(echo->str, "after");
  EXPECT_EQ(conn.stats().timeouts, 1u);
}

TEST(RedisConnection, FrozenServerNeverHoldsACallerPastItsDeadline) {
  RedisServer server;
  EventLoop loop(1);
  auto o = options_for(server.url());
  o.command_timeout = 100 * kMicrosPerMilli;
  o.breaker.failures = 0;  // every call waits for its own deadline
  Connection conn(loop, o);
  ASSERT_TRUE(conn.command_sync({"PING"}));
  server.pause();
  for (int i = 0; i < 10; ++i) {
    const auto start = std::chrono::steady_clock::now();
    auto r = conn.command_sync({"PING"});
    const double took = seconds_since(start);
    ASSERT_FALSE(r);
    EXPECT_TRUE(r.error().code == ErrorCode::timeout || r.error().code == ErrorCode::unavailable)
        << r.error().message;
    EXPECT_LT(took, 1.0);
  }
  server.resume();
  EXPECT_TRUE(eventually([&] { return conn.command_sync({"PING"}).has_value(); }));
}

TEST(RedisConnection, AuthenticatesWithPasswordAndWithAclUser) {
  RedisServer server({.args = {"--requirepass", "s3cret", "--user", "alice", "on", ">alicepw", "~*", "&*", "+@all"},
                      .password = "s3cret"});
  EventLoop loop(1);
  Connection with_password(loop, options_for(fmt::format("redis://:s3cret@127.0.0.1:{}", server.port())));
  auto pong = with_password.command_sync({"PING"});
  ASSERT_TRUE(pong) << pong.error().message;
  EXPECT_EQ(pong->str, "PONG");

  Connection with_user(loop, options_for(fmt::format("redis://alice:alicepw@127.0.0.1:{}", server.port())));
  auto who = with_user.command_sync({"ACL", "WHOAMI"});
  ASSERT_TRUE(who) << who.error().message;
  EXPECT_EQ(who->str, "alice");
}

TEST(RedisConnection, WrongPasswordIsAClearAuthErrorWithoutHanging) {
  RedisServer server({.args = {"--requirepass", "s3cret"}, .password = "s3cret"});
  EventLoop loop(1);
  Connection conn(loop, options_for(fmt::format("redis://:wrong@127.0.0.1:{}", server.port())));
  const auto start = std::chrono::steady_clock::now();
  auto r = conn.command_sync({"PING"});
  EXPECT_LT(seconds_since(start), 2.0);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::auth) << r.error().message;
  EXPECT_NE(r.error().message.find("WRONGPASS"), std::string::npos) << r.error().message;
  // While it backs off, callers keep getting the auth error at once.
  auto again = conn.command_sync({"PING"});
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::auth) << again.error().message;
}

TEST(RedisConnection, SelectsTheDatabaseAndRefusesOneOutOfRange) {
  RedisServer server;
  EventLoop loop(1);
  Connection db2(loop, options_for(server.url() + "/2"));
  ASSERT_TRUE(db2.command_sync({"SET", "where", "db2"}));
  EXPECT_EQ(server.command({"GET", "where"}), "(nil)");

  Connection db99(loop, options_for(server.url() + "/99"));
  auto r = db99.command_sync({"PING"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::auth) << r.error().message;
  EXPECT_NE(r.error().message.find("SELECT 99"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("out of range"), std::string::npos) << r.error().message;
}

TEST(RedisConnection, UnreachableServerIsUnavailableFast) {
  EventLoop loop(1);
  Connection conn(loop, options_for(fmt::format("redis://127.0.0.1:{}", testing::free_port())));
  const auto start = std::chrono::steady_clock::now();
  auto r = conn.command_sync({"PING"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::unavailable) << r.error().message;
  EXPECT_LT(seconds_since(start), 1.0);
  EXPECT_NE(conn.status(), "ok");
  EXPECT_NE(conn.state(), ConnectionState::connected);
}

TEST(RedisConnection, ResolvesAHostNameAndFailsCleanlyOnOneThatDoesNotResolve) {
  RedisServer server;
  EventLoop loop(1);
  Connection conn(loop, options_for(fmt::format("redis://localhost:{}", server.port())));
  auto r = conn.command_sync({"PING"});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->str, "PONG");

  Connection bad(loop, options_for("redis://no-such-host.invalid:6379"));
  auto failed = bad.command_sync({"PING"});
  ASSERT_FALSE(failed);
  // "cannot resolve", or "connect timed out" where DNS itself does not answer in time.
  EXPECT_EQ(failed.error().code, ErrorCode::unavailable) << failed.error().message;
  EXPECT_NE(bad.status(), "ok");
}

TEST(RedisConnection, TalksOverAUnixSocket) {
  const int port = testing::free_port();
  const std::string path = fmt::format("/tmp/ratekeeper-test-{}-{}.sock", ::getpid(), port);
  RedisServer server({.args = {"--unixsocket", path, "--unixsocketperm", "700"}, .port = port, .password = ""});
  EventLoop loop(1);
  Connection conn(loop, options_for("unix://" + path + "?db=1"));
  auto r = conn.command_sync({"SET", "over", "unix"});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->str, "OK");
  EXPECT_EQ(server.command({"GET", "over"}), "(nil)");  // db 0
  auto info = conn.command_sync({"CLIENT", "INFO"});
  ASSERT_TRUE(info) << info.error().message;
  EXPECT_NE(info->str.find(" db=1 "), std::string::npos) << info->str;
  EXPECT_EQ(conn.state(), ConnectionState::connected);
  EXPECT_EQ(conn.status(), "ok");
}

TEST(RedisConnection, ReconnectsAfterTheServerRestarts) {
  RedisServer server;
  EventLoop loop(1);
  auto o = options_for(server.url());
  o.breaker.failures = 0;
  Connection conn(loop, o);
  ASSERT_TRUE(conn.command_sync({"PING"}));
  server.stop();
  auto down = conn.command_sync({"PING"});
  ASSERT_FALSE(down);
  EXPECT_EQ(down.error().code, ErrorCode::unavailable) << down.error().message;
  server.start();
  EXPECT_TRUE(eventually([&] { return conn.command_sync({"PING"}).has_value(); }));
  EXPECT_GE(conn.stats().reconnects, 1u);
  EXPECT_EQ(conn.status(), "ok");
}

// The breaker's open interval is timed by the connection's clock: a manual one here, so that
// every refusal happens while it is open however slowly the calls run, and it half-opens
// only when the clock is moved past it.
TEST(RedisConnection, BreakerOpensFailsInMicrosecondsAndClosesAfterRecovery) {
  RedisServer server;
  EventLoop loop(1);
  ManualClock clock;
  auto o = options_for(server.url());
  o.breaker.failures = 3;
  o.breaker.open_for = 200 * kMicrosPerMilli;
  o.clock = &clock;
  Connection conn(loop, o);
  ASSERT_TRUE(conn.command_sync({"PING"}));
  server.stop();
  for (int i = 0; i < 3; ++i) {
    auto r = conn.command_sync({"PING"});
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().code, ErrorCode::circuit_open);
  }
  EXPECT_EQ(conn.breaker_state(), CircuitBreaker::State::open);
  constexpr int kCalls = 1000;
  int refused = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kCalls; ++i) {
    conn.command({"PING"}, [&](Result<Reply> r) { refused += !r && r.error().code == ErrorCode::circuit_open; });
  }
  const double took = seconds_since(start);
  EXPECT_EQ(refused, kCalls);  // answered on the caller's stack
  EXPECT_LT(took / kCalls, 100e-6) << "per call: " << took / kCalls * 1e6 << " us";
  EXPECT_EQ(conn.stats().breaker_opened, 1u);
  // Open until open_for has passed on its clock, then one probe may go.
  clock.advance(o.breaker.open_for - 1);
  EXPECT_EQ(conn.breaker_state(), CircuitBreaker::State::open);
  clock.advance(1);
  EXPECT_EQ(conn.breaker_state(), CircuitBreaker::State::half_open);

  server.start();
  // A probe that fails (the server still starting) opens the breaker again for open_for.
  EXPECT_TRUE(eventually([&] {
    if (conn.breaker_state() == CircuitBreaker::State::open) clock.advance(o.breaker.open_for);
    return conn.command_sync({"PING"}).has_value();
  }));
  EXPECT_EQ(conn.breaker_state(), CircuitBreaker::State::closed);
  EXPECT_EQ(conn.status(), "ok");
}

}  // namespace
}  // namespace ratekeeper::redis
