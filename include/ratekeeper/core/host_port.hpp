#pragma once
// The one host:port splitter: "host", "host:port", "[v6]" and "[v6]:port" into their host and
// port text, for every address the project reads (Redis endpoints, the listen address). It
// judges neither part: what a valid host or port is differs by caller. Pure; thread-safe.

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

}  // namespace ratekeeper
