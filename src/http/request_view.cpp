#include "ratekeeper/http/request_view.hpp"

namespace ratekeeper::http {

bool iequals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

std::optional<std::string_view> RequestView::header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (iequals(n, name)) return v;
  }
  return std::nullopt;
}

std::string RequestView::header_list(std::string_view name) const {
  std::string out;
  for (const auto& [n, v] : headers) {
    if (!iequals(n, name)) continue;
    if (!out.empty()) out += ", ";
    out += v;
  }
  return out;
}

std::pair<std::string_view, std::string_view> RequestView::split_target(std::string_view target) {
  const auto q = target.find('?');
  if (q == std::string_view::npos) return {target, {}};
  return {target.substr(0, q), target.substr(q + 1)};
}

}  // namespace ratekeeper::http
