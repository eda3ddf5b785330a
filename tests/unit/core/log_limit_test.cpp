// LogLimit on a manual clock: a burst, then one line per 1/per_second; the next line written
// names how many were left out.

#include "ratekeeper/core/log_limit.hpp"

#include <gtest/gtest.h>

namespace ratekeeper {
namespace {

TEST(LogLimit, ABurstThenOneLinePerIntervalNamingTheLinesLeftOut) {
  ManualClock clock;
  LogLimit limit(/*per_second=*/2, /*burst=*/3, &clock);
  std::uint64_t suppressed = 99;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(limit.admit(suppressed)) << i;
    EXPECT_EQ(suppressed, 0u);
  }
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(limit.admit(suppressed)) << i;
  clock.advance(kMicrosPerSecond / 2 - 1);
  EXPECT_FALSE(limit.admit(suppressed));  // 6 left out so far
  clock.advance(1);
  ASSERT_TRUE(limit.admit(suppressed));
  EXPECT_EQ(suppressed, 6u);
  EXPECT_FALSE(limit.admit(suppressed));
  clock.advance(10 * kMicrosPerSecond);  // refills to the burst, no more
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limit.admit(suppressed)) << i;
  EXPECT_FALSE(limit.admit(suppressed));
}

}  // namespace
}  // namespace ratekeeper
