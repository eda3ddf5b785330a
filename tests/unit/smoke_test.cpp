#include <gtest/gtest.h>
#include "ratekeeper/algorithms/step.hpp"
TEST(Smoke, Builds) {
  auto l = ratekeeper::algorithms::Limit::token_bucket(10, 1);
  ASSERT_TRUE(l);
  auto s = ratekeeper::algorithms::step(*l, {}, 0, 1);
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->decision.allowed);
  EXPECT_EQ(s->decision.remaining, 9);
}
