#pragma once
// Identities of header values and API keys: the strings a rule's budget is charged to
// (identities of client IPs come from http/client_ip.hpp). Pure functions; thread-safe.

#include <string>
#include <string_view>

#include "ratekeeper/core/error.hpp"

namespace ratekeeper::limiter {

// The identity of a header value under a kind prefix ("user" when `prefix` is empty):
// "<prefix>:<value>". invalid_argument, naming `header`, when the value is empty or longer
// than kMaxIdentityBytes. (The key escapes it later: escape_identity in keys.hpp.)
Result<std::string> header_identity(std::string_view header, std::string_view prefix,
                                    std::string_view value);

// The identity of an API key: "key:" + 16 hex digits of a 64-bit hash, so that secrets never
// appear in store keys or logs.
std::string api_key_identity(std::string_view api_key);

}  // namespace ratekeeper::limiter
