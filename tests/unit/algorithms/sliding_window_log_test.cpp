// Sliding window log: the window is (now − W, now], one entry per admitted unit of cost.

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "algorithm_test_support.hpp"
#include "ratekeeper/algorithms/sliding_window_log.hpp"

namespace ratekeeper::testing {
namespace {

constexpr Micros kT0 = 1'700'000'000'000'000;

struct WindowParam {
  std::int64_t limit;
  Micros window;
};

class SlidingWindowLog : public ::testing::TestWithParam<WindowParam> {
 protected:
  Limit limit() const { return make_limit(Algorithm::sliding_window_log, l(), w()); }
  std::int64_t l() const { return GetParam().limit; }
  Micros w() const { return GetParam().window; }
  std::set<std::int64_t> costs() const {
    return {1, std::min<std::int64_t>(2, l()), std::max<std::int64_t>(1, l() / 2), l()};
  }
  // L units admitted one at a time, spread over the first half of a window from kT0.
  Key spread() const {
    Key key(limit());
    const Micros step = w() / 2 / l();
    for (std::int64_t i = 0; i < l(); ++i) EXPECT_TRUE(key.at(kT0 + i * step).allowed);
    return key;
  }
};

TEST_P(SlidingWindowLog, AdmitsExactlyLimitWithinOneWindowThenDenies) {
  Key key(limit());
  for (std::int64_t i = 0; i < l(); ++i) {
    const Decision d = key.at(kT0);
    ASSERT_TRUE(d.allowed) << "request " << i + 1;
    EXPECT_EQ(d.limit, l());
    EXPECT_EQ(d.remaining, l() - 1 - i);
    EXPECT_EQ(d.retry_after, 0);
    EXPECT_EQ(d.reset_after, w());
  }
  const Decision denied = key.at(kT0);
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.remaining, 0);
  EXPECT_EQ(denied.retry_after, w());
  EXPECT_EQ(denied.reset_after, w());
}

TEST_P(SlidingWindowLog, AnEntryCountsUntilExactlyOneWindowLater) {
  Key key(limit());
  ASSERT_TRUE(key.at(kT0, l()).allowed);
  const Decision before = key.at(kT0 + w() - 1);
  EXPECT_FALSE(before.allowed);
  EXPECT_EQ(before.retry_after, 1);
  const Decision at = key.at(kT0 + w());
  EXPECT_TRUE(at.allowed);
  EXPECT_EQ(at.remaining, l() - 1);
}

TEST_P(SlidingWindowLog, EveryUnitOfCostIsOneEntry) {
  Key key(limit());
  ASSERT_TRUE(key.at(kT0, l()).allowed);
  EXPECT_EQ(static_cast<std::int64_t>(key.state().log.size()), l());
  EXPECT_FALSE(key.at(kT0, 1).allowed);
  EXPECT_EQ(static_cast<std::int64_t>(key.state().log.size()), l());
}

TEST_P(SlidingWindowLog, RetryAfterIsExactlyWhenTheSameRequestSucceeds) {
  const Key key = spread();
  const Micros last = key.state().log.back();
  int denials = 0;
  for (Micros now : {last, last + w() / 3, last + w() / 2}) {
    for (std::int64_t cost : costs()) {
      const Decision d = key.would(now, cost);
      if (d.allowed) {
        EXPECT_EQ(d.retry_after, 0);
        continue;
      }
      ++denials;
      ASSERT_GT(d.retry_after, 0);
      EXPECT_FALSE(key.would(now + d.retry_after - 1, cost).allowed) << "cost " << cost << " at " << now;
      EXPECT_TRUE(key.would(now + d.retry_after, cost).allowed) << "cost " << cost << " at " << now;
    }
  }
  EXPECT_GT(denials, 0);
}

TEST_P(SlidingWindowLog, ResetAfterIsWhenTheKeyIsIndistinguishableFromAbsent) {
  Key key = spread();
  const Micros now = key.state().log.back();
  const Decision d = key.would(now, 0);
  EXPECT_EQ(d.reset_after, key.state().log.back() + w() - now);
  EXPECT_EQ(key.expires_at(), now + d.reset_after);
  EXPECT_FALSE(same_as_absent(limit(), key.state(), now + d.reset_after - 1));
  EXPECT_TRUE(same_as_absent(limit(), key.state(), now + d.reset_after));
}

TEST_P(SlidingWindowLog, PeekNeverChangesWhatTheKeyAnswers) {
  const Key key = spread();
  const Micros last = key.state().log.back();
  for (Micros at : {kT0 - 1, kT0, last, last + w() / 2, last + w()}) {
    const Step peek = must_step(limit(), key.state(), at, 0);
    EXPECT_TRUE(peek.decision.allowed);
    EXPECT_EQ(peek.decision.retry_after, 0);
    // Only entries that no longer count may be forgotten: every later answer is the same.
    for (Micros later : {at, at + 1, at + w() / 2, at + w()}) {
      for (std::int64_t cost : costs()) {
        EXPECT_EQ(must_step(limit(), peek.state, later, cost).decision,
                  must_step(limit(), key.state(), later, cost).decision)
            << "peek at " << at << ", then cost " << cost << " at " << later;
      }
    }
  }
  // Nothing had expired at `last`: the peek returns the state as it was.
  EXPECT_EQ(must_step(limit(), key.state(), last, 0).state, key.state());
}

TEST_P(SlidingWindowLog, ClockGoingBackwardsAdmitsNoMore) {
  const Micros latest = kT0 + 10 * w();
  Key key(limit());
  ASSERT_TRUE(key.at(latest, l()).allowed);
  for (Micros back : {Micros{1}, w() / 2, w(), 5 * w()}) {
    const Step s = must_step(limit(), key.state(), latest - back, 1);
    EXPECT_FALSE(s.decision.allowed) << "back " << back;
    EXPECT_EQ(s.decision.remaining, 0);
    // The same instant it would succeed without the jump: when the entries at `latest` expire.
    EXPECT_EQ(latest - back + s.decision.retry_after, latest + w());
  }
  // An admission at an earlier instant keeps the log ordered and counts for one window from it.
  Key late(limit());
  ASSERT_TRUE(late.at(latest, 1).allowed);
  if (l() >= 2 && w() >= 2) {
    ASSERT_TRUE(late.at(latest - 1, 1).allowed);
    EXPECT_TRUE(std::is_sorted(late.state().log.begin(), late.state().log.end()));
    EXPECT_EQ(late.would(latest, 0).remaining, l() - 2);
    EXPECT_EQ(late.would(latest - 1 + w(), 0).remaining, l() - 1);
  }
}

TEST_P(SlidingWindowLog, NegativeCostAndCostAboveLimitAreInvalidArguments) {
  for (std::int64_t cost : {std::int64_t{-1}, l() + 1}) {
    auto r = algorithms::step(limit(), State{}, kT0, cost);
    ASSERT_FALSE(r) << "cost " << cost;
    EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
    EXPECT_NE(r.error().message.find("cost"), std::string::npos) << r.error().message;
  }
}

INSTANTIATE_TEST_SUITE_P(Windows, SlidingWindowLog,
                         ::testing::Values(WindowParam{1, 1'000}, WindowParam{5, 1'000'000},
                                           WindowParam{100, 60'000'000}, WindowParam{3, 7},
                                           WindowParam{10, 1}),
                         [](const auto& info) {
                           return "L" + std::to_string(info.param.limit) + "_W" +
                                  std::to_string(info.param.window);
                         });

}  // namespace
}  // namespace ratekeeper::testing
