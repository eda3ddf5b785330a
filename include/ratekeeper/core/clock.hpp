#pragma once
// Where `now` comes from: the system clock in production, a manual clock in tests.

#include <atomic>

#include "ratekeeper/core/time.hpp"

namespace ratekeeper {

class Clock {
 public:
  virtual ~Clock() = default;
  // Microseconds since the Unix epoch. Thread-safe.
  virtual Micros now() const noexcept = 0;
};

// Wall-clock time, shared meaning across processes (as Redis TIME). Thread-safe.
class SystemClock final : public Clock {
 public:
  Micros now() const noexcept override;
  static SystemClock& instance() noexcept;
};

// A clock that moves only when told to. Thread-safe.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(Micros start = 0) noexcept : now_(start) {}
  Micros now() const noexcept override { return now_.load(std::memory_order_acquire); }
  void set(Micros t) noexcept { now_.store(t, std::memory_order_release); }
  void advance(Micros d) noexcept { now_.fetch_add(d, std::memory_order_acq_rel); }

 private:
  std::atomic<Micros> now_;
};

}  // namespace ratekeeper
