#include "ratekeeper/limiter/metrics.hpp"

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
std::string escape_label(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out.push_back(c);
  }
  return out;
}

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

std::string Metrics::render(const store::StoreHealth& health, std::string_view store_kind) const {
  std::string out;
  auto it = std::back_inserter(out);

  fmt::format_to(it,
                 "# HELP ratekeeper_decisions_total Rate limit decisions by rule and outcome.\n"
                 "# TYPE ratekeeper_decisions_total counter\n");
  for (std::size_t r = 0; r < rule_names_.size(); ++r) {
    const auto rule = escape_label(rule_names_[r]);
    for (std::size_t o = 0; o < kOutcomeCount; ++o) {
      fmt::format_to(it, "ratekeeper_decisions_total{{rule=\"{}\",outcome=\"{}\"}} {}\n", rule,
                     to_string(static_cast<Outcome>(o)), rows_[r]->decisions[o].load(kRelaxed));
    }
  }

  fmt::format_to(it,
                 "# HELP ratekeeper_near_limit_total Allowed decisions with less than 10% of the "
                 "limit remaining.\n"
                 "# TYPE ratekeeper_near_limit_total counter\n");
  for (std::size_t r = 0; r < rule_names_.size(); ++r) {
    fmt::format_to(it, "ratekeeper_near_limit_total{{rule=\"{}\"}} {}\n",
                   escape_label(rule_names_[r]), rows_[r]->near_limit.load(kRelaxed));
  }

  fmt::format_to(it,
                 "# HELP ratekeeper_delayed_total Allowed decisions that wait for their turn "
                 "(on_limit: delay).\n"
                 "# TYPE ratekeeper_delayed_total counter\n");
  for (std::size_t r = 0; r < rule_names_.size(); ++r) {
    fmt::format_to(it, "ratekeeper_delayed_total{{rule=\"{}\"}} {}\n", escape_label(rule_names_[r]),
                   rows_[r]->delayed.load(kRelaxed));
  }
  fmt::format_to(it,
                 "# HELP ratekeeper_delay_seconds_total Sum of the waits of the delayed decisions.\n"
                 "# TYPE ratekeeper_delay_seconds_total counter\n");
  for (std::size_t r = 0; r < rule_names_.size(); ++r) {
    fmt::format_to(it, "ratekeeper_delay_seconds_total{{rule=\"{}\"}} {}\n", escape_label(rule_names_[r]),
                   static_cast<double>(rows_[r]->delay_us.load(kRelaxed)) / kMicrosPerSecond);
  }

  fmt::format_to(it,
                 "# HELP ratekeeper_store_latency_seconds Round trip of store checks.\n"
                 "# TYPE ratekeeper_store_latency_seconds histogram\n");
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < kLatencyBuckets.size(); ++i) {
    cumulative += totals_->latency_buckets[i].load(kRelaxed);
    fmt::format_to(it, "ratekeeper_store_latency_seconds_bucket{{le=\"{}\"}} {}\n",
                   seconds(kLatencyBuckets[i]), cumulative);
  }
  cumulative += totals_->latency_buckets[kLatencyBuckets.size()].load(kRelaxed);
  // +Inf equals _count; both are derived from the buckets so a scrape stays consistent.
  fmt::format_to(it, "ratekeeper_store_latency_seconds_bucket{{le=\"+Inf\"}} {}\n", cumulative);
  fmt::format_to(it, "ratekeeper_store_latency_seconds_sum {}\n",
                 seconds(static_cast<Micros>(totals_->latency_sum_us.load(kRelaxed))));
  fmt::format_to(it, "ratekeeper_store_latency_seconds_count {}\n", cumulative);

  fmt::format_to(it,
                 "# HELP ratekeeper_store_errors_total Store failures by kind.\n"
                 "# TYPE ratekeeper_store_errors_total counter\n");
  for (std::size_t i = 0; i < kErrorCodeCount; ++i) {
    fmt::format_to(it, "ratekeeper_store_errors_total{{kind=\"{}\"}} {}\n",
                   ratekeeper::to_string(static_cast<ErrorCode>(i)),
                   totals_->store_errors[i].load(kRelaxed));
  }

  fmt::format_to(it,
                 "# HELP ratekeeper_decision_log_suppressed_total Decision log lines dropped by "
                 "the log rate limit.\n"
                 "# TYPE ratekeeper_decision_log_suppressed_total counter\n"
                 "ratekeeper_decision_log_suppressed_total {}\n",
                 totals_->log_suppressed.load(kRelaxed));

  fmt::format_to(it,
                 "# HELP ratekeeper_store_ready Whether the store can answer (1) or not (0); "
                 "0 while the circuit breaker is open.\n"
                 "# TYPE ratekeeper_store_ready gauge\n"
                 "ratekeeper_store_ready{{kind=\"{}\"}} {}\n",
                 escape_label(store_kind), health.ready ? 1 : 0);
  return out;
}

}  // namespace ratekeeper::limiter
