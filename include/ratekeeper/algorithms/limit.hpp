#pragma once
// One limit: an algorithm with its capacity and period, validated on construction.

#include <cstdint>
#include <optional>
#include <string_view>

#include "ratekeeper/core/error.hpp"
#include "ratekeeper/core/time.hpp"

namespace ratekeeper::algorithms {

enum class Algorithm : std::uint8_t {
  token_bucket,
  sliding_window_log,
  sliding_window_counter,
  fixed_window,
  // Requests in flight: `capacity` slots, each held until released or, at the latest,
  // `period` µs after it was taken or last renewed (algorithms/concurrency.hpp).
  concurrency,
};

std::string_view to_string(Algorithm a) noexcept;
std::optional<Algorithm> parse_algorithm(std::string_view name) noexcept;

// Windows: at most 2^40 units per window of at most 2^45 µs (about 407 days). Within these
// bounds every step of the window algorithms is exact, in 64-bit integers and in Lua's
// doubles (exact below 2^53) alike, for any `now` up to 2^53 − 2^47 µs (the year 2251).
inline constexpr std::int64_t kMaxWindowLimit = std::int64_t{1} << 40;
inline constexpr Micros kMaxWindow = Micros{1} << 45;

// Token bucket: τ = C·T at most 2^51 µs, so that now + 2τ and every product of
// lua/token_bucket.lua stays below 2^53, where Lua's doubles are exact. No limit's period or
// window is longer, so durations converted to microseconds are bounded by it too.
inline constexpr std::int64_t kMaxHorizon = std::int64_t{1} << 51;

// Sliding window log: the most units one check may consume. The log keeps one entry per unit,
// so a check's cost is work for the store (Redis runs it without serving anything else: about
// 1.6 µs a unit); a larger cost is refused (sliding_window_counter or token_bucket count any
// cost in constant work).
inline constexpr std::int64_t kMaxLogCost = 1000;

// The longest a request may wait for its turn instead of being denied (a max_delay).
inline constexpr Micros kMaxDelay = Micros{3600} * kMicrosPerSecond;

// Concurrency: at most 2^20 slots per key (each is a member of a sorted set in Redis), and
// what a denial answers as retry_after at most: a slot frees when its request ends, which no
// one can foresee, so a denied client is told to try again soon, or when the oldest slot
// expires if that comes first.
inline constexpr std::int64_t kMaxConcurrency = std::int64_t{1} << 20;
inline constexpr Micros kConcurrencyRetryAfter = 1 * kMicrosPerSecond;

// Token bucket: capacity C tokens, one token every `period` microseconds (GCRA emission
// interval T; a refill rate r tokens/s is T = round(1e6 / r)); C·T at most 2^51 µs.
// Windows: `capacity` requests per window of `period` microseconds.
// Concurrency: `capacity` requests in flight, a slot lasting `period` µs unless renewed.
struct Limit {
  Algorithm algorithm = Algorithm::token_bucket;
  std::int64_t capacity = 0;
  Micros period = 0;

  // Validating constructors. Errors name the offending field.
  static Result<Limit> token_bucket(double capacity, double refill_per_second);
  static Result<Limit> window(Algorithm algorithm, double limit, Micros window);
  static Result<Limit> make(Algorithm algorithm, std::int64_t capacity, Micros period);

  // Refill rate in tokens per second (token bucket) or requests per second on average.
  double rate_per_second() const noexcept {
    return static_cast<double>(capacity) * kMicrosPerSecond /
           static_cast<double>(algorithm == Algorithm::token_bucket ? period * capacity : period);
  }
  // The time one full period takes: τ = C·T for a token bucket, the window otherwise.
  Micros horizon() const noexcept {
    return algorithm == Algorithm::token_bucket ? capacity * period : period;
  }

  friend bool operator==(const Limit&, const Limit&) = default;
};

// Checks a cost against a limit: negative, above capacity, above kMaxLogCost for a sliding
// window log, or above 1 for a concurrency limit (a request holds one slot) is an invalid
// argument.
Result<void> validate_cost(const Limit& limit, std::int64_t cost);

}  // namespace ratekeeper::algorithms
