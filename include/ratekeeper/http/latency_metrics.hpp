#pragma once
// Request latency histograms, by the rule the middleware's answer came from and its outcome:
//   ratekeeper_http_request_duration_seconds{rule,outcome}: from a request's header read to its
//     response written (the server's own answers and the proxy's, upstream time included);
//   ratekeeper_proxy_upstream_duration_seconds{rule}: from a proxied request's head sent to the
//     upstream's response head read.
// Requests no rule applied to have rule="none". Recording is lock-free once a rule's row
// exists (a row is made on the first request of its rule and kept). Thread-safe.

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>

#include "ratekeeper/core/time.hpp"
#include "ratekeeper/http/request.hpp"

namespace ratekeeper {
class MetricsWriter;
}

namespace ratekeeper::http {

class LatencyMetrics {
 public:
  // Upper bounds of the buckets, in microseconds (100 µs to 10 s).
  static constexpr std::array<Micros, 16> kBuckets = {
      100,     250,     500,     1'000,     2'500,     5'000,     10'000,    25'000,
      50'000, 100'000, 250'000, 500'000, 1'000'000, 2'500'000, 5'000'000, 10'000'000};

  struct Histogram {
    std::array<std::atomic<std::uint64_t>, kBuckets.size() + 1> buckets{};  // the last: +Inf
    std::atomic<std::uint64_t> sum_us{0};
    void record(Micros us) noexcept;
  };
  // The histograms of one rule; its address is stable for the life of the LatencyMetrics.
  struct Row {
    std::array<Histogram, kRequestOutcomeCount> request;
    Histogram upstream;
  };

  // The row of `rule` (empty: "none"), made on first use.
  Row& row(std::string_view rule);

  void write(MetricsWriter& out) const;

 private:
  mutable std::shared_mutex mu_;
  std::map<std::string, std::unique_ptr<Row>, std::less<>> rows_;
};

}  // namespace ratekeeper::http
