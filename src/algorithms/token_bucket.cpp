#include "ratekeeper/algorithms/token_bucket.hpp"

#include <algorithm>

namespace ratekeeper::algorithms::token_bucket {

// tokens(now) = C − max(0, tat − now)/T. With τ = C·T, n tokens are available iff
// max(tat, now) + n·T − now ≤ τ. lua/token_bucket.lua mirrors this line by line.
Step step(const Limit& limit, State state, Micros now, std::int64_t cost) {
  const Micros interval = limit.period;
  const Micros tau = limit.capacity * interval;
  const Micros tat = std::max(state.t, now);
  const Micros new_tat = tat + cost * interval;

  Step out;
  out.decision.limit = limit.capacity;
  if (new_tat - now <= tau) {
    out.decision.allowed = true;
    out.decision.remaining = (tau - (new_tat - now)) / interval;
    out.decision.reset_after = new_tat - now;
    if (cost > 0) state.t = new_tat;
  } else {
    out.decision.allowed = false;
    out.decision.remaining = std::max<Micros>(0, tau - (tat - now)) / interval;
    out.decision.retry_after = new_tat - now - tau;
    out.decision.reset_after = tat - now;
  }
  out.expires_at = state.t > now ? state.t : 0;
  out.state = std::move(state);
  return out;
}

// lua/token_bucket.lua's token_bucket_delayed mirrors this line by line.
Step step_delayed(const Limit& limit, State state, Micros now, std::int64_t cost, Micros delay) {
  Step out = step(limit, std::move(state), now + delay, cost);
  if (out.decision.allowed) {
    const Micros tau = limit.capacity * limit.period;
    out.decision.reset_after += delay;
    out.decision.remaining = std::max<Micros>(0, tau - out.decision.reset_after) / limit.period;
    out.decision.delay = delay;
  }
  out.expires_at = out.state.t > now ? out.state.t : 0;
  return out;
}

}  // namespace ratekeeper::algorithms::token_bucket
