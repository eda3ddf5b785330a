#include "ratekeeper/algorithms/fixed_window.hpp"

#include <algorithm>

namespace ratekeeper::algorithms::fixed_window {

// Windows are aligned at multiples of the window length. A clock that goes backwards
// keeps counting in the later window it has already seen.
Step step(const Limit& limit, State state, Micros now, std::int64_t cost) {
  const Micros window = limit.period;
  const Micros aligned = now / window * window;
  if (state.t < aligned) {
    state.t = aligned;
    state.current = 0;
  }
  const Micros end = state.t + window;

  Step out;
  out.decision.limit = limit.capacity;
  if (state.current + cost <= limit.capacity) {
    out.decision.allowed = true;
    state.current += cost;
  } else {
    out.decision.retry_after = end - now;
  }
  // A settled reservation may have charged the window beyond its limit (algorithms::charge).
  out.decision.remaining = std::max<std::int64_t>(0, limit.capacity - state.current);
  out.decision.reset_after = state.current > 0 ? end - now : 0;
  out.expires_at = state.current > 0 ? end : 0;
  if (state.current == 0) state = State{};
  out.state = std::move(state);
  return out;
}

}  // namespace ratekeeper::algorithms::fixed_window
