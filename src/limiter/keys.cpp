#include "ratekeeper/limiter/keys.hpp"

#include <fmt/format.h>

namespace ratekeeper::limiter {

Result<std::string> escape_identity(std::string_view identity) {
  if (identity.empty()) return make_error(ErrorCode::invalid_argument, "identity must not be empty");
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(identity.size());
  for (unsigned char c : identity) {
    if (c <= 0x20 || c >= 0x7f || c == '{' || c == '}' || c == '%') {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xf]);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  if (out.size() > kMaxIdentityBytes) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("identity is longer than {} bytes", kMaxIdentityBytes));
  }
  return out;
}

Result<std::string> make_key(std::string_view prefix, std::string_view identity,
                             std::string_view rule, std::string_view limit_name) {
  auto id = escape_identity(identity);
  if (!id) return std::unexpected(id.error());
  if (limit_name.empty()) return fmt::format("{}:{{{}}}:{}", prefix, *id, rule);
  return fmt::format("{}:{{{}}}:{}:{}", prefix, *id, rule, limit_name);
}

}  // namespace ratekeeper::limiter
