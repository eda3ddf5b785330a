// Several limits checked as one: all consume or none does, and the combined decision.

#include <gtest/gtest.h>

#include <vector>

#include "algorithm_test_support.hpp"

namespace ratekeeper::testing {
namespace {

using algorithms::combine;
using algorithms::MultiStep;
using algorithms::step_all;

constexpr Micros kT0 = 1'700'000'000'000'000;

// 10 per second as a bucket and 20 per minute as a sliding log, as a policy "10/s and 20/min".
std::vector<Limit> per_second_and_per_minute() {
  return {make_limit(Algorithm::token_bucket, 10, 100'000),
          make_limit(Algorithm::sliding_window_log, 20, 60 * kMicrosPerSecond)};
}

MultiStep must_step_all(std::span<const Limit> limits, std::vector<State> states, Micros now,
                        std::vector<std::int64_t> costs) {
  auto r = step_all(limits, std::move(states), now, costs);
  EXPECT_TRUE(r) << r.error().message;
  return r.value_or(MultiStep{});
}

TEST(MultiLimit, WhenAllAllowEveryLimitConsumes) {
  const auto limits = per_second_and_per_minute();
  const MultiStep s = must_step_all(limits, {State{}, State{}}, kT0, {3, 3});
  ASSERT_TRUE(s.decision.allowed);
  ASSERT_EQ(s.items.size(), 2u);
  ASSERT_EQ(s.states.size(), 2u);
  for (std::size_t i = 0; i < limits.size(); ++i) {
    const Step alone = must_step(limits[i], State{}, kT0, 3);
    EXPECT_EQ(s.items[i], alone.decision) << i;
    EXPECT_EQ(s.states[i], alone.state) << i;
    EXPECT_EQ(s.expires_at[i], alone.expires_at) << i;
  }
}

TEST(MultiLimit, WhenOneDeniesNoLimitConsumes) {
  const auto limits = per_second_and_per_minute();
  std::vector<State> states{State{}, State{}};
  // Spend the minute's 20 over three seconds; the per-second bucket refills meanwhile.
  for (Micros at : {kT0, kT0 + kMicrosPerSecond}) {
    auto s = must_step_all(limits, states, at, {10, 10});
    ASSERT_TRUE(s.decision.allowed);
    states = s.states;
  }
  const Micros now = kT0 + 2 * kMicrosPerSecond;
  const MultiStep denied = must_step_all(limits, states, now, {1, 1});
  EXPECT_FALSE(denied.decision.allowed);
  EXPECT_TRUE(denied.items[0].allowed);   // the bucket alone would admit
  EXPECT_FALSE(denied.items[1].allowed);  // the minute is spent
  // Nothing was taken from the bucket: its item reports a peek, its state is as before.
  EXPECT_EQ(denied.items[0], must_step(limits[0], states[0], now, 0).decision);
  EXPECT_EQ(denied.items[0].remaining, 10);
  EXPECT_EQ(denied.states[0], must_step(limits[0], states[0], now, 0).state);
  EXPECT_EQ(denied.states[1], must_step(limits[1], states[1], now, 0).state);
  // The combined answer is the minute's: it frees up last.
  EXPECT_EQ(denied.decision.limit, 20);
  EXPECT_EQ(denied.decision.remaining, 0);
  EXPECT_EQ(denied.decision.retry_after, denied.items[1].retry_after);
  EXPECT_EQ(denied.decision.retry_after, kT0 + 60 * kMicrosPerSecond - now);
}

TEST(MultiLimit, CombinedRetryAfterIsExactlyWhenTheBatchSucceeds) {
  const auto limits = per_second_and_per_minute();
  std::vector<State> states{State{}, State{}};
  auto first = must_step_all(limits, states, kT0, {10, 10});
  ASSERT_TRUE(first.decision.allowed);
  states = first.states;
  const MultiStep denied = must_step_all(limits, states, kT0 + 1, {5, 5});
  ASSERT_FALSE(denied.decision.allowed);
  const Micros retry = denied.decision.retry_after;
  EXPECT_FALSE(must_step_all(limits, states, kT0 + 1 + retry - 1, {5, 5}).decision.allowed);
  EXPECT_TRUE(must_step_all(limits, states, kT0 + 1 + retry, {5, 5}).decision.allowed);
}

TEST(MultiLimit, EachLimitIsChargedItsOwnCost) {
  const auto limits = per_second_and_per_minute();
  const MultiStep s = must_step_all(limits, {State{}, State{}}, kT0, {1, 5});
  ASSERT_TRUE(s.decision.allowed);
  EXPECT_EQ(s.items[0].remaining, 9);
  EXPECT_EQ(s.items[1].remaining, 15);
}

TEST(MultiLimit, AnInvalidCostOnAnyLimitIsAnErrorNamingTheCost) {
  const auto limits = per_second_and_per_minute();
  for (std::vector<std::int64_t> costs : {std::vector<std::int64_t>{1, 21}, {11, 1}, {1, -1}}) {
    auto r = step_all(limits, {State{}, State{}}, kT0, costs);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
    EXPECT_NE(r.error().message.find("cost"), std::string::npos) << r.error().message;
  }
}

TEST(MultiLimit, MismatchedLengthsAreInvalidArguments) {
  const auto limits = per_second_and_per_minute();
  auto r = step_all(limits, {State{}}, kT0, std::vector<std::int64_t>{1, 1});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
  auto negative_now = step_all(limits, {State{}, State{}}, -1, std::vector<std::int64_t>{1, 1});
  ASSERT_FALSE(negative_now);
  EXPECT_NE(negative_now.error().message.find("now"), std::string::npos);
}

TEST(Combine, NoLimitsAllows) {
  const Decision d = combine({});
  EXPECT_TRUE(d.allowed);
}

TEST(Combine, AllowedTakesTheFewestRemainingAndTheLargestResetAfter) {
  const std::vector<Decision> items{
      {.allowed = true, .limit = 10, .remaining = 7, .retry_after = 0, .reset_after = 300},
      {.allowed = true, .limit = 100, .remaining = 2, .retry_after = 0, .reset_after = 50},
      {.allowed = true, .limit = 5, .remaining = 4, .retry_after = 0, .reset_after = 900}};
  const Decision d = combine(items);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.limit, 100);
  EXPECT_EQ(d.remaining, 2);
  EXPECT_EQ(d.retry_after, 0);
  EXPECT_EQ(d.reset_after, 900);
}

TEST(Combine, DeniedTakesTheLimitThatFreesUpLast) {
  const std::vector<Decision> items{
      {.allowed = true, .limit = 10, .remaining = 7, .retry_after = 0, .reset_after = 300},
      {.allowed = false, .limit = 100, .remaining = 0, .retry_after = 40, .reset_after = 5000},
      {.allowed = false, .limit = 5, .remaining = 1, .retry_after = 700, .reset_after = 800}};
  const Decision d = combine(items);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.limit, 5);
  EXPECT_EQ(d.remaining, 1);
  EXPECT_EQ(d.retry_after, 700);
  EXPECT_EQ(d.reset_after, 5000);
}

TEST(Combine, BindingNamesTheLimitTheDecisionComesFrom) {
  const std::vector<Decision> allowed{
      {.allowed = true, .limit = 10, .remaining = 7, .retry_after = 0, .reset_after = 300},
      {.allowed = true, .limit = 100, .remaining = 2, .retry_after = 0, .reset_after = 50},
      {.allowed = true, .limit = 5, .remaining = 4, .retry_after = 0, .reset_after = 900}};
  EXPECT_EQ(algorithms::combine_with_binding(allowed).binding, 1u);
  EXPECT_EQ(algorithms::combine_with_binding(allowed).decision, combine(allowed));
  const std::vector<Decision> denied{
      {.allowed = false, .limit = 5, .remaining = 1, .retry_after = 700, .reset_after = 800},
      {.allowed = true, .limit = 10, .remaining = 7, .retry_after = 0, .reset_after = 300},
      {.allowed = false, .limit = 100, .remaining = 0, .retry_after = 40, .reset_after = 5000}};
  EXPECT_EQ(algorithms::combine_with_binding(denied).binding, 0u);
  const std::vector<Decision> last{
      {.allowed = true, .limit = 10, .remaining = 7, .retry_after = 0, .reset_after = 300},
      {.allowed = false, .limit = 100, .remaining = 0, .retry_after = 40, .reset_after = 5000},
      {.allowed = false, .limit = 5, .remaining = 1, .retry_after = 700, .reset_after = 800}};
  EXPECT_EQ(algorithms::combine_with_binding(last).binding, 2u);
  EXPECT_EQ(algorithms::combine_with_binding({}).binding, 0u);
}

TEST(Combine, OneDenialDeniesTheWhole) {
  const std::vector<Decision> items{
      {.allowed = true, .limit = 10, .remaining = 9, .retry_after = 0, .reset_after = 10},
      {.allowed = false, .limit = 3, .remaining = 0, .retry_after = 5, .reset_after = 20}};
  const Decision d = combine(items);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.limit, 3);
  EXPECT_EQ(d.retry_after, 5);
}

}  // namespace
}  // namespace ratekeeper::testing
