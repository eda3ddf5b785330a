#include "ratekeeper/http/request.hpp"

namespace ratekeeper::http {

bool is_request_method(std::string_view method) noexcept {
  if (method.empty()) return false;
  for (const char c : method) {
    const bool upper_or_digit = (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!upper_or_digit && std::string_view("!#$%&'*+-.^_`|~").find(c) == std::string_view::npos) {
      return false;
    }
  }
  return true;
}

std::string_view Request::path() const noexcept {
  std::string_view t = target;
  return t.substr(0, t.find('?'));
}

std::string_view Request::query() const noexcept {
  std::string_view t = target;
  const auto q = t.find('?');
  return q == std::string_view::npos ? std::string_view{} : t.substr(q + 1);
}

std::optional<std::string_view> Request::header(std::string_view name) const noexcept {
  for (const auto& [n, v] : headers) {
    if (iequals(n, name)) return std::string_view(v);
  }
  return std::nullopt;
}

std::string Request::header_list(std::string_view name) const {
  std::string out;
  for (const auto& [n, v] : headers) {
    if (!iequals(n, name)) continue;
    if (!out.empty()) out += ", ";
    out += v;
  }
  return out;
}

}  // namespace ratekeeper::http
