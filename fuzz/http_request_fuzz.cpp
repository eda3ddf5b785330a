// Fuzz target: bytes from an HTTP client to a response on the wire, as the server handles a
// connection (src/http/server.cpp): the request parser (src/http/request_parser.hpp) with the
// server's default limits, then the rate-limiting middleware and the routes (server/api.hpp)
// over a memory store (fuzz/api_fixture.hpp), then the Beast response the server writes.
// Pipelined requests are answered in turn until one cannot be read or asks to close.

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>

#include "api_fixture.hpp"
#include "http/request_parser.hpp"

namespace {

using namespace ratekeeper;
namespace bhttp = boost::beast::http;

constexpr int kMaxRequests = 8;

// The response as Server writes it (Session::build).
std::string wire(const http::Response& r, unsigned version) {
  bhttp::response<bhttp::string_body> res;
  res.version(version);
  res.result(static_cast<unsigned>(r.status));
  res.set(bhttp::field::server, "ratekeeper");
  if (!r.content_type.empty()) res.set(bhttp::field::content_type, r.content_type);
  for (const auto& [name, value] : r.headers) res.insert(name, value);
  res.body() = r.body;
  res.prepare_payload();
  std::ostringstream out;
  out << res;
  return out.str();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const http::ServerOptions limits;
  fuzz::ApiFixture api;
  std::string_view input(reinterpret_cast<const char*>(data), size);
  for (int n = 0; n < kMaxRequests && !input.empty(); ++n) {
    http::RequestParser parser(static_cast<std::uint32_t>(limits.header_limit), limits.body_limit);
    boost::beast::error_code ec;
    // As the server reads: put what was received, and at the end of the input (the client
    // sends nothing more) put_eof.
    while (!parser.is_done()) {
      if (input.empty()) {
        parser.put_eof(ec);
        break;
      }
      const std::size_t used =
          parser.put(boost::asio::const_buffer(input.data(), input.size()), ec);
      input.remove_prefix(used);
      if (ec == bhttp::error::need_more) {
        ec = {};
        if (used > 0) continue;
        parser.put_eof(ec);  // what is left is not enough: nothing more comes
        break;
      }
      if (ec) break;
    }
    if (ec || !parser.is_done()) break;  // answered 431, 413 or 400 by the server, then closed
    const unsigned version = static_cast<unsigned>(parser.version());
    const bool keep_alive = parser.keep_alive();
    const auto response = api.handle(parser.release());
    const std::string bytes = wire(response, version);
    fuzz::require(bytes.starts_with(version == 10 ? "HTTP/1.0 " : "HTTP/1.1 "));
    if (!keep_alive) break;
  }
  return 0;
}
