// Sliding window counter: estimate = previous·(W − elapsed)/W + current, exact in integers.

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "algorithm_test_support.hpp"
#include "ratekeeper/algorithms/sliding_window_counter.hpp"

namespace ratekeeper::testing {
namespace {

constexpr Micros kT0 = 1'700'000'000'000'000;

struct WindowParam {
  std::int64_t limit;
  Micros window;
};

class SlidingWindowCounter : public ::testing::TestWithParam<WindowParam> {
 protected:
  Limit limit() const { return make_limit(Algorithm::sliding_window_counter, l(), w()); }
  std::int64_t l() const { return GetParam().limit; }
  Micros w() const { return GetParam().window; }
  Micros start() const { return (kT0 / w() + 1) * w(); }
  std::set<std::int64_t> costs() const {
    return {1, std::min<std::int64_t>(2, l()), std::max<std::int64_t>(1, l() / 2), l()};
  }
  static Micros ceil_div(Micros a, Micros b) { return (a + b - 1) / b; }
};

TEST_P(SlidingWindowCounter, FirstWindowAdmitsExactlyLimitThenDenies) {
  Key key(limit());
  const Micros now = start() + w() / 2;
  for (std::int64_t i = 0; i < l(); ++i) {
    const Decision d = key.at(now);
    ASSERT_TRUE(d.allowed) << "request " << i + 1;
    EXPECT_EQ(d.limit, l());
    EXPECT_EQ(d.remaining, l() - 1 - i);
    EXPECT_EQ(d.retry_after, 0);
    // The units counted now weigh on the next window too.
    EXPECT_EQ(d.reset_after, start() + 2 * w() - now);
  }
  EXPECT_FALSE(key.at(now).allowed);
}

TEST_P(SlidingWindowCounter, PreviousWindowWeighsLinearlyOverTheCurrentOne) {
  Key key(limit());
  ASSERT_TRUE(key.at(start(), l()).allowed);
  const Micros next = start() + w();
  // Remaining at elapsed e: floor(L − L·(W − e)/W) = floor(L·e/W).
  for (Micros e : {Micros{0}, Micros{1}, w() / 4, w() / 2, w() - 1}) {
    EXPECT_EQ(key.would(next + e, 0).remaining, l() * e / w()) << "elapsed " << e;
  }
  // The first unit fits once L·(W − e) + W ≤ L·W, that is e ≥ ceil(W/L).
  const Micros first = ceil_div(w(), l());
  const Decision denied = key.would(next, 1);
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.retry_after, first);
  EXPECT_FALSE(key.would(next + first - 1, 1).allowed);
  EXPECT_TRUE(key.would(next + first, 1).allowed);
}

TEST_P(SlidingWindowCounter, AWindowTwoWindowsAgoCountsForNothing) {
  Key key(limit());
  ASSERT_TRUE(key.at(start(), l()).allowed);
  // No request in the next window: the one after starts clean.
  EXPECT_EQ(key.would(start() + 2 * w(), 0).remaining, l());
  for (std::int64_t i = 0; i < l(); ++i) ASSERT_TRUE(key.at(start() + 2 * w()).allowed);
  EXPECT_FALSE(key.at(start() + 2 * w()).allowed);
}

TEST_P(SlidingWindowCounter, RetryAfterIsExactlyWhenTheSameRequestSucceeds) {
  struct Scenario {
    std::int64_t previous;
    std::int64_t current;
  };
  int denials = 0;
  for (Scenario sc : {Scenario{l(), 0}, Scenario{l() / 2, l() / 2}, Scenario{0, l()},
                      Scenario{1, l() - 1}}) {
    Key key(limit());
    if (sc.previous > 0) {
      ASSERT_TRUE(key.at(start(), sc.previous).allowed);
    }
    if (sc.current > 0) {
      ASSERT_TRUE(key.at(start() + w(), sc.current).allowed);
    }
    for (Micros now : {start() + w(), start() + w() + w() / 3, start() + 2 * w() - 1}) {
      for (std::int64_t cost : costs()) {
        const Decision d = key.would(now, cost);
        if (d.allowed) {
          EXPECT_EQ(d.retry_after, 0);
          continue;
        }
        ++denials;
        ASSERT_GT(d.retry_after, 0);
        EXPECT_FALSE(key.would(now + d.retry_after - 1, cost).allowed)
            << "previous " << sc.previous << " current " << sc.current << " cost " << cost;
        EXPECT_TRUE(key.would(now + d.retry_after, cost).allowed)
            << "previous " << sc.previous << " current " << sc.current << " cost " << cost;
      }
    }
  }
  EXPECT_GT(denials, 0);
}

TEST_P(SlidingWindowCounter, ResetAfterIsWhenTheKeyIsIndistinguishableFromAbsent) {
  // Counted in the current window: it weighs until the end of the next one.
  Key key(limit());
  const Micros now = start() + w() / 2;
  const Decision d = key.at(now);
  ASSERT_TRUE(d.allowed);
  EXPECT_EQ(key.expires_at(), now + d.reset_after);
  EXPECT_FALSE(same_as_absent(limit(), key.state(), now + d.reset_after - 1));
  EXPECT_TRUE(same_as_absent(limit(), key.state(), now + d.reset_after));

  // Counted only in the previous window: it weighs until the end of the current one.
  const Micros next = start() + w() + w() / 2;
  const Step peek = must_step(limit(), key.state(), next, 0);
  EXPECT_EQ(peek.decision.reset_after, start() + 2 * w() - next);
  EXPECT_EQ(peek.expires_at, start() + 2 * w());
  EXPECT_FALSE(same_as_absent(limit(), peek.state, peek.expires_at - 1));
  EXPECT_TRUE(same_as_absent(limit(), peek.state, peek.expires_at));
}

TEST_P(SlidingWindowCounter, PeekNeverChangesWhatTheKeyAnswers) {
  Key key(limit());
  ASSERT_TRUE(key.at(start(), std::max<std::int64_t>(1, l() / 2)).allowed);
  EXPECT_EQ(must_step(limit(), key.state(), start() + w() - 1, 0).state, key.state());
  for (Micros at : {start(), start() + w(), start() + w() + w() / 2, start() + 3 * w()}) {
    const Step peek = must_step(limit(), key.state(), at, 0);
    EXPECT_TRUE(peek.decision.allowed);
    for (Micros later : {at, at + w() / 2, at + w()}) {
      for (std::int64_t cost : costs()) {
        EXPECT_EQ(must_step(limit(), peek.state, later, cost).decision,
                  must_step(limit(), key.state(), later, cost).decision)
            << "peek at " << at << ", then cost " << cost << " at " << later;
      }
    }
  }
}

TEST_P(SlidingWindowCounter, ClockGoingBackwardsAdmitsNoMore) {
  const Micros later = start() + w() + w() / 2;
  Key key(limit());
  ASSERT_TRUE(key.at(start(), l()).allowed);
  ASSERT_TRUE(key.at(later, key.would(later, 0).remaining).allowed);
  const std::int64_t at_latest = key.would(later, 0).remaining;
  for (Micros back : {Micros{1}, w() / 2, w(), 3 * w()}) {
    const Step s = must_step(limit(), key.state(), later - back, 1);
    EXPECT_LE(s.decision.remaining, at_latest) << "back " << back;
    if (s.decision.allowed) {
      EXPECT_TRUE(key.would(later, 1).allowed);
    }
  }
}

TEST_P(SlidingWindowCounter, NegativeCostAndCostAboveLimitAreInvalidArguments) {
  for (std::int64_t cost : {std::int64_t{-1}, l() + 1}) {
    auto r = algorithms::step(limit(), State{}, kT0, cost);
    ASSERT_FALSE(r) << "cost " << cost;
    EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
    EXPECT_NE(r.error().message.find("cost"), std::string::npos) << r.error().message;
  }
}

INSTANTIATE_TEST_SUITE_P(Windows, SlidingWindowCounter,
                         ::testing::Values(WindowParam{10, 1'000}, WindowParam{1, 1'000},
                                           WindowParam{5, 1'000'000}, WindowParam{100, 60'000'000},
                                           WindowParam{3, 7}),
                         [](const auto& info) {
                           return "L" + std::to_string(info.param.limit) + "_W" +
                                  std::to_string(info.param.window);
                         });

}  // namespace
}  // namespace ratekeeper::testing
