#include "transport.hpp"

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include <boost/asio/ssl/error.hpp>

#include "connect.hpp"

namespace ratekeeper::redis {
namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
using boost::system::error_code;

namespace {

std::unexpected<Error> tls_error(std::string_view option, std::string_view file, std::string_view why) {
  return make_error(ErrorCode::invalid_argument, fmt::format("tls {} '{}': {}", option, file, why));
}

// OpenSSL's reason for the last failure, without the library's error-code prefix.
std::string ssl_reason(const error_code& ec) {
  if (ec.category() == asio::error::get_ssl_category()) {
    const char* reason = ERR_reason_error_string(static_cast<unsigned long>(ec.value()));
    if (reason != nullptr) return reason;
  }
  return ec.message();
}

}  // namespace

Result<std::shared_ptr<TlsContext>> make_tls_context(const TlsOptions& options) {
  ssl::context context(ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(context.native_handle(), TLS1_2_VERSION);
  error_code ec;
  if (options.verify) {
    context.set_verify_mode(ssl::verify_peer, ec);
    if (!options.ca_file.empty()) {
      if (context.load_verify_file(options.ca_file, ec); ec) {
        return tls_error("ca_file", options.ca_file, "cannot load: " + ssl_reason(ec));
      }
    }
    if (!options.ca_dir.empty()) {
      if (context.add_verify_path(options.ca_dir, ec); ec) {
        return tls_error("ca_dir", options.ca_dir, "cannot use: " + ssl_reason(ec));
      }
    }
    if (options.ca_file.empty() && options.ca_dir.empty()) {
      if (context.set_default_verify_paths(ec); ec) {
        return make_error(ErrorCode::invalid_argument,
                          "tls: the system's CA certificates cannot be loaded: " + ssl_reason(ec));
      }
    }
  } else {
    context.set_verify_mode(ssl::verify_none, ec);
  }
  if (options.cert_file.empty() != options.key_file.empty()) {
    return make_error(ErrorCode::invalid_argument,
                      "tls: cert_file and key_file go together (a client certificate and its key)");
  }
  if (!options.cert_file.empty()) {
    if (context.use_certificate_chain_file(options.cert_file, ec); ec) {
      return tls_error("cert_file", options.cert_file, "cannot load: " + ssl_reason(ec));
    }
    if (context.use_private_key_file(options.key_file, ssl::context::pem, ec); ec) {
      return tls_error("key_file", options.key_file, "cannot load: " + ssl_reason(ec));
    }
    if (SSL_CTX_check_private_key(context.native_handle()) != 1) {
      ERR_clear_error();
      return tls_error("key_file", options.key_file, "does not match the certificate of cert_file");
    }
  }
  return std::make_shared<TlsContext>(std::move(context), options);
}

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
  const TlsOptions& options = tls_->options();
  const std::string& name = options.server_name.empty() ? endpoint.host : options.server_name;
  SSL* ssl = stream->native_handle();
  error_code not_ip;
  asio::ip::make_address(name, not_ip);
  // SNI carries host names only (RFC 6066).
  if (not_ip && SSL_set_tlsext_host_name(ssl, name.c_str()) != 1) {
    ERR_clear_error();
    done(fmt::format("TLS: server name '{}' cannot be sent", name));
    return;
  }
  if (options.verify) {
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    const int set = not_ip ? (X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS),
                              X509_VERIFY_PARAM_set1_host(param, name.c_str(), name.size()))
                           : X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str());
    if (set != 1) {
      ERR_clear_error();
      done(fmt::format("TLS: server name '{}' cannot be verified", name));
      return;
    }
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
    const long verified = SSL_get_verify_result(stream->native_handle());
    if (verified != X509_V_OK) {
      done(fmt::format("TLS handshake failed: certificate verify failed: {}",
                       X509_verify_cert_error_string(verified)));
      return;
    }
    done("TLS handshake failed: " + ssl_reason(ec));
  });
}

}  // namespace detail
}  // namespace ratekeeper::redis
