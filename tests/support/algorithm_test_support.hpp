#pragma once
// Helpers shared by the algorithm unit tests: building limits and stepping a key's state.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "algorithms/step.hpp"

namespace ratekeeper::testing {

using algorithms::Algorithm;
using algorithms::Decision;
using algorithms::Limit;
using algorithms::State;
using algorithms::Step;

inline Limit make_limit(Algorithm algorithm, std::int64_t capacity, Micros period) {
  auto limit = Limit::make(algorithm, capacity, period);
  EXPECT_TRUE(limit) << limit.error().message;
  return limit.value_or(Limit{algorithm, 1, 1});
}

// One step that must be valid (the arguments are the test's, not under test).
inline Step must_step(const Limit& limit, const State& state, Micros now, std::int64_t cost) {
  auto s = algorithms::step(limit, state, now, cost);
  EXPECT_TRUE(s) << s.error().message;
  return s.value_or(Step{});
}

// One key's state under one limit, stepped as a store would: the new state is kept.
class Key {
 public:
  explicit Key(Limit limit) : limit_(limit) {}

  Decision at(Micros now, std::int64_t cost = 1) {
    Step s = must_step(limit_, state_, now, cost);
    state_ = s.state;
    expires_at_ = s.expires_at;
    return s.decision;
  }
  // What `cost` would get at `now`, without keeping the result.
  Decision would(Micros now, std::int64_t cost = 1) const {
    return must_step(limit_, state_, now, cost).decision;
  }
  const State& state() const { return state_; }
  Micros expires_at() const { return expires_at_; }
  const Limit& limit() const { return limit_; }

 private:
  Limit limit_;
  State state_;
  Micros expires_at_ = 0;
};

// At `now`, `state` answers every cost exactly as a key that was never used would.
inline ::testing::AssertionResult same_as_absent(const Limit& limit, const State& state, Micros now) {
  for (std::int64_t cost = 0; cost <= limit.capacity; ++cost) {
    const Step used = must_step(limit, state, now, cost);
    const Step fresh = must_step(limit, State{}, now, cost);
    if (!(used.decision == fresh.decision) || used.expires_at != fresh.expires_at) {
      return ::testing::AssertionFailure()
             << "cost " << cost << " at " << now << ": used key allowed=" << used.decision.allowed
             << " remaining=" << used.decision.remaining << " reset_after=" << used.decision.reset_after
             << ", fresh key allowed=" << fresh.decision.allowed
             << " remaining=" << fresh.decision.remaining << " reset_after=" << fresh.decision.reset_after;
    }
  }
  return ::testing::AssertionSuccess();
}

inline std::string describe(const Limit& limit) {
  return std::string(algorithms::to_string(limit.algorithm)) + " C=" + std::to_string(limit.capacity) +
         " period=" + std::to_string(limit.period);
}

}  // namespace ratekeeper::testing
