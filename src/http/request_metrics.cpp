#include "ratekeeper/http/request_metrics.hpp"

#include "ratekeeper/core/metrics_writer.hpp"

#include <fmt/format.h>

#include <iterator>

namespace ratekeeper::http {

std::string_view to_string(RequestOutcome outcome) noexcept {
  switch (outcome) {
    case RequestOutcome::admitted:
      return "admitted";
    case RequestOutcome::rejected:
      return "rejected";
    case RequestOutcome::bad_request:
      return "bad_request";
    case RequestOutcome::error:
      return "error";
    case RequestOutcome::unmatched:
      return "unmatched";
  }
  return "unknown";
}

void RequestMetrics::write(MetricsWriter& out) const {
  out.family("ratekeeper_http_requests_total", "counter", "Middleware answers by result.");
  for (std::size_t i = 0; i < kRequestOutcomeCount; ++i) {
    out.sample("ratekeeper_http_requests_total", counts_[i].load(std::memory_order_relaxed),
               {{"result", to_string(static_cast<RequestOutcome>(i))}});
  }
}

std::string RequestMetrics::render() const {
  MetricsWriter out;
  write(out);
  return out.take();
}

}  // namespace ratekeeper::http
