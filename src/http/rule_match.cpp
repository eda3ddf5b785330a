#include "ratekeeper/http/rule_match.hpp"

#include <algorithm>

namespace ratekeeper::http {

namespace {

// `request_path` is `path`, or `path` with a trailing slash added or taken away: most
// applications serve /login/ as /login (Express's default routing, Flask's and Django's
// redirects, Spring before 6), so a rule on one is not escaped through the other. The root
// is only itself.
bool same_route(std::string_view request_path, std::string_view path) noexcept {
  if (request_path == path) return true;
  if (request_path.size() == path.size() + 1) {
    return path != "/" && request_path.back() == '/' && request_path.starts_with(path);
  }
  if (path.size() == request_path.size() + 1) {
    return request_path != "/" && path.back() == '/' && path.starts_with(request_path);
  }
  return false;
}

}  // namespace

bool RuleMatch::matches(std::string_view method, std::string_view request_path) const noexcept {
  // A rule for GET covers HEAD: applications answer HEAD with their GET handler, doing its work.
  if (!methods.empty() && std::find(methods.begin(), methods.end(), method) == methods.end() &&
      !(method == "HEAD" && std::find(methods.begin(), methods.end(), "GET") != methods.end())) {
    return false;
  }
  if (!path.empty() && !same_route(request_path, path)) return false;
  if (!path_prefix.empty() && !request_path.starts_with(path_prefix)) return false;
  return true;
}

}  // namespace ratekeeper::http
