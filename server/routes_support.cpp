#include "routes.hpp"

#include "ratekeeper/http/headers.hpp"

namespace ratekeeper::server {

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

bool is_method(std::string_view s) {
  if (s.empty() || s.size() > 32) return false;
  for (const char c : s) {
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum && std::string_view("!#$%&'*+-.^_`|~").find(c) == std::string_view::npos) {
      return false;
    }
  }
  return true;
}

}  // namespace ratekeeper::server
