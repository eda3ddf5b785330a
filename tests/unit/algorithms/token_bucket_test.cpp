// Token bucket (GCRA form): exact boundaries, refill, retry_after, reset_after, peeks,
// invalid costs and a clock that goes backwards, at several capacities and rates.

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "algorithm_test_support.hpp"
#include "ratekeeper/algorithms/token_bucket.hpp"

namespace ratekeeper::testing {
namespace {

constexpr Micros kT0 = 1'700'000'000'000'000;  // a realistic wall-clock time in microseconds

struct BucketParam {
  std::int64_t capacity;
  Micros interval;  // T: one token every `interval` microseconds
};

class TokenBucket : public ::testing::TestWithParam<BucketParam> {
 protected:
  Limit limit() const { return make_limit(Algorithm::token_bucket, c(), t()); }
  std::int64_t c() const { return GetParam().capacity; }
  Micros t() const { return GetParam().interval; }
  // A few fill levels and costs, so that large capacities stay fast.
  std::set<std::int64_t> levels() const { return {0, 1, c() / 2, c() - 1, c()}; }
  std::set<std::int64_t> costs() const {
    return {1, std::min<std::int64_t>(2, c()), std::max<std::int64_t>(1, c() / 2), c()};
  }
};

TEST_P(TokenBucket, StartsFullAndAdmitsExactlyCapacityThenDenies) {
  Key key(limit());
  for (std::int64_t i = 0; i < c(); ++i) {
    const Decision d = key.at(kT0);
    ASSERT_TRUE(d.allowed) << "request " << i + 1 << " of " << c();
    EXPECT_EQ(d.limit, c());
    EXPECT_EQ(d.remaining, c() - 1 - i);
    EXPECT_EQ(d.retry_after, 0);
    EXPECT_EQ(d.reset_after, (i + 1) * t());
  }
  const Decision denied = key.at(kT0);
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.limit, c());
  EXPECT_EQ(denied.remaining, 0);
  EXPECT_EQ(denied.retry_after, t());
  EXPECT_EQ(denied.reset_after, c() * t());
}

TEST_P(TokenBucket, FirstTokenComesBackExactlyAfterOneInterval) {
  Key key(limit());
  ASSERT_TRUE(key.at(kT0, c()).allowed);
  const Decision before = key.at(kT0 + t() - 1);
  EXPECT_FALSE(before.allowed);
  EXPECT_EQ(before.retry_after, 1);
  const Decision at = key.at(kT0 + t());
  EXPECT_TRUE(at.allowed);
  EXPECT_EQ(at.remaining, 0);
  const Decision again = key.at(kT0 + t());
  EXPECT_FALSE(again.allowed);
  EXPECT_EQ(again.retry_after, t());
}

TEST_P(TokenBucket, RetryAfterIsExactlyWhenTheSameRequestSucceeds) {
  int denials = 0;
  for (std::int64_t used : levels()) {
    for (Micros offset : {Micros{0}, t() / 3, t()}) {
      for (std::int64_t cost : costs()) {
        Key key(limit());
        if (used > 0) {
          ASSERT_TRUE(key.at(kT0, used).allowed);
        }
        const Micros now = kT0 + offset;
        const Decision d = key.would(now, cost);
        if (d.allowed) {
          EXPECT_EQ(d.retry_after, 0);
          continue;
        }
        ++denials;
        ASSERT_GT(d.retry_after, 0);
        EXPECT_FALSE(key.would(now + d.retry_after - 1, cost).allowed)
            << "used " << used << " cost " << cost << " offset " << offset;
        EXPECT_TRUE(key.would(now + d.retry_after, cost).allowed)
            << "used " << used << " cost " << cost << " offset " << offset;
      }
    }
  }
  EXPECT_GT(denials, 0);
}

TEST_P(TokenBucket, RefillsUpToCapacityAndNeverBeyond) {
  Key key(limit());
  ASSERT_TRUE(key.at(kT0, c()).allowed);
  // Exactly one full period refills everything; one microsecond less leaves a token short.
  EXPECT_EQ(key.would(kT0 + c() * t() - 1, 0).remaining, c() - 1);
  EXPECT_EQ(key.would(kT0 + c() * t(), 0).remaining, c());

  // A huge idle gap still gives exactly C tokens.
  const Micros later = kT0 + 1'000'000'000'000'000;  // about 31 years later
  const Decision peek = key.would(later, 0);
  EXPECT_EQ(peek.remaining, c());
  EXPECT_EQ(peek.reset_after, 0);
  for (std::int64_t i = 0; i < c(); ++i) ASSERT_TRUE(key.at(later).allowed);
  const Decision denied = key.at(later);
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.retry_after, t());
}

TEST_P(TokenBucket, ResetAfterIsWhenTheKeyIsIndistinguishableFromAbsent) {
  for (std::int64_t used : levels()) {
    if (used == 0) continue;
    Key key(limit());
    const Decision d = key.at(kT0, used);
    ASSERT_TRUE(d.allowed);
    EXPECT_EQ(d.reset_after, used * t());
    EXPECT_EQ(key.expires_at(), kT0 + d.reset_after);
    EXPECT_FALSE(same_as_absent(limit(), key.state(), kT0 + d.reset_after - 1)) << "used " << used;
    EXPECT_TRUE(same_as_absent(limit(), key.state(), kT0 + d.reset_after)) << "used " << used;
  }
}

TEST_P(TokenBucket, ExpiresAtIsWhenTheStoredStateBecomesAbsent) {
  Key key(limit());
  ASSERT_TRUE(key.at(kT0, c()).allowed);
  ASSERT_FALSE(key.at(kT0).allowed);  // a denial keeps the same expiry
  EXPECT_EQ(key.expires_at(), kT0 + c() * t());
  EXPECT_TRUE(same_as_absent(limit(), key.state(), key.expires_at()));
  EXPECT_FALSE(same_as_absent(limit(), key.state(), key.expires_at() - 1));
  // A peek of a full bucket reports nothing to store.
  const Step full = must_step(limit(), key.state(), key.expires_at(), 0);
  EXPECT_EQ(full.expires_at, 0);
  EXPECT_EQ(must_step(limit(), State{}, kT0, 0).expires_at, 0);
}

TEST_P(TokenBucket, PeekNeverChangesState) {
  for (std::int64_t used : levels()) {
    Key key(limit());
    if (used > 0) {
      ASSERT_TRUE(key.at(kT0, used).allowed);
    }
    for (Micros at : {kT0 - t(), kT0, kT0 + 1, kT0 + t(), kT0 + c() * t() + 5}) {
      const Step peek = must_step(limit(), key.state(), at, 0);
      EXPECT_EQ(peek.state, key.state()) << "at " << at;
      // From the last admission on, zero tokens are always there. (Before it, a clock that
      // went backwards sees the bucket overdrawn and the peek reports when it is not.)
      if (at >= kT0) {
        EXPECT_TRUE(peek.decision.allowed);
        EXPECT_EQ(peek.decision.retry_after, 0);
      }
    }
    // Tokens at kT0: C − used.
    EXPECT_EQ(key.would(kT0, 0).remaining, c() - used);
  }
}

TEST_P(TokenBucket, ClockGoingBackwardsMintsNoTokens) {
  const Micros latest = kT0 + 10 * t();
  Key key(limit());
  ASSERT_TRUE(key.at(latest, c()).allowed);
  const State drained = key.state();
  for (Micros back : {Micros{1}, t(), 10 * t(), 20 * t()}) {
    const Step s = must_step(limit(), drained, latest - back, 1);
    EXPECT_FALSE(s.decision.allowed) << "back " << back;
    EXPECT_EQ(s.decision.remaining, 0);
    EXPECT_EQ(s.state, drained);
    // The same instant it would succeed without the jump: one interval after `latest`.
    EXPECT_EQ(latest - back + s.decision.retry_after, latest + t());
  }
  // A partly used bucket never shows more tokens at an earlier time than at the latest.
  Key half(limit());
  ASSERT_TRUE(half.at(latest, std::max<std::int64_t>(1, c() / 2)).allowed);
  const std::int64_t now_tokens = half.would(latest, 0).remaining;
  for (Micros back : {Micros{1}, t(), 100 * t()}) {
    EXPECT_LE(half.would(latest - back, 0).remaining, now_tokens);
  }
}

TEST_P(TokenBucket, NegativeCostAndCostAboveCapacityAreInvalidArguments) {
  auto negative = algorithms::step(limit(), State{}, kT0, -1);
  ASSERT_FALSE(negative);
  EXPECT_EQ(negative.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(negative.error().message.find("cost"), std::string::npos) << negative.error().message;

  auto above = algorithms::step(limit(), State{}, kT0, c() + 1);
  ASSERT_FALSE(above);
  EXPECT_EQ(above.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(above.error().message.find("cost"), std::string::npos) << above.error().message;
  EXPECT_NE(above.error().message.find("capacity"), std::string::npos) << above.error().message;
}

INSTANTIATE_TEST_SUITE_P(Rates, TokenBucket,
                         ::testing::Values(BucketParam{1, 1'000'000}, BucketParam{10, 100'000},
                                           BucketParam{60, 1'000'000}, BucketParam{100, 100'000},
                                           BucketParam{7, 3}, BucketParam{3, 333'333},
                                           BucketParam{1000, 1}),
                         [](const auto& info) {
                           return "C" + std::to_string(info.param.capacity) + "_T" +
                                  std::to_string(info.param.interval);
                         });

TEST(TokenBucketLimit, RefillRateBecomesTheRoundedEmissionInterval) {
  auto seed = Limit::token_bucket(100, 10.0);
  ASSERT_TRUE(seed);
  EXPECT_EQ(seed->capacity, 100);
  EXPECT_EQ(seed->period, 100'000);
  EXPECT_EQ(seed->horizon(), 10'000'000);
  EXPECT_DOUBLE_EQ(seed->rate_per_second(), 10.0);
  auto thirds = Limit::token_bucket(5, 3.0);
  ASSERT_TRUE(thirds);
  EXPECT_EQ(thirds->period, 333'333);
  auto slow = Limit::token_bucket(1, 0.5);
  ASSERT_TRUE(slow);
  EXPECT_EQ(slow->period, 2'000'000);
}

TEST(TokenBucketLimit, SeedScenarioHundredTokensTenPerSecond) {
  Key key(*Limit::token_bucket(100, 10.0));
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(key.at(kT0).allowed);
  const Decision denied = key.at(kT0);
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.retry_after, 100'000);
  // One second later exactly ten requests fit.
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(key.at(kT0 + kMicrosPerSecond).allowed);
  EXPECT_FALSE(key.at(kT0 + kMicrosPerSecond).allowed);
}

}  // namespace
}  // namespace ratekeeper::testing
