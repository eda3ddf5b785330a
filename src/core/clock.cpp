#include "ratekeeper/core/clock.hpp"

#include <chrono>

namespace ratekeeper {

Micros SystemClock::now() const noexcept {
  using namespace std::chrono;
  return duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
}

Micros SystemClock::steady() const noexcept {
  using namespace std::chrono;
  return duration_cast<microseconds>(steady_clock::now().time_since_epoch()).count();
}

SystemClock& SystemClock::instance() noexcept {
  static SystemClock clock;
  return clock;
}

}  // namespace ratekeeper
