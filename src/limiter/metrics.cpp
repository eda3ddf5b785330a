#include "ratekeeper/limiter/metrics.hpp"

#include "ratekeeper/core/metrics_writer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

namespace ratekeeper::limiter {

std::string_view to_string(Outcome outcome) noexcept {
  switch (outcome) {
    case Outcome::allowed:
      return "allowed";
    case Outcome::denied:
      return "denied";
    case Outcome::shadow_denied:
      return "shadow_denied";
    case Outcome::failure_policy:
      return "failure_policy";
  }
  return "unknown";
}

struct Metrics::RuleRow {
  std::array<std::atomic<std::uint64_t>, kOutcomeCount> decisions{};
  std::atomic<std::uint64_t> near_limit{0};
  std::atomic<std::uint64_t> delayed{0};
  std::atomic<std::int64_t> delay_us{0};  // sum of the waits of `delayed`
  std::array<std::atomic<std::uint64_t>, kReservationCount> reservations{};
  std::atomic<std::uint64_t> reserved_cost{0};  // sum of the estimates reserved
  std::atomic<std::uint64_t> settled_cost{0};   // sum of the actual costs settled
};

struct Metrics::Totals {
  std::array<std::atomic<std::uint64_t>, kLatencyBuckets.size() + 1> latency_buckets{};
  std::atomic<std::uint64_t> latency_count{0};
  std::atomic<std::uint64_t> latency_sum_us{0};
  std::array<std::atomic<std::uint64_t>, kErrorCodeCount> store_errors{};
  std::atomic<std::uint64_t> log_suppressed{0};
};

namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

// Label values escape backslash, double quote and newline.
std::string seconds(Micros us) {
  return fmt::format("{}", static_cast<double>(us) / static_cast<double>(kMicrosPerSecond));
}

}  // namespace

Metrics::Metrics(std::vector<std::string> rule_names)
    : rule_names_(std::move(rule_names)), totals_(std::make_shared<Totals>()) {
  rows_.reserve(rule_names_.size());
  for (std::size_t i = 0; i < rule_names_.size(); ++i) rows_.push_back(std::make_shared<RuleRow>());
}

Metrics::Metrics(std::vector<std::string> rule_names, const Metrics& previous)
    : rule_names_(std::move(rule_names)), totals_(previous.totals_) {
  rows_.reserve(rule_names_.size());
  for (const auto& name : rule_names_) {
    const auto it = std::find(previous.rule_names_.begin(), previous.rule_names_.end(), name);
    rows_.push_back(it == previous.rule_names_.end()
                        ? std::make_shared<RuleRow>()
                        : previous.rows_[static_cast<std::size_t>(it - previous.rule_names_.begin())]);
  }
}

Metrics::~Metrics() = default;

void Metrics::record_decision(std::size_t rule, Outcome outcome) noexcept {
  if (rule >= rule_names_.size()) return;
  rows_[rule]->decisions[static_cast<std::size_t>(outcome)].fetch_add(1, kRelaxed);
}

void Metrics::record_near_limit(std::size_t rule) noexcept {
  if (rule >= rule_names_.size()) return;
  rows_[rule]->near_limit.fetch_add(1, kRelaxed);
}

void Metrics::record_delayed(std::size_t rule, Micros delay) noexcept {
  if (rule >= rule_names_.size()) return;
  rows_[rule]->delayed.fetch_add(1, kRelaxed);
  rows_[rule]->delay_us.fetch_add(delay, kRelaxed);
}

std::string_view to_string(Reservation r) noexcept {
  switch (r) {
    case Reservation::reserved: return "reserved";
    case Reservation::settled: return "settled";
    case Reservation::unknown: return "unknown";
    case Reservation::failed: return "failed";
    case Reservation::unreported: return "unreported";
    case Reservation::released: return "released";
    case Reservation::renewed: return "renewed";
    case Reservation::lost: return "lost";
  }
  return "unknown";
}

void Metrics::record_reservation(std::size_t rule, Reservation what, std::int64_t cost) noexcept {
  if (rule >= rule_names_.size()) return;
  RuleRow& row = *rows_[rule];
  row.reservations[static_cast<std::size_t>(what)].fetch_add(1, kRelaxed);
  const auto units = static_cast<std::uint64_t>(std::max<std::int64_t>(0, cost));
  if (what == Reservation::reserved) row.reserved_cost.fetch_add(units, kRelaxed);
  if (what == Reservation::settled) row.settled_cost.fetch_add(units, kRelaxed);
}

std::uint64_t Metrics::reservations(std::size_t rule, Reservation what) const noexcept {
  if (rule >= rule_names_.size()) return 0;
  return rows_[rule]->reservations[static_cast<std::size_t>(what)].load(kRelaxed);
}

void Metrics::record_store_latency(Micros latency) noexcept {
  if (latency < 0) latency = 0;
  std::size_t i = 0;
  while (i < kLatencyBuckets.size() && latency > kLatencyBuckets[i]) ++i;
  totals_->latency_buckets[i].fetch_add(1, kRelaxed);  // non-cumulative here, summed when rendered
  totals_->latency_count.fetch_add(1, kRelaxed);
  totals_->latency_sum_us.fetch_add(static_cast<std::uint64_t>(latency), kRelaxed);
}

void Metrics::record_store_error(ErrorCode code) noexcept {
  const auto i = static_cast<std::size_t>(code);
  if (i < totals_->store_errors.size()) totals_->store_errors[i].fetch_add(1, kRelaxed);
}

void Metrics::record_log_suppressed(std::uint64_t lines) noexcept {
  totals_->log_suppressed.fetch_add(lines, kRelaxed);
}

std::uint64_t Metrics::decisions(std::size_t rule, Outcome outcome) const noexcept {
  if (rule >= rule_names_.size()) return 0;
  return rows_[rule]->decisions[static_cast<std::size_t>(outcome)].load(kRelaxed);
}

std::uint64_t Metrics::near_limit(std::size_t rule) const noexcept {
  if (rule >= rule_names_.size()) return 0;
  return rows_[rule]->near_limit.load(kRelaxed);
}

std::uint64_t Metrics::delayed(std::size_t rule) const noexcept {
  if (rule >= rule_names_.size()) return 0;
  return rows_[rule]->delayed.load(kRelaxed);
}

std::uint64_t Metrics::store_errors(ErrorCode code) const noexcept {
  const auto i = static_cast<std::size_t>(code);
  return i < totals_->store_errors.size() ? totals_->store_errors[i].load(kRelaxed) : 0;
}

std::uint64_t Metrics::store_latency_count() const noexcept {
  return totals_->latency_count.load(kRelaxed);
}

void Metrics::write(MetricsWriter& out, const store::StoreHealth& health, std::string_view store_kind) const {
  out.family("ratekeeper_decisions_total", "counter", "Rate limit decisions by rule and outcome.");
  for (std::size_t r = 0; r < rule_names_.size(); ++r) {
    for (std::size_t o = 0; o < kOutcomeCount; ++o) {
      out.sample("ratekeeper_decisions_total", rows_[r]->decisions[o].load(kRelaxed),
                 {{"rule", rule_names_[r]}, {"outcome", to_string(static_cast<Outcome>(o))}});
    }
  }
  out.family("ratekeeper_near_limit_total", "counter",
             "Allowed decisions with less than 10% of the limit remaining.");
  for (std::size_t r = 0; r < rule_names_.size(); ++r) {
    out.sample("ratekeeper_near_limit_total", rows_[r]->near_limit.load(kRelaxed), {{"rule", rule_names_[r]}});
  }
  out.family("ratekeeper_delayed_total", "counter", "Allowed decisions that wait for their turn (on_limit: delay).");
  for (std::size_t r = 0; r < rule_names_.size(); ++r) {
    out.sample("ratekeeper_delayed_total", rows_[r]->delayed.load(kRelaxed), {{"rule", rule_names_[r]}});
  }
  out.family("ratekeeper_delay_seconds_total", "counter", "Sum of the waits of the delayed decisions.");
  for (std::size_t r = 0; r < rule_names_.size(); ++r) {
    out.sample("ratekeeper_delay_seconds_total",
               static_cast<double>(rows_[r]->delay_us.load(kRelaxed)) / kMicrosPerSecond, {{"rule", rule_names_[r]}});
  }

  out.family("ratekeeper_reservations_total", "counter",
             "Reservations (a cost estimated at admission, settled to the actual cost; concurrency slots held until "
             "released) by rule and result.");
  for (std::size_t r = 0; r < rule_names_.size(); ++r) {
    for (std::size_t i = 0; i < kReservationCount; ++i) {
      out.sample("ratekeeper_reservations_total", rows_[r]->reservations[i].load(kRelaxed),
                 {{"rule", rule_names_[r]}, {"result", to_string(static_cast<Reservation>(i))}});
    }
  }
  out.family("ratekeeper_reserved_cost_total", "counter", "Sum of the estimates reserved.");
  for (std::size_t r = 0; r < rule_names_.size(); ++r) {
    out.sample("ratekeeper_reserved_cost_total", rows_[r]->reserved_cost.load(kRelaxed), {{"rule", rule_names_[r]}});
  }
  out.family("ratekeeper_settled_cost_total", "counter", "Sum of the actual costs settled.");
  for (std::size_t r = 0; r < rule_names_.size(); ++r) {
    out.sample("ratekeeper_settled_cost_total", rows_[r]->settled_cost.load(kRelaxed), {{"rule", rule_names_[r]}});
  }

  out.family("ratekeeper_store_latency_seconds", "histogram", "Round trip of store checks.");
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < kLatencyBuckets.size(); ++i) {
    cumulative += totals_->latency_buckets[i].load(kRelaxed);
    out.sample("ratekeeper_store_latency_seconds_bucket", cumulative, {{"le", seconds(kLatencyBuckets[i])}});
  }
  cumulative += totals_->latency_buckets[kLatencyBuckets.size()].load(kRelaxed);
  // +Inf equals _count; both are derived from the buckets so a scrape stays consistent.
  out.sample("ratekeeper_store_latency_seconds_bucket", cumulative, {{"le", "+Inf"}});
  out.sample("ratekeeper_store_latency_seconds_sum",
             static_cast<double>(totals_->latency_sum_us.load(kRelaxed)) / kMicrosPerSecond);
  out.sample("ratekeeper_store_latency_seconds_count", cumulative);

  out.family("ratekeeper_store_errors_total", "counter", "Store failures by kind.");
  for (std::size_t i = 0; i < kErrorCodeCount; ++i) {
    out.sample("ratekeeper_store_errors_total", totals_->store_errors[i].load(kRelaxed),
               {{"kind", ratekeeper::to_string(static_cast<ErrorCode>(i))}});
  }
  out.counter("ratekeeper_decision_log_suppressed_total", "Decision log lines dropped by the log rate limit.",
              totals_->log_suppressed.load(kRelaxed));
  out.gauge("ratekeeper_store_ready", "Whether the store can answer (1) or not (0); 0 while the circuit breaker is open.",
            std::int64_t{health.ready ? 1 : 0}, {{"kind", store_kind}});
}

std::string Metrics::render(const store::StoreHealth& health, std::string_view store_kind) const {
  MetricsWriter out;
  write(out, health, store_kind);
  return out.take();
}

}  // namespace ratekeeper::limiter
