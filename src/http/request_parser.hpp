#pragma once
// The HTTP/1.1 request parser of http::Server: Beast's basic_parser (the wire syntax, header
// and body limits, chunked bodies) writing straight into a Request. Header fields are
// kept as received, in order, with no per-field size limit of their own: only the header
// limit bounds them (Beast's own field container refuses values of 64 KiB and more by
// throwing). Usable without a socket: put() bytes, check is_done(), release().
// Not thread-safe.

#include <boost/beast/http/basic_parser.hpp>
#include <cstdint>

#include "ratekeeper/http/server.hpp"

namespace ratekeeper::http {

class RequestParser final : public boost::beast::http::basic_parser<true> {
 public:
  RequestParser(std::uint32_t header_bytes, std::uint64_t body_bytes);

  int version() const noexcept { return version_; }  // 10 or 11, after the header
  // The parsed request (after is_done()); the parser is spent afterwards.
  Request release() { return std::move(request_); }

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
};

}  // namespace ratekeeper::http
