#pragma once
// The OpenSSL contexts behind core/tls.hpp, for the transports that use them (src/redis,
// src/http). Internal.

#include <openssl/ssl.h>

#include <boost/asio/ssl/context.hpp>
#include <boost/system/error_code.hpp>
#include <string>
#include <string_view>
#include <utility>

#include "ratekeeper/core/tls.hpp"

namespace ratekeeper {

class TlsContext {
 public:
  TlsContext(boost::asio::ssl::context context, TlsOptions options)
      : context_(std::move(context)), options_(std::move(options)) {}
  boost::asio::ssl::context& context() noexcept { return context_; }
  const TlsOptions& options() const noexcept { return options_; }

 private:
  boost::asio::ssl::context context_;
  TlsOptions options_;
};

class TlsServerContext {
 public:
  TlsServerContext(boost::asio::ssl::context context, TlsServerOptions options)
      : context_(std::move(context)), options_(std::move(options)) {}
  boost::asio::ssl::context& context() noexcept { return context_; }
  const TlsServerOptions& options() const noexcept { return options_; }

 private:
  boost::asio::ssl::context context_;
  TlsServerOptions options_;
};

// Before a client handshake on `ssl`: SNI (host names only, RFC 6066) and, with verification,
// the name the server's certificate must carry: options.server_name, or `host` (the host
// connected to). An empty string, or why it cannot be set up.
std::string prepare_client_handshake(SSL* ssl, const TlsOptions& options, const std::string& host);

// Why a handshake failed, in words: the certificate check's reason when it was that, else
// OpenSSL's reason ("certificate verify failed: certificate has expired", "wrong version
// number").
std::string handshake_failure(SSL* ssl, const boost::system::error_code& ec);

// OpenSSL's reason for a failure, without the library's error-code prefix.
std::string ssl_reason(const boost::system::error_code& ec);

}  // namespace ratekeeper
