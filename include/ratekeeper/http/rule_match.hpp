#pragma once
// Which HTTP requests a rate-limiting rule applies to: the middleware charges a request to
// every rule whose match it satisfies, in configuration order. Plain immutable values, safe
// to share between threads.

#include <string>
#include <string_view>
#include <vector>

namespace ratekeeper::http {

// Empty `methods`: any method; one listing GET also matches HEAD. `path` is an exact match,
// but for one trailing slash (a rule on /login also matches /login/, and one on /login/ matches
// /login); `path_prefix` a prefix match; both empty: any path.
struct RuleMatch {
  std::string rule;                  // the name of the limiter's rule it selects
  std::vector<std::string> methods;  // upper case, e.g. "GET", "POST"
  std::string path;
  std::string path_prefix;
  // Applies only to requests no other rule's match selects (a default rule): e.g. every
  // path of an application behind the proxy that has no rule of its own.
  bool unmatched = false;

  bool matches(std::string_view method, std::string_view request_path) const noexcept;
};

}  // namespace ratekeeper::http
