// TopDenied: the identities a rule denied most over the last minutes, in bounded memory. Exact
// while a minute's identities fit its counters; beyond, every count lies within the bounds it
// states and an identity denied more than 1/capacity of a minute's denials is never missed.

#include "ratekeeper/limiter/top_denied.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace ratekeeper::limiter {
namespace {

constexpr Micros kMinute = 60 * kMicrosPerSecond;
constexpr Micros kT0 = 1'000 * kMinute;  // the start of a minute

TEST(TopDenied, CountsAreExactWhileTheIdentitiesFit) {
  TopDenied top(2, 8);
  for (int i = 0; i < 5; ++i) top.record(1, "ip:a", kT0 + i);
  for (int i = 0; i < 3; ++i) top.record(1, "ip:b", kT0 + i);
  top.record(1, "ip:c", kT0);
  top.record(0, "ip:other-rule", kT0);
  const auto r = top.top(1, 1, 10, kT0 + 1000);
  EXPECT_EQ(r.denials, 9u);
  ASSERT_EQ(r.top.size(), 3u);
  EXPECT_EQ(r.top[0].identity, "ip:a");
  EXPECT_EQ(r.top[0].at_least, 5u);
  EXPECT_EQ(r.top[0].at_most, 5u);
  EXPECT_EQ(r.top[1].identity, "ip:b");
  EXPECT_EQ(r.top[1].at_least, 3u);
  EXPECT_EQ(r.top[2].identity, "ip:c");
  EXPECT_EQ(top.top(1, 1, 2, kT0).top.size(), 2u);  // n bounds the answer
  EXPECT_EQ(top.top(0, 1, 10, kT0).denials, 1u);
  EXPECT_EQ(top.top(7, 1, 10, kT0).denials, 0u);  // no such rule: nothing
}

// A flood of made-up identities, one denial each, around one identity denied again and again
// (a fifth of the denials, above 1/capacity): the counters stay as many as the capacity, and
// the one that matters comes first.
TEST(TopDenied, AHeavyHitterStandsOutOfAFloodOfOneOffIdentities) {
  TopDenied top(1, 8);
  for (int i = 0; i < 2000; ++i) {
    top.record(0, "ip:10.0." + std::to_string(i / 256) + "." + std::to_string(i % 256), kT0);
    if (i % 4 == 0) top.record(0, "ip:192.0.2.66", kT0);
  }
  const auto r = top.top(0, 1, 100, kT0);
  EXPECT_EQ(r.denials, 2500u);
  EXPECT_EQ(r.top.size(), 8u);
  ASSERT_FALSE(r.top.empty());
  EXPECT_EQ(r.top[0].identity, "ip:192.0.2.66");
  EXPECT_LE(r.top[0].at_least, 500u);
  EXPECT_GT(r.top[0].at_least, 100u);
  EXPECT_GE(r.top[0].at_most, 500u);
  for (const auto& e : r.top) {
    if (e.identity != "ip:192.0.2.66") {
      EXPECT_LE(e.at_least, 1u) << e.identity;
    }
  }
}

// Minutes roll: the report covers the minutes asked for, the current one included; a minute
// older than the kept ones is gone; an identity without a counter in a full minute may have had
// up to that minute's least count there.
TEST(TopDenied, TheReportCoversTheMinutesAskedFor) {
  TopDenied top(1, 2);
  top.record(0, "user:old", kT0);
  top.record(0, "user:z", kT0);  // the first minute's two counters are taken: its floor is 1
  for (int i = 0; i < 3; ++i) top.record(0, "user:a", kT0 + 3 * kMinute);
  for (int i = 0; i < 2; ++i) top.record(0, "user:b", kT0 + 3 * kMinute);
  top.record(0, "user:old", kT0 + 3 * kMinute);  // evicts b's counter (2): old counts 3, error 2
  const Micros now = kT0 + 3 * kMinute + 59 * kMicrosPerSecond;
  const auto last = top.top(0, 1, 10, now);
  EXPECT_EQ(last.denials, 6u);
  const auto both = top.top(0, 4, 10, now);
  EXPECT_EQ(both.denials, 8u);
  std::map<std::string, TopDenied::Entry> by;
  for (const auto& e : both.top) by[e.identity] = e;
  ASSERT_TRUE(by.contains("user:old"));
  EXPECT_EQ(by["user:old"].at_least, 2u);  // 1 in the first minute, at least 1 in the last
  EXPECT_EQ(by["user:old"].at_most, 4u);
  ASSERT_TRUE(by.contains("user:a"));
  EXPECT_EQ(by["user:a"].at_least, 3u);
  EXPECT_EQ(by["user:a"].at_most, 3u + 1u);  // without a counter in the full first minute: up to its floor
  ASSERT_TRUE(by.contains("user:z"));
  EXPECT_EQ(by["user:z"].at_least, 1u);
  EXPECT_EQ(by["user:z"].at_most, 1u + 3u);  // the last minute's floor
  EXPECT_FALSE(by.contains("user:b"));
  EXPECT_EQ(top.top(0, TopDenied::kMinutes, 10, kT0 + (TopDenied::kMinutes + 3) * kMinute).denials, 0u);
  // The ring slot of an old minute is taken by a new one, not added to it.
  top.record(0, "user:new", kT0 + TopDenied::kMinutes * kMinute);
  EXPECT_EQ(top.top(0, 1, 10, kT0 + TopDenied::kMinutes * kMinute).denials, 1u);
}

// Any stream of denials in one minute: each reported identity's true count lies within its
// bounds, and one denied more than (denials / capacity) times is reported.
RC_GTEST_PROP(TopDenied, BoundsHoldAndHeavyHittersAreReported, (const std::vector<std::uint8_t>& stream)) {
  constexpr std::size_t kCapacity = 4;
  TopDenied top(1, kCapacity);
  std::map<std::string, std::uint64_t> truth;
  for (const auto b : stream) {
    const std::string identity = "id:" + std::to_string(b % 13);
    top.record(0, identity, kT0);
    ++truth[identity];
  }
  const auto r = top.top(0, 1, 100, kT0);
  RC_ASSERT(r.denials == stream.size());
  std::map<std::string, TopDenied::Entry> by;
  for (const auto& e : r.top) {
    RC_ASSERT(e.at_least <= truth[e.identity]);
    RC_ASSERT(truth[e.identity] <= e.at_most);
    by[e.identity] = e;
  }
  for (const auto& [identity, count] : truth) {
    if (count * kCapacity > stream.size()) RC_ASSERT(by.contains(identity));
  }
}

}  // namespace
}  // namespace ratekeeper::limiter
