#include "redis/circuit_breaker.hpp"

#include <algorithm>

namespace ratekeeper::redis {

CircuitBreaker::Admission CircuitBreaker::admit(Micros now) noexcept {
  const Micros until = open_until_.load(std::memory_order_acquire);
  if (until == 0) return {true, false};
  if (now < until) return {false, false};
  // Half-open: exactly one probe at a time.
  bool expected = false;
  if (probing_.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) return {true, true};
  return {false, false};
}

void CircuitBreaker::on_success(bool probe) noexcept {
  consecutive_.store(0, std::memory_order_relaxed);
  if (probe) {
    open_until_.store(0, std::memory_order_release);
    probing_.store(false, std::memory_order_release);
  }
}

void CircuitBreaker::on_failure(bool probe, Micros now) noexcept {
  if (probe) {
    open(now);
    probing_.store(false, std::memory_order_release);
    return;
  }
  if (options_.failures <= 0) return;
  const int n = consecutive_.fetch_add(1, std::memory_order_acq_rel) + 1;
  if (n >= options_.failures && open_until_.load(std::memory_order_acquire) == 0) open(now);
}

void CircuitBreaker::open(Micros now) noexcept {
  open_until_.store(now + std::max<Micros>(1, options_.open_for), std::memory_order_release);
  consecutive_.store(0, std::memory_order_relaxed);
  opened_.fetch_add(1, std::memory_order_relaxed);
}

CircuitBreaker::State CircuitBreaker::state(Micros now) const noexcept {
  const Micros until = open_until_.load(std::memory_order_acquire);
  if (until == 0) return State::closed;
  return now < until ? State::open : State::half_open;
}

}  // namespace ratekeeper::redis
