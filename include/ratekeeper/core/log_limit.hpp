#pragma once
// Bounds the log lines of one kind of event (a failure repeated by every request): a burst,
// then at most `per_second` lines a second; the lines left out are counted and the next line
// written says how many. Thread-safe.

#include <cstdint>
#include <mutex>

#include "ratekeeper/core/clock.hpp"

namespace ratekeeper {

class LogLimit {
 public:
  explicit LogLimit(double per_second = 1, double burst = 5, const Clock* clock = nullptr);

  // Whether to write a line now; when it is, `suppressed` is set to the number of lines left
  // out since the last one written.
  bool admit(std::uint64_t& suppressed) noexcept;

 private:
  std::mutex mu_;
  const Clock& clock_;
  double per_second_;
  double burst_;
  double tokens_;
  Micros last_ = 0;
  std::uint64_t suppressed_ = 0;
};

}  // namespace ratekeeper
