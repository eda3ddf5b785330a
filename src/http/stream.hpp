#pragma once
// The byte stream of one HTTP connection, client or upstream side: a TCP stream with Beast's
// timeouts, or TLS over one. One type for both, so that the sessions' HTTP code (Beast's
// parsers and serializers, the relays) is compiled once; each operation picks the layer with
// one branch. A plain stream with no timeout set (the sessions bound their operations with one
// LazyDeadline instead) reads and writes its socket directly: Beast's timed layer costs a
// work guard and an operation of its own on each. Internal to src/http.

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
  using TlsLayer = boost::beast::ssl_stream<boost::beast::tcp_stream>;

  // An accepted connection, plain.
  explicit Stream(boost::asio::ip::tcp::socket&& socket) : plain_(std::in_place, std::move(socket)) {}
  // An accepted connection, TLS with `context` (kept by the caller as long as the stream).
  Stream(boost::asio::ip::tcp::socket&& socket, boost::asio::ssl::context& context)
      : tls_(std::in_place, std::move(socket), context) {}
  // A connection to be made (tcp().async_connect), plain or (with `context`) TLS.
  Stream(const executor_type& executor, boost::asio::ssl::context* context) {
    if (context != nullptr) {
      tls_.emplace(executor, *context);
    } else {
      plain_.emplace(executor);
    }
  }

  executor_type get_executor() noexcept { return tcp().get_executor(); }
  // The TCP layer: the socket, connecting (its timeouts through expires_*() below).
  boost::beast::tcp_stream& tcp() noexcept { return tls_ ? tls_->next_layer() : *plain_; }

  // Beast's timeout of the operations from now on (connecting included): every operation
  // under way or started before it passes ends with beast::error::timeout, the connection
  // closed.
  template <class Duration>
  void expires_after(Duration d) {
    timed_ = true;
    tcp().expires_after(d);
  }
  template <class TimePoint>
  void expires_at(TimePoint t) {
    timed_ = true;
    tcp().expires_at(t);
  }
  void expires_never() {
    timed_ = false;
    tcp().expires_never();
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
    } else if (timed_) {
      plain_->async_read_some(buffers, std::forward<Handler>(handler));
    } else {
      plain_->socket().async_read_some(buffers, std::forward<Handler>(handler));
    }
  }

  template <class ConstBuffers, class Handler>
  void async_write_some(const ConstBuffers& buffers, Handler&& handler) {
    if (tls_) {
      tls_->async_write_some(buffers, std::forward<Handler>(handler));
    } else if (timed_) {
      plain_->async_write_some(buffers, std::forward<Handler>(handler));
    } else {
      plain_->socket().async_write_some(buffers, std::forward<Handler>(handler));
    }
  }

 private:
  std::optional<boost::beast::tcp_stream> plain_;
  std::optional<TlsLayer> tls_;
  bool timed_ = false;  // an expires_*() other than never is in force
};

}  // namespace ratekeeper::http
