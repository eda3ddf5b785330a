#pragma once
// The HTTP/1.1 request parser of http::Server: Beast's basic_parser (the wire syntax, header
// and body limits, chunked bodies) writing straight into a Request. Header fields are
// kept as received, in order, with no per-field size limit of their own: only the header
// limit bounds them (Beast's own field container refuses values of 64 KiB and more by
// throwing). Usable without a socket: put() bytes, check is_done(), release().
// Request smuggling is refused: besides Beast's own checks (Content-Length with
// Transfer-Encoding, differing lengths), a second Content-Length field (bad_content_length)
// and a Transfer-Encoding whose last coding is not chunked, or in an HTTP/1.0 request
// (bad_transfer_encoding). RFC 9112: an HTTP/1.1 request without a Host field, or any request
// with two, is refused (bad_field). Trailer fields are parsed and dropped (RFC 9110 6.5.1):
// nothing after the body can change what the header said.
// Streaming (the proxy): after the header, stream_body() gives the body somewhere to go, a
// piece at a time; the parser stops with need_buffer once that place is full.
// Not thread-safe.

#include <boost/beast/http/basic_parser.hpp>
#include <cstdint>

#include "ratekeeper/http/server.hpp"

namespace ratekeeper::http {

// Where a streamed body goes, a piece at a time: put() copies what fits and reports
// need_buffer when the rest does not.
struct BodySink {
  char* data = nullptr;
  std::size_t size = 0;      // room left at data
  std::size_t streamed = 0;  // bytes put since reset()

  void reset(char* d, std::size_t n) noexcept {
    data = d;
    size = n;
    streamed = 0;
  }
  std::size_t put(boost::beast::string_view body, boost::beast::error_code& ec) noexcept;
};

class RequestParser final : public boost::beast::http::basic_parser<true> {
 public:
  // `streamed`: the body is never kept in the Request, only passed on through stream_body().
  RequestParser(std::uint32_t header_bytes, std::uint64_t body_bytes, bool streamed = false);

  int version() const noexcept { return version_; }  // 10 or 11, after the header
  // The parsed request (after is_done()); the parser is spent afterwards.
  Request release() { return std::move(request_); }
  // The request line and header fields, body empty (after is_header_done()).
  Request& request() noexcept { return request_; }

  // Body bytes go to [data, data + size) from now on instead of into the Request; then
  // streamed() says how many arrived there.
  void stream_body(char* data, std::size_t size) noexcept {
    streaming_ = true;
    sink_.reset(data, size);
  }
  std::size_t streamed() const noexcept { return sink_.streamed; }

 private:
  using error_code = boost::beast::error_code;
  using string_view = boost::beast::string_view;

  void on_request_impl(boost::beast::http::verb, string_view method, string_view target,
                       int version, error_code& ec) override;
  void on_response_impl(int, string_view, int, error_code& ec) override;
  void on_field_impl(boost::beast::http::field, string_view name, string_view value,
                     error_code& ec) override;
  void on_header_impl(error_code& ec) override;
  void on_body_init_impl(const boost::optional<std::uint64_t>& content_length,
                         error_code& ec) override;
  std::size_t on_body_impl(string_view body, error_code& ec) override;
  void on_chunk_header_impl(std::uint64_t size, string_view extensions, error_code& ec) override;
  std::size_t on_chunk_body_impl(std::uint64_t remain, string_view body, error_code& ec) override;
  void on_finish_impl(error_code& ec) override;

  Request request_;
  std::uint64_t body_limit_;
  int version_ = 11;
  bool content_length_seen_ = false;
  bool transfer_encoding_seen_ = false;
  int host_fields_ = 0;
  bool streaming_ = false;
  BodySink sink_;
};

}  // namespace ratekeeper::http
