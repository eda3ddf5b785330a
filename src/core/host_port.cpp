#include "ratekeeper/core/host_port.hpp"

#include <fmt/format.h>

namespace ratekeeper {

Result<HostPort> split_host_port(std::string_view text) {
  HostPort out;
  if (text.starts_with('[')) {
    const auto close = text.find(']');
    if (close == std::string_view::npos) {
      return make_error(ErrorCode::invalid_argument, fmt::format("'{}': missing ']'", text));
    }
    out.bracketed = true;
    out.host = text.substr(1, close - 1);
    const std::string_view after = text.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') {
        return make_error(ErrorCode::invalid_argument,
                          fmt::format("'{}': expected ':' after ']'", text));
      }
      out.port = after.substr(1);
    }
    return out;
  }
  const auto colon = text.rfind(':');
  out.host = text.substr(0, colon);
  if (colon != std::string_view::npos) out.port = text.substr(colon + 1);
  return out;
}

}  // namespace ratekeeper
