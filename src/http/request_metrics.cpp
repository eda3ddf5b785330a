#include "ratekeeper/http/request_metrics.hpp"

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

std::string RequestMetrics::render() const {
  std::string out;
  auto it = std::back_inserter(out);
  fmt::format_to(it,
                 "# HELP ratekeeper_http_requests_total Middleware answers by result.\n"
                 "# TYPE ratekeeper_http_requests_total counter\n");
  for (std::size_t i = 0; i < kRequestOutcomeCount; ++i) {
    fmt::format_to(it, "ratekeeper_http_requests_total{{result=\"{}\"}} {}\n",
                   to_string(static_cast<RequestOutcome>(i)),
                   counts_[i].load(std::memory_order_relaxed));
  }
  return out;
}

}  // namespace ratekeeper::http
