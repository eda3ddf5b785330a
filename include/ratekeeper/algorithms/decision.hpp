#pragma once
// What a limiter answers: exactly what the response headers need.

#include <cstdint>

#include "ratekeeper/core/time.hpp"

namespace ratekeeper::algorithms {

struct Decision {
  bool allowed = false;
  std::int64_t limit = 0;      // capacity C, or requests per window L
  std::int64_t remaining = 0;  // whole units still available after this decision
  Micros retry_after = 0;      // 0 when allowed; else the time until the same request succeeds
  Micros reset_after = 0;      // time until the state is as if the key had never been used
  // Admitted with a delay: the request reserved its place at now + delay and is to be passed
  // on then, not before (token bucket limits with a max_delay, see algorithms::step_all);
  // 0 for an admission at once and for a denial.
  Micros delay = 0;

  friend bool operator==(const Decision&, const Decision&) = default;
};

}  // namespace ratekeeper::algorithms
