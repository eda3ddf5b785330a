#include "ratekeeper/algorithms/concurrency.hpp"

#include <algorithm>

namespace ratekeeper::algorithms::concurrency {
namespace {

// Forgets the slots expired at `now`.
void reclaim(State& state, Micros now) {
  auto& log = state.log;
  log.erase(log.begin(), std::upper_bound(log.begin(), log.end(), now));
}

// The step's state, expiry and reset_after once `state` is settled.
Step finish(State state, Micros now, Decision decision) {
  Step out;
  out.decision = decision;
  if (state.log.empty()) {
    out.decision.reset_after = 0;
    out.state = State{};
    return out;
  }
  out.expires_at = state.log.back();
  out.decision.reset_after = out.expires_at - now;
  out.state = std::move(state);
  return out;
}

void insert(State& state, Micros expires_at) {
  auto& log = state.log;
  log.insert(std::upper_bound(log.begin(), log.end(), expires_at), expires_at);
}

}  // namespace

Step step(const Limit& limit, State state, Micros now, std::int64_t cost) {
  reclaim(state, now);
  const auto held = static_cast<std::int64_t>(state.log.size());
  Decision d;
  d.limit = limit.capacity;
  if (held + cost <= limit.capacity) {
    d.allowed = true;
    if (cost > 0) insert(state, now + limit.period);
    d.remaining = limit.capacity - held - cost;
  } else {
    d.retry_after = std::clamp<Micros>(state.log.front() - now, 1, kConcurrencyRetryAfter);
  }
  return finish(std::move(state), now, d);
}

Step release(const Limit& limit, State state, Micros now, Micros expires_at) {
  reclaim(state, now);
  auto& log = state.log;
  if (auto it = std::lower_bound(log.begin(), log.end(), expires_at); it != log.end() && *it == expires_at) {
    log.erase(it);
  }
  Decision d;
  d.allowed = true;
  d.limit = limit.capacity;
  d.remaining = std::max<std::int64_t>(0, limit.capacity - static_cast<std::int64_t>(log.size()));
  return finish(std::move(state), now, d);
}

std::optional<Step> renew(const Limit& limit, State state, Micros now, Micros expires_at) {
  reclaim(state, now);
  auto& log = state.log;
  auto it = std::lower_bound(log.begin(), log.end(), expires_at);
  if (it == log.end() || *it != expires_at) return std::nullopt;
  log.erase(it);
  insert(state, now + limit.period);
  Decision d;
  d.allowed = true;
  d.limit = limit.capacity;
  d.remaining = std::max<std::int64_t>(0, limit.capacity - static_cast<std::int64_t>(log.size()));
  return finish(std::move(state), now, d);
}

}  // namespace ratekeeper::algorithms::concurrency
