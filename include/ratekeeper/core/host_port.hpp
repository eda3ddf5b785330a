#pragma once
// The one host:port splitter: "host", "host:port", "[v6]" and "[v6]:port" into their host and
// port text, for every address the project reads (Redis endpoints, the listen address). It
// judges neither part: what a valid host or port is differs by caller. Pure; thread-safe.

#include <cstdint>
#include <optional>
#include <string_view>

#include "ratekeeper/core/error.hpp"

namespace ratekeeper {

struct HostPort {
  std::string_view host;                 // without brackets; may hold ':' when not bracketed
  std::optional<std::string_view> port;  // nullopt: no ':'; may be empty ("host:")
  bool bracketed = false;                // written "[host]" (IPv6)
};

// Unbracketed text splits at its last ':'. invalid_argument, quoting the text: a '[' without
// its ']', or anything but ":port" after the ']'.
Result<HostPort> split_host_port(std::string_view text);

// The one port parser: decimal digits only (no sign, space or leading zero), from 1 (or 0
// where `allow_zero`: a listener's ephemeral port) to 65535. invalid_argument, quoting the text.
Result<std::uint16_t> parse_port(std::string_view text, bool allow_zero = false);

}  // namespace ratekeeper
