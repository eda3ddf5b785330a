#pragma once
// The decision log: one JSON line per logged decision (rule, identity, key, allowed,
// remaining, retry_after_ms, latency_us, ...). Every denial is logged, but through a
// lock-free token bucket of lines per second, so a flood cannot flood the log: lines over the
// budget are counted and the count is reported on the next line written ("suppressed": N).
// Allowed decisions are sampled at a configured rate. Thread-safe.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "ratekeeper/core/clock.hpp"

namespace spdlog {
class logger;
}

namespace ratekeeper::limiter {

struct DecisionLogOptions {
  bool enabled = true;
  double allow_sample_rate = 0.0;   // fraction of allowed decisions logged, 0..1
  double lines_per_second = 100.0;  // budget of logged lines per second
  double burst = 200.0;             // lines that may be written at once
  const Clock* clock = nullptr;     // for the line budget; nullptr: the system clock
  // Where lines go. Empty: the spdlog logger named "decisions" (created on first use, stdout).
  std::function<void(std::string_view line)> sink;
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
};

class DecisionLog {
 public:
  explicit DecisionLog(DecisionLogOptions options = {});
  ~DecisionLog();

  enum class Written : std::uint8_t { line, not_sampled, suppressed, disabled };

  // Logs `record` if it is a denial (within the line budget) or a sampled allow.
  Written record(const DecisionRecord& record);

  std::uint64_t written() const noexcept { return written_.load(std::memory_order_relaxed); }
  std::uint64_t suppressed_total() const noexcept {
    return suppressed_total_.load(std::memory_order_relaxed);
  }

  // The JSON line for a record (without the "suppressed" field).
  static std::string format(const DecisionRecord& record, std::uint64_t suppressed = 0);

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
  std::shared_ptr<spdlog::logger> logger_;
};

}  // namespace ratekeeper::limiter
