#include "ratekeeper/algorithms/lease.hpp"

#include <algorithm>

#include "algorithms/step.hpp"

namespace ratekeeper::algorithms {

LeaseStep lease_grant(const Limit& limit, State state, Micros now, std::int64_t min, std::int64_t want) {
  // A peek tells how many units fit now; a step of that many (at most `want`) admits them.
  const Step peek = step_unchecked(limit, state, now, 0);
  const std::int64_t granted = std::min(want, peek.decision.remaining);
  LeaseStep out;
  if (granted < min) {
    out.step = step_unchecked(limit, std::move(state), now, min);
    return out;
  }
  out.granted = granted;
  out.step = step_unchecked(limit, std::move(state), now, granted);
  return out;
}

Step lease_return(const Limit& limit, State state, Micros now, std::int64_t units, Micros at, Micros reset_after) {
  Step out;
  out.decision.limit = limit.capacity;
  const Micros ends = at + reset_after;
  if (limit.algorithm == Algorithm::fixed_window) {
    const Micros window = limit.period;
    const bool same_window = state.current > 0 && state.t + window == ends && now / window * window <= state.t;
    if (units > 0 && same_window) state.current = std::max<std::int64_t>(0, state.current - units);
    out.expires_at = state.current > 0 ? state.t + window : 0;
    if (out.expires_at == 0) state = State{};
  } else {
    const Micros held = std::min({units * limit.period, ends - now, state.t - now});
    if (units > 0 && held > 0) state.t -= held;
    out.expires_at = state.t > now ? state.t : 0;
    if (out.expires_at == 0) state = State{};
  }
  out.state = std::move(state);
  return out;
}

// lua/reservation.lua's charge functions mirror this line by line.
Step charge(const Limit& limit, State state, Micros now, std::int64_t units) {
  Step out;
  out.decision.limit = limit.capacity;
  if (limit.algorithm == Algorithm::fixed_window) {
    const Micros window = limit.period;
    const Micros aligned = now / window * window;
    if (state.t < aligned) {
      state.t = aligned;
      state.current = 0;
    }
    state.current = std::min(state.current + std::min(units, kMaxCharged), kMaxCharged);
    out.expires_at = state.current > 0 ? state.t + window : 0;
    if (out.expires_at == 0) state = State{};
  } else {
    const Micros from = std::max(state.t, now);
    // units·T, without overflow: at most kMaxHorizon past now.
    const Micros room = now + kMaxHorizon - from;
    const Micros debt = units > room / limit.period ? room : units * limit.period;
    state.t = from + std::max<Micros>(0, debt);
    out.expires_at = state.t > now ? state.t : 0;
    if (out.expires_at == 0) state = State{};
  }
  out.state = std::move(state);
  return out;
}

Step settle(const Limit& limit, State state, Micros now, std::int64_t estimate, std::int64_t actual, Micros at,
            Micros reset_after) {
  if (actual < estimate) return lease_return(limit, std::move(state), now, estimate - actual, at, reset_after);
  return charge(limit, std::move(state), now, actual - estimate);
}

}  // namespace ratekeeper::algorithms
