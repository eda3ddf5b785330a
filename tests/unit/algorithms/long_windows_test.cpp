// Quotas per day, month or year: window limits up to 2^40 per window of up to 2^45 µs
// (about 407 days) load, and every window algorithm counts them exactly. The sliding window
// counter weighs the previous window by the time left of the current one, a product of a
// count and a time far beyond 64 bits (and beyond Lua's exact 2^53): checked here against
// 128-bit arithmetic.

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <string>

#include "algorithm_test_support.hpp"

namespace ratekeeper::testing {
namespace {

__extension__ using Wide = __int128;

constexpr Micros kDay = 86'400 * kMicrosPerSecond;
constexpr std::int64_t kMaxLimit = std::int64_t{1} << 40;
constexpr Micros kMaxWindow = Micros{1} << 45;
constexpr Micros kT0 = 1'700'000'000'000'000;

struct Quota {
  std::int64_t limit;
  Micros window;
};

std::string describe(Algorithm a, Quota q) {
  return std::string(algorithms::to_string(a)) + " " + std::to_string(q.limit) + " per " +
         std::to_string(q.window) + " us";
}

constexpr Algorithm kWindows[] = {Algorithm::fixed_window, Algorithm::sliding_window_counter,
                                  Algorithm::sliding_window_log};

TEST(LongWindows, DailyMonthlyAndYearlyQuotasLoad) {
  for (Algorithm a : kWindows) {
    for (Quota q : {Quota{100'000, kDay}, Quota{1'000'000, 30 * kDay}, Quota{kMaxLimit, 365 * kDay},
                    Quota{kMaxLimit, kMaxWindow}, Quota{1, kMaxWindow}}) {
      auto limit = Limit::window(a, static_cast<double>(q.limit), q.window);
      ASSERT_TRUE(limit) << describe(a, q) << ": " << limit.error().message;
      EXPECT_EQ(limit->capacity, q.limit);
      EXPECT_EQ(limit->period, q.window);
    }
  }
}

TEST(LongWindows, LimitsAndWindowsBeyondTheBoundsAreRejected) {
  for (Algorithm a : kWindows) {
    const std::string name(algorithms::to_string(a));
    auto big = Limit::make(a, kMaxLimit + 1, kMicrosPerSecond);
    ASSERT_FALSE(big) << name;
    EXPECT_NE(big.error().message.find("limit"), std::string::npos) << big.error().message;
    auto long_window = Limit::make(a, 10, kMaxWindow + 1);
    ASSERT_FALSE(long_window) << name;
    EXPECT_NE(long_window.error().message.find("window"), std::string::npos)
        << long_window.error().message;
  }
  // The token bucket keeps its bound: C·T at most 2^51 µs.
  EXPECT_FALSE(Limit::make(Algorithm::token_bucket, 100'000, kDay));
  EXPECT_TRUE(Limit::make(Algorithm::token_bucket, 100'000, 20'000'000'000));
}

// The limit is reached exactly, in two steps, and the next unit waits exactly until it fits.
TEST(LongWindows, EveryWindowAlgorithmAdmitsExactlyTheLimit) {
  for (Algorithm a : kWindows) {
    for (Quota q : {Quota{100'000, kDay}, Quota{1'000'000, 30 * kDay}, Quota{kMaxLimit, 365 * kDay},
                    Quota{kMaxLimit - 1, kMaxWindow}, Quota{3, kMaxWindow}}) {
      if (a == Algorithm::sliding_window_log && q.limit > 100'000)
        continue;  // one entry per unit (the configuration allows up to 100,000 a window)
      SCOPED_TRACE(describe(a, q));
      Key key(make_limit(a, q.limit, q.window));
      const Micros start = (kT0 / q.window + 1) * q.window;
      const Micros now = start + q.window / 3;
      // A log takes at most kMaxLogCost units in one check.
      const std::int64_t most = a == Algorithm::sliding_window_log ? algorithms::kMaxLogCost : q.limit;
      Decision d;
      for (std::int64_t taken = 0; taken < q.limit - 1; taken += std::min(most, q.limit - 1 - taken)) {
        d = key.at(now, std::min(most, q.limit - 1 - taken));
      }
      ASSERT_TRUE(d.allowed);
      EXPECT_EQ(d.remaining, 1);
      d = key.at(now + 1, 1);
      ASSERT_TRUE(d.allowed);
      EXPECT_EQ(d.remaining, 0);
      const Decision denied = key.would(now + 1, 1);
      EXPECT_FALSE(denied.allowed);
      EXPECT_EQ(denied.remaining, 0);
      Micros retry = 0;
      switch (a) {
        case Algorithm::fixed_window:
          retry = start + q.window - (now + 1);
          break;
        case Algorithm::sliding_window_log:
          retry = q.window - 1;
          break;  // the first entry leaves at now + W
        case Algorithm::sliding_window_counter: {
          // Next window, elapsed e: previous·(W − e)/W + 1 ≤ L with previous = L needs
          // L·e ≥ W, e ≥ ceil(W/L).
          retry = start + q.window - (now + 1) + (q.window + q.limit - 1) / q.limit;
          break;
        }
        case Algorithm::token_bucket:
        case Algorithm::concurrency:  // not a window
          break;
      }
      EXPECT_EQ(denied.retry_after, retry);
      EXPECT_FALSE(key.would(now + 1 + retry - 1, 1).allowed);
      EXPECT_TRUE(key.would(now + 1 + retry, 1).allowed);
    }
  }
}

// The previous window weighs L·(W − e)/W at elapsed e: what remains is floor(L·e/W).
TEST(LongWindows, SlidingWindowCounterWeighsThePreviousWindowExactly) {
  for (Quota q : {Quota{100'000, kDay}, Quota{1'000'000, 30 * kDay}, Quota{kMaxLimit, 365 * kDay},
                  Quota{kMaxLimit, kMaxWindow}, Quota{kMaxLimit - 3, kMaxWindow - 7}}) {
    SCOPED_TRACE(describe(Algorithm::sliding_window_counter, q));
    Key key(make_limit(Algorithm::sliding_window_counter, q.limit, q.window));
    const Micros start = (kT0 / q.window + 1) * q.window;
    ASSERT_TRUE(key.at(start, q.limit).allowed);
    const Micros next = start + q.window;
    for (Micros e : {Micros{0}, Micros{1}, q.window / 7, q.window / 2, q.window - 1}) {
      const auto expected = static_cast<std::int64_t>(Wide{q.limit} * e / q.window);
      EXPECT_EQ(key.would(next + e, 0).remaining, expected) << "elapsed " << e;
    }
  }
}

// The sliding window counter against the same estimate in 128-bit integers, on random
// limits and windows up to the bounds: admitted iff previous·(W − e) + (current + n)·W ≤
// L·W; remaining = floor((L·W − previous·(W − e) − current·W)/W); retry_after is the first
// instant at which the same request fits.
class WideCounter {
 public:
  WideCounter(std::int64_t limit, Micros window, Micros t, std::int64_t current,
              std::int64_t previous)
      : l_(limit), w_(window), t_(t), current_(current), previous_(previous) {}

  // Whether `cost` fits at `now` >= t, the counts rolled over as time passes.
  bool fits(Micros now, std::int64_t cost) const {
    Wide current = current_, previous = previous_;
    Micros t = t_;
    if (now >= t + w_) {
      previous = now < t + 2 * w_ ? current : 0;
      current = 0;
      t = now / w_ * w_;
    }
    const Wide weight = w_ - (now - t);
    return previous * weight + (current + cost) * Wide{w_} <= Wide{l_} * w_;
  }
  std::int64_t remaining(Micros now, std::int64_t admitted) const {
    const Wide weight = w_ - (now - t_);
    const Wide left = Wide{l_} * w_ - Wide{previous_} * weight - Wide{current_ + admitted} * w_;
    return left <= 0 ? 0 : static_cast<std::int64_t>(left / w_);
  }

 private:
  std::int64_t l_;
  Micros w_;
  Micros t_;
  std::int64_t current_;
  std::int64_t previous_;
};

RC_GTEST_PROP(LongWindows, SlidingWindowCounterMatchesWideArithmetic, ()) {
  const auto limit_n = *rc::gen::weightedOneOf<std::int64_t>(
      {{1, rc::gen::inRange<std::int64_t>(1, 100)},
       {3, rc::gen::inRange<std::int64_t>(1, kMaxLimit + 1)}});
  const auto window = *rc::gen::weightedOneOf<Micros>(
      {{1, rc::gen::inRange<Micros>(1, 1000)}, {3, rc::gen::inRange<Micros>(1, kMaxWindow + 1)}});
  const Limit limit = *Limit::make(Algorithm::sliding_window_counter, limit_n, window);
  const Micros t = (kT0 / window + 1) * window;
  const auto current = *rc::gen::inRange<std::int64_t>(0, limit_n + 1);
  const auto previous = *rc::gen::inRange<std::int64_t>(0, limit_n + 1);
  const Micros now = t + *rc::gen::inRange<Micros>(0, window);
  const auto cost = *rc::gen::inRange<std::int64_t>(0, limit_n + 1);
  State state;
  state.t = t;
  state.current = current;
  state.previous = previous;
  const auto step = algorithms::step(limit, state, now, cost);
  RC_ASSERT(step.has_value());
  const WideCounter model(limit_n, window, t, current, previous);
  const Decision& d = step->decision;
  RC_ASSERT(d.allowed == model.fits(now, cost));
  RC_ASSERT(d.remaining == model.remaining(now, d.allowed ? cost : 0));
  if (d.allowed) {
    RC_ASSERT(d.retry_after == 0);
  } else {
    RC_ASSERT(d.retry_after > 0);
    RC_ASSERT(model.fits(now + d.retry_after, cost));
    RC_ASSERT(!model.fits(now + d.retry_after - 1, cost));
  }
}

}  // namespace
}  // namespace ratekeeper::testing
