// Delay instead of reject (step_all with max_delays, token_bucket::step_delayed): a request
// that would be denied now but fits within its max_delay is admitted as if it arrived at
// its send time, one send time for every limit of the check; beyond, denied as without
// max_delays; never with a window limit in the check.

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <vector>

#include "algorithms/step.hpp"
#include "ratekeeper/algorithms/token_bucket.hpp"

namespace ratekeeper::algorithms {
namespace {

constexpr Micros kT0 = 1'700'000'000'000'000;
constexpr Micros kSecond = kMicrosPerSecond;

Limit bucket(std::int64_t capacity, Micros interval) { return *Limit::make(Algorithm::token_bucket, capacity, interval); }

MultiStep must(Result<MultiStep> r) {
  EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().message);
  return r ? std::move(*r) : MultiStep{};
}

// A bucket of capacity 2, one token a second, emptied at kT0.
State emptied(const Limit& limit) {
  State s;
  for (int i = 0; i < limit.capacity; ++i) s = token_bucket::step(limit, s, kT0, 1).state;
  return s;
}

TEST(Delay, DelayedStepLeavesTheStateOfTheStepAtItsSendTime) {
  const Limit limit = bucket(2, kSecond);
  const State empty = emptied(limit);
  const Step now = token_bucket::step(limit, empty, kT0, 1);
  ASSERT_FALSE(now.decision.allowed);
  const Micros r = now.decision.retry_after;
  ASSERT_EQ(r, kSecond);

  const auto multi = must(step_all(std::vector{limit}, {empty}, kT0, std::vector<std::int64_t>{1}, std::vector{r}));
  const Step at_send_time = token_bucket::step(limit, empty, kT0 + r, 1);
  ASSERT_TRUE(at_send_time.decision.allowed);
  EXPECT_TRUE(multi.decision.allowed);
  EXPECT_EQ(multi.decision.delay, r);
  EXPECT_EQ(multi.states[0], at_send_time.state);  // TAT' = max(TAT, now + r) + T
  EXPECT_EQ(multi.states[0].t, kT0 + 3 * kSecond);
  EXPECT_EQ(multi.expires_at[0], at_send_time.expires_at);
  // Told from now: the bucket owes 3 s, 1 s beyond its capacity: nothing remains, full in 3 s.
  EXPECT_EQ(multi.decision.remaining, 0);
  EXPECT_EQ(multi.decision.reset_after, 3 * kSecond);
  EXPECT_EQ(multi.decision.retry_after, 0);
}

TEST(Delay, BeyondMaxDelayDeniedAndNothingChanges) {
  const Limit limit = bucket(2, kSecond);
  const State empty = emptied(limit);
  const auto plain = must(step_all(std::vector{limit}, {empty}, kT0, std::vector<std::int64_t>{1}));
  const auto multi =
      must(step_all(std::vector{limit}, {empty}, kT0, std::vector<std::int64_t>{1}, std::vector{kSecond - 1}));
  EXPECT_FALSE(multi.decision.allowed);
  EXPECT_EQ(multi.decision.delay, 0);
  EXPECT_EQ(multi.decision, plain.decision);
  EXPECT_EQ(multi.states[0], empty);
}

TEST(Delay, SeveralLimitsGetOneSendTimeTheLargestNeeded) {
  // A needs 1 s, B needs 3 s (cost 1 of 1 every 4 s, taken 1 s ago), C has room now.
  const Limit a = bucket(2, kSecond);
  const Limit b = bucket(1, 4 * kSecond);
  const Limit c = bucket(10, kSecond);
  const State sa = emptied(a);
  const State sb = token_bucket::step(b, {}, kT0 - kSecond, 1).state;
  const std::vector limits{a, b, c};
  const std::vector<std::int64_t> costs{1, 1, 1};
  const auto multi = must(step_all(limits, {sa, sb, State{}}, kT0, costs, std::vector{kSecond, 3 * kSecond, Micros{0}}));
  ASSERT_TRUE(multi.decision.allowed);
  EXPECT_EQ(multi.decision.delay, 3 * kSecond);
  const Micros send = kT0 + 3 * kSecond;
  EXPECT_EQ(multi.states[0], token_bucket::step(a, sa, send, 1).state);
  EXPECT_EQ(multi.states[1], token_bucket::step(b, sb, send, 1).state);
  EXPECT_EQ(multi.states[2], token_bucket::step(c, {}, send, 1).state);  // stepped at the send time too
  for (const Decision& d : multi.items) {
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.delay, 3 * kSecond);
  }
  // A limit needing more than its own max_delay denies the whole check, whatever the others allow.
  const auto denied = must(step_all(limits, {sa, sb, State{}}, kT0, costs, std::vector{kSecond, 3 * kSecond - 1, kMaxDelay}));
  EXPECT_FALSE(denied.decision.allowed);
  EXPECT_EQ(denied.states, (std::vector<State>{sa, sb, State{}}));
}

// Found by the property test of the scripts: the wait is the largest, not the last denied
// limit's (here the largest comes first).
TEST(Delay, TheLargestWaitWinsWhereverItsLimitIs) {
  const Limit slow = bucket(1, 4 * kSecond);
  const Limit fast = bucket(2, kSecond);
  const State ss = token_bucket::step(slow, {}, kT0 - kSecond, 1).state;  // needs 3 s
  const State sf = emptied(fast);                                         // needs 1 s
  const auto multi = must(step_all(std::vector{slow, fast}, {ss, sf}, kT0, std::vector<std::int64_t>{1, 1},
                                   std::vector{kMaxDelay, kMaxDelay}));
  ASSERT_TRUE(multi.decision.allowed);
  EXPECT_EQ(multi.decision.delay, 3 * kSecond);
}

TEST(Delay, AWindowLimitInTheCheckMeansNoDelay) {
  const Limit tb = bucket(2, kSecond);
  const Limit window = *Limit::make(Algorithm::fixed_window, 100, 60 * kSecond);
  const State empty = emptied(tb);
  const auto multi = must(step_all(std::vector{tb, window}, {empty, State{}}, kT0, std::vector<std::int64_t>{1, 1},
                                   std::vector{kMaxDelay, kMaxDelay}));
  EXPECT_FALSE(multi.decision.allowed);
  EXPECT_EQ(multi.decision.delay, 0);
  EXPECT_EQ(multi.states[0], empty);
  // A window limit that denies cannot be waited for either.
  const auto full = *Limit::make(Algorithm::sliding_window_log, 1, 60 * kSecond);
  const State used = step_unchecked(full, {}, kT0, 1).state;
  EXPECT_FALSE(must(step_all(std::vector{full}, {used}, kT0 + 1, std::vector<std::int64_t>{1}, std::vector{kMaxDelay}))
                   .decision.allowed);
}

TEST(Delay, MaxDelaysAreValidated) {
  const Limit tb = bucket(2, kSecond);
  EXPECT_FALSE(step_all(std::vector{tb}, {State{}}, kT0, std::vector<std::int64_t>{1}, std::vector{Micros{-1}}));
  EXPECT_FALSE(step_all(std::vector{tb}, {State{}}, kT0, std::vector<std::int64_t>{1}, std::vector{kMaxDelay + 1}));
  EXPECT_FALSE(step_all(std::vector{tb}, {State{}}, kT0, std::vector<std::int64_t>{1}, std::vector{Micros{1}, Micros{1}}));
  EXPECT_TRUE(step_all(std::vector{tb}, {State{}}, kT0, std::vector<std::int64_t>{1}, std::vector{kMaxDelay}));
}

// Exactness: requests checked at arbitrary (non-decreasing) instants, each admitted at its
// send time s = check time + delay. For every interval [x, y] of send times, the admitted
// cost is at most C + (y − x)/T: the upstream never sees more than the bucket allows.
RC_GTEST_PROP(Delay, SendTimesConformToTheBucket, ()) {
  const std::int64_t capacity = *rc::gen::inRange<std::int64_t>(1, 6);
  const Micros interval = *rc::gen::inRange<Micros>(1, 1000);
  const Micros max_delay = *rc::gen::inRange<Micros>(1, 20 * interval * capacity);
  const Limit limit = bucket(capacity, interval);
  State state;
  Micros now = kT0;
  std::vector<std::pair<Micros, std::int64_t>> sent;  // send time, cost
  const int n = *rc::gen::inRange(1, 60);
  for (int i = 0; i < n; ++i) {
    now += *rc::gen::weightedOneOf<Micros>({{3, rc::gen::just<Micros>(0)}, {2, rc::gen::inRange<Micros>(0, 2 * interval)}});
    const std::int64_t cost = *rc::gen::inRange<std::int64_t>(0, capacity + 1);
    const auto multi = must(step_all(std::vector{limit}, {state}, now, std::vector{cost}, std::vector{max_delay}));
    RC_ASSERT(multi.decision.delay <= max_delay);
    if (!multi.decision.allowed) {
      RC_ASSERT(multi.states[0] == state);
      continue;
    }
    state = multi.states[0];
    sent.emplace_back(now + multi.decision.delay, cost);
  }
  std::sort(sent.begin(), sent.end());
  for (std::size_t i = 0; i < sent.size(); ++i) {
    std::int64_t units = 0;
    for (std::size_t j = i; j < sent.size(); ++j) {
      units += sent[j].second;
      // Units sent in [x, y] need (units − C)·T of refill at most.
      RC_ASSERT((units - capacity) * interval <= sent[j].first - sent[i].first);
    }
  }
}

}  // namespace
}  // namespace ratekeeper::algorithms
