#include "ratekeeper/http/latency_metrics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>

#include "ratekeeper/core/metrics_writer.hpp"

namespace ratekeeper::http {

namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;
constexpr std::string_view kNone = "none";

std::string seconds(Micros us) {
  return fmt::format("{}", static_cast<double>(us) / kMicrosPerSecond);
}

void write_histogram(MetricsWriter& out, std::string_view name, const LatencyMetrics::Histogram& h,
                     std::string_view rule, std::optional<std::string_view> outcome) {
  const std::string bucket = std::string(name) + "_bucket";
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i <= LatencyMetrics::kBuckets.size(); ++i) {
    cumulative += h.buckets[i].load(kRelaxed);
    const std::string le = i < LatencyMetrics::kBuckets.size() ? seconds(LatencyMetrics::kBuckets[i]) : "+Inf";
    if (outcome) {
      out.sample(bucket, cumulative, {{"rule", rule}, {"outcome", *outcome}, {"le", le}});
    } else {
      out.sample(bucket, cumulative, {{"rule", rule}, {"le", le}});
    }
  }
  const double sum = static_cast<double>(h.sum_us.load(kRelaxed)) / kMicrosPerSecond;
  if (outcome) {
    out.sample(std::string(name) + "_sum", sum, {{"rule", rule}, {"outcome", *outcome}});
    out.sample(std::string(name) + "_count", cumulative, {{"rule", rule}, {"outcome", *outcome}});
  } else {
    out.sample(std::string(name) + "_sum", sum, {{"rule", rule}});
    out.sample(std::string(name) + "_count", cumulative, {{"rule", rule}});
  }
}

}  // namespace

void LatencyMetrics::Histogram::record(Micros us) noexcept {
  us = std::max<Micros>(us, 0);
  const auto at = std::lower_bound(kBuckets.begin(), kBuckets.end(), us) - kBuckets.begin();
  buckets[static_cast<std::size_t>(at)].fetch_add(1, kRelaxed);
  sum_us.fetch_add(static_cast<std::uint64_t>(us), kRelaxed);
}

LatencyMetrics::Row& LatencyMetrics::row(std::string_view rule) {
  if (rule.empty()) rule = kNone;
  {
    std::shared_lock lock(mu_);
    if (auto it = rows_.find(rule); it != rows_.end()) return *it->second;
  }
  std::unique_lock lock(mu_);
  auto& slot = rows_[std::string(rule)];
  if (!slot) slot = std::make_unique<Row>();
  return *slot;
}

void LatencyMetrics::write(MetricsWriter& out) const {
  std::shared_lock lock(mu_);
  out.family("ratekeeper_http_request_duration_seconds", "histogram",
             "From a request's header read to its response written, by rule and outcome.");
  for (const auto& [rule, row] : rows_) {
    for (std::size_t o = 0; o < kRequestOutcomeCount; ++o) {
      const auto& h = row->request[o];
      bool any = false;
      for (const auto& b : h.buckets) any = any || b.load(kRelaxed) != 0;
      if (!any) continue;  // outcomes a rule never had are not series
      write_histogram(out, "ratekeeper_http_request_duration_seconds", h, rule,
                      to_string(static_cast<RequestOutcome>(o)));
    }
  }
  out.family("ratekeeper_proxy_upstream_duration_seconds", "histogram",
             "From a proxied request's head sent to the upstream's response head read, by rule.");
  for (const auto& [rule, row] : rows_) {
    bool any = false;
    for (const auto& b : row->upstream.buckets) any = any || b.load(kRelaxed) != 0;
    if (any) write_histogram(out, "ratekeeper_proxy_upstream_duration_seconds", row->upstream, rule, std::nullopt);
  }
}

}  // namespace ratekeeper::http
