// Settling a reservation (algorithms::settle, charge): below the estimate the difference goes
// back as a lease's unused units do; above it, it is charged whatever is left: a token
// bucket owes (its tat beyond now + τ) and denies until the debt refills, a fixed window
// counts beyond its limit and denies until it ends. Both stay within the bounds where Lua's
// doubles are exact, however large the charge.

#include <gtest/gtest.h>

#include "ratekeeper/algorithms/lease.hpp"
#include "algorithms/step.hpp"

namespace ratekeeper::algorithms {
namespace {

constexpr Micros kT0 = 1'700'000'000'000'000;

TEST(Settle, ATokenBucketGivesBackBelowTheEstimateAndOwesAboveIt) {
  const Limit limit = *Limit::make(Algorithm::token_bucket, 10, kMicrosPerSecond);  // 1 token/s
  const Step reserved = step_unchecked(limit, State{}, kT0, 6);
  ASSERT_TRUE(reserved.decision.allowed);
  const Step back = settle(limit, reserved.state, kT0, 6, 2, kT0, reserved.decision.reset_after);
  EXPECT_EQ(step_unchecked(limit, back.state, kT0, 0).decision.remaining, 8);
  EXPECT_EQ(back.expires_at, kT0 + 2 * kMicrosPerSecond);

  const Step owed = settle(limit, reserved.state, kT0, 6, 16, kT0, reserved.decision.reset_after);
  EXPECT_EQ(owed.state.t, kT0 + 16 * kMicrosPerSecond);  // 6 owed beyond the 10 it holds
  EXPECT_EQ(owed.expires_at, owed.state.t);
  const Step next = step_unchecked(limit, owed.state, kT0, 1);
  EXPECT_FALSE(next.decision.allowed);
  EXPECT_EQ(next.decision.remaining, 0);
  EXPECT_EQ(next.decision.retry_after, 7 * kMicrosPerSecond);  // the 6 owed and the one asked for
  EXPECT_TRUE(step_unchecked(limit, owed.state, kT0 + 7 * kMicrosPerSecond, 1).decision.allowed);
}

TEST(Settle, AFixedWindowCountsBeyondItsLimitUntilItEnds) {
  const Micros window = 60 * kMicrosPerSecond;
  const Limit limit = *Limit::make(Algorithm::fixed_window, 100, window);
  const Micros start = kT0 / window * window;
  const Step reserved = step_unchecked(limit, State{}, start + 5, 40);
  const Step charged = settle(limit, reserved.state, start + 10, 40, 250, start + 5, reserved.decision.reset_after);
  EXPECT_EQ(charged.state.current, 250);
  EXPECT_EQ(charged.expires_at, start + window);
  const Step denied = step_unchecked(limit, charged.state, start + 20, 1);
  EXPECT_FALSE(denied.decision.allowed);
  EXPECT_EQ(denied.decision.remaining, 0);  // never negative
  EXPECT_EQ(denied.decision.retry_after, window - 20);
  EXPECT_TRUE(step_unchecked(limit, charged.state, start + window, 100).decision.allowed);
  // Settled in a later window: charged there; nothing given back to a window that ended.
  const Step later = settle(limit, reserved.state, start + window + 1, 40, 45, start + 5, reserved.decision.reset_after);
  EXPECT_EQ(later.state.t, start + window);
  EXPECT_EQ(later.state.current, 5);
  const Step gone = settle(limit, reserved.state, start + window + 1, 40, 0, start + 5, reserved.decision.reset_after);
  EXPECT_LE(gone.expires_at, start + window + 1);  // nothing of it counts any more
  EXPECT_EQ(gone.state.current, 40);
}

TEST(Settle, AChargeIsBoundedWithoutOverflow) {
  const Limit slow = *Limit::make(Algorithm::token_bucket, 1000, kMaxHorizon / 1000);
  const Step far = charge(slow, State{}, kT0, kMaxCharged);
  EXPECT_EQ(far.state.t, kT0 + kMaxHorizon);
  const Step again = charge(slow, far.state, kT0, kMaxCharged);
  EXPECT_EQ(again.state.t, kT0 + kMaxHorizon);
  const Limit window = *Limit::make(Algorithm::fixed_window, kMaxWindowLimit, kMaxWindow);
  const Step full = charge(window, charge(window, State{}, kT0, kMaxCharged).state, kT0, kMaxCharged);
  EXPECT_EQ(full.state.current, kMaxCharged);
  EXPECT_EQ(charge(window, State{}, kT0, 0).expires_at, 0);
}

}  // namespace
}  // namespace ratekeeper::algorithms
