#pragma once
// A circuit breaker: after `failures` consecutive failures it opens; while open, admit()
// refuses in nanoseconds; after `open_for` it lets one probe through (half-open) and closes
// when the probe succeeds, reopens when it fails. Thread-safe, lock-free.

#include <atomic>
#include <cstdint>

#include "ratekeeper/core/time.hpp"

namespace ratekeeper::redis {

struct BreakerOptions {
  int failures = 3;  // consecutive failures that open the breaker; <= 0: never opens
  Micros open_for = 1 * kMicrosPerSecond;
};

class CircuitBreaker {
 public:
  enum class State : std::uint8_t { closed, open, half_open };

  using Options = BreakerOptions;

  // What admit() answers: whether to go ahead, and whether this call is the probe.
  struct Admission {
    bool admitted = true;
    bool probe = false;
  };

  explicit CircuitBreaker(Options options = {}) noexcept : options_(options) {}

  // `now` is a steady-clock reading in microseconds (Clock::steady()): the breaker reads no
  // clock itself.
  Admission admit(Micros now) noexcept;
  void on_success(bool probe) noexcept;
  void on_failure(bool probe, Micros now) noexcept;

  State state(Micros now) const noexcept;
  std::uint64_t opened_count() const noexcept { return opened_.load(std::memory_order_relaxed); }

 private:
  void open(Micros now) noexcept;

  Options options_;
  std::atomic<int> consecutive_{0};
  std::atomic<Micros> open_until_{0};   // 0: closed
  std::atomic<bool> probing_{false};
  std::atomic<std::uint64_t> opened_{0};
};

}  // namespace ratekeeper::redis
