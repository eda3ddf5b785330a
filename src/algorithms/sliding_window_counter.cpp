#include "ratekeeper/algorithms/sliding_window_counter.hpp"

#include <algorithm>

namespace ratekeeper::algorithms::sliding_window_counter {
namespace {

constexpr std::int64_t kMaxExact = std::int64_t{1} << 53;

struct Quotient {
  std::int64_t q;  // floor(a·b / c)
  std::int64_t r;  // a·b − q·c
};

// a·b / c for 0 <= a < 2^42, 0 <= b <= 2^45, 0 < c <= 2^45 (a count, a time and a window of
// Limit::make), exact although a·b may reach 2^87: when the product leaves the range where
// Lua's doubles are exact (2^53), it is taken seven bits of `a` at a time, the remainder
// carried, so that no intermediate value reaches 2^53. lua/sliding_window_counter.lua has
// the same function, line by line.
Quotient mul_div(std::int64_t a, std::int64_t b, std::int64_t c) {
  if (b == 0 || a <= (kMaxExact - 1) / b) {
    const std::int64_t p = a * b;
    return {p / c, p % c};
  }
  Quotient out{0, 0};
  for (int shift = 35; shift >= 0; shift -= 7) {
    const std::int64_t x = out.r * 128 + (a >> shift) % 128 * b;
    out.q = out.q * 128 + x / c;
    out.r = x % c;
  }
  return out;
}

}  // namespace

// Estimated count = previous·(W − elapsed)/W + current. The previous window's part is
// rounded up: a request of n fits iff previous·(W − elapsed)/W + current + n ≤ L, that is
// iff ceil(previous·(W − elapsed)/W) + current + n ≤ L, all in integers.
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
  const Quotient part = mul_div(state.previous, weight, window);
  const std::int64_t weighted = part.r > 0 ? part.q + 1 : part.q;

  Step out;
  out.decision.limit = cap;
  if (weighted + state.current + cost <= cap) {
    out.decision.allowed = true;
    state.current += cost;
  } else if (state.current + cost <= cap) {
    // Wait inside this window until the previous window's weight has decayed enough:
    // previous·(weight − d) ≤ (L − current − n)·W.
    // (A clock that went backwards waits for the window's start before the weight decays.)
    const Micros lag = std::max<Micros>(0, state.t - now);
    out.decision.retry_after =
        lag + weight - mul_div(cap - state.current - cost, window, state.previous).q;
  } else {
    // Wait for the next window, then until this window's count has decayed enough.
    const Micros next = state.t + window - now;
    out.decision.retry_after =
        next + std::max<Micros>(0, window - mul_div(cap - cost, window, state.current).q);
  }
  out.decision.remaining = std::max<std::int64_t>(0, cap - state.current - weighted);
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
