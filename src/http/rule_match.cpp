#include "ratekeeper/http/rule_match.hpp"

#include <algorithm>

namespace ratekeeper::http {

bool RuleMatch::matches(std::string_view method, std::string_view request_path) const noexcept {
  if (!methods.empty() && std::find(methods.begin(), methods.end(), method) == methods.end()) {
    return false;
  }
  if (!path.empty() && request_path != path) return false;
  if (!path_prefix.empty() && !request_path.starts_with(path_prefix)) return false;
  return true;
}

}  // namespace ratekeeper::http
