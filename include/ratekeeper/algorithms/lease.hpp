#pragma once
// Leases: a block of units consumed from a limit at once, to be admitted later, elsewhere
// (store/leasing_store.hpp), and the return of the block's unused units. Fixed windows and
// token buckets only: the two algorithms whose state a block consumption and its return
// change exactly as the same units consumed and given back one by one would.
// lua/lease.lua mirrors lease_grant line by line; lua/refund.lua is the return's twin.

#include <cstdint>

#include "ratekeeper/algorithms/limit.hpp"
#include "ratekeeper/algorithms/state.hpp"

namespace ratekeeper::algorithms {

// Whether `algorithm` can be leased (fixed window, token bucket).
constexpr bool leasable(Algorithm algorithm) noexcept {
  return algorithm == Algorithm::fixed_window || algorithm == Algorithm::token_bucket;
}

struct LeaseStep {
  std::int64_t granted = 0;  // units consumed: min(want, available), 0 when below `min`
  Step step;                 // the step that consumed them; a denial of `min` when granted 0
};

// Grants g = min(want, what is available at `now`) units when g >= min, as one step of cost
// g; otherwise nothing, with the decision (and exact retry_after) of a step of cost `min`.
// Preconditions (checked by the callers): leasable(limit.algorithm), 1 <= min <= want <=
// limit.capacity, now >= 0.
LeaseStep lease_grant(const Limit& limit, State state, Micros now, std::int64_t min, std::int64_t want);

// Gives back `units` of a block consumed at `at` whose step reported `reset_after`, as
// lua/refund.lua gives back a consumption: a fixed window while the block's window lasts
// (never below 0); a token bucket by what of them has not refilled yet, min(units·T,
// at + reset_after − now, tat − now), so the bucket is never fuller than if they had never
// been taken. Returns the state to store and its expiry (0: forget the key).
Step lease_return(const Limit& limit, State state, Micros now, std::int64_t units, Micros at, Micros reset_after);

}  // namespace ratekeeper::algorithms
