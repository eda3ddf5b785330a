#include "ratekeeper/limiter/keys.hpp"

#include <fmt/format.h>

namespace ratekeeper::limiter {

namespace {

// Appends `identity` percent-encoded (see escape_identity); invalid_argument when it is empty
// or longer than kMaxIdentityBytes once encoded.
Result<void> append_escaped(std::string& out, std::string_view identity) {
  if (identity.empty()) return make_error(ErrorCode::invalid_argument, "identity must not be empty");
  static constexpr char kHex[] = "0123456789ABCDEF";
  const std::size_t start = out.size();
  // Runs of bytes that need no escape are appended whole.
  std::size_t plain = 0;
  for (std::size_t i = 0; i < identity.size(); ++i) {
    const auto c = static_cast<unsigned char>(identity[i]);
    if (c <= 0x20 || c >= 0x7f || c == '{' || c == '}' || c == '%') {
      out.append(identity.data() + plain, i - plain);
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xf]);
      plain = i + 1;
    }
  }
  out.append(identity.data() + plain, identity.size() - plain);
  if (out.size() - start > kMaxIdentityBytes) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("identity is longer than {} bytes", kMaxIdentityBytes));
  }
  return {};
}

}  // namespace

Result<std::string> escape_identity(std::string_view identity) {
  std::string out;
  out.reserve(identity.size());
  if (auto ok = append_escaped(out, identity); !ok) return std::unexpected(ok.error());
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

Result<void> append_key(std::string& out, std::string_view prefix, std::string_view identity,
                        std::string_view rule, std::string_view limit_name) {
  if (prefix.empty()) return make_error(ErrorCode::invalid_argument, "key prefix must not be empty");
  if (rule.empty()) return make_error(ErrorCode::invalid_argument, "rule name must not be empty");
  if (auto ok = check_name("key prefix", prefix); !ok) return std::unexpected(ok.error());
  if (auto ok = check_name("rule name", rule); !ok) return std::unexpected(ok.error());
  if (auto ok = check_name("limit name", limit_name); !ok) return std::unexpected(ok.error());
  // <prefix>:{<identity>}:<rule>[:<limit>], in one allocation unless the identity needs escapes.
  out.reserve(out.size() + prefix.size() + identity.size() + rule.size() + limit_name.size() + 6);
  out += prefix;
  out += ":{";
  if (auto ok = append_escaped(out, identity); !ok) return std::unexpected(ok.error());
  out += "}:";
  out += rule;
  if (!limit_name.empty()) {
    out += ':';
    out += limit_name;
  }
  return {};
}

Result<std::string> make_key(std::string_view prefix, std::string_view identity,
                             std::string_view rule, std::string_view limit_name) {
  std::string key;
  if (auto ok = append_key(key, prefix, identity, rule, limit_name); !ok) return std::unexpected(ok.error());
  return key;
}

}  // namespace ratekeeper::limiter
