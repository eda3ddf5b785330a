// Fuzz target: the reverse proxy's handling of outside bytes without sockets
// (src/http/proxy.cpp, src/http/proxy_message.hpp). The input is two messages: the first two
// bytes give the length of the client's request (little-endian), the rest is the upstream's
// response. The request's line written to the access log must be one valid JSON object with
// the request's status and byte count, whatever bytes its method and target hold. The request goes through the streaming request parser (its body in pieces of a
// few bytes), path normalisation and the header rewriting; the head written to the upstream
// must parse again, with the same method and target, the peer last in X-Forwarded-For. The
// response goes through the response parser (body in pieces) and the rewriting towards the
// client; that head must parse again too.

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "http/proxy_message.hpp"
#include "ratekeeper/http/access_log.hpp"
#include "http/request_parser.hpp"
#include "ratekeeper/http/path.hpp"
#include "require.hpp"

namespace {

using namespace ratekeeper;
namespace bhttp = boost::beast::http;

constexpr std::uint32_t kHeaderLimit = 8 * 1024;
constexpr std::string_view kPeer = "192.0.2.1";

// Feeds `input` to a parser as a socket would: put, and put_eof once nothing more comes.
// Body bytes go to a small buffer, emptied each time it fills. False when the message is
// refused or incomplete.
template <class Parser>
bool parse(Parser& parser, std::string_view& input, bool stream) {
  char piece[7];
  boost::beast::error_code ec;
  while (!parser.is_done()) {
    if (stream && parser.is_header_done()) parser.stream_body(piece, sizeof piece);
    if (input.empty()) {
      parser.put_eof(ec);
      return !ec && parser.is_done();
    }
    const std::size_t used = parser.put(boost::asio::const_buffer(input.data(), input.size()), ec);
    input.remove_prefix(used);
    if (ec == bhttp::error::need_buffer) {
      ec = {};
      continue;
    }
    if (ec == bhttp::error::need_more) {
      ec = {};
      if (used > 0) continue;
      parser.put_eof(ec);
      return !ec && parser.is_done();
    }
    if (ec) return false;
    // A header parsed whole with nothing for the body yet: go on with the body.
  }
  return true;
}

void request_side(std::string_view input) {
  http::RequestParser parser(kHeaderLimit, std::numeric_limits<std::uint64_t>::max(), true);
  parser.eager(false);
  if (!parse(parser, input, true)) return;
  const http::Request& request = parser.request();
  // Under each choice of http.escaped_slashes and http.ambiguous_paths the normal form is a
  // fixed point; the head is written from the most permissive one (the most targets).
  Result<std::string> target = std::unexpected(Error{});
  for (const auto& options :
       {http::PathOptions{},
        http::PathOptions{.lowercase = true, .escaped_slashes = http::EscapedSlashes::unescape},
        http::PathOptions{.escaped_slashes = http::EscapedSlashes::keep, .reject_ambiguous = false}}) {
    target = http::normalize_target(request.target, options);
    if (!target) continue;  // 400
    const auto twice = http::normalize_target(*target, options);
    fuzz::require(twice && *twice == *target);
  }
  {
    // The access log line of this request: one JSON object, whatever its bytes.
    const std::string line = http::AccessLog::format(http::AccessRecord{.time = 1'796'496'639'598'638,
                                                                        .client = kPeer,
                                                                        .method = request.method,
                                                                        .path = request.target,
                                                                        .status = 200,
                                                                        .rule = request.method,
                                                                        .outcome = http::RequestOutcome::admitted,
                                                                        .duration = 1234,
                                                                        .upstream = 1000,
                                                                        .bytes = request.target.size()});
    fuzz::require(line.find('\n') == std::string::npos);
    const auto parsed = nlohmann::json::parse(line, nullptr, false);
    fuzz::require(!parsed.is_discarded() && parsed.is_object());
    fuzz::require(parsed["status"] == 200 && parsed["bytes"] == request.target.size());
    fuzz::require(parsed["method"].is_string() && parsed["path"].is_string());
  }
  if (!target) return;
  // An upgrade asked for is sent on as asked (the proxy relays one for a request without body),
  // when every protocol it offers is one relayed: never h2c.
  static const std::vector<std::string> kRelayed{"websocket", "chat"};
  const std::string_view upgrade = http::requested_upgrade(request.headers, kRelayed);
  std::string offered(upgrade);
  for (char& c : offered) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  fuzz::require(offered.find("h2c") == std::string::npos);
  const http::Forwarding forwarding(kPeer, "https", upgrade);
  const auto fields = http::upstream_request_fields(request.headers, forwarding);
  const auto framing = parser.chunked() ? http::Framing::chunked
                       : parser.content_length() ? http::Framing::length
                                                 : http::Framing::none;
  const std::string head = http::request_head(request.method, *target, fields, framing,
                                              parser.content_length().value_or(0));
  std::string written;
  http::write_upstream_request_head(written, request.method, *target, request.headers, forwarding,
                                    framing, parser.content_length().value_or(0));
  fuzz::require(written == head);
  // The head the upstream receives is one well-formed request header, the one meant.
  http::RequestParser again(1 << 20, std::numeric_limits<std::uint64_t>::max(), true);
  boost::beast::error_code ec;
  again.put(boost::asio::const_buffer(head.data(), head.size()), ec);
  fuzz::require(!ec || ec == bhttp::error::need_buffer);
  fuzz::require(again.is_header_done());
  fuzz::require(again.request().method == request.method);
  fuzz::require(again.request().target == *target);
  const auto forwarded = again.request().header_list("X-Forwarded-For");
  fuzz::require(std::string_view(forwarded).ends_with(kPeer));
  fuzz::require(again.request().header("X-Forwarded-Proto") == std::optional<std::string_view>("https"));
  if (!upgrade.empty()) {
    fuzz::require(again.request().header("Upgrade") == std::optional<std::string_view>(upgrade));
  }
}

void response_side(std::string_view input) {
  http::ResponseParser parser(kHeaderLimit);
  parser.eager(false);
  if (!parse(parser, input, true)) return;
  const http::HeaderList limiter = {{"RateLimit-Policy", "\"api\";q=10;w=1"},
                                    {"RateLimit", "\"api\";r=9;t=1"}};
  const auto fields = http::client_response_fields(parser.fields(), limiter);
  const std::string head = http::response_head(11, parser.status(), parser.reason(), fields,
                                               http::Framing::chunked, 0, true);
  std::string written;
  http::write_client_response_head(written, 11, parser.status(), parser.reason(), parser.fields(),
                                   limiter, http::Framing::chunked, 0, true);
  fuzz::require(written == head);
  http::ResponseParser again(1 << 20);
  boost::beast::error_code ec;
  again.put(boost::asio::const_buffer(head.data(), head.size()), ec);
  fuzz::require(!ec || ec == bhttp::error::need_buffer);
  fuzz::require(again.is_header_done());
  fuzz::require(again.status() == parser.status());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::size_t request_size = std::size_t{data[0]} | (std::size_t{data[1]} << 8);
  std::string_view input(reinterpret_cast<const char*>(data) + 2, size - 2);
  const auto request = input.substr(0, request_size);
  const auto response = input.substr(request.size());
  request_side(request);
  response_side(response);
  return 0;
}
