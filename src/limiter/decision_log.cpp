#include "ratekeeper/limiter/decision_log.hpp"

#include <fmt/format.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
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

// `value` within [lo, hi]; NaN is lo.
double bounded(double value, double lo, double hi) {
  if (!(value >= lo)) return lo;
  return value > hi ? hi : value;
}

// RFC 3339 UTC with microseconds: "2026-12-03T09:21:11.123456Z".
std::string rfc3339(Micros at) {
  using namespace std::chrono;
  const sys_time<microseconds> tp{microseconds{at}};
  const auto day = floor<days>(tp);
  const year_month_day ymd{day};
  const hh_mm_ss<microseconds> hms{tp - day};
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z", static_cast<int>(ymd.year()),
                     static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()),
                     hms.hours().count(), hms.minutes().count(), hms.seconds().count(),
                     hms.subseconds().count());
}

}  // namespace

DecisionSink stdout_decision_sink() {
  return [logger = decisions_logger()](std::string_view line) { logger->info("{}", line); };
}

DecisionLog::DecisionLog(DecisionLogOptions options)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : &SystemClock::instance()) {
  options_.lines_per_second =
      bounded(options_.lines_per_second, kMinDecisionLinesPerSecond, kMaxDecisionLinesPerSecond);
  options_.burst = bounded(options_.burst, 1.0, kMaxDecisionBurst);
  options_.allow_sample_rate = bounded(options_.allow_sample_rate, 0.0, 1.0);
  // At most 10^9 µs per line and 10^6 lines of burst: τ stays far below 2^63.
  interval_ = static_cast<Micros>(
      std::ceil(static_cast<double>(kMicrosPerSecond) / options_.lines_per_second));
  tolerance_ = static_cast<Micros>(options_.burst * static_cast<double>(interval_));
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

std::string DecisionLog::format(const DecisionRecord& r, Micros at, std::uint64_t suppressed) {
  nlohmann::ordered_json j = {
      {"ts", rfc3339(at)},          {"rule", r.rule},
      {"identity", r.identity},     {"key", r.key},
      {"allowed", r.allowed},       {"limit", r.limit},
      {"remaining", r.remaining},   {"retry_after_ms", r.retry_after_ms},
      {"latency_us", r.latency_us},
  };
  if (!r.tier.empty()) j["tier"] = r.tier;
  if (r.delay_ms > 0) j["delay_ms"] = r.delay_ms;
  if (r.shadow) j["shadow"] = true;
  if (r.by_failure_policy) j["by_failure_policy"] = true;
  if (suppressed > 0) j["suppressed"] = suppressed;
  // Identities and keys come from clients: never let invalid UTF-8 throw on the request path.
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

DecisionLog::Written DecisionLog::record(const DecisionRecord& record) {
  if (!options_.enabled || !options_.sink) return Written::disabled;
  const bool wanted = !record.allowed || sample_allow();
  if (!wanted) return Written::not_sampled;
  const Micros now = clock_->now();
  if (!take_line(now)) {
    pending_suppressed_.fetch_add(1, std::memory_order_relaxed);
    suppressed_total_.fetch_add(1, std::memory_order_relaxed);
    return Written::suppressed;
  }
  const auto suppressed = pending_suppressed_.exchange(0, std::memory_order_relaxed);
  options_.sink(format(record, now, suppressed));
  written_.fetch_add(1, std::memory_order_relaxed);
  return Written::line;
}

}  // namespace ratekeeper::limiter
