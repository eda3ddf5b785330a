#include "ratekeeper/algorithms/sliding_window_counter.hpp"

#include <algorithm>

namespace ratekeeper::algorithms::sliding_window_counter {

// Estimated count = previous·(W − elapsed)/W + current, kept in integers scaled by W:
// admitted iff previous·(W − elapsed) + (current + n)·W ≤ L·W.
Step step(const Limit& limit, State state, Micros now, std::int64_t cost) {
  const Micros window = limit.period;
  const std::int64_t cap = limit.capacity;
  const Micros aligned = now / window * window;
  if (state.t < aligned) {
    state.previous = state.t + window == aligned ? state.current : 0;
    state.current = 0;
    state.t = aligned;
  }
  const Micros elapsed = std::clamp<Micros>(now - state.t, 0, window);
  const Micros weight = window - elapsed;
  const std::int64_t budget = cap * window - state.previous * weight;  // in units of 1/W

  Step out;
  out.decision.limit = cap;
  if ((state.current + cost) * window <= budget) {
    out.decision.allowed = true;
    state.current += cost;
  } else if (state.current + cost <= cap) {
    // Wait inside this window until the previous window's weight has decayed enough.
    // (A clock that went backwards waits for the window's start before the weight decays.)
    const Micros lag = std::max<Micros>(0, state.t - now);
    out.decision.retry_after =
        lag + weight - (cap - state.current - cost) * window / state.previous;
  } else {
    // Wait for the next window, then until this window's count has decayed enough.
    const Micros next = state.t + window - now;
    out.decision.retry_after =
        next + std::max<Micros>(0, window - (cap - cost) * window / state.current);
  }
  out.decision.remaining = std::max<std::int64_t>(0, (budget - state.current * window) / window);
  Micros expires = 0;
  if (state.current > 0) {
    expires = state.t + 2 * window;
  } else if (state.previous > 0) {
    expires = state.t + window;
  }
  out.decision.reset_after = expires > 0 ? expires - now : 0;
  out.expires_at = expires;
  if (expires == 0) state = State{};
  out.state = std::move(state);
  return out;
}

}  // namespace ratekeeper::algorithms::sliding_window_counter
