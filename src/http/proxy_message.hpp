#pragma once
// The messages of the reverse proxy, apart from the sockets: which header fields pass in each
// direction, the heads written to the upstream and to the client, and the parser of the
// upstream's responses. Header rewriting is pure (no Beast types), for tests and the fuzzer.
//   - Hop-by-hop fields are removed both ways (Connection, Keep-Alive, Proxy-Connection, TE,
//     Trailer, Transfer-Encoding, Upgrade, Proxy-Authenticate, Proxy-Authorization), and so
//     is every field named in Connection, except the ones the proxy vouches for (Host,
//     X-Forwarded-*, Forwarded, the rate-limit fields): a client cannot have them dropped.
//   - Content-Length is removed too: each head states its own framing.
//   - To the upstream: X-Forwarded-For gets the peer appended to the chain received,
//     X-Forwarded-Proto is set to the scheme the request came in on (http, https) and
//     X-Forwarded-Host to the Host received.
//   - An upgrade (WebSocket): a request asking for one (Upgrade, named in Connection) is sent
//     on with `Connection: upgrade` and its Upgrade field; the upstream's 101 goes back with
//     its Upgrade field and `Connection: upgrade`. Nothing else of either message changes.
//   - To the client: the limiter's fields (RateLimit-Policy, RateLimit, ...) replace the
//     upstream's fields of the same names.
// Thread-safety: pure functions are thread-safe; a parser is not.

#include <boost/beast/http/basic_parser.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <span>
#include <string_view>

#include "ratekeeper/http/request.hpp"
#include "request_parser.hpp"

namespace ratekeeper::http {

// How a head delimits the body after it.
enum class Framing {
  none,     // no body (or HEAD / 204 / 304: none follows whatever the fields say)
  length,   // Content-Length: n
  chunked,  // Transfer-Encoding: chunked
  close,    // the body ends when the connection closes (responses only)
};

// True for the fields that apply to one connection only.
bool is_hop_by_hop(std::string_view name) noexcept;

// Methods whose content has no defined meaning (RFC 9110 9.3: GET, HEAD, DELETE, OPTIONS,
// TRACE). Many applications never read a body sent with them, and then parse it as the next
// request on the connection: a request the rules never saw, whose response would go to the
// next client given the connection. Such a request with a body is sent on with
// `Connection: close` (Forwarding::close), and its upstream connection is not reused.
bool body_unexpected(std::string_view method) noexcept;

// What the proxy states about a request it sends on: the client's address, the scheme the
// request came in on, the protocol an upgrade asks for (empty: none), and whether the upstream
// connection ends with this request.
struct Forwarding {
  explicit Forwarding(std::string_view peer) : peer_address(peer) {}
  Forwarding(std::string_view peer, std::string_view scheme, std::string_view upgrade_to, bool last = false)
      : peer_address(peer), proto(scheme), upgrade(upgrade_to), close(last) {}
  std::string_view peer_address;
  std::string_view proto = "http";
  std::string_view upgrade;
  bool close = false;  // `Connection: close` (never with an upgrade)
};

// The protocols a request asks to upgrade to (its Upgrade field, when Connection names
// "upgrade"), when each protocol it offers is one of `allowed` (names compared without case, a
// version ignored: "websocket/13" is websocket); empty when it asks for none or for another.
std::string_view requested_upgrade(const HeaderList& received, std::span<const std::string> allowed) noexcept;

// Removes from a received request the fields its Connection field names, when the proxy
// would not send them on (RFC 9110 7.6.1): what the rules decide on is what the upstream
// receives. Without this, an identity header the client names in Connection would be counted
// and then never reach the application. Hop-by-hop fields, Content-Length and the fields the
// proxy vouches for stay: the proxy reads or rewrites them itself.
void remove_connection_named(HeaderList& fields);

// The fields of the request the upstream receives (without framing: see request_head).
HeaderList upstream_request_fields(const HeaderList& received, const Forwarding& forwarding);

// The fields of the response the client receives (without framing: see response_head).
HeaderList client_response_fields(const HeaderList& received, const HeaderList& limiter_fields);
// The same fields, in the same order, handed to `f` one by one without being copied.
void each_client_response_field(const HeaderList& received, const HeaderList& limiter_fields,
                                const std::function<void(std::string_view, std::string_view)>& f);

// "METHOD target HTTP/1.1\r\n" fields, framing, "\r\n". Fields whose name or value could
// break the head (CR, LF, NUL; an empty name) are left out.
std::string request_head(std::string_view method, std::string_view target,
                         const HeaderList& fields, Framing framing, std::uint64_t length);

// "HTTP/1.x status reason\r\n" fields, framing, Connection, "\r\n". `length` is written for
// Framing::length, and kept for a response without body (a HEAD's Content-Length).
std::string response_head(int version, int status, std::string_view reason,
                          const HeaderList& fields, Framing framing, std::uint64_t length,
                          bool keep_alive);

// request_head(method, target, upstream_request_fields(received, forwarding), framing,
// length) and response_head(version, status, reason, client_response_fields(received,
// limiter_fields), framing, length, keep_alive), written into `out` (replacing what it held,
// keeping its capacity) without building the field lists in between: the proxy's request path.
void write_upstream_request_head(std::string& out, std::string_view method, std::string_view target,
                                 const HeaderList& received, const Forwarding& forwarding,
                                 Framing framing, std::uint64_t length);
// The upstream's 101 to an upgrade, as the client receives it: the status line, its fields
// (hop-by-hop ones dropped as usual), the limiter's, then its Upgrade and `Connection: upgrade`.
void write_client_upgrade_head(std::string& out, std::string_view reason, const HeaderList& received,
                               const HeaderList& limiter_fields);
void write_client_response_head(std::string& out, int version, int status, std::string_view reason,
                                const HeaderList& received, const HeaderList& limiter_fields,
                                Framing framing, std::uint64_t length, bool keep_alive);

// Chunked framing of one piece of body: "<hex size>\r\n" before it, "\r\n" after it; the
// last chunk is "0\r\n\r\n".
std::string chunk_prefix(std::size_t size);
inline constexpr std::string_view kChunkSuffix = "\r\n";
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";

// The upstream's response: status line and fields kept, the body streamed into the place
// stream_body() gives (need_buffer once full). 1xx responses parse as complete messages
// without body; call skip(true) before the header of a response to HEAD.
class ResponseParser final : public boost::beast::http::basic_parser<false> {
 public:
  explicit ResponseParser(std::uint32_t header_bytes);

  int version() const noexcept { return version_; }
  int status() const noexcept { return status_; }
  const std::string& reason() const noexcept { return reason_; }
  const HeaderList& fields() const noexcept { return fields_; }

  void stream_body(char* data, std::size_t size) noexcept { sink_.reset(data, size); }
  std::size_t streamed() const noexcept { return sink_.streamed; }

 private:
  using error_code = boost::beast::error_code;
  using string_view = boost::beast::string_view;

  void on_request_impl(boost::beast::http::verb, string_view, string_view, int,
                       error_code& ec) override;
  void on_response_impl(int code, string_view reason, int version, error_code& ec) override;
  void on_field_impl(boost::beast::http::field f, string_view name, string_view value,
                     error_code& ec) override;
  void on_header_impl(error_code&) override {}
  void on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) override {}
  std::size_t on_body_impl(string_view body, error_code& ec) override;
  void on_chunk_header_impl(std::uint64_t, string_view, error_code&) override {}
  std::size_t on_chunk_body_impl(std::uint64_t, string_view body, error_code& ec) override;
  void on_finish_impl(error_code&) override {}

  int version_ = 11;
  int status_ = 0;
  std::string reason_;
  HeaderList fields_;
  bool content_length_seen_ = false;
  BodySink sink_;
};

}  // namespace ratekeeper::http
