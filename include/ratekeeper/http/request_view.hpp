#pragma once
// A framework-agnostic view of an HTTP request, enough for rate limiting: method, path,
// query, socket peer and headers. It refers to the caller's strings (no copies): they must
// live until Middleware::handle returns. Not thread-safe to mutate; read-only use is.

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ratekeeper::http {

struct RequestView {
  std::string_view method;  // "GET", "POST"... (compared case-sensitively, as HTTP says)
  std::string_view path;    // target path without the query, e.g. "/api/data"
  std::string_view query;   // without the '?', may be empty
  std::string_view peer;    // socket peer address, e.g. "192.0.2.7" or "2001:db8::1"
  std::vector<std::pair<std::string_view, std::string_view>> headers;  // in arrival order

  // The first value of a header, by case-insensitive name.
  std::optional<std::string_view> header(std::string_view name) const;
  // Every value of a header joined with ", " (for list headers such as X-Forwarded-For).
  std::string header_list(std::string_view name) const;

  // Splits a request target "/a/b?x=1" into path and query.
  static std::pair<std::string_view, std::string_view> split_target(std::string_view target);
};

bool iequals(std::string_view a, std::string_view b) noexcept;

}  // namespace ratekeeper::http
