#include "routed_command.hpp"

#include <algorithm>

namespace ratekeeper::redis::detail {

std::optional<Micros> retry_delay(const RetryOptions& options, int retries, Micros now,
                                  Micros deadline) noexcept {
  if (now >= deadline) return std::nullopt;
  const Micros min = std::max<Micros>(1, options.retry_min);
  const Micros max = std::max(min, options.retry_max);
  const int shift = std::clamp(retries, 0, 20);
  return std::min({max, min << shift, deadline - now});
}

}  // namespace ratekeeper::redis::detail
