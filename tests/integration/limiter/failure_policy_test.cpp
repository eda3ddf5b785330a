// The failure policy over RedisStore: with Redis stopped or frozen, allow / deny / local each
// answer as they say, within the deadline, and every such answer is counted.

#include <gtest/gtest.h>

#include <chrono>

#include "ratekeeper/limiter/failure_policy.hpp"
#include "ratekeeper/store/open_store.hpp"
#include "support/redis_server.hpp"

namespace ratekeeper::limiter {
namespace {

using algorithms::Algorithm;
using store::CheckItem;
using testing::RedisServer;

constexpr double kDeadlineMargin = 1.0;  // seconds; the store deadline is 100 ms

std::unique_ptr<store::Store> open_redis(const RedisServer& server, Micros command_timeout = 100 * kMicrosPerMilli) {
  store::StoreOptions o;
  o.url = server.url();
  o.command_timeout = command_timeout;
  o.connect_timeout = 200 * kMicrosPerMilli;
  o.reconnect_min = 10 * kMicrosPerMilli;
  auto s = store::open_store(o);
  EXPECT_TRUE(s) << s.error().message;
  return std::move(*s);
}

CheckItem item(std::string key, std::int64_t capacity, std::int64_t cost = 1) {
  return {std::move(key), *algorithms::Limit::make(Algorithm::token_bucket, capacity, kMicrosPerSecond), cost};
}

// Runs one guarded check and asserts it came back within the deadline plus margin.
Result<Verdict> timed_check(GuardedStore& guarded, std::vector<CheckItem> items, std::optional<Micros> now = {}) {
  const auto start = std::chrono::steady_clock::now();
  auto r = guarded.check_sync(std::move(items), now);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), kDeadlineMargin);
  return r;
}

class FailurePolicyOverRedis : public ::testing::TestWithParam<bool> {
 protected:
  // The parameter: true freezes Redis (SIGSTOP), false stops it.
  void SetUp() override {
    store_ = open_redis(server_);
    // Connected and the script loaded (the first call may exceed 100 ms on a busy machine).
    Result<store::CheckOutcome> warm = make_error(ErrorCode::unavailable, "not tried");
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!warm && std::chrono::steady_clock::now() < give_up) warm = store_->check_sync({item("warm", 5)});
    ASSERT_TRUE(warm) << warm.error().message;
    if (GetParam()) {
      server_.pause();
    } else {
      server_.stop();
    }
  }
  void TearDown() override { server_.resume(); }

  RedisServer server_;
  std::unique_ptr<store::Store> store_;
};

TEST_P(FailurePolicyOverRedis, AllowAdmitsAndCounts) {
  GuardedStore guarded(*store_, {FailureMode::allow});
  for (int i = 0; i < 5; ++i) {
    auto r = timed_check(guarded, {item("k", 3)});
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_TRUE(r->by_failure_policy);
    EXPECT_TRUE(r->decision.allowed);
    ASSERT_TRUE(r->store_error.has_value());
    EXPECT_TRUE(r->store_error->is_store_failure()) << r->store_error->message;
  }
  EXPECT_EQ(guarded.failure_decisions(), 5u);
}

TEST_P(FailurePolicyOverRedis, DenyRefusesWithRetryAfterAndCounts) {
  GuardedStore guarded(*store_, {FailureMode::deny, 1, 2 * kMicrosPerSecond});
  for (int i = 0; i < 5; ++i) {
    auto r = timed_check(guarded, {item("k", 3), item("k2", 10)});
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_TRUE(r->by_failure_policy);
    EXPECT_FALSE(r->decision.allowed);
    EXPECT_EQ(r->decision.retry_after, 2 * kMicrosPerSecond);
    EXPECT_EQ(r->items.size(), 2u);
  }
  EXPECT_EQ(guarded.failure_decisions(), 5u);
}

TEST_P(FailurePolicyOverRedis, LocalAppliesTheLimitDividedAmongInstances) {
  GuardedStore guarded(*store_, {FailureMode::local, 2});
  const Micros now = 1'000'000'000;
  int allowed = 0;
  for (int i = 0; i < 8; ++i) {
    auto r = timed_check(guarded, {item("k", 10)}, now);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_TRUE(r->by_failure_policy);
    allowed += r->decision.allowed;
  }
  EXPECT_EQ(allowed, 5);  // capacity 10 over 2 instances
  EXPECT_EQ(guarded.failure_decisions(), 8u);
}

TEST_P(FailurePolicyOverRedis, InvalidArgumentIsAnErrorNotAFailureDecision) {
  GuardedStore guarded(*store_, {FailureMode::allow});
  auto r = timed_check(guarded, {item("k", 3, 4)});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
  EXPECT_EQ(guarded.failure_decisions(), 0u);
}

INSTANTIATE_TEST_SUITE_P(StoppedOrFrozen, FailurePolicyOverRedis, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Frozen" : "Stopped"; });

TEST(FailurePolicy, HealthyRedisAnswersWithoutThePolicy) {
  RedisServer server;
  auto store = open_redis(server, 2 * kMicrosPerSecond);
  GuardedStore guarded(*store, {FailureMode::deny});
  auto r = guarded.check_sync({item("healthy", 3)});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_FALSE(r->by_failure_policy);
  EXPECT_TRUE(r->decision.allowed);
  EXPECT_EQ(guarded.failure_decisions(), 0u);
}

}  // namespace
}  // namespace ratekeeper::limiter
