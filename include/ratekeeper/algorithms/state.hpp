#pragma once
// Per-key state of every algorithm, and the result of one step.

#include <cstdint>
#include <vector>

#include "ratekeeper/algorithms/decision.hpp"
#include "ratekeeper/core/time.hpp"

namespace ratekeeper::algorithms {

// A default-constructed State is "absent": the key was never used or has expired.
struct State {
  Micros t = 0;              // token bucket: TAT; windows: start of the current window
  std::int64_t current = 0;  // windows: units counted in the current window
  std::int64_t previous = 0; // sliding window counter: units counted in the previous window
  std::vector<Micros> log;   // sliding window log: one timestamp per admitted unit, ascending

  friend bool operator==(const State&, const State&) = default;
};

struct Step {
  Decision decision;
  State state;          // the state to store (unchanged when denied or peeked)
  Micros expires_at = 0;  // when `state` becomes indistinguishable from absent; 0: it already is
};

}  // namespace ratekeeper::algorithms
