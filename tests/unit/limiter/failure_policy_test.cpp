// answer_by_policy: what each failure mode answers for a batch once the store has failed, and
// the errors no policy answers.

#include "ratekeeper/limiter/failure_policy.hpp"

#include <gtest/gtest.h>

namespace ratekeeper::limiter {
namespace {

using algorithms::Algorithm;
using algorithms::Limit;

constexpr Micros kNow = 1'700'000'000LL * kMicrosPerSecond;

std::vector<store::CheckItem> two_items() {
  return {{"k1", *Limit::make(Algorithm::token_bucket, 4, kMicrosPerSecond), 1},
          {"k2", *Limit::make(Algorithm::fixed_window, 10, kMicrosPerSecond), 2}};
}

const Error kDown{ErrorCode::unavailable, "connection refused"};

TEST(AnswerByPolicy, AllowAdmitsEveryItemWithItsFullLimit) {
  auto answer = answer_by_policy(two_items(), kDown, FailureMode::allow, {});
  ASSERT_TRUE(answer) << answer.error().message;
  ASSERT_EQ(answer->size(), 2u);
  EXPECT_TRUE((*answer)[0].allowed);
  EXPECT_EQ((*answer)[0].limit, 4);
  EXPECT_EQ((*answer)[0].remaining, 4);
  EXPECT_EQ((*answer)[0].retry_after, 0);
  EXPECT_TRUE((*answer)[1].allowed);
  EXPECT_EQ((*answer)[1].remaining, 10);
}

TEST(AnswerByPolicy, DenyRefusesEveryItemWithTheConfiguredRetryAfter) {
  FailurePolicy policy;
  policy.deny_retry_after = 3 * kMicrosPerSecond;
  auto answer = answer_by_policy(two_items(), kDown, FailureMode::deny, policy);
  ASSERT_TRUE(answer) << answer.error().message;
  ASSERT_EQ(answer->size(), 2u);
  for (const auto& d : *answer) {
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.remaining, 0);
    EXPECT_EQ(d.retry_after, 3 * kMicrosPerSecond);
  }
  EXPECT_EQ((*answer)[1].limit, 10);
}

TEST(AnswerByPolicy, LocalChecksTheDividedLimitsInTheLocalStore) {
  store::MemoryStore local;
  FailurePolicy policy;
  policy.instances = 2;
  policy.local = &local;
  const std::vector<store::CheckItem> items{
      {"k", *Limit::make(Algorithm::token_bucket, 4, kMicrosPerSecond), 1}};
  int allowed = 0;
  for (int i = 0; i < 4; ++i) {
    auto answer = answer_by_policy(items, kDown, FailureMode::local, policy, kNow);
    ASSERT_TRUE(answer) << answer.error().message;
    ASSERT_EQ(answer->size(), 1u);
    EXPECT_EQ((*answer)[0].limit, 2);  // 4 over 2 instances
    allowed += (*answer)[0].allowed ? 1 : 0;
  }
  EXPECT_EQ(allowed, 2);
}

TEST(AnswerByPolicy, ErrorsThatAreNoStoreFailureComeBackAsTheyAre) {
  const Error bad{ErrorCode::invalid_argument, "cost exceeds capacity"};
  store::MemoryStore local;
  FailurePolicy policy;
  policy.local = &local;
  for (auto mode : {FailureMode::allow, FailureMode::deny, FailureMode::local}) {
    auto answer = answer_by_policy(two_items(), bad, mode, policy, kNow);
    ASSERT_FALSE(answer) << to_string(mode);
    EXPECT_EQ(answer.error().code, ErrorCode::invalid_argument);
    EXPECT_EQ(answer.error().message, "cost exceeds capacity");
  }
}

TEST(AnswerByPolicy, EveryStoreFailureIsAnswered) {
  for (auto code : {ErrorCode::store_full, ErrorCode::unavailable, ErrorCode::timeout,
                    ErrorCode::circuit_open, ErrorCode::protocol, ErrorCode::reply,
                    ErrorCode::auth, ErrorCode::redirect}) {
    auto answer = answer_by_policy(two_items(), Error{code, "x"}, FailureMode::deny, {});
    ASSERT_TRUE(answer) << to_string(code);
    EXPECT_EQ(answer->size(), 2u);
  }
}

}  // namespace
}  // namespace ratekeeper::limiter
