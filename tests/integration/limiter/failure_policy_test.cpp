// The failure policy over RedisStore: with Redis stopped or frozen, a Limiter's allow / deny /
// local rules each answer as they say, within the store's deadline, and every such answer is
// counted.

#include <gtest/gtest.h>

#include <chrono>

#include "ratekeeper/limiter/limiter.hpp"
#include "ratekeeper/store/open_store.hpp"
#include "support/redis_server.hpp"

namespace ratekeeper::limiter {
namespace {

using algorithms::Algorithm;
using testing::RedisServer;

// The store's deadline is 100 ms. Without one, a frozen server would never be answered; with
// it, an answer comes within the deadline plus the scheduling of two loaded cores, far below
// this bound.
constexpr double kGenerousBound = 5.0;  // seconds

std::unique_ptr<store::Store> open_redis(const RedisServer& server,
                                         Micros command_timeout = 100 * kMicrosPerMilli) {
  store::StoreOptions o;
  o.url = server.url();
  o.command_timeout = command_timeout;
  o.connect_timeout = 200 * kMicrosPerMilli;
  o.reconnect_min = 10 * kMicrosPerMilli;
  auto s = store::open_store(o);
  EXPECT_TRUE(s) << s.error().message;
  return std::move(*s);
}

NamedLimit limit(std::string name, std::int64_t capacity) {
  return {std::move(name),
          *algorithms::Limit::make(Algorithm::token_bucket, capacity, kMicrosPerSecond)};
}

LimiterConfig one_rule(FailureMode mode, Policy limits) {
  LimiterConfig c;
  Rule r;
  r.name = "api";
  r.limits = std::move(limits);
  r.on_store_error = mode;
  c.rules.push_back(std::move(r));
  return c;
}

// One check of rule "api", asserted to come back within the generous bound.
Result<Evaluation> timed_check(Limiter& limiter, std::int64_t cost = 1) {
  AppliedRule app;
  app.rule = limiter.find_rule("api");
  app.identity = "ip:192.0.2.7";
  app.cost = cost;
  const auto start = std::chrono::steady_clock::now();
  auto r = limiter.evaluate_sync({app});
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
            kGenerousBound);
  return r;
}

class FailurePolicyOverRedis : public ::testing::TestWithParam<bool> {
 protected:
  // The parameter: true freezes Redis (SIGSTOP), false stops it.
  void SetUp() override {
    store_ = open_redis(server_);
    // Connected and the script loaded (the first call may exceed 100 ms on a busy machine).
    const algorithms::Limit warm_limit = limit("", 5).limit;
    Result<store::CheckOutcome> warm = make_error(ErrorCode::unavailable, "not tried");
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!warm && std::chrono::steady_clock::now() < give_up) {
      warm = store_->check_sync({{"warm", warm_limit, 1}});
    }
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
  Limiter limiter(one_rule(FailureMode::allow, {limit("", 3)}), *store_);
  for (int i = 0; i < 5; ++i) {
    auto r = timed_check(limiter);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_TRUE(r->by_failure_policy);
    EXPECT_TRUE(r->allowed);
    ASSERT_TRUE(r->store_error.has_value());
    EXPECT_TRUE(r->store_error->is_store_failure()) << r->store_error->message;
  }
  EXPECT_EQ(limiter.metrics().decisions(0, Outcome::failure_policy), 5u);
}

TEST_P(FailurePolicyOverRedis, DenyRefusesWithRetryAfterAndCounts) {
  auto config = one_rule(FailureMode::deny, {limit("small", 3), limit("large", 10)});
  config.deny_retry_after = 2 * kMicrosPerSecond;
  Limiter limiter(std::move(config), *store_);
  for (int i = 0; i < 5; ++i) {
    auto r = timed_check(limiter);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_TRUE(r->by_failure_policy);
    EXPECT_FALSE(r->allowed);
    EXPECT_EQ(r->decision.retry_after, 2 * kMicrosPerSecond);
    ASSERT_EQ(r->rules.size(), 1u);
    EXPECT_EQ(r->rules[0].limits.size(), 2u);
  }
  EXPECT_EQ(limiter.metrics().decisions(0, Outcome::failure_policy), 5u);
}

TEST_P(FailurePolicyOverRedis, LocalAppliesTheLimitDividedAmongInstances) {
  ManualClock clock(1'000'000'000);  // the local store's time stands still
  auto config = one_rule(FailureMode::local, {limit("", 10)});
  config.instances = 2;
  Limiter limiter(std::move(config), *store_, &clock);
  int allowed = 0;
  for (int i = 0; i < 8; ++i) {
    auto r = timed_check(limiter);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_TRUE(r->by_failure_policy);
    allowed += r->allowed;
  }
  EXPECT_EQ(allowed, 5);  // capacity 10 over 2 instances
  EXPECT_EQ(limiter.metrics().decisions(0, Outcome::failure_policy), 8u);
}

TEST_P(FailurePolicyOverRedis, InvalidArgumentIsAnErrorNotAFailureDecision) {
  Limiter limiter(one_rule(FailureMode::allow, {limit("", 3)}), *store_);
  auto r = timed_check(limiter, 4);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
  EXPECT_EQ(limiter.metrics().decisions(0, Outcome::failure_policy), 0u);
}

INSTANTIATE_TEST_SUITE_P(StoppedOrFrozen, FailurePolicyOverRedis, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Frozen" : "Stopped"; });

TEST(FailurePolicy, HealthyRedisAnswersWithoutThePolicy) {
  RedisServer server;
  auto store = open_redis(server, 2 * kMicrosPerSecond);
  Limiter limiter(one_rule(FailureMode::deny, {limit("", 3)}), *store);
  auto r = limiter.check_sync("api", "ip:192.0.2.7", 1);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_FALSE(r->by_failure_policy);
  EXPECT_TRUE(r->decision.allowed);
  EXPECT_EQ(limiter.metrics().decisions(0, Outcome::failure_policy), 0u);
}

}  // namespace
}  // namespace ratekeeper::limiter
