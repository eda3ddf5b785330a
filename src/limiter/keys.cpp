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

namespace {

// Printable ASCII without the hash tag's braces.
Result<void> check_name(std::string_view what, std::string_view name) {
  for (unsigned char c : name) {
    if (c <= 0x20 || c >= 0x7f || c == '{' || c == '}') {
      return make_error(ErrorCode::invalid_argument,
                        fmt::format("{} '{}': names are printable ASCII without spaces or braces", what, name));
    }
  }
  return {};
}

}  // namespace

Result<std::string> make_key(std::string_view prefix, std::string_view identity,
                             std::string_view rule, std::string_view limit_name) {
  if (prefix.empty()) return make_error(ErrorCode::invalid_argument, "key prefix must not be empty");
  if (rule.empty()) return make_error(ErrorCode::invalid_argument, "rule name must not be empty");
  if (auto ok = check_name("key prefix", prefix); !ok) return std::unexpected(ok.error());
  if (auto ok = check_name("rule name", rule); !ok) return std::unexpected(ok.error());
  if (auto ok = check_name("limit name", limit_name); !ok) return std::unexpected(ok.error());
  auto id = escape_identity(identity);
  if (!id) return std::unexpected(id.error());
  if (limit_name.empty()) return fmt::format("{}:{{{}}}:{}", prefix, *id, rule);
  return fmt::format("{}:{{{}}}:{}:{}", prefix, *id, rule, limit_name);
}

}  // namespace ratekeeper::limiter
