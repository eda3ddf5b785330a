#include "transport.hpp"

#include <fmt/format.h>

#include <boost/asio/ssl/error.hpp>

#include "connect.hpp"
#include "core/tls_context.hpp"

namespace ratekeeper::redis {
namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
using boost::system::error_code;

namespace detail {

Transport::Transport(asio::io_context& context, std::shared_ptr<TlsContext> tls)
    : socket_(context), tls_(std::move(tls)) {}

void Transport::close() {
  error_code ignored;
  socket_.close(ignored);
}

void Transport::open(asio::ip::tcp::resolver& resolver, const Endpoint& endpoint,
                     std::function<void(std::string error)> done) {
  tls_stream_.reset();  // an abandoned attempt's stream lives on in its own handlers
  in_handshake_ = false;
  const std::uint64_t attempt = ++attempts_;
  async_open(socket_, resolver, endpoint, [this, attempt, endpoint, done = std::move(done)](std::string error) mutable {
    if (attempt != attempts_) {  // a later open() owns the socket now
      done("connection attempt abandoned");
      return;
    }
    if (!error.empty()) {
      done(std::move(error));
      return;
    }
    if (!endpoint.is_unix()) {
      error_code ignored;
      socket_.set_option(asio::ip::tcp::no_delay(true), ignored);
    }
    if (!tls_) {
      done({});
      return;
    }
    handshake(endpoint, std::move(done));
  });
}

void Transport::handshake(const Endpoint& endpoint, std::function<void(std::string)> done) {
  auto stream = std::make_shared<TlsStream>(socket_, tls_->context());
  tls_stream_ = stream;
  if (std::string error = prepare_client_handshake(stream->native_handle(), tls_->options(), endpoint.host);
      !error.empty()) {
    done(std::move(error));
    return;
  }
  in_handshake_ = true;
  stream->async_handshake(ssl::stream_base::client, [this, attempt = attempts_, stream, done = std::move(done)](
                                                        const error_code& ec) {
    if (attempt == attempts_) in_handshake_ = false;
    if (!ec) {
      done({});
      return;
    }
    if (ec == asio::error::operation_aborted) {
      done("TLS handshake aborted");
      return;
    }
    done("TLS handshake failed: " + handshake_failure(stream->native_handle(), ec));
  });
}

}  // namespace detail
}  // namespace ratekeeper::redis
