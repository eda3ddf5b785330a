#include "ratekeeper/algorithms/sliding_window_log.hpp"

#include <algorithm>

namespace ratekeeper::algorithms::sliding_window_log {

// The window is (now − W, now]: an entry stamped ts stops counting at ts + W.
Step step(const Limit& limit, State state, Micros now, std::int64_t cost) {
  const Micros window = limit.period;
  auto& log = state.log;
  const auto first_live = std::upper_bound(log.begin(), log.end(), now - window);
  log.erase(log.begin(), first_live);
  const auto count = static_cast<std::int64_t>(log.size());

  Step out;
  out.decision.limit = limit.capacity;
  if (count + cost <= limit.capacity) {
    out.decision.allowed = true;
    log.insert(std::upper_bound(log.begin(), log.end(), now), static_cast<std::size_t>(cost), now);
  } else {
    const auto expiring = static_cast<std::size_t>(count + cost - limit.capacity);
    out.decision.retry_after = log[expiring - 1] + window - now;
  }
  out.decision.remaining = limit.capacity - static_cast<std::int64_t>(log.size());
  out.expires_at = log.empty() ? 0 : log.back() + window;
  out.decision.reset_after = log.empty() ? 0 : out.expires_at - now;
  if (log.empty()) state = State{};
  out.state = std::move(state);
  return out;
}

}  // namespace ratekeeper::algorithms::sliding_window_log
