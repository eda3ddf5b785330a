#include "ratekeeper/core/host_port.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

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

Result<std::uint16_t> parse_port(std::string_view text, bool allow_zero) {
  const auto bad = [&](std::string_view why) {
    return make_error(ErrorCode::invalid_argument, fmt::format("port '{}': {}", text, why));
  };
  if (text.empty()) return bad("empty");
  if (!std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return bad("must be a decimal integer");
  }
  if (text.size() > 1 && text.front() == '0') return bad("must be a decimal integer without leading zeros");
  const std::uint32_t min = allow_zero ? 0 : 1;
  std::uint32_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < min || value > 65535) {
    return bad(fmt::format("must be between {} and 65535", min));
  }
  return static_cast<std::uint16_t>(value);
}

}  // namespace ratekeeper
