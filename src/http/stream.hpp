#pragma once
// The byte stream of one HTTP connection, client or upstream side: a TCP stream with Beast's
// timeouts, or TLS over one. One type for both, so that the sessions' HTTP code (Beast's
// parsers and serializers, the relays) is compiled once; each operation picks the layer with
// one branch. With no timeout set (the sessions bound their operations with one LazyDeadline
// instead), the bytes go to and from the socket directly, under TLS too: Beast's timed layer
// costs a work guard and an operation of its own on each read and write. Internal to src/http.

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream_base.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <memory>
#include <optional>
#include <utility>

namespace ratekeeper::http {

class Stream {
 public:
  using executor_type = boost::beast::tcp_stream::executor_type;

  // What TLS runs over: the connection's TCP stream, through Beast's timed operations while a
  // timeout is set (the handshake's), its socket otherwise.
  class TcpLayer {
   public:
    using executor_type = boost::beast::tcp_stream::executor_type;
    using lowest_layer_type = boost::asio::ip::tcp::socket::lowest_layer_type;

    explicit TcpLayer(Stream& stream) noexcept : stream_(&stream) {}
    void rebind(Stream& stream) noexcept { stream_ = &stream; }

    executor_type get_executor() noexcept { return stream_->tcp_->get_executor(); }
    lowest_layer_type& lowest_layer() noexcept { return stream_->tcp_->socket().lowest_layer(); }
    const lowest_layer_type& lowest_layer() const noexcept { return stream_->tcp_->socket().lowest_layer(); }

    template <class MutableBuffers, class Handler>
    void async_read_some(const MutableBuffers& buffers, Handler&& handler) {
      if (stream_->timed_) {
        stream_->tcp_->async_read_some(buffers, std::forward<Handler>(handler));
      } else {
        stream_->tcp_->socket().async_read_some(buffers, std::forward<Handler>(handler));
      }
    }
    template <class ConstBuffers, class Handler>
    void async_write_some(const ConstBuffers& buffers, Handler&& handler) {
      if (stream_->timed_) {
        stream_->tcp_->async_write_some(buffers, std::forward<Handler>(handler));
      } else {
        stream_->tcp_->socket().async_write_some(buffers, std::forward<Handler>(handler));
      }
    }

   private:
    Stream* stream_;
  };
  using TlsLayer = boost::beast::ssl_stream<TcpLayer>;

  // An accepted connection, plain.
  explicit Stream(boost::asio::ip::tcp::socket&& socket) : tcp_(std::in_place, std::move(socket)) {}
  // An accepted connection, TLS with `context` (kept by the caller as long as the stream).
  Stream(boost::asio::ip::tcp::socket&& socket, boost::asio::ssl::context& context)
      : tcp_(std::in_place, std::move(socket)), tls_(std::in_place, TcpLayer(*this), context) {}
  // A connection to be made (tcp().async_connect), plain or (with `context`) TLS.
  Stream(const executor_type& executor, boost::asio::ssl::context* context) : tcp_(std::in_place, executor) {
    if (context != nullptr) tls_.emplace(TcpLayer(*this), *context);
  }
  // Handed on (to an HTTP/2 session) with no operation under way: the TLS layer, which refers
  // to the stream it is part of, is pointed at its new place.
  Stream(Stream&& other) noexcept
      : tcp_(std::move(other.tcp_)), timed_(other.timed_), tls_(std::move(other.tls_)) {
    if (tls_) tls_->next_layer().rebind(*this);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Stream& operator=(Stream&&) = delete;

  executor_type get_executor() noexcept { return tcp_->get_executor(); }
  // The TCP layer: the socket, connecting (its timeouts through expires_*() below).
  boost::beast::tcp_stream& tcp() noexcept { return *tcp_; }

  // Beast's timeout of the operations from now on (connecting and the TLS handshake
  // included): every operation under way or started before it passes ends with
  // beast::error::timeout, the connection closed.
  template <class Duration>
  void expires_after(Duration d) {
    timed_ = true;
    tcp_->expires_after(d);
  }
  template <class TimePoint>
  void expires_at(TimePoint t) {
    timed_ = true;
    tcp_->expires_at(t);
  }
  void expires_never() {
    timed_ = false;
    tcp_->expires_never();
  }

  bool is_tls() const noexcept { return tls_.has_value(); }
  TlsLayer* tls() noexcept { return tls_ ? &*tls_ : nullptr; }

  template <class Handler>
  void async_handshake(boost::asio::ssl::stream_base::handshake_type type, Handler&& handler) {
    tls_->async_handshake(type, std::forward<Handler>(handler));
  }

  template <class MutableBuffers, class Handler>
  void async_read_some(const MutableBuffers& buffers, Handler&& handler) {
    if (tls_) {
      tls_->async_read_some(buffers, std::forward<Handler>(handler));
    } else {
      TcpLayer(*this).async_read_some(buffers, std::forward<Handler>(handler));
    }
  }

  template <class ConstBuffers, class Handler>
  void async_write_some(const ConstBuffers& buffers, Handler&& handler) {
    if (tls_) {
      tls_->async_write_some(buffers, std::forward<Handler>(handler));
    } else {
      TcpLayer(*this).async_write_some(buffers, std::forward<Handler>(handler));
    }
  }

 private:
  std::optional<boost::beast::tcp_stream> tcp_;
  bool timed_ = false;  // an expires_*() other than never is in force
  std::optional<TlsLayer> tls_;
};

}  // namespace ratekeeper::http
