#pragma once
// One HTTP request and its response, as the server reads and writes them and as the
// middleware and the routes see them: the transport (Boost.Beast) stays inside http::Server.
// Plain values: not thread-safe to mutate, safe to read from several threads.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ratekeeper::http {

// Header fields in order, names as sent.
using HeaderList = std::vector<std::pair<std::string, std::string>>;

// What the rate-limiting middleware made of a request: admitted by every rule that applied,
// rejected by one (429), a bad identity (400), a failure (500), or no rule applied.
enum class RequestOutcome : std::uint8_t { admitted, rejected, bad_request, error, unmatched };
inline constexpr std::size_t kRequestOutcomeCount = 5;
std::string_view to_string(RequestOutcome outcome) noexcept;

// ASCII case-insensitive equality (header names). Inline: the proxy compares each field's
// name against a few fixed names, and most differ in length.
inline bool iequals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

// Whether a CGI, FastCGI or WSGI gateway reads two field names as one variable: equal but for
// case, every byte other than a letter or a digit taken as '_' (lighttpd maps all of them;
// nginx, Apache and WSGI servers map '-'): X-User-ID, X-User_ID and X.User.ID are HTTP_X_USER_ID.
inline bool gateway_equals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  auto fold = [](char c) {
    if (c >= 'A' && c <= 'Z') return static_cast<char>(c - 'A' + 'a');
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) return c;
    return '_';
  };
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (fold(a[i]) != fold(b[i])) return false;
  }
  return true;
}

// A request method as ratekeeper takes it: a token (RFC 9110 5.6.2) without lower-case letters.
// Methods are case-sensitive and the rules name theirs in upper case; `post` would be another
// method to them and POST to an application that upper-cases it, so it is refused (400).
bool is_request_method(std::string_view method) noexcept;

struct Request {
  std::string method;  // as sent, e.g. "GET" (compared case-sensitively, as HTTP says)
  std::string target;  // path and query, e.g. "/api/search?q=x"
  HeaderList headers;  // in arrival order
  std::string body;
  std::string peer_address;  // the socket peer, e.g. "127.0.0.1" or "::1"
  std::uint16_t peer_port = 0;

  std::string_view path() const noexcept;   // the target without the query
  std::string_view query() const noexcept;  // without '?', empty when absent
  // The first value of a header, by case-insensitive name.
  std::optional<std::string_view> header(std::string_view name) const noexcept;
  // Every value of a header joined with ", " (list headers such as X-Forwarded-For).
  std::string header_list(std::string_view name) const;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";  // empty: no Content-Type
  HeaderList headers;
  std::string body;
  // What the middleware decided for the request, when it was asked: the rule the answer came
  // from (MiddlewareResult::rule) and the outcome. For the access log and the latency
  // histograms; never sent.
  std::string rule{};
  std::optional<RequestOutcome> outcome{};
};

}  // namespace ratekeeper::http
