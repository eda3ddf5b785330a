#include "algorithms/step.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "ratekeeper/algorithms/concurrency.hpp"
#include "ratekeeper/algorithms/fixed_window.hpp"
#include "ratekeeper/algorithms/sliding_window_counter.hpp"
#include "ratekeeper/algorithms/sliding_window_log.hpp"
#include "ratekeeper/algorithms/token_bucket.hpp"

namespace ratekeeper::algorithms {
Result<void> validate_now(Micros now) {
  if (now < 0) {
    return make_error(ErrorCode::invalid_argument, fmt::format("now must be >= 0, got {}", now));
  }
  return {};
}

Result<void> validate_max_delay(Micros max_delay) {
  if (max_delay < 0 || max_delay > kMaxDelay) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("max_delay must be between 0 and {} microseconds, got {}", kMaxDelay, max_delay));
  }
  return {};
}

Micros schedule_delay(std::span<const Limit> limits, std::span<const Decision> items,
                      std::span<const Micros> max_delays) {
  Micros delay = 0;
  for (std::size_t i = 0; i < limits.size(); ++i) {
    if (limits[i].algorithm != Algorithm::token_bucket) return 0;
    if (items[i].allowed) continue;
    if (items[i].retry_after > max_delays[i]) return 0;
    delay = std::max(delay, items[i].retry_after);
  }
  return delay;
}

Step step_unchecked(const Limit& limit, State state, Micros now, std::int64_t cost) {
  switch (limit.algorithm) {
    case Algorithm::token_bucket: return token_bucket::step(limit, std::move(state), now, cost);
    case Algorithm::sliding_window_log:
      return sliding_window_log::step(limit, std::move(state), now, cost);
    case Algorithm::sliding_window_counter:
      return sliding_window_counter::step(limit, std::move(state), now, cost);
    case Algorithm::fixed_window: return fixed_window::step(limit, std::move(state), now, cost);
    case Algorithm::concurrency: return concurrency::step(limit, std::move(state), now, cost);
  }
  return {};
}

Result<Step> step(const Limit& limit, State state, Micros now, std::int64_t cost) {
  if (auto ok = validate_cost(limit, cost); !ok) return std::unexpected(ok.error());
  if (auto ok = validate_now(now); !ok) return std::unexpected(ok.error());
  return step_unchecked(limit, std::move(state), now, cost);
}

Combined combine_with_binding(std::span<const Decision> items) {
  Combined out;
  if (items.empty()) {
    out.decision.allowed = true;
    return out;
  }
  const bool allowed = std::all_of(items.begin(), items.end(), [](const Decision& d) { return d.allowed; });
  for (std::size_t i = 1; i < items.size(); ++i) {
    const Decision& d = items[i];
    const Decision& binding = items[out.binding];
    if (allowed ? d.remaining < binding.remaining : d.retry_after > binding.retry_after) {
      out.binding = i;
    }
  }
  out.decision = items[out.binding];
  out.decision.allowed = allowed;
  for (const Decision& d : items) {
    out.decision.reset_after = std::max(out.decision.reset_after, d.reset_after);
  }
  return out;
}

Decision combine(std::span<const Decision> items) { return combine_with_binding(items).decision; }

Result<MultiStep> step_all(std::span<const Limit> limits, std::vector<State> states, Micros now,
                           std::span<const std::int64_t> costs, std::span<const Micros> max_delays) {
  if (limits.size() != states.size() || limits.size() != costs.size() ||
      (!max_delays.empty() && max_delays.size() != limits.size())) {
    return make_error(ErrorCode::invalid_argument, "limits, states, costs and max_delays differ in length");
  }
  for (const Micros max_delay : max_delays) {
    if (auto ok = validate_max_delay(max_delay); !ok) return std::unexpected(ok.error());
  }
  if (auto ok = validate_now(now); !ok) return std::unexpected(ok.error());
  for (std::size_t i = 0; i < limits.size(); ++i) {
    if (auto ok = validate_cost(limits[i], costs[i]); !ok) return std::unexpected(ok.error());
  }
  MultiStep out;
  out.items.reserve(limits.size());
  std::vector<State> next;
  next.reserve(limits.size());
  bool allowed = true;
  for (std::size_t i = 0; i < limits.size(); ++i) {
    Step s = step_unchecked(limits[i], states[i], now, costs[i]);
    allowed = allowed && s.decision.allowed;
    out.items.push_back(s.decision);
    out.expires_at.push_back(s.expires_at);
    next.push_back(std::move(s.state));
  }
  if (!allowed && !max_delays.empty()) {
    // One send time for the whole check; lua/multi.lua's check_all mirrors this.
    if (const Micros delay = schedule_delay(limits, out.items, max_delays); delay > 0) {
      for (std::size_t i = 0; i < limits.size(); ++i) {
        Step s = token_bucket::step_delayed(limits[i], std::move(states[i]), now, costs[i], delay);
        out.items[i] = s.decision;
        out.expires_at[i] = s.expires_at;
        next[i] = std::move(s.state);
      }
      out.states = std::move(next);
      out.decision = combine(out.items);
      return out;
    }
  }
  if (!allowed) {
    // Nothing is consumed: the limits that would have admitted report their state as a peek.
    // (A denial already leaves its state as it was, apart from forgetting expired entries.)
    for (std::size_t i = 0; i < limits.size(); ++i) {
      if (!out.items[i].allowed) continue;
      Step peek = step_unchecked(limits[i], std::move(states[i]), now, 0);
      out.items[i] = peek.decision;
      out.expires_at[i] = peek.expires_at;
      next[i] = std::move(peek.state);
    }
  }
  out.states = std::move(next);
  out.decision = combine(out.items);
  return out;
}

}  // namespace ratekeeper::algorithms
