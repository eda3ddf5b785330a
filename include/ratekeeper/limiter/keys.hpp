#pragma once
// Key naming (one convention everywhere): <prefix>:{<identity>}:<rule>[:<limit>].
// The braces are the Redis Cluster hash tag, so every key of one identity lives in one slot.

#include <string>
#include <string_view>

#include "ratekeeper/core/error.hpp"

namespace ratekeeper::limiter {

inline constexpr std::string_view kDefaultPrefix = "ratelimit";
inline constexpr std::size_t kMaxIdentityBytes = 256;

// Percent-encodes '{', '}', '%', spaces, control and non-ASCII bytes, so that no identity can
// end the hash tag early or spell another identity's key. Identities longer than
// kMaxIdentityBytes once encoded, and empty ones, are invalid arguments.
Result<std::string> escape_identity(std::string_view identity);

// The key of `identity` (escaped here) under `rule`, optionally one of the rule's limits.
// The prefix and the names are non-empty (the limit name may be empty: no limit part),
// printable ASCII without spaces, '{' or '}' (a brace would move the hash tag out of the
// identity). Anything else is an invalid argument.
Result<std::string> make_key(std::string_view prefix, std::string_view identity,
                             std::string_view rule, std::string_view limit_name = {});
// make_key appended to `out`, whose capacity it reuses; on an invalid argument `out` may hold
// part of a key.
Result<void> append_key(std::string& out, std::string_view prefix, std::string_view identity,
                        std::string_view rule, std::string_view limit_name = {});

}  // namespace ratekeeper::limiter
