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

// Reservations (store::Store::reserve, settle): a check admitted at a cost estimated in
// advance, settled when the actual cost is known. Token buckets and fixed windows only, as
// leases: what settles below the estimate goes back as lease_return gives back units, so the
// bucket is never fuller than had the actual cost been taken at first.
// Concurrency limits are held by a reservation too: a slot taken with it, given back when it
// settles (algorithms::concurrency).
constexpr bool reservable(Algorithm algorithm) noexcept {
  return leasable(algorithm) || algorithm == Algorithm::concurrency;
}

// The largest count a fixed window holds once charged (algorithms::charge): far above any
// limit (kMaxWindowLimit), exact in Lua's doubles.
inline constexpr std::int64_t kMaxCharged = 2 * kMaxWindowLimit;

// Takes `units` more at `now` whatever is left, the debt of a cost that settled above its
// estimate: a token bucket's tat moves max(tat, now) + units·T on (at most kMaxHorizon past
// now), so it admits again once the debt has refilled; a fixed window counts them in the
// window of `now` (at most kMaxCharged), which denies until it ends. `units` >= 0.
Step charge(const Limit& limit, State state, Micros now, std::int64_t units);

// Settles a reservation of `estimate` units admitted at `at` with `reset_after` to the
// `actual` cost: gives back estimate − actual (lease_return) or charges actual − estimate
// (charge). Preconditions: reservable(limit.algorithm), estimate, actual >= 0.
Step settle(const Limit& limit, State state, Micros now, std::int64_t estimate, std::int64_t actual, Micros at,
            Micros reset_after);

}  // namespace ratekeeper::algorithms
