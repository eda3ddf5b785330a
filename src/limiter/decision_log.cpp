#include "ratekeeper/limiter/decision_log.hpp"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>

namespace ratekeeper::limiter {
namespace {

std::shared_ptr<spdlog::logger> decisions_logger() {
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  if (auto existing = spdlog::get("decisions")) return existing;
  auto logger = spdlog::stdout_logger_mt("decisions");
  logger->set_pattern("%v");
  return logger;
}

}  // namespace

DecisionLog::DecisionLog(DecisionLogOptions options)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : &SystemClock::instance()) {
  const double rate = std::max(options_.lines_per_second, 1e-6);
  interval_ = static_cast<Micros>(std::ceil(static_cast<double>(kMicrosPerSecond) / rate));
  tolerance_ = static_cast<Micros>(std::max(options_.burst, 1.0) * static_cast<double>(interval_));
  options_.allow_sample_rate = std::clamp(options_.allow_sample_rate, 0.0, 1.0);
  if (options_.enabled && !options_.sink) logger_ = decisions_logger();
}

DecisionLog::~DecisionLog() = default;

bool DecisionLog::take_line(Micros now) noexcept {
  // GCRA on one atomic: the line is allowed iff max(tat, now) + T − now ≤ τ.
  Micros tat = tat_.load(std::memory_order_relaxed);
  for (;;) {
    const Micros next = std::max(tat, now) + interval_;
    if (next - now > tolerance_) return false;
    if (tat_.compare_exchange_weak(tat, next, std::memory_order_relaxed)) return true;
  }
}

bool DecisionLog::sample_allow() noexcept {
  if (options_.allow_sample_rate <= 0) return false;
  if (options_.allow_sample_rate >= 1) return true;
  thread_local std::minstd_rand rng{std::random_device{}()};
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng) < options_.allow_sample_rate;
}

std::string DecisionLog::format(const DecisionRecord& r, std::uint64_t suppressed) {
  nlohmann::json j = {
      {"rule", r.rule},
      {"identity", r.identity},
      {"key", r.key},
      {"allowed", r.allowed},
      {"limit", r.limit},
      {"remaining", r.remaining},
      {"retry_after_ms", r.retry_after_ms},
      {"latency_us", r.latency_us},
  };
  if (!r.tier.empty()) j["tier"] = r.tier;
  if (r.shadow) j["shadow"] = true;
  if (r.by_failure_policy) j["by_failure_policy"] = true;
  if (suppressed > 0) j["suppressed"] = suppressed;
  // Identities and keys come from clients: never let invalid UTF-8 throw on the request path.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

DecisionLog::Written DecisionLog::record(const DecisionRecord& record) {
  if (!options_.enabled) return Written::disabled;
  const bool wanted = !record.allowed || sample_allow();
  if (!wanted) return Written::not_sampled;
  if (!take_line(clock_->now())) {
    pending_suppressed_.fetch_add(1, std::memory_order_relaxed);
    suppressed_total_.fetch_add(1, std::memory_order_relaxed);
    return Written::suppressed;
  }
  const auto suppressed = pending_suppressed_.exchange(0, std::memory_order_relaxed);
  const auto line = format(record, suppressed);
  if (options_.sink) {
    options_.sink(line);
  } else if (logger_) {
    logger_->info("{}", line);
  }
  written_.fetch_add(1, std::memory_order_relaxed);
  return Written::line;
}

}  // namespace ratekeeper::limiter
