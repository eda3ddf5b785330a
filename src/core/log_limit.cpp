#include "ratekeeper/core/log_limit.hpp"

#include <algorithm>
#include <utility>

namespace ratekeeper {

LogLimit::LogLimit(double per_second, double burst, const Clock* clock)
    : clock_(clock_or_system(clock)), per_second_(per_second), burst_(burst), tokens_(burst),
      last_(clock_.steady()) {}

bool LogLimit::admit(std::uint64_t& suppressed) noexcept {
  const std::lock_guard lock(mu_);
  const Micros now = clock_.steady();
  tokens_ = std::min(burst_, tokens_ + static_cast<double>(now - last_) * per_second_ / 1e6);
  last_ = now;
  if (tokens_ < 1) {
    ++suppressed_;
    return false;
  }
  tokens_ -= 1;
  suppressed = std::exchange(suppressed_, 0);
  return true;
}

}  // namespace ratekeeper
