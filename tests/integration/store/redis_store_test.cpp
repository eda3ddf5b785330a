// RedisStore against a real redis-server running the embedded Lua scripts: every algorithm,
// multi-limit all-or-nothing, the seed's limiter classes, identical decisions to MemoryStore,
// script cache loss, restarts, a frozen server, and several instances sharing one bucket.

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <mutex>
#include <chrono>
#include <random>
#include <thread>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include "ratekeeper/core/event_loop.hpp"
#include "ratekeeper/limiter/limiter.hpp"
#include "ratekeeper/limiter/rate_limiters.hpp"
#include "store/redis/lua_scripts.hpp"
#include "ratekeeper/store/memory_store.hpp"
#include "ratekeeper/store/open_store.hpp"
#include "store/redis/redis_store.hpp"
#include "support/eventually.hpp"
#include "support/redis_server.hpp"
#include "support/script_runner.hpp"

namespace ratekeeper::store {
namespace {

using algorithms::Algorithm;
using testing::RedisServer;
using testing::eventually;
using namespace std::chrono_literals;

constexpr Algorithm kAlgorithms[] = {Algorithm::token_bucket, Algorithm::sliding_window_log,
                                     Algorithm::sliding_window_counter, Algorithm::fixed_window};

StoreOptions options_for(const RedisServer& server) {
  StoreOptions o;
  o.url = server.url();
  o.command_timeout = 2 * kMicrosPerSecond;
  o.reconnect_min = 10 * kMicrosPerMilli;
  o.reconnect_max = 100 * kMicrosPerMilli;
  return o;
}

std::unique_ptr<Store> open(const StoreOptions& options) {
  auto store = open_store(options);
  EXPECT_TRUE(store) << store.error().message;
  return std::move(*store);
}

Limit limit(Algorithm a, std::int64_t capacity, Micros period) { return *Limit::make(a, capacity, period); }

// A RedisStore on `server` (2 s command timeout) whose checks are coalesced on `loop`.
RedisStoreOptions on_loop(const RedisServer& server, std::shared_ptr<EventLoop> loop) {
  RedisStoreOptions o;
  std::get<redis::ConnectionOptions>(o.topology).endpoint = redis::Endpoint{server.host(), server.port(), {}};
  std::get<redis::ConnectionOptions>(o.topology).command_timeout = 2 * kMicrosPerSecond;
  o.loop = std::move(loop);
  return o;
}

// A RedisStore on a loop of its own (one thread), on a fresh redis-server, coalescing up to
// `max_batch` checks a batch call.
struct StoreOnLoop {
  explicit StoreOnLoop(std::size_t max_batch) : store(options(max_batch)) {}

  RedisStoreOptions options(std::size_t max_batch) const {
    RedisStoreOptions o = on_loop(server, loop);
    o.max_batch = max_batch;
    return o;
  }

  // `checks` issued from one task on the loop's thread, so that they go out together, then
  // each answer in its place (nullopt for one that did not come).
  std::vector<std::optional<Result<CheckOutcome>>> checked_together(const std::vector<std::vector<CheckItem>>& checks,
                                                                    Micros now) {
    std::mutex mu;
    std::vector<std::optional<Result<CheckOutcome>>> answers(checks.size());
    std::atomic<std::size_t> answered{0};
    loop->post(0, [&] {
      for (std::size_t i = 0; i < checks.size(); ++i) {
        store.check(checks[i], now, [&, i](Result<CheckOutcome> r) {
          std::lock_guard lock(mu);
          answers[i] = std::move(r);
          answered.fetch_add(1);
        });
      }
    });
    EXPECT_TRUE(eventually([&] { return answered.load() == checks.size(); }));
    std::lock_guard lock(mu);
    return answers;
  }

  RedisServer server;
  std::shared_ptr<EventLoop> loop = std::make_shared<EventLoop>(1);
  RedisStore store;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}


// Whether the server on `port` leaves a PING unanswered for 200 ms (asleep, e.g. in DEBUG
// SLEEP), on a connection of its own.
bool server_is_asleep(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool asleep = false;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::send(fd, "PING\r\n", 6, MSG_NOSIGNAL) == 6) {
    pollfd p{fd, POLLIN, 0};
    asleep = ::poll(&p, 1, 200) == 0;
  }
  ::close(fd);
  return asleep;
}

// One server for the tests that do not stop or freeze it; keys are unique per test.
RedisServer& shared_server() {
  static RedisServer server;
  return server;
}

std::string unique_key(std::string_view what) {
  static std::atomic<int> n{0};
  return fmt::format("ratelimit:{{test:{}}}:{}", n.fetch_add(1), what);
}

// A Limiter of one rule "r" with limit `l` and failure policy `mode` over `store`: what
// answers by policy when the store fails.
std::unique_ptr<limiter::Limiter> policy_limiter(Store& store, const Limit& l, limiter::FailureMode mode) {
  limiter::LimiterConfig c;
  limiter::Rule r;
  r.name = "r";
  r.limits = {{"", l}};
  r.on_store_error = mode;
  c.rules.push_back(std::move(r));
  return std::make_unique<limiter::Limiter>(std::move(c), store);
}

// The SHA1 each embedded script is sent by (EVALSHA) is computed at build time.
TEST(RedisStore, EmbeddedScriptShaIsTheOneRedisComputes) {
  for (const auto& script : lua_scripts()) {
    EXPECT_EQ(script.sha, shared_server().command({"SCRIPT", "LOAD", std::string(script.source)})) << script.name;
  }
}

TEST(RedisStore, OpensFromUrlsAndReportsHealth) {
  auto store = open(options_for(shared_server()));
  EXPECT_EQ(store->kind(), "redis");
  ASSERT_TRUE(store->check_sync({{unique_key("health"), limit(Algorithm::fixed_window, 5, kMicrosPerSecond), 1}}));
  EXPECT_TRUE(store->health().ready) << store->health().detail;
  EXPECT_EQ(store->health().detail, "ok");

  StoreOptions bad = options_for(shared_server());
  bad.url = "redis://127.0.0.1:notaport";
  auto r = open_store(bad);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(r.error().message.find("port"), std::string::npos) << r.error().message;

  StoreOptions down = options_for(shared_server());
  down.url = fmt::format("redis://127.0.0.1:{}", testing::free_port());
  auto unreachable = open(down);
  auto result = unreachable->check_sync({{"k", limit(Algorithm::fixed_window, 5, kMicrosPerSecond), 1}});
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, ErrorCode::unavailable);
  EXPECT_FALSE(unreachable->health().ready);
  EXPECT_NE(unreachable->health().detail.find("connect"), std::string::npos) << unreachable->health().detail;
}

// A Redis that answers script calls with errors while its connection is fine: maxmemory with
// noeviction (admissions fail with OOM, denials write nothing and still succeed), then an
// ACL that refuses TIME (every check on the server's clock fails inside its script). The
// store is not ready while such errors come, and ready again once error_window has passed
// without one (on a manual clock: no waiting).
TEST(RedisStore, ErrorRepliesMakeTheStoreNotReadyUntilChecksSucceedAgain) {
  RedisServer server;
  ManualClock clock(0);
  StoreOptions o = options_for(server);
  o.clock = &clock;
  o.error_window = 10 * kMicrosPerSecond;
  auto store = open(o);
  const Limit l = limit(Algorithm::token_bucket, 2, 3600 * kMicrosPerSecond);
  const std::string empty = unique_key("oom-empty");
  ASSERT_TRUE(store->check_sync({{empty, l, 2}}));
  ASSERT_TRUE(store->health().ready) << store->health().detail;

  ASSERT_EQ(server.command({"CONFIG", "SET", "maxmemory-policy", "noeviction"}), "OK");
  ASSERT_EQ(server.command({"CONFIG", "SET", "maxmemory", "1"}), "OK");
  auto admission = store->check_sync({{unique_key("oom-new"), l, 1}});
  ASSERT_FALSE(admission);
  EXPECT_EQ(admission.error().code, ErrorCode::reply);
  EXPECT_FALSE(store->health().ready);
  EXPECT_NE(store->health().detail.find("OOM"), std::string::npos) << store->health().detail;
  auto denial = store->check_sync({{empty, l, 1}});
  ASSERT_TRUE(denial) << denial.error().message;
  EXPECT_FALSE(denial->decision.allowed);
  clock.advance(o.error_window - 1);
  EXPECT_FALSE(store->health().ready) << "a denial in between does not make it ready";

  ASSERT_EQ(server.command({"CONFIG", "SET", "maxmemory", "0"}), "OK");
  auto after = store->check_sync({{unique_key("oom-after"), l, 1}});
  ASSERT_TRUE(after && after->decision.allowed);
  clock.advance(1);
  EXPECT_TRUE(store->health().ready) << store->health().detail;
  EXPECT_EQ(store->health().detail, "ok");

  ASSERT_EQ(server.command({"ACL", "SETUSER", "default", "-time"}), "OK");
  for (int i = 0; i < 3; ++i) {
    auto r = store->check_sync({{unique_key("acl"), l, 1}});
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::reply);
  }
  EXPECT_FALSE(store->health().ready);
  EXPECT_NE(store->health().detail.find("can't run this command"), std::string::npos) << store->health().detail;
  ASSERT_EQ(server.command({"ACL", "SETUSER", "default", "+time"}), "OK");
  ASSERT_TRUE(store->check_sync({{unique_key("acl"), l, 1}}));
  clock.advance(o.error_window);
  EXPECT_TRUE(store->health().ready) << store->health().detail;
}

TEST(RedisStore, EveryAlgorithmAdmitsItsCapacityThenDenies) {
  auto store = open(options_for(shared_server()));
  const Micros t0 = 1'000'000'000;
  for (Algorithm a : kAlgorithms) {
    const std::string key = unique_key(algorithms::to_string(a));
    const Limit l = limit(a, 3, kMicrosPerSecond);
    for (int i = 0; i < 3; ++i) {
      auto r = store->check_sync({{key, l, 1}}, t0 + i);
      ASSERT_TRUE(r) << algorithms::to_string(a) << ": " << r.error().message;
      EXPECT_TRUE(r->decision.allowed) << algorithms::to_string(a);
      EXPECT_EQ(r->decision.limit, 3);
      EXPECT_EQ(r->decision.remaining, 2 - i);
    }
    auto denied = store->check_sync({{key, l, 1}}, t0 + 3);
    ASSERT_TRUE(denied) << denied.error().message;
    EXPECT_FALSE(denied->decision.allowed) << algorithms::to_string(a);
    EXPECT_GT(denied->decision.retry_after, 0);
    // Cost above capacity can never succeed: an invalid argument, not a denial.
    auto too_big = store->check_sync({{key, l, 4}}, t0 + 4);
    ASSERT_FALSE(too_big);
    EXPECT_EQ(too_big.error().code, ErrorCode::invalid_argument);
  }
}

TEST(RedisStore, MultiLimitIsAllOrNothing) {
  auto store = open(options_for(shared_server()));
  const Micros t0 = 5'000'000'000;
  const std::string per_second = unique_key("1s");
  const std::string per_minute = unique_key("1m");
  const Limit tight = limit(Algorithm::token_bucket, 2, kMicrosPerSecond);
  const Limit loose = limit(Algorithm::sliding_window_log, 10, 60 * kMicrosPerSecond);
  for (int i = 0; i < 2; ++i) {
    auto r = store->check_sync({{per_second, tight, 1}, {per_minute, loose, 1}}, t0);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_TRUE(r->decision.allowed);
    ASSERT_EQ(r->items.size(), 2u);
  }
  // The bucket is empty: denied, and the minute window is not charged for it.
  for (int i = 0; i < 3; ++i) {
    auto r = store->check_sync({{per_second, tight, 1}, {per_minute, loose, 1}}, t0);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_FALSE(r->decision.allowed);
    EXPECT_FALSE(r->items[0].allowed);
  }
  auto peek = store->check_sync({{per_minute, loose, 0}}, t0);
  ASSERT_TRUE(peek) << peek.error().message;
  EXPECT_EQ(peek->decision.remaining, 8);

  auto twice = store->check_sync({{per_second, tight, 1}, {per_second, tight, 1}}, t0);
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.error().code, ErrorCode::invalid_argument);
}

TEST(RedisStore, ScriptErrorReplyIsAReplyError) {
  // A server out of memory refuses scripts that write: an error reply, not a decision.
  RedisServer server({.args = {"--maxmemory", "1", "--maxmemory-policy", "noeviction"}, .port = 0, .password = ""});
  auto store = open(options_for(server));
  auto r = store->check_sync({{unique_key("oom"), limit(Algorithm::token_bucket, 5, kMicrosPerSecond), 1}}, 1'000'000);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::reply);
  EXPECT_NE(r.error().message.find("OOM"), std::string::npos) << r.error().message;
}

// A refusal of the connection's rights or credentials is an auth error, counted and shown as
// such: an ACL without the scripts (NOPERM), a password the store's url does not give
// (NOAUTH).
TEST(RedisStore, ARefusalOfTheConnectionsRightsIsAnAuthError) {
  RedisServer server;
  ASSERT_EQ(server.command({"ACL", "SETUSER", "noscripts", "on", ">pw", "~*", "+@all", "-@scripting"}), "OK");
  RedisStoreOptions o;
  std::get<redis::ConnectionOptions>(o.topology).endpoint = redis::Endpoint{server.host(), server.port(), {}};
  std::get<redis::ConnectionOptions>(o.topology).credentials = redis::Credentials{"noscripts", "pw"};
  std::get<redis::ConnectionOptions>(o.topology).command_timeout = 2 * kMicrosPerSecond;
  {
    RedisStore store(o);
    auto r = store.check_sync({{unique_key("noperm"), limit(Algorithm::token_bucket, 5, kMicrosPerSecond), 1}});
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::auth) << r.error().message;
    EXPECT_NE(r.error().message.find("NOPERM"), std::string::npos) << r.error().message;
  }

  RedisServer locked({.args = {"--requirepass", "set-on-the-server"}, .port = 0, .password = "set-on-the-server"});
  auto store = open(options_for(locked));  // its url names no password
  auto r = store->check_sync({{unique_key("noauth"), limit(Algorithm::token_bucket, 5, kMicrosPerSecond), 1}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::auth) << r.error().message;
  EXPECT_NE(r.error().message.find("NOAUTH"), std::string::npos) << r.error().message;
}

// An OOM answer to FUNCTION LOAD is the memory's state, not a refusal of functions: once
// memory is back, the next check loads the library and runs as FCALL (a store that took it for
// a refusal would use scripts for good, and never load the library again).
TEST(RedisStore, AnOutOfMemoryLibraryLoadDoesNotTurnFunctionsOff) {
  RedisServer server;
  auto store = open(options_for(server));
  const Limit l = limit(Algorithm::token_bucket, 5, 3600 * kMicrosPerSecond);
  const std::string library(lua_library().name);
  ASSERT_EQ(server.command({"FUNCTION", "LIST", "LIBRARYNAME", library}), "");
  ASSERT_EQ(server.command({"CONFIG", "SET", "maxmemory-policy", "noeviction"}), "OK");
  ASSERT_EQ(server.command({"CONFIG", "SET", "maxmemory", "1"}), "OK");
  auto refused = store->check_sync({{unique_key("oom-load"), l, 1}});
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("OOM"), std::string::npos) << refused.error().message;
  EXPECT_EQ(server.command({"FUNCTION", "LIST", "LIBRARYNAME", library}), "");  // not loaded
  ASSERT_EQ(server.command({"CONFIG", "SET", "maxmemory", "0"}), "OK");
  const auto fcalls = [&] {
    const auto info = server.command({"INFO", "commandstats"});
    const auto at = info.find("cmdstat_fcall:calls=");
    return at == std::string::npos ? 0 : std::stoi(info.substr(at + 20));
  };
  const int before = fcalls();
  auto after = store->check_sync({{unique_key("oom-after-load"), l, 1}});
  ASSERT_TRUE(after) << after.error().message;
  EXPECT_TRUE(after->decision.allowed);
  EXPECT_NE(server.command({"FUNCTION", "LIST", "LIBRARYNAME", library}), "");
  EXPECT_GT(fcalls(), before);
}

// A check answered by its deadline while Redis is stopped (SIGSTOP) must not consume when
// Redis wakes up and runs it: the call carries its deadline on the server's clock and does
// nothing after it. Without that, capacity lost this way never comes back.
TEST(RedisStore, ChecksThatMissedTheirDeadlineInAStoppedServerConsumeNothing) {
  RedisServer server;
  StoreOptions o = options_for(server);
  o.command_timeout = 200 * kMicrosPerMilli;
  o.breaker_failures = 1000;  // every check goes to the stopped server
  auto store = open(o);
  const Limit l = limit(Algorithm::token_bucket, 100, 3600 * kMicrosPerSecond);
  ASSERT_TRUE(store->check_sync({{unique_key("warm"), l, 1}}));  // the server's clock sampled
  const std::string key = unique_key("stopped");
  server.pause();
  int timeouts = 0;
  auto last_sent = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) {
    last_sent = std::chrono::steady_clock::now();
    auto r = store->check_sync({{key, l, 1}});
    ASSERT_FALSE(r);  // a timeout, or unavailable while the connection is made again
    timeouts += r.error().code == ErrorCode::timeout ? 1 : 0;
  }
  EXPECT_GE(timeouts, 1);
  // Resumed once every check's deadline has passed: a check answered before its deadline (its
  // connection given up) may still run until then.
  std::this_thread::sleep_until(last_sent + std::chrono::microseconds(o.command_timeout) + 5ms);
  server.resume();
  ASSERT_TRUE(eventually([&] {
    auto r = store->check_sync({{unique_key("after"), l, 1}});
    return r && r->decision.allowed;
  }));
  EXPECT_EQ(server.command({"EXISTS", key}), "0");
  auto peek = store->check_sync({{key, l, 0}});
  ASSERT_TRUE(peek) << peek.error().message;
  EXPECT_EQ(peek->decision.remaining, 100);

  // A lease grant the same way: the units it would have taken stay in the bucket.
  const std::string leased = unique_key("stopped-lease");
  server.pause();
  std::promise<Result<LeaseGrant>> granted;
  store->lease_grant({leased, l, 1}, 50, [&](Result<LeaseGrant> r) { granted.set_value(std::move(r)); });
  const auto grant_sent = std::chrono::steady_clock::now();
  auto grant = granted.get_future().get();
  EXPECT_FALSE(grant);
  std::this_thread::sleep_until(grant_sent + std::chrono::microseconds(o.command_timeout) + 5ms);
  server.resume();
  ASSERT_TRUE(eventually([&] {
    auto r = store->check_sync({{unique_key("after-lease"), l, 1}});
    return r && r->decision.allowed;
  }));
  EXPECT_EQ(server.command({"EXISTS", leased}), "0");
}

TEST(RedisStore, SeedLimiterClassesWorkUnchanged) {
  auto store = open(options_for(shared_server()));
  const Micros t0 = 7'000'000'000;
  // A key prefix of this run's own (prefixes carry no hash tag: the identity is the tag).
  static std::atomic<int> run{0};
  const std::string prefix = fmt::format("seed{}-{}", ::getpid(), run.fetch_add(1));
  auto bucket = limiter::TokenBucketRateLimiter::create(*store, 5, 1.0, {prefix});
  ASSERT_TRUE(bucket);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(bucket->allow("ip:192.0.2.7", 1, t0)->allowed);
  auto denied = bucket->allow("ip:192.0.2.7", 1, t0);
  ASSERT_TRUE(denied) << denied.error().message;
  EXPECT_FALSE(denied->allowed);
  EXPECT_EQ(denied->retry_after, kMicrosPerSecond);
  EXPECT_TRUE(bucket->allow("ip:192.0.2.7", 1, t0 + kMicrosPerSecond)->allowed);

  // The window classes on the server's clock (minute-long windows: no timing dependence).
  auto sliding = limiter::SlidingWindowRateLimiter::create(*store, 60000, 3, {prefix});
  auto fixed = limiter::FixedWindowRateLimiter::create(*store, 60, 3, {prefix});
  ASSERT_TRUE(sliding && fixed);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(sliding->allow("user:1")->allowed);
    EXPECT_TRUE(fixed->allow("user:1")->allowed);
  }
  EXPECT_FALSE(sliding->allow("user:1")->allowed);
  auto fixed_denied = fixed->allow("user:1");
  ASSERT_TRUE(fixed_denied) << fixed_denied.error().message;
  // A fixed window may roll over between calls; then the fourth call opens a new window.
  EXPECT_TRUE(!fixed_denied->allowed || fixed_denied->remaining == 2);

  limiter::TieredRateLimiter tiers(*store, {prefix});
  int allowed = 0;
  for (int i = 0; i < 61; ++i) allowed += tiers.allow("user:2", "free", 1, t0)->allowed;
  EXPECT_EQ(allowed, 60);
  EXPECT_TRUE(tiers.allow("user:2", "pro", 1, t0)->allowed);
}

std::string describe(const Decision& d) {
  return fmt::format("{{{} limit {} remaining {} retry {} reset {}}}", d.allowed ? "allow" : "deny", d.limit,
                     d.remaining, d.retry_after, d.reset_after);
}

std::string describe(const Result<CheckOutcome>& r) {
  if (!r) return fmt::format("error {}: {}", to_string(r.error().code), r.error().message);
  std::string out = describe(r->decision);
  for (const auto& d : r->items) out += " " + describe(d);
  return out;
}

// Random sequences at explicit times: RedisStore and MemoryStore answer identically.
// Redis expires keys on its own clock (PX relative to the explicit `now`), so every time
// and period here is a multiple of kUnit (10 s): a key then lives at least 10 s of real
// time, far longer than one sequence takes, and never vanishes while its state counts.
RC_GTEST_PROP(RedisStoreDifferential, DecisionsEqualMemoryStore, ()) {
  constexpr Micros kUnit = 10 * kMicrosPerSecond;
  static auto redis = open(options_for(shared_server()));
  MemoryStore memory;
  const int limits = *rc::gen::inRange(1, 4);
  std::vector<CheckItem> items;
  for (int i = 0; i < limits; ++i) {
    const auto a = static_cast<Algorithm>(*rc::gen::inRange(0, 4));
    const std::int64_t capacity = *rc::gen::inRange<std::int64_t>(1, 12);
    const Micros period = kUnit * *rc::gen::element<Micros>(1, 2, 3, 7, 60);
    items.push_back({unique_key(fmt::format("diff{}", i)), limit(a, capacity, period), 1});
  }
  const Micros max_period = std::max_element(items.begin(), items.end(), [](auto& x, auto& y) {
                              return x.limit.horizon() < y.limit.horizon();
                            })->limit.horizon() / kUnit;
  Micros now = kUnit * *rc::gen::inRange<Micros>(0, 1'000'000);
  const int steps = *rc::gen::inRange(1, 40);
  for (int s = 0; s < steps; ++s) {
    now += kUnit * *rc::gen::oneOf(rc::gen::just<Micros>(0), rc::gen::inRange<Micros>(0, max_period / 4 + 2),
                                   rc::gen::inRange<Micros>(0, 2 * max_period + 2));
    // Sometimes one limit alone (single-key script), sometimes all (multi script).
    std::vector<CheckItem> batch;
    if (limits > 1 && *rc::gen::arbitrary<bool>()) {
      batch = items;
    } else {
      batch = {items[static_cast<std::size_t>(*rc::gen::inRange(0, limits))]};
    }
    for (auto& item : batch) item.cost = *rc::gen::inRange<std::int64_t>(0, item.limit.capacity + 1);
    auto expected = memory.check_batch(batch, now);
    auto actual = redis->check_sync(batch, now);
    RC_LOG() << "step " << s << " at " << now << ":";
    for (const auto& item : batch) {
      RC_LOG() << " " << algorithms::to_string(item.limit.algorithm) << "(" << item.limit.capacity << ", "
               << item.limit.period << ") cost " << item.cost;
    }
    RC_LOG() << "\n  memory: " << describe(expected) << "\n  redis:  " << describe(actual) << "\n";
    RC_ASSERT(expected.has_value() == actual.has_value());
    if (!expected) {
      RC_ASSERT(expected.error().code == actual.error().code);
      continue;
    }
    RC_ASSERT(actual->decision == expected->decision);
    RC_ASSERT(actual->items == expected->items);
  }
}

// Flushes the scripts (functions off: SCRIPT FLUSH) or the library (FUNCTION FLUSH) five
// times while two threads check without pause: no check fails, each flush is absorbed by a
// reload.
void flush_mid_traffic(bool functions) {
  auto options = options_for(shared_server());
  options.redis_functions = functions;
  auto store = open(options);
  auto& redis = dynamic_cast<RedisStore&>(*store);
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::atomic<int> answered{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      const std::string single = unique_key("flush");
      const std::string a = unique_key("flush-a");
      const std::string b = unique_key("flush-b");
      const Limit big = limit(Algorithm::token_bucket, 1'000'000, 1);
      while (!stop.load()) {
        auto r = t == 0 ? store->check_sync({{single, big, 1}})
                        : store->check_sync({{a, big, 1}, {b, limit(Algorithm::fixed_window, 1'000'000, kMicrosPerSecond), 1}});
        if (!r || !r->decision.allowed) failures.fetch_add(1);
        answered.fetch_add(1);
      }
    });
  }
  ASSERT_TRUE(eventually([&] { return answered.load() > 20; }));
  for (int i = 0; i < 5; ++i) {
    const int before = answered.load();
    EXPECT_EQ(shared_server().command({functions ? "FUNCTION" : "SCRIPT", "FLUSH"}), "OK");
    ASSERT_TRUE(eventually([&] { return answered.load() > before + 20; }));
  }
  stop = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(redis.using_functions(), functions);
  if (functions) {
    EXPECT_GE(redis.library_loads(), 2u);  // first use, and after a flush at least
    EXPECT_EQ(redis.noscript_reloads(), 0u);
  } else {
    EXPECT_GE(redis.noscript_reloads(), 1u);
    EXPECT_EQ(redis.library_loads(), 0u);
  }
}

TEST(RedisStore, ScriptFlushMidTrafficFailsNoRequest) { flush_mid_traffic(false); }
TEST(RedisStore, FunctionFlushMidTrafficFailsNoRequest) { flush_mid_traffic(true); }

// Where the server refuses functions, the store falls back to scripts (EVALSHA, EVAL after
// NOSCRIPT) and decides exactly as with them: a user that may not call FCALL at all, and one
// that may call it but not load the library (FUNCTION LOAD refused).
TEST(RedisStore, FunctionsRefusedByAnAclFallBackToScripts) {
  RedisServer server;
  ASSERT_EQ(server.command({"ACL", "SETUSER", "nofcall", "on", ">pw", "~*", "+@all", "-fcall"}), "OK");
  ASSERT_EQ(server.command({"ACL", "SETUSER", "noload", "on", ">pw", "~*", "+@all", "-function"}), "OK");
  for (const std::string user : {"nofcall", "noload"}) {
    SCOPED_TRACE(user);
    ASSERT_EQ(server.command({"SCRIPT", "FLUSH"}), "OK");
    ASSERT_EQ(server.command({"FUNCTION", "FLUSH"}), "OK");
    RedisStoreOptions o;
    std::get<redis::ConnectionOptions>(o.topology).endpoint = redis::Endpoint{server.host(), server.port(), {}};
    std::get<redis::ConnectionOptions>(o.topology).credentials = redis::Credentials{user, "pw"};
    RedisStore store(o);
    ASSERT_TRUE(eventually([&] { return store.health().ready; }));
    EXPECT_TRUE(store.using_functions());
    const Limit l = limit(Algorithm::token_bucket, 3, 3'600'000'000);
    const std::string key = unique_key("acl-" + user);
    for (int i = 0; i < 4; ++i) {
      auto r = store.check_sync({{key, l, 1}});
      ASSERT_TRUE(r) << r.error().message;
      EXPECT_EQ(r->decision.allowed, i < 3) << i;
      EXPECT_EQ(r->decision.remaining, std::max(0, 2 - i)) << i;
    }
    EXPECT_FALSE(store.using_functions());
    EXPECT_EQ(store.library_loads(), 0u);
    EXPECT_GE(store.noscript_reloads(), 1u);  // the single-key script, evaluated once
  }
}

TEST(RedisStore, RestartMidTrafficReconnectsAndAppliesTheFailurePolicyWhileDown) {
  RedisServer server;
  StoreOptions o = options_for(server);
  o.command_timeout = 100 * kMicrosPerMilli;
  o.breaker_open_for = 100 * kMicrosPerMilli;
  auto store = open(o);
  auto guarded = policy_limiter(*store, limit(Algorithm::token_bucket, 1'000'000, 1), limiter::FailureMode::allow);
  std::atomic<bool> stop{false};
  std::atomic<int> by_store{0}, by_policy{0}, errors{0};
  std::atomic<double> slowest{0};
  std::thread traffic([&] {
    const std::string key = unique_key("restart");
    while (!stop.load()) {
      const auto start = std::chrono::steady_clock::now();
      auto r = guarded->check_sync("r", key, 1);
      const double took = seconds_since(start);
      if (took > slowest.load()) slowest = took;
      if (!r) {
        errors.fetch_add(1);
      } else {
        (r->by_failure_policy ? by_policy : by_store).fetch_add(1);
      }
    }
  });
  ASSERT_TRUE(eventually([&] { return by_store.load() > 10; }));
  server.stop();
  ASSERT_TRUE(eventually([&] { return by_policy.load() > 10; }));
  EXPECT_FALSE(store->health().ready);
  server.start();
  const int before = by_store.load();
  EXPECT_TRUE(eventually([&] { return by_store.load() > before + 10; }));
  stop = true;
  traffic.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(guarded->metrics().decisions(0, limiter::Outcome::failure_policy),
            static_cast<std::uint64_t>(by_policy.load()));
  EXPECT_LT(slowest.load(), 2.0);  // deadline 100 ms, generous margin for a busy machine
  EXPECT_TRUE(eventually([&] { return store->health().ready; })) << store->health().detail;
}

TEST(RedisStore, FrozenServerAnswersEveryCallWithinItsDeadlineByPolicy) {
  RedisServer server;
  StoreOptions o = options_for(server);
  o.command_timeout = 100 * kMicrosPerMilli;
  o.breaker_open_for = 200 * kMicrosPerMilli;
  auto store = open(o);
  const Limit l = limit(Algorithm::sliding_window_counter, 1'000'000, kMicrosPerSecond);
  auto guarded = policy_limiter(*store, l, limiter::FailureMode::deny);
  ASSERT_TRUE(guarded->check_sync("r", unique_key("frozen"), 1));
  server.pause();
  std::atomic<int> by_policy{0}, calls{0};
  std::atomic<double> slowest{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 15; ++i) {
        const auto start = std::chrono::steady_clock::now();
        auto r = guarded->check_sync("r", unique_key("frozen"), 1);
        const double took = seconds_since(start);
        if (took > slowest.load()) slowest = took;
        calls.fetch_add(1);
        if (r && r->by_failure_policy && !r->decision.allowed) by_policy.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(by_policy.load(), calls.load());
  EXPECT_LT(slowest.load(), 1.0);
  EXPECT_FALSE(store->health().ready);
  server.resume();
  EXPECT_TRUE(eventually([&] {
    auto r = guarded->check_sync("r", unique_key("frozen"), 1);
    return r && !r->by_failure_policy && r->decision.allowed;
  }));
}

TEST(RedisStore, IndependentInstancesShareOneTokenBucket) {
  constexpr std::int64_t kCapacity = 20;
  constexpr double kRate = 50;  // tokens per second
  const Limit l = limit(Algorithm::token_bucket, kCapacity, static_cast<Micros>(kMicrosPerSecond / kRate));
  const std::string key = unique_key("shared-bucket");
  std::vector<std::unique_ptr<Store>> stores;
  for (int i = 0; i < 3; ++i) {
    stores.push_back(open(options_for(shared_server())));
    ASSERT_TRUE(stores.back()->check_sync({{unique_key("warm"), l, 1}}));
  }
  std::atomic<std::int64_t> allowed{0};
  std::atomic<int> errors{0};
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + 1s;
  std::vector<std::thread> threads;
  for (auto& store : stores) {
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, s = store.get()] {
        while (std::chrono::steady_clock::now() < end) {
          auto r = s->check_sync({{key, l, 1}});  // the server's clock
          if (!r) {
            errors.fetch_add(1);
          } else if (r->decision.allowed) {
            allowed.fetch_add(1);
          }
        }
      });
    }
  }
  for (auto& t : threads) t.join();
  const double elapsed = seconds_since(start);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_GE(allowed.load(), kCapacity);
  EXPECT_LE(static_cast<double>(allowed.load()), kCapacity + kRate * elapsed + 2) << "elapsed " << elapsed;
}


// Checks issued on a loop thread while it is busy are coalesced into batch script calls: the
// decisions are those of the same checks sent one by one (exactly `capacity` admitted, each
// with its own remaining), checks of other keys and multi-key checks ride along, and a
// NOSCRIPT in the middle of traffic is absorbed.
TEST(RedisStore, CoalescedChecksOnALoopThreadDecideExactly) {
  RedisServer server;
  auto loop = std::make_shared<EventLoop>(1);
  RedisStoreOptions o = on_loop(server, loop);
  RedisStore store(o);
  ASSERT_TRUE(eventually([&] { return store.health().ready; }));

  const Limit hot = limit(Algorithm::token_bucket, 100, 3'600'000'000);
  const Limit cold = limit(Algorithm::fixed_window, 1, 3'600'000'000);
  std::mutex mu;
  std::vector<std::int64_t> remaining;  // of the admitted hot checks
  int denied = 0, cold_admitted = 0, multi_admitted = 0, errors = 0;
  std::atomic<int> answered{0};
  constexpr int kHot = 150, kCold = 20, kMulti = 10;
  // All issued from one task on the loop's thread: nothing is sent before it returns.
  loop->post(0, [&] {
    for (int i = 0; i < kHot + kCold + kMulti; ++i) {
      std::vector<CheckItem> items;
      int kind = i < kHot ? 0 : i < kHot + kCold ? 1 : 2;
      if (kind == 0) items = {{"test:{hot}", hot, 1}};
      if (kind == 1) items = {{fmt::format("test:{{cold:{}}}", i), cold, 1}};
      if (kind == 2) items = {{"test:{hot}", hot, 0}, {fmt::format("test:{{multi:{}}}", i), cold, 1}};
      store.check(std::move(items), std::nullopt, [&, kind](Result<CheckOutcome> r) {
        std::lock_guard lock(mu);
        if (!r) {
          ++errors;
        } else if (kind == 0) {
          if (r->decision.allowed) {
            remaining.push_back(r->decision.remaining);
          } else {
            ++denied;
          }
        } else if (kind == 1) {
          cold_admitted += r->decision.allowed;
        } else {
          multi_admitted += r->decision.allowed;
        }
        answered.fetch_add(1);
      });
    }
  });
  ASSERT_TRUE(eventually([&] { return answered.load() == kHot + kCold + kMulti; }));
  std::lock_guard lock(mu);
  EXPECT_EQ(errors, 0);
  EXPECT_EQ(remaining.size(), 100u);
  EXPECT_EQ(denied, kHot - 100);
  std::sort(remaining.begin(), remaining.end());
  for (std::size_t i = 0; i < remaining.size(); ++i) EXPECT_EQ(remaining[i], static_cast<std::int64_t>(i));
  EXPECT_EQ(cold_admitted, kCold);
  EXPECT_EQ(multi_admitted, kMulti);
  EXPECT_GE(store.stats().batches, 1u);
  EXPECT_EQ(store.stats().batched_checks, static_cast<std::uint64_t>(kHot + kCold + kMulti));
}

// Checks that may wait for their turn, issued on a loop thread while it is busy along with
// plain checks: the plain ones are coalesced as ever, each waiting one goes out alone
// ("multi_delay") and gets its exact wait: identical waiting checks of a hot key are never
// folded into the batch script, which knows no max_delay.
TEST(RedisStore, ChecksThatMayWaitAreNeverCoalesced) {
  auto loop = std::make_shared<EventLoop>(1);
  RedisStoreOptions o = on_loop(shared_server(), loop);
  RedisStore store(o);
  ASSERT_TRUE(eventually([&] { return store.health().ready; }));

  constexpr Micros kT = 10'000;
  const Limit hot = limit(Algorithm::token_bucket, 5, kT);
  const Limit cold = limit(Algorithm::fixed_window, 1, 3'600'000'000);
  const std::string hot_key = unique_key("waiting");
  std::mutex mu;
  std::vector<Micros> delays;
  int denied = 0, cold_admitted = 0, errors = 0;
  std::atomic<int> answered{0};
  // Five plain checks (one batch), then each waiting check followed by a plain one (alone).
  constexpr int kLeading = 5, kWaiting = 15, kCold = kLeading + kWaiting;
  const Micros now = 1'000'000'000'000;
  loop->post(0, [&] {
    for (int i = 0; i < kCold + kWaiting; ++i) {
      const bool waiting = i >= kLeading && (i - kLeading) % 2 == 0;
      std::vector<CheckItem> items;
      if (waiting) {
        items = {{hot_key, hot, 1, 9 * kT}};
      } else {
        items = {{unique_key("cold"), cold, 1}};
      }
      store.check(std::move(items), now, [&, waiting](Result<CheckOutcome> r) {
        std::lock_guard lock(mu);
        if (!r) {
          ++errors;
        } else if (!waiting) {
          cold_admitted += r->decision.allowed;
        } else if (r->decision.allowed) {
          delays.push_back(r->decision.delay);
        } else {
          ++denied;
        }
        answered.fetch_add(1);
      });
    }
  });
  ASSERT_TRUE(eventually([&] { return answered.load() == kCold + kWaiting; }));
  std::lock_guard lock(mu);
  EXPECT_EQ(errors, 0);
  EXPECT_EQ(cold_admitted, kCold);
  // 5 at once, then one every T up to 9·T: 14 admitted, the 15th would wait 10·T.
  std::sort(delays.begin(), delays.end());
  std::vector<Micros> expected;
  for (Micros k = 0; k < 14; ++k) expected.push_back(std::max<Micros>(0, k - 4) * kT);
  EXPECT_EQ(delays, expected);
  EXPECT_EQ(denied, 1);
  EXPECT_EQ(store.stats().batches, 1u);  // the five leading plain checks, coalesced
  EXPECT_EQ(store.stats().batched_checks, static_cast<std::uint64_t>(kLeading));
}

// Identical checks of one key coalesced into one batch call (the closed form of a repeated
// token bucket check, the per-check replies of the other algorithms) answer exactly what the
// same checks answer sent one call at a time: decision, remaining, retry_after and
// reset_after (RateLimit's t=) of each, in issue order.
TEST(RedisStore, CoalescedIdenticalChecksAnswerAsTheSameChecksOneCallAtATime) {
  StoreOnLoop on_loop(RedisStoreOptions{}.max_batch);
  RedisStore& store = on_loop.store;
  ASSERT_TRUE(eventually([&] { return store.health().ready; }));

  constexpr int kChecks = 8;
  constexpr Micros kNow = 1'000'000'000;
  for (Algorithm a : kAlgorithms) {
    const Limit l = limit(a, 5, 100 * kMicrosPerMilli);
    const std::int64_t cost = 2;
    const std::string coalesced = fmt::format("test:{{coalesced:{}}}", algorithms::to_string(a));
    const std::string alone = fmt::format("test:{{alone:{}}}", algorithms::to_string(a));
    const auto before = store.stats();
    const auto batched = on_loop.checked_together(std::vector<std::vector<CheckItem>>(kChecks, {{coalesced, l, cost}}), kNow);
    ASSERT_EQ(store.stats().batches, before.batches + 1) << algorithms::to_string(a);
    ASSERT_EQ(store.stats().batched_checks, before.batched_checks + kChecks);

    int admitted = 0;
    for (int i = 0; i < kChecks; ++i) {
      auto one = store.check_sync({{alone, l, cost}}, kNow);
      ASSERT_TRUE(one) << one.error().message;
      const auto& got = batched[static_cast<std::size_t>(i)];
      ASSERT_TRUE(got && *got) << algorithms::to_string(a) << " check " << i;
      EXPECT_EQ((*got)->decision, one->decision) << algorithms::to_string(a) << " check " << i;
      EXPECT_EQ((*got)->items, one->items) << algorithms::to_string(a) << " check " << i;
      admitted += one->decision.allowed;
    }
    EXPECT_EQ(admitted, 2) << algorithms::to_string(a);  // 5 units, 2 per check
    EXPECT_EQ(store.stats().batches, before.batches + 1);  // one call each
  }
}

// One batch of interleaved checks: repeats of three keys, and checks of the same keys that are
// not identical (another cost, another key beside). Identical checks share one entry, answered
// one after the other where the first of them stands; the others get entries of their own.
// Every check answers what it answers sent one call at a time in that order.
TEST(RedisStore, CoalescedMixOfIdenticalAndDistinctChecksAnswersAsEachGroupAlone) {
  StoreOnLoop on_loop(64);
  RedisStore& store = on_loop.store;
  ASSERT_TRUE(eventually([&] { return store.health().ready; }));

  constexpr Micros kNow = 1'000'000'000;
  const Limit l = limit(Algorithm::token_bucket, 7, 100 * kMicrosPerMilli);
  const auto check_of = [&](const std::string& prefix, int shape) -> std::vector<CheckItem> {
    switch (shape % 5) {
      case 0: return {{prefix + "{a}", l, 1}};
      case 1: return {{prefix + "{b}", l, 1}};
      case 2: return {{prefix + "{a}", l, 2}};  // a's key, another cost
      case 3: return {{prefix + "{c}", l, 1}, {prefix + "{c}:x", l, 1}};
      default: return {{prefix + "{c}", l, 1}};  // c's first key alone
    }
  };
  // Issue order: the shapes interleaved, 40 checks.
  std::vector<int> shapes;
  for (int i = 0; i < 40; ++i) shapes.push_back((i * 3 + i / 5) % 5);

  const auto before = store.stats();
  std::vector<std::vector<CheckItem>> checks;
  for (const int shape : shapes) checks.push_back(check_of("test:mix:", shape));
  const auto batched = on_loop.checked_together(checks, kNow);
  ASSERT_EQ(store.stats().batches, before.batches + 1);

  // The same checks one call at a time, on keys of their own (a's key is shared by shapes 0 and
  // 2, c's by 3 and 4): each group of identical checks together, the groups in the order of
  // their first check.
  std::vector<std::size_t> order(shapes.size());
  std::vector<int> first_of(5, -1);
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    if (first_of[static_cast<std::size_t>(shapes[i])] < 0) first_of[static_cast<std::size_t>(shapes[i])] = static_cast<int>(i);
    order[i] = i;
  }
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    return first_of[static_cast<std::size_t>(shapes[x])] < first_of[static_cast<std::size_t>(shapes[y])];
  });
  int admitted = 0;
  for (const std::size_t i : order) {
    auto one = store.check_sync(check_of("test:alone:", shapes[i]), kNow);
    ASSERT_TRUE(one) << one.error().message;
    const auto& got = batched[i];
    ASSERT_TRUE(got && *got) << "check " << i;
    EXPECT_EQ((*got)->decision, one->decision) << "check " << i << " shape " << shapes[i];
    EXPECT_EQ((*got)->items, one->items) << "check " << i << " shape " << shapes[i];
    admitted += one->decision.allowed;
  }
  EXPECT_GT(admitted, 5);  // not all denied: the comparison says something
}

// A one-key token bucket check in a batch comes back as one integer (lua/batch.lua): admitted
// and denied, a bucket full, partly drained, empty and over-full (a larger capacity filled it),
// costs 0 to 3, every decision as the same check sent alone gives it.
TEST(RedisStore, OneKeyTokenBucketChecksInABatchAnswerAsAlone) {
  StoreOnLoop on_loop(64);
  RedisStore& store = on_loop.store;
  ASSERT_TRUE(eventually([&] { return store.health().ready; }));

  constexpr Micros kNow = 1'000'000'000;
  const Limit l = limit(Algorithm::token_bucket, 5, 100 * kMicrosPerMilli);
  const Limit larger = limit(Algorithm::token_bucket, 9, 100 * kMicrosPerMilli);
  constexpr std::size_t kKeys = 24;
  const auto key = [](const std::string& prefix, std::size_t i) { return fmt::format("{}{{{}}}", prefix, i); };
  // Key i drained by i % 8 units beforehand (up to 5 by l, beyond by the larger limit).
  for (const std::string prefix : {"test:one-int:batched:", "test:one-int:alone:"}) {
    for (std::size_t i = 0; i < kKeys; ++i) {
      const std::int64_t drained = static_cast<std::int64_t>(i % 8);
      if (drained == 0) continue;
      ASSERT_TRUE(store.check_sync({{key(prefix, i), drained > 5 ? larger : l, drained}}, kNow - 50'000));
    }
  }
  const auto cost = [](std::size_t i) { return static_cast<std::int64_t>(i % 4); };

  const auto before = store.stats();
  std::vector<std::vector<CheckItem>> checks;
  for (std::size_t i = 0; i < kKeys; ++i) checks.push_back({{key("test:one-int:batched:", i), l, cost(i)}});
  const auto batched = on_loop.checked_together(checks, kNow);
  ASSERT_EQ(store.stats().batches, before.batches + 1);

  int admitted = 0;
  int denied = 0;
  for (std::size_t i = 0; i < kKeys; ++i) {
    auto one = store.check_sync({{key("test:one-int:alone:", i), l, cost(i)}}, kNow);
    ASSERT_TRUE(one) << one.error().message;
    const auto& got = batched[i];
    ASSERT_TRUE(got && *got) << "check " << i << ": " << (got ? got->error().message : "none");
    EXPECT_EQ((*got)->decision, one->decision) << "check " << i;
    EXPECT_EQ((*got)->items, one->items) << "check " << i;
    (one->decision.allowed ? admitted : denied) += 1;
  }
  EXPECT_GT(admitted, 5);  // both kinds: the comparison says something
  EXPECT_GT(denied, 5);
}

void flush_while_a_batch_waits(bool functions) {
  RedisServer::Options debug;
  debug.args = {"--enable-debug-command", "local"};
  RedisServer server(debug);
  auto loop = std::make_shared<EventLoop>(1);
  RedisStoreOptions o;
  std::get<redis::ConnectionOptions>(o.topology).endpoint = redis::Endpoint{server.host(), server.port(), {}};
  std::get<redis::ConnectionOptions>(o.topology).command_timeout = 30 * kMicrosPerSecond;
  o.loop = loop;
  o.max_in_flight = 1;
  o.functions = functions;
  RedisStore store(o);
  ASSERT_TRUE(eventually([&] { return store.health().ready; }));
  const Limit l = limit(Algorithm::token_bucket, 1000, kMicrosPerSecond);
  ASSERT_TRUE(store.check_sync({{"test:{warm}", l, 1}}));  // the single-key script (or the library) is loaded
  const auto loads = store.library_loads();
  const auto* batch = find_lua_script("batch");
  ASSERT_NE(batch, nullptr);

  // Two more clients (5 s timeouts): one puts the server to sleep for 2 s, the other flushes
  // the scripts during it.
  testing::RedisConnection sleeping(server.host(), server.port());
  testing::RedisConnection flushing(server.host(), server.port());
  std::thread sleeper([&] { EXPECT_EQ(sleeping.command({"DEBUG", "SLEEP", "2"}).text, "OK"); });
  ASSERT_TRUE(eventually([&] { return server_is_asleep(server.port()); }));

  constexpr int kQueued = 6;
  std::mutex mu;
  std::vector<Result<CheckOutcome>> outcomes;
  std::atomic<int> answered{0};
  auto record = [&](Result<CheckOutcome> r) {
    std::lock_guard lock(mu);
    outcomes.push_back(std::move(r));
    answered.fetch_add(1);
  };
  // The first check goes out alone (its flush runs before the next task); the others queue.
  loop->post(0, [&] { store.check({{"test:{first}", l, 1}}, std::nullopt, record); });
  loop->barrier();
  loop->post(0, [&] {
    for (int i = 0; i < kQueued; ++i) {
      store.check({{fmt::format("test:{{queued:{}}}", i % 3), l, 1}}, std::nullopt, record);
    }
  });
  loop->barrier();
  EXPECT_EQ(answered.load(), 0);  // everything waits behind the sleep
  std::thread flusher(
      [&] { EXPECT_EQ(flushing.command({functions ? "FUNCTION" : "SCRIPT", "FLUSH"}).text, "OK"); });
  sleeper.join();
  flusher.join();

  ASSERT_TRUE(eventually([&] { return answered.load() == 1 + kQueued; }, 10'000ms));
  std::lock_guard lock(mu);
  for (const auto& r : outcomes) {
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_TRUE(r->decision.allowed);
  }
  EXPECT_EQ(store.stats().batches, 1u);
  EXPECT_EQ(store.stats().batched_checks, static_cast<std::uint64_t>(kQueued));
  if (functions) {
    EXPECT_EQ(store.library_loads(), loads + 1);  // once, for the first call after the flush
    EXPECT_NE(server.command({"FUNCTION", "LIST", "LIBRARYNAME", std::string(lua_library().name)}), "");
  } else {
    EXPECT_GE(store.noscript_reloads(), 1u);
    EXPECT_EQ(server.command({"SCRIPT", "EXISTS", std::string(batch->sha)}), "1");
  }
}

// A flush while checks wait to go out as one batch: the batch call gets NOSCRIPT (functions
// off) and is sent again once as EVAL, or "Function not found" and the library is loaded and
// the call sent again; every check is answered by Redis. The store's only connection is held
// by a single check behind a DEBUG SLEEP of the server, the others queue up behind it
// (max_in_flight 1); the flush, sent during the sleep, runs before the batch is sent.
TEST(RedisStore, ScriptFlushWhileABatchWaitsIsAnsweredByEvalOnce) { flush_while_a_batch_waits(false); }
TEST(RedisStore, FunctionFlushWhileABatchWaitsLoadsTheLibraryOnce) { flush_while_a_batch_waits(true); }

}  // namespace
}  // namespace ratekeeper::store
