#include "request_parser.hpp"

#include <algorithm>
#include <cstring>
#include <boost/beast/http/error.hpp>

namespace ratekeeper::http {

namespace bhttp = boost::beast::http;

RequestParser::RequestParser(std::uint32_t header_bytes, std::uint64_t body_bytes, bool streamed)
    : body_limit_(body_bytes), streaming_(streamed) {
  header_limit(header_bytes);
  body_limit(body_bytes);
}

void RequestParser::on_request_impl(bhttp::verb, string_view method, string_view target,
                                    int version, error_code&) {
  request_.method.assign(method.data(), method.size());
  request_.target.assign(target.data(), target.size());
  version_ = version;
}

void RequestParser::on_response_impl(int, string_view, int, error_code& ec) {
  ec = bhttp::error::bad_version;  // never called for a request parser
}

namespace {

bool only_chunked_or_identity(std::string_view value) noexcept {
  while (!value.empty()) {
    const auto comma = value.find(',');
    std::string_view coding = value.substr(0, comma);
    while (!coding.empty() && (coding.front() == ' ' || coding.front() == '\t')) coding.remove_prefix(1);
    while (!coding.empty() && (coding.back() == ' ' || coding.back() == '\t')) coding.remove_suffix(1);
    if (!coding.empty() && !iequals(coding, "chunked") && !iequals(coding, "identity")) return false;
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return true;
}

}  // namespace

void RequestParser::on_field_impl(bhttp::field f, string_view name, string_view value,
                                  error_code& ec) {
  // RFC 9110 6.5.1: trailer fields (after a chunked body) are not merged into the header
  // section; none is kept, none is forwarded. The header limit bounds them as it bounds headers.
  if (is_header_done()) return;
  if (f == bhttp::field::content_length) {
    // One decimal number: a list ("0, 0"), even of equal values, is refused as nginx does,
    // so that no reader after this one can take it for another length.
    const bool digits = !value.empty() && std::all_of(value.begin(), value.end(), [](char c) {
      return c >= '0' && c <= '9';
    });
    if (content_length_seen_ || !digits) {
      ec = bhttp::error::bad_content_length;
      return;
    }
    content_length_seen_ = true;
  } else if (f == bhttp::field::transfer_encoding) {
    transfer_encoding_seen_ = true;
    // Only chunked (and identity, which changes nothing) can be re-framed: the body of
    // "gzip, chunked" would reach the upstream chunked, its gzip coding lost.
    if (!only_chunked_or_identity(std::string_view(value.data(), value.size()))) {
      ec = bhttp::error::bad_transfer_encoding;
      return;
    }
  } else if (f == bhttp::field::host) {
    ++host_fields_;
  }
  if (request_.headers.empty()) request_.headers.reserve(8);
  request_.headers.emplace_back(std::string(name.data(), name.size()),
                                std::string(value.data(), value.size()));
}

void RequestParser::on_header_impl(error_code& ec) {
  // A request body is delimited by chunked or by its length: any other coding last leaves
  // its end to whoever reads it next.
  if (transfer_encoding_seen_ && !chunked()) ec = bhttp::error::bad_transfer_encoding;
  // RFC 9112 6.1: HTTP/1.0 has no Transfer-Encoding; its framing cannot be trusted.
  if (transfer_encoding_seen_ && version_ < 11) ec = bhttp::error::bad_transfer_encoding;
  // RFC 9112 3.2: an HTTP/1.1 request has exactly one Host field; none or several is a 400.
  if (host_fields_ > 1 || (version_ >= 11 && host_fields_ == 0)) ec = bhttp::error::bad_field;
}

void RequestParser::on_body_init_impl(const boost::optional<std::uint64_t>& content_length,
                                      error_code&) {
  // basic_parser has refused a length above the limit already; reserve what is announced.
  if (content_length && !streaming_) request_.body.reserve(static_cast<std::size_t>(std::min(*content_length, body_limit_)));
}

std::size_t BodySink::put(boost::beast::string_view body, boost::beast::error_code& ec) noexcept {
  const std::size_t n = std::min(body.size(), size);
  if (n > 0) std::memcpy(data, body.data(), n);
  data += n;
  size -= n;
  streamed += n;
  if (n < body.size()) ec = bhttp::error::need_buffer;
  return n;
}

std::size_t RequestParser::on_body_impl(string_view body, error_code& ec) {
  if (streaming_) return sink_.put(body, ec);
  request_.body.append(body.data(), body.size());
  return body.size();
}

void RequestParser::on_chunk_header_impl(std::uint64_t, string_view, error_code&) {}

std::size_t RequestParser::on_chunk_body_impl(std::uint64_t, string_view body, error_code& ec) {
  if (streaming_) return sink_.put(body, ec);
  request_.body.append(body.data(), body.size());
  return body.size();
}

void RequestParser::on_finish_impl(error_code&) {}

}  // namespace ratekeeper::http
