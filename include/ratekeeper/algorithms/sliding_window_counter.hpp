#pragma once
// Sliding window counter: current and previous fixed window, the previous one weighted.

#include "ratekeeper/algorithms/limit.hpp"
#include "ratekeeper/algorithms/state.hpp"

namespace ratekeeper::algorithms::sliding_window_counter {

// Pure: no clock is read. Preconditions (checked by algorithms::step): 0 <= cost <= capacity,
// now >= 0. Cost 0 is a peek and never changes the state.
Step step(const Limit& limit, State state, Micros now, std::int64_t cost);

}  // namespace ratekeeper::algorithms::sliding_window_counter
