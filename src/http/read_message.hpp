#pragma once
// Reading an HTTP/1.1 message from a Stream into a Beast parser, as Beast's http::async_read_header
// and http::async_read_some do (the same completions and errors), without their composed
// operations: one read of the stream at a time, parsed as it arrives. A proxied request makes
// four of these reads, so their layers (a composed operation, two work guards and a type-erased
// executor each) are a measurable part of its CPU.
// Internal to src/http.
//   - Bytes already in the buffer are parsed before anything is read.
//   - End of stream: a message begun is finished by put_eof() (a body delimited by the close
//     completes, anything else is partial_message); none begun is end_of_stream.
//   - The handler is never called from inside the call that starts the read: a message
//     already in the buffer completes through the stream's executor.
//   - The buffer grows by at most 64 KiB a read; full (its max_size), buffer_overflow.

#include <boost/asio/post.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <utility>

#include "stream.hpp"

namespace ratekeeper::http {

// The most one read adds to a buffer.
inline constexpr std::size_t kReadSize = 65536;

// The most a read buffer should hold (its max_size): a header of up to `header_limit` bytes,
// a piece of body of up to `piece` bytes, and one read. Every line a parser needs whole (the
// header, a chunk's size line with its extensions, the trailer fields) fits in it; one that
// never ends fails its read with buffer_overflow instead of growing the buffer without end.
constexpr std::size_t read_buffer_limit(std::size_t header_limit, std::size_t piece = 0) noexcept {
  return header_limit + piece + kReadSize;
}

// Until: what completes the read besides an error.
enum class ReadUntil {
  header,  // the header is parsed whole (http::async_read_header)
  some,    // any progress: a put() without error (http::async_read_some)
};

namespace detail {

template <class Parser, class Handler>
class ReadMessageOp {
 public:
  ReadMessageOp(Stream& stream, boost::beast::flat_buffer& buffer, Parser& parser, ReadUntil until,
                Handler&& handler)
      : stream_(&stream), buffer_(&buffer), parser_(&parser), until_(until), handler_(std::move(handler)) {}

  // First step: what is already buffered, then the stream.
  void start() {
    boost::beast::error_code ec;
    if (buffer_->size() != 0 && parse(ec)) {
      boost::asio::post(stream_->get_executor(), [op = std::move(*this), ec]() mutable {
        op.complete(ec);
      });
      return;
    }
    read();
  }

  // A read of the stream completed.
  void operator()(boost::beast::error_code ec, std::size_t n) {
    buffer_->commit(n);
    if (ec == boost::asio::error::eof) {
      if (!parser_->got_some()) return complete(boost::beast::http::error::end_of_stream);
      ec = {};
      parser_->put_eof(ec);
      return complete(ec);
    }
    if (ec) return complete(ec);
    if (parse(ec)) return complete(ec);
    read();
  }

 private:
  // Parses what the buffer holds: true when the read is complete (with ec), false when it
  // needs more bytes.
  bool parse(boost::beast::error_code& ec) {
    while (buffer_->size() != 0) {
      const std::size_t used = parser_->put(buffer_->data(), ec);
      buffer_->consume(used);
      consumed_ += used;
      if (ec == boost::beast::http::error::need_more) {
        ec = {};
        return false;
      }
      if (ec) return true;
      if (until_ == ReadUntil::some || parser_->is_header_done()) return true;
      if (used == 0) return false;
    }
    return false;
  }

  void read() {
    const std::size_t size = buffer_->size();
    const std::size_t room = std::min<std::size_t>(std::max<std::size_t>(512, buffer_->capacity() - size),
                                                   std::min<std::size_t>(kReadSize, buffer_->max_size() - size));
    if (room == 0) return complete(boost::beast::http::error::buffer_overflow);
    boost::asio::mutable_buffer space;
    try {
      space = buffer_->prepare(room);
    } catch (const std::length_error&) {
      return complete(boost::beast::http::error::buffer_overflow);
    }
    Stream& stream = *stream_;
    stream.async_read_some(space, std::move(*this));
  }

  void complete(boost::beast::error_code ec) { handler_(ec, consumed_); }

  Stream* stream_;
  boost::beast::flat_buffer* buffer_;
  Parser* parser_;
  ReadUntil until_;
  std::size_t consumed_ = 0;
  Handler handler_;
};

}  // namespace detail

// Reads from `stream` into `buffer`, parsing with `parser`, until `until` or an error; then
// handler(error_code, bytes parsed). `stream`, `buffer` and `parser` outlive the read.
template <class Parser, class Handler>
void async_read_message(Stream& stream, boost::beast::flat_buffer& buffer, Parser& parser, ReadUntil until,
                        Handler&& handler) {
  detail::ReadMessageOp<Parser, std::decay_t<Handler>>(stream, buffer, parser, until,
                                                         std::forward<Handler>(handler))
      .start();
}

}  // namespace ratekeeper::http
