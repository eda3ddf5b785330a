#pragma once
// Token bucket in GCRA form: one number (the theoretical arrival time) per key.

#include "ratekeeper/algorithms/limit.hpp"
#include "ratekeeper/algorithms/state.hpp"

namespace ratekeeper::algorithms::token_bucket {

// Pure: no clock is read. Preconditions (checked by algorithms::step): 0 <= cost <= capacity,
// now >= 0. Cost 0 is a peek and never changes the state.
Step step(const Limit& limit, State state, Micros now, std::int64_t cost);

// A request checked at `now` and admitted as if it arrived at now + delay (delay >= 0): the
// state is the one step(limit, state, now + delay, cost) leaves, TAT' = max(TAT, now + delay)
// + cost·T, and the decision is told from `now`: remaining and reset_after count from `now`,
// `delay` is set. The caller has chosen `delay` so that the step at now + delay admits (see
// algorithms::step_all). The state expires as seen from `now`: a peek (cost 0) keeps it.
Step step_delayed(const Limit& limit, State state, Micros now, std::int64_t cost, Micros delay);

}  // namespace ratekeeper::algorithms::token_bucket
