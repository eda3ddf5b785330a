#include "ratekeeper/core/log_limit.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace ratekeeper {

namespace {

// The named limits alive. Taken before a limit's own lock, never while holding one.
struct Registry {
  std::mutex mu;
  std::vector<LogLimit*> limits;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

LogLimit::LogLimit(double per_second, double burst, const Clock* clock)
    : clock_(clock_or_system(clock)), per_second_(per_second), burst_(burst), tokens_(burst),
      last_(clock_.steady()) {}

LogLimit::LogLimit(std::string_view what, double per_second, double burst, const Clock* clock)
    : LogLimit(per_second, burst, clock) {
  what_ = what;
  Registry& r = registry();
  const std::lock_guard lock(r.mu);
  r.limits.push_back(this);
}

LogLimit::~LogLimit() {
  if (what_.empty()) return;
  Registry& r = registry();
  const std::lock_guard lock(r.mu);
  std::erase(r.limits, this);
}

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

std::size_t LogLimit::report_left_out() {
  Registry& r = registry();
  const std::lock_guard registry_lock(r.mu);
  std::size_t written = 0;
  for (LogLimit* limit : r.limits) {
    std::uint64_t left_out = 0;
    {
      const std::lock_guard lock(limit->mu_);
      if (limit->suppressed_ == 0) continue;
      const Micros now = limit->clock_.steady();
      limit->tokens_ = std::min(limit->burst_, limit->tokens_ + static_cast<double>(now - limit->last_) *
                                                                   limit->per_second_ / 1e6);
      limit->last_ = now;
      if (limit->tokens_ < 1) continue;  // a line of its own kind may still come and say it
      limit->tokens_ -= 1;
      left_out = std::exchange(limit->suppressed_, 0);
    }
    spdlog::warn("{} lines left out since the last: {}", left_out, limit->what_);
    ++written;
  }
  return written;
}

}  // namespace ratekeeper
