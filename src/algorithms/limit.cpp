#include "ratekeeper/algorithms/limit.hpp"

#include <fmt/format.h>

#include <cmath>

namespace ratekeeper::algorithms {
namespace {

constexpr std::string_view kWindowLimitBound = "2^40 (1099511627776) per window";

// A whole number in [1, max] (`bound` names max in the error).
Result<std::int64_t> whole_positive(std::string_view field, double value, std::int64_t max,
                                    std::string_view bound) {
  if (!std::isfinite(value)) {
    return make_error(ErrorCode::invalid_argument, fmt::format("{} must be finite, got {}", field, value));
  }
  if (value < 1 || value != std::floor(value)) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("{} must be a whole number >= 1, got {}", field, value));
  }
  if (value > static_cast<double>(max)) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("{} must be at most {}, got {}", field, bound, value));
  }
  return static_cast<std::int64_t>(value);
}

}  // namespace

std::string_view to_string(Algorithm a) noexcept {
  switch (a) {
    case Algorithm::token_bucket: return "token_bucket";
    case Algorithm::sliding_window_log: return "sliding_window_log";
    case Algorithm::sliding_window_counter: return "sliding_window_counter";
    case Algorithm::fixed_window: return "fixed_window";
    case Algorithm::concurrency: return "concurrency";
  }
  return "unknown";
}

std::optional<Algorithm> parse_algorithm(std::string_view name) noexcept {
  for (auto a : {Algorithm::token_bucket, Algorithm::sliding_window_log,
                 Algorithm::sliding_window_counter, Algorithm::fixed_window, Algorithm::concurrency}) {
    if (name == to_string(a)) return a;
  }
  return std::nullopt;
}

Result<Limit> Limit::make(Algorithm algorithm, std::int64_t capacity, Micros period) {
  if (capacity < 1) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("capacity must be >= 1, got {}", capacity));
  }
  if (period < 1) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("{} must be >= 1 microsecond, got {}",
                                  algorithm == Algorithm::token_bucket  ? "refill interval"
                                  : algorithm == Algorithm::concurrency ? "slot_ttl"
                                                                        : "window",
                                  period));
  }
  if (algorithm == Algorithm::token_bucket) {
    if (capacity > kMaxHorizon / period) {
      return make_error(
          ErrorCode::invalid_argument,
          fmt::format("capacity × refill interval must stay below 2^51 microseconds ({} × {})",
                      capacity, period));
    }
    return Limit{algorithm, capacity, period};
  }
  if (algorithm == Algorithm::concurrency && capacity > kMaxConcurrency) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("limit must be at most 2^20 (1048576) requests in flight, got {}", capacity));
  }
  if (capacity > kMaxWindowLimit) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("limit must be at most {}, got {}", kWindowLimitBound, capacity));
  }
  if (period > kMaxWindow) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("{} must be at most 2^45 microseconds (about 407 days), got {}",
                                  algorithm == Algorithm::concurrency ? "slot_ttl" : "window", period));
  }
  return Limit{algorithm, capacity, period};
}

Result<Limit> Limit::token_bucket(double capacity, double refill_per_second) {
  auto c = whole_positive("capacity", capacity, kMaxHorizon, "2^51");
  if (!c) return std::unexpected(c.error());
  if (!std::isfinite(refill_per_second) || refill_per_second <= 0) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("refill_rate must be a finite number > 0, got {}", refill_per_second));
  }
  if (refill_per_second > kMicrosPerSecond) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("refill_rate must be at most 1000000 per second, got {}",
                                  refill_per_second));
  }
  const double interval = std::round(static_cast<double>(kMicrosPerSecond) / refill_per_second);
  if (interval > static_cast<double>(kMaxHorizon)) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("refill_rate is too small, got {}", refill_per_second));
  }
  return make(Algorithm::token_bucket, *c, static_cast<Micros>(interval));
}

Result<Limit> Limit::window(Algorithm algorithm, double limit, Micros window) {
  if (algorithm == Algorithm::token_bucket) {
    return make_error(ErrorCode::invalid_argument, "algorithm must be a window algorithm");
  }
  auto l = whole_positive("limit", limit, kMaxWindowLimit, kWindowLimitBound);
  if (!l) return std::unexpected(l.error());
  if (window < 1) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("window must be >= 1 microsecond, got {}", window));
  }
  return make(algorithm, *l, window);
}

Result<void> validate_cost(const Limit& limit, std::int64_t cost) {
  if (cost < 0) {
    return make_error(ErrorCode::invalid_argument, fmt::format("cost must be >= 0, got {}", cost));
  }
  if (cost > limit.capacity) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("cost {} exceeds capacity {}: it can never be admitted", cost,
                                  limit.capacity));
  }
  if (limit.algorithm == Algorithm::concurrency && cost > 1) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("cost {} of a concurrency limit: a request holds one slot (cost 0 or 1)", cost));
  }
  if (limit.algorithm == Algorithm::sliding_window_log && cost > kMaxLogCost) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("cost {} is above {}, the most a sliding window log takes in one check (one "
                                  "entry per unit): use sliding_window_counter or token_bucket for large costs",
                                  cost, kMaxLogCost));
  }
  return {};
}

}  // namespace ratekeeper::algorithms
