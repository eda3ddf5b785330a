#pragma once
// The decision log: one JSON line per logged decision (ts, rule, identity, key, allowed,
// remaining, retry_after_ms, latency_us, ...), handed to a sink. Every denial is logged, but
// through a lock-free token bucket of lines per second, so a flood cannot flood the log: lines
// over the budget are counted and the count is reported on the next line written
// ("suppressed": N). Allowed decisions are sampled at a configured rate. Without a sink
// nothing is written: a library does not pick its host's stdout. Thread-safe.

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "ratekeeper/core/clock.hpp"

namespace ratekeeper::limiter {

// Receives one JSON line (no newline) per logged decision, on the thread that recorded the
// decision, possibly from several threads at once: it must be thread-safe.
using DecisionSink = std::function<void(std::string_view line)>;

// A sink writing each line to stdout through the spdlog logger named "decisions" (created on
// first use, pattern "%v", at level info, so the global spdlog level applies). For programs,
// such as `ratekeeper serve`, that choose to log decisions on their stdout.
DecisionSink stdout_decision_sink();

// Bounds of the line budget; options outside them (or NaN) are brought to the nearest bound.
inline constexpr double kMinDecisionLinesPerSecond = 0.001;
inline constexpr double kMaxDecisionLinesPerSecond = 1'000'000;
inline constexpr double kMaxDecisionBurst = 1'000'000;

struct DecisionLogOptions {
  bool enabled = true;
  double allow_sample_rate = 0.0;   // fraction of allowed decisions logged, 0..1
  double lines_per_second = 100.0;  // budget of logged lines per second
  double burst = 200.0;             // lines that may be written at once, >= 1
  const Clock* clock = nullptr;     // line budget and "ts"; nullptr: the system clock
  DecisionSink sink;                // where lines go; empty: nowhere (as enabled = false)
};

struct DecisionRecord {
  std::string_view rule;
  std::string_view identity;
  std::string_view key;
  std::string_view tier;  // empty unless the rule is tiered
  bool allowed = false;
  bool shadow = false;
  bool by_failure_policy = false;
  std::int64_t limit = 0;
  std::int64_t remaining = 0;
  std::int64_t retry_after_ms = 0;
  std::int64_t latency_us = 0;
  std::int64_t delay_ms = 0;  // admitted to wait this long (on_limit: delay); logged when > 0
};

class DecisionLog {
 public:
  explicit DecisionLog(DecisionLogOptions options = {});
  ~DecisionLog();

  // disabled: options.enabled is false or there is no sink.
  enum class Written : std::uint8_t { line, not_sampled, suppressed, disabled };

  // Logs `record` if it is a denial (within the line budget) or a sampled allow.
  Written record(const DecisionRecord& record);

  std::uint64_t written() const noexcept { return written_.load(std::memory_order_relaxed); }
  std::uint64_t suppressed_total() const noexcept {
    return suppressed_total_.load(std::memory_order_relaxed);
  }

  // The JSON line for a record logged at `at` (microseconds since the epoch, written as RFC
  // 3339 UTC with microseconds: "ts":"2026-12-03T09:21:11.123456Z"), with "suppressed" when
  // `suppressed` > 0.
  static std::string format(const DecisionRecord& record, Micros at, std::uint64_t suppressed = 0);

 private:
  bool take_line(Micros now) noexcept;
  bool sample_allow() noexcept;

  DecisionLogOptions options_;
  const Clock* clock_;
  Micros interval_;   // microseconds per line
  Micros tolerance_;  // burst × interval
  std::atomic<Micros> tat_{0};
  std::atomic<std::uint64_t> pending_suppressed_{0};
  std::atomic<std::uint64_t> suppressed_total_{0};
  std::atomic<std::uint64_t> written_{0};
};

}  // namespace ratekeeper::limiter
