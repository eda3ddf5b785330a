// Fixed window: a counter per window aligned at multiples of W, reset when the window ends.

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "algorithm_test_support.hpp"
#include "ratekeeper/algorithms/fixed_window.hpp"

namespace ratekeeper::testing {
namespace {

constexpr Micros kT0 = 1'700'000'000'000'000;

struct WindowParam {
  std::int64_t limit;
  Micros window;
};

class FixedWindow : public ::testing::TestWithParam<WindowParam> {
 protected:
  Limit limit() const { return make_limit(Algorithm::fixed_window, l(), w()); }
  std::int64_t l() const { return GetParam().limit; }
  Micros w() const { return GetParam().window; }
  // The start of an aligned window.
  Micros start() const { return (kT0 / w() + 1) * w(); }
  std::set<std::int64_t> costs() const {
    return {1, std::min<std::int64_t>(2, l()), std::max<std::int64_t>(1, l() / 2), l()};
  }
};

TEST_P(FixedWindow, AdmitsExactlyLimitPerWindowThenDenies) {
  Key key(limit());
  const Micros now = start() + w() / 2;
  const Micros end = start() + w();
  for (std::int64_t i = 0; i < l(); ++i) {
    const Decision d = key.at(now);
    ASSERT_TRUE(d.allowed) << "request " << i + 1;
    EXPECT_EQ(d.limit, l());
    EXPECT_EQ(d.remaining, l() - 1 - i);
    EXPECT_EQ(d.retry_after, 0);
    EXPECT_EQ(d.reset_after, end - now);
  }
  const Decision denied = key.at(now);
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.remaining, 0);
  EXPECT_EQ(denied.retry_after, end - now);
  EXPECT_EQ(denied.reset_after, end - now);
}

TEST_P(FixedWindow, CounterResetsExactlyAtTheWindowBoundary) {
  Key key(limit());
  ASSERT_TRUE(key.at(start(), l()).allowed);
  const Decision before = key.at(start() + w() - 1);
  EXPECT_FALSE(before.allowed);
  EXPECT_EQ(before.retry_after, 1);
  const Decision at = key.at(start() + w());
  EXPECT_TRUE(at.allowed);
  EXPECT_EQ(at.remaining, l() - 1);
  EXPECT_EQ(at.reset_after, w());
}

// The known weakness of fixed windows, kept on purpose: 2·L around a boundary.
TEST_P(FixedWindow, AdmitsABurstOfTwiceTheLimitAcrossABoundary) {
  Key key(limit());
  const Micros end = start() + w();
  for (std::int64_t i = 0; i < l(); ++i) ASSERT_TRUE(key.at(end - 1).allowed);
  for (std::int64_t i = 0; i < l(); ++i) ASSERT_TRUE(key.at(end).allowed);
  EXPECT_FALSE(key.at(end).allowed);
}

TEST_P(FixedWindow, RetryAfterIsExactlyWhenTheSameRequestSucceeds) {
  int denials = 0;
  for (std::int64_t used : {std::int64_t{1}, std::max<std::int64_t>(1, l() / 2), l()}) {
    Key key(limit());
    ASSERT_TRUE(key.at(start(), used).allowed);
    for (Micros now : {start(), start() + w() / 2, start() + w() - 1}) {
      for (std::int64_t cost : costs()) {
        const Decision d = key.would(now, cost);
        if (d.allowed) {
          EXPECT_EQ(d.retry_after, 0);
          continue;
        }
        ++denials;
        ASSERT_GT(d.retry_after, 0);
        EXPECT_FALSE(key.would(now + d.retry_after - 1, cost).allowed);
        EXPECT_TRUE(key.would(now + d.retry_after, cost).allowed);
      }
    }
  }
  EXPECT_GT(denials, 0);
}

TEST_P(FixedWindow, ResetAfterIsWhenTheKeyIsIndistinguishableFromAbsent) {
  Key key(limit());
  const Micros now = start() + w() / 3;
  const Decision d = key.at(now);
  ASSERT_TRUE(d.allowed);
  EXPECT_EQ(d.reset_after, start() + w() - now);
  EXPECT_EQ(key.expires_at(), now + d.reset_after);
  EXPECT_FALSE(same_as_absent(limit(), key.state(), now + d.reset_after - 1));
  EXPECT_TRUE(same_as_absent(limit(), key.state(), now + d.reset_after));
}

TEST_P(FixedWindow, PeekNeverChangesWhatTheKeyAnswers) {
  Key key(limit());
  ASSERT_TRUE(key.at(start(), std::max<std::int64_t>(1, l() / 2)).allowed);
  // Within the window the state is returned as it was.
  const Step same = must_step(limit(), key.state(), start() + w() - 1, 0);
  EXPECT_EQ(same.state, key.state());
  EXPECT_TRUE(same.decision.allowed);
  EXPECT_EQ(same.decision.remaining, l() - std::max<std::int64_t>(1, l() / 2));
  // After it, the peek reports an unused key and stores nothing.
  const Step after = must_step(limit(), key.state(), start() + w(), 0);
  EXPECT_EQ(after.state, State{});
  EXPECT_EQ(after.expires_at, 0);
  EXPECT_EQ(after.decision.remaining, l());
}

TEST_P(FixedWindow, ClockGoingBackwardsKeepsCountingInTheLaterWindow) {
  const Micros later = start() + w();
  Key key(limit());
  ASSERT_TRUE(key.at(later, l()).allowed);
  for (Micros back : {Micros{1}, w(), 3 * w()}) {
    const Step s = must_step(limit(), key.state(), later - back, 1);
    EXPECT_FALSE(s.decision.allowed) << "back " << back;
    EXPECT_EQ(s.state, key.state());
    EXPECT_EQ(later - back + s.decision.retry_after, later + w());
  }
}

TEST_P(FixedWindow, NegativeCostAndCostAboveLimitAreInvalidArguments) {
  for (std::int64_t cost : {std::int64_t{-1}, l() + 1}) {
    auto r = algorithms::step(limit(), State{}, kT0, cost);
    ASSERT_FALSE(r) << "cost " << cost;
    EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
    EXPECT_NE(r.error().message.find("cost"), std::string::npos) << r.error().message;
  }
}

INSTANTIATE_TEST_SUITE_P(Windows, FixedWindow,
                         ::testing::Values(WindowParam{1, 1'000}, WindowParam{5, 1'000'000},
                                           WindowParam{100, 60'000'000}, WindowParam{3, 7},
                                           WindowParam{10, 2}),
                         [](const auto& info) {
                           return "L" + std::to_string(info.param.limit) + "_W" +
                                  std::to_string(info.param.window);
                         });

}  // namespace
}  // namespace ratekeeper::testing
