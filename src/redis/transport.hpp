#pragma once
// The byte stream of one Redis connection: a socket (TCP or unix), or TLS over a TCP socket.
// Used by the pipelined Connection and the sentinel Subscriber. Internal to src/redis.
//
// Each open() connects afresh and, with TLS, handshakes on a new TLS stream; the stream of an
// abandoned attempt stays alive until its pending operations have completed (their handlers
// hold it). Loop thread only.

#include <boost/asio/buffer.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/write.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "ratekeeper/redis/tls.hpp"
#include "ratekeeper/redis/url.hpp"

namespace ratekeeper::redis {

namespace detail {

class Transport {
 public:
  using Socket = boost::asio::generic::stream_protocol::socket;
  using TlsStream = boost::asio::ssl::stream<Socket&>;

  // `tls` nullptr: plain.
  Transport(boost::asio::io_context& context, std::shared_ptr<TlsContext> tls);

  // Connects to `endpoint` (see async_open in connect.hpp), sets TCP_NODELAY, then with TLS
  // sends SNI, verifies the server's certificate and name, and handshakes. `done` gets an
  // empty string on success, or why it failed ("connect failed: …", "TLS handshake failed:
  // certificate verify failed: certificate has expired", …). As with async_open, the caller
  // keeps the Transport alive until `done` runs and ignores completions of abandoned attempts.
  void open(boost::asio::ip::tcp::resolver& resolver, const Endpoint& endpoint,
            std::function<void(std::string error)> done);

  template <class Handler>
  void async_write(boost::asio::const_buffer buffer, Handler&& handler) {
    if (tls_stream_) {
      boost::asio::async_write(*tls_stream_, buffer,
                               [stream = tls_stream_, h = std::forward<Handler>(handler)](
                                   const boost::system::error_code& ec, std::size_t n) mutable { h(ec, n); });
    } else {
      boost::asio::async_write(socket_, buffer, std::forward<Handler>(handler));
    }
  }

  template <class Handler>
  void async_read_some(boost::asio::mutable_buffer buffer, Handler&& handler) {
    if (tls_stream_) {
      tls_stream_->async_read_some(buffer, [stream = tls_stream_, h = std::forward<Handler>(handler)](
                                               const boost::system::error_code& ec, std::size_t n) mutable { h(ec, n); });
    } else {
      socket_.async_read_some(buffer, std::forward<Handler>(handler));
    }
  }

  // Closes the socket: pending operations complete with operation_aborted.
  void close();
  bool tls() const noexcept { return tls_ != nullptr; }
  // The current open() is in its TLS handshake (connected, not yet secured).
  bool in_tls_handshake() const noexcept { return in_handshake_; }

 private:
  void handshake(const Endpoint& endpoint, std::function<void(std::string)> done);

  Socket socket_;
  std::shared_ptr<TlsContext> tls_;
  std::shared_ptr<TlsStream> tls_stream_;  // the current attempt's
  std::uint64_t attempts_ = 0;             // open() calls: completions of older ones are ignored
  bool in_handshake_ = false;
};

}  // namespace detail
}  // namespace ratekeeper::redis
