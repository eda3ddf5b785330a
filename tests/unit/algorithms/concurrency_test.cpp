// Concurrency slots (algorithms::concurrency): taken up to the capacity, given back by
// release, moved on by renew, reclaimed once expired.

#include <gtest/gtest.h>

#include "ratekeeper/algorithms/concurrency.hpp"
#include "algorithms/step.hpp"

namespace ratekeeper::algorithms {
namespace {

constexpr Micros kTtl = 10 * kMicrosPerSecond;
const Limit kTwo = *Limit::make(Algorithm::concurrency, 2, kTtl);

TEST(Concurrency, SlotsAreTakenUpToTheCapacityThenDenied) {
  State s;
  auto a = concurrency::step(kTwo, s, 1000, 1);
  EXPECT_TRUE(a.decision.allowed);
  EXPECT_EQ(a.decision.remaining, 1);
  EXPECT_EQ(a.decision.reset_after, kTtl);
  EXPECT_EQ(a.expires_at, 1000 + kTtl);
  auto b = concurrency::step(kTwo, a.state, 2000, 1);
  EXPECT_TRUE(b.decision.allowed);
  EXPECT_EQ(b.decision.remaining, 0);
  auto c = concurrency::step(kTwo, b.state, 3000, 1);
  EXPECT_FALSE(c.decision.allowed);
  EXPECT_EQ(c.decision.remaining, 0);
  EXPECT_EQ(c.decision.retry_after, kConcurrencyRetryAfter);  // the oldest lasts 8 s more
  EXPECT_EQ(c.state, b.state);
  // Half a second before the oldest expires, that is the wait.
  auto d = concurrency::step(kTwo, b.state, 1000 + kTtl - 500'000, 1);
  EXPECT_FALSE(d.decision.allowed);
  EXPECT_EQ(d.decision.retry_after, 500'000);
  // Once it has expired, its slot is taken again.
  auto e = concurrency::step(kTwo, b.state, 1000 + kTtl, 1);
  EXPECT_TRUE(e.decision.allowed);
  EXPECT_EQ(e.state.log, (std::vector<Micros>{2000 + kTtl, 1000 + 2 * kTtl}));
}

TEST(Concurrency, APeekTakesNothing) {
  auto a = concurrency::step(kTwo, State{}, 0, 1);
  auto p = concurrency::step(kTwo, a.state, 5, 0);
  EXPECT_TRUE(p.decision.allowed);
  EXPECT_EQ(p.decision.remaining, 1);
  EXPECT_EQ(p.state, a.state);
  auto empty = concurrency::step(kTwo, State{}, 5, 0);
  EXPECT_EQ(empty.expires_at, 0);
  EXPECT_EQ(empty.decision.remaining, 2);
}

TEST(Concurrency, AReleaseGivesBackItsOwnSlotOnce) {
  auto a = concurrency::step(kTwo, State{}, 1000, 1);
  auto b = concurrency::step(kTwo, a.state, 2000, 1);
  auto r = concurrency::release(kTwo, b.state, 3000, 1000 + kTtl);
  EXPECT_EQ(r.state.log, (std::vector<Micros>{2000 + kTtl}));
  EXPECT_EQ(r.decision.remaining, 1);
  auto again = concurrency::release(kTwo, r.state, 3000, 1000 + kTtl);
  EXPECT_EQ(again.state.log, r.state.log);
  auto last = concurrency::release(kTwo, r.state, 3000, 2000 + kTtl);
  EXPECT_EQ(last.expires_at, 0);  // no slot left: the key is forgotten
  EXPECT_EQ(last.state, State{});
}

TEST(Concurrency, ARenewalMovesTheSlotOnUnlessItExpired) {
  auto a = concurrency::step(kTwo, State{}, 1000, 1);
  auto renewed = concurrency::renew(kTwo, a.state, 9000, 1000 + kTtl);
  ASSERT_TRUE(renewed);
  EXPECT_EQ(renewed->state.log, (std::vector<Micros>{9000 + kTtl}));
  EXPECT_EQ(renewed->expires_at, 9000 + kTtl);
  EXPECT_FALSE(concurrency::renew(kTwo, a.state, 1000 + kTtl, 1000 + kTtl));  // expired at that instant
  EXPECT_FALSE(concurrency::renew(kTwo, a.state, 9000, 5));                     // never held
}

TEST(Concurrency, ACostAboveOneIsRefused) {
  EXPECT_FALSE(step(kTwo, State{}, 0, 2));
  EXPECT_TRUE(step(kTwo, State{}, 0, 1));
  EXPECT_FALSE(Limit::make(Algorithm::concurrency, kMaxConcurrency + 1, kTtl));
  EXPECT_TRUE(Limit::make(Algorithm::concurrency, kMaxConcurrency, kTtl));
}

}  // namespace
}  // namespace ratekeeper::algorithms
