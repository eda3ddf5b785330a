#pragma once
// Where time comes from: the system's clocks in production, a manual clock in tests.
//
// Two readings, both integer microseconds:
// - now():    wall-clock time since the Unix epoch, with a meaning shared across processes
//             (as Redis TIME); what algorithms and the decision log are timed by.
// - steady(): monotonic time from an unspecified origin; deadlines, durations, the circuit
//             breaker and the DenialCache are timed by it, so a wall-clock step never stretches
//             or shortens them.
// Every component that reads time takes a `const Clock*` (nullptr: SystemClock::instance()).

#include <atomic>

#include "ratekeeper/core/time.hpp"

namespace ratekeeper {

class Clock {
 public:
  virtual ~Clock() = default;
  // Microseconds since the Unix epoch. Thread-safe.
  virtual Micros now() const noexcept = 0;
  // Monotonic microseconds. Thread-safe.
  virtual Micros steady() const noexcept = 0;
};

// std::chrono::system_clock and std::chrono::steady_clock. Thread-safe.
class SystemClock final : public Clock {
 public:
  Micros now() const noexcept override;
  Micros steady() const noexcept override;
  static SystemClock& instance() noexcept;
};

// `clock` when given, else the system clock.
inline const Clock& clock_or_system(const Clock* clock) noexcept {
  return clock != nullptr ? *clock : SystemClock::instance();
}

// A clock that moves only when told to: advance() moves both readings, set() only the wall
// reading (a wall-clock step). Thread-safe.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(Micros start = 0) noexcept : now_(start) {}
  Micros now() const noexcept override { return now_.load(std::memory_order_acquire); }
  Micros steady() const noexcept override { return steady_.load(std::memory_order_acquire); }
  void set(Micros t) noexcept { now_.store(t, std::memory_order_release); }
  void advance(Micros d) noexcept {
    now_.fetch_add(d, std::memory_order_acq_rel);
    steady_.fetch_add(d, std::memory_order_acq_rel);
  }

 private:
  std::atomic<Micros> now_;
  std::atomic<Micros> steady_{kMicrosPerSecond};  // positive, as a real steady clock
};

}  // namespace ratekeeper
