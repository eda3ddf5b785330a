#include "routes.hpp"

#include "ratekeeper/http/headers.hpp"

namespace ratekeeper::server {

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

// application/x-www-form-urlencoded decoding ('+' is a space); bad escapes are kept as sent.
std::string url_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 &&
               hex_value(s[i + 2]) >= 0) {
      out += static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The first value of query parameter `name`, decoded.
std::optional<std::string> query_param(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    const auto amp = query.find('&');
    const auto pair = query.substr(0, amp);
    const auto eq = pair.find('=');
    if (url_decode(pair.substr(0, eq)) == name) {
      return eq == std::string_view::npos ? std::string() : url_decode(pair.substr(eq + 1));
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

std::string json_text(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

Response json_response(int status, std::string body) {
  return Response{status, std::string(kJson), {}, std::move(body)};
}

Response error_response(int status, std::string_view message) {
  return json_response(status, json_text(json{{"error", message}}));
}

Response bad_request(std::string_view detail) {
  return json_response(400, http::bad_request_body(detail));
}

Micros to_ms(Micros t) {
  return (std::max<Micros>(t, 0) + kMicrosPerMilli - 1) / kMicrosPerMilli;
}

bool is_method(std::string_view s) { return s.size() <= 32 && http::is_request_method(s); }

}  // namespace ratekeeper::server
