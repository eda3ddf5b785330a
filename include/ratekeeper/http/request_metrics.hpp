#pragma once
// What the rate-limiting middleware answered, counted by result, in the Prometheus text
// exposition format (`ratekeeper_http_requests_total{result}`). Recording is lock-free
// (relaxed atomics); thread-safe.

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "ratekeeper/http/request.hpp"

namespace ratekeeper {
class MetricsWriter;
}

namespace ratekeeper::http {


class RequestMetrics {
 public:
  void record(RequestOutcome outcome) noexcept {
    counts_[static_cast<std::size_t>(outcome)].fetch_add(1, std::memory_order_relaxed);
  }
  std::uint64_t requests(RequestOutcome outcome) const noexcept {
    return counts_[static_cast<std::size_t>(outcome)].load(std::memory_order_relaxed);
  }
  // The exposition text of the counters (Content-Type: text/plain; version=0.0.4).
  void write(MetricsWriter& out) const;
  std::string render() const;  // write() as exposition text

 private:
  std::array<std::atomic<std::uint64_t>, kRequestOutcomeCount> counts_{};
};

}  // namespace ratekeeper::http
