#pragma once
// One decision for one limit, any algorithm, with the arguments validated; and the
// all-or-nothing decision over several limits (multi-limit policies, several rules).

#include <span>
#include <vector>

#include "ratekeeper/algorithms/limit.hpp"
#include "ratekeeper/algorithms/state.hpp"

namespace ratekeeper::algorithms {

Result<Step> step(const Limit& limit, State state, Micros now, std::int64_t cost);

// invalid_argument unless now >= 0.
Result<void> validate_now(Micros now);

// As step, with the arguments already validated by the caller (validate_cost, now >= 0).
Step step_unchecked(const Limit& limit, State state, Micros now, std::int64_t cost);

struct MultiStep {
  Decision decision;            // the combined decision (see combine)
  std::vector<Decision> items;  // each limit's own view; when denied, without consumption
  std::vector<State> states;    // states to store: all consumed, or all unchanged
  std::vector<Micros> expires_at;
};

// Checks every limit at `now` with its cost; consumes from all of them or from none.
// states[i] belongs to limits[i]; costs[i] is the cost charged to limits[i].
//
// max_delays[i] (empty: 0 for every limit; each in [0, kMaxDelay]) lets a check that would be
// denied at `now` wait for its turn instead: it gets ONE send time now + D, D the largest
// delay any of its limits needs at `now` (a denied token bucket's retry_after, see
// schedule_delay). It is admitted iff every limit's own needed delay is within its
// max_delay and every limit is a token bucket (any window limit: no delay, denied as
// without max_delays); then every limit is stepped as if the request arrived at now + D
// (token_bucket::step_delayed; GCRA admission is monotone in time, so each admits there),
// and every decision, the combined one too, has delay D. Beyond, the denial is the one
// without max_delays: nothing consumed.
//
// Exact: passed on at their send times, the requests never exceed what the bucket allows
// (the proof: docs/design/architecture.md, "Delayed admission is exact").
Result<MultiStep> step_all(std::span<const Limit> limits, std::vector<State> states, Micros now,
                           std::span<const std::int64_t> costs,
                           std::span<const Micros> max_delays = {});

// The send delay D of a check whose limits decided `items` at one instant (some denied):
// the largest retry_after of its items, when every limit is a token bucket and each item's
// retry_after is within its max_delay; 0 (no delay possible: deny) otherwise.
Micros schedule_delay(std::span<const Limit> limits, std::span<const Decision> items,
                      std::span<const Micros> max_delays);

// invalid_argument unless 0 <= max_delay <= kMaxDelay.
Result<void> validate_max_delay(Micros max_delay);

// The combined decision and the limit it binds to. Allowed: the limit with the fewest
// remaining units, the largest reset_after. Denied: the limit that frees up last gives limit,
// remaining and retry_after; reset_after is the largest. No items: allowed, binding 0.
struct Combined {
  Decision decision;
  std::size_t binding = 0;  // index in `items` of the limit that gave limit, remaining, retry_after
};
Combined combine_with_binding(std::span<const Decision> items);

// combine_with_binding(items).decision.
Decision combine(std::span<const Decision> items);

}  // namespace ratekeeper::algorithms
