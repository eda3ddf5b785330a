#include "ratekeeper/core/tls.hpp"

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ssl/error.hpp>
#include <cstring>
#include <string_view>

#include "alpn.hpp"
#include "tls_context.hpp"

namespace ratekeeper {
namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
using boost::system::error_code;

namespace {

std::unexpected<Error> tls_error(std::string_view option, std::string_view file, std::string_view why) {
  return make_error(ErrorCode::invalid_argument, fmt::format("tls {} '{}': {}", option, file, why));
}

// Mozilla's "intermediate" TLS 1.2 suites: forward secrecy and AEAD only. TLS 1.3's suites
// are OpenSSL's defaults (all AEAD).
constexpr const char* kTls12Ciphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"
    "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

// ALPN, server side: h2 when the listener speaks it (`arg` non-null) and the client offers it,
// else http/1.1; a client offering neither gets no ALPN answer (and speaks HTTP/1.1 or fails
// on its own).
int select_alpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
                unsigned int inlen, void* arg) {
  const auto chosen = choose_alpn(std::span<const unsigned char>(in, inlen), arg != nullptr);
  if (!chosen) return SSL_TLSEXT_ERR_NOACK;
  *out = chosen->data();
  *outlen = static_cast<unsigned char>(chosen->size());
  return SSL_TLSEXT_ERR_OK;
}

}  // namespace

std::optional<std::span<const unsigned char>> choose_alpn(std::span<const unsigned char> offered, bool h2) noexcept {
  const auto find = [&](std::string_view protocol) -> std::optional<std::span<const unsigned char>> {
    for (std::size_t i = 0; i < offered.size();) {
      const std::size_t n = offered[i];
      if (n > offered.size() - i - 1) break;  // cut short
      const auto name = offered.subspan(i + 1, n);
      if (n == protocol.size() && std::memcmp(name.data(), protocol.data(), n) == 0) return name;
      i += 1 + n;
    }
    return std::nullopt;
  };
  if (h2) {
    if (auto name = find("h2")) return name;
  }
  return find("http/1.1");
}

std::string ssl_reason(const error_code& ec) {
  if (ec.category() == asio::error::get_ssl_category()) {
    const char* reason = ERR_reason_error_string(static_cast<unsigned long>(ec.value()));
    if (reason != nullptr) return reason;
  }
  return ec.message();
}

std::string handshake_failure(SSL* ssl, const error_code& ec) {
  const long verified = SSL_get_verify_result(ssl);
  if (verified != X509_V_OK) {
    return fmt::format("certificate verify failed: {}", X509_verify_cert_error_string(verified));
  }
  return ssl_reason(ec);
}

std::string prepare_client_handshake(SSL* ssl, const TlsOptions& options, const std::string& host) {
  const std::string& name = options.server_name.empty() ? host : options.server_name;
  error_code not_ip;
  asio::ip::make_address(name, not_ip);
  if (not_ip && SSL_set_tlsext_host_name(ssl, name.c_str()) != 1) {
    ERR_clear_error();
    return fmt::format("TLS: server name '{}' cannot be sent", name);
  }
  if (options.verify) {
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    const int set = not_ip ? (X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS),
                              X509_VERIFY_PARAM_set1_host(param, name.c_str(), name.size()))
                           : X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str());
    if (set != 1) {
      ERR_clear_error();
      return fmt::format("TLS: server name '{}' cannot be verified", name);
    }
  }
  return {};
}

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

Result<std::shared_ptr<TlsServerContext>> make_tls_server_context(const TlsServerOptions& options) {
  if (options.cert_file.empty() || options.key_file.empty()) {
    return make_error(ErrorCode::invalid_argument,
                      "tls: cert_file and key_file are required (the server's certificate and its key)");
  }
  int min_version = 0;
  if (options.min_version == "1.2") {
    min_version = TLS1_2_VERSION;
  } else if (options.min_version == "1.3") {
    min_version = TLS1_3_VERSION;
  } else {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("tls min_version '{}': must be 1.2 or 1.3", options.min_version));
  }
  ssl::context context(ssl::context::tls_server);
  SSL_CTX* native = context.native_handle();
  SSL_CTX_set_min_proto_version(native, min_version);
  SSL_CTX_set_options(native, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_SINGLE_ECDH_USE);
  if (SSL_CTX_set_cipher_list(native, kTls12Ciphers) != 1) {
    ERR_clear_error();
    return make_error(ErrorCode::invalid_argument, "tls: this OpenSSL refuses the TLS 1.2 cipher suites");
  }
  // Any non-null argument says h2 is offered.
  static int h2_offered = 1;
  SSL_CTX_set_alpn_select_cb(native, select_alpn, options.http2 ? &h2_offered : nullptr);
  error_code ec;
  if (context.use_certificate_chain_file(options.cert_file, ec); ec) {
    return tls_error("cert_file", options.cert_file, "cannot load: " + ssl_reason(ec));
  }
  if (context.use_private_key_file(options.key_file, ssl::context::pem, ec); ec) {
    return tls_error("key_file", options.key_file, "cannot load: " + ssl_reason(ec));
  }
  if (SSL_CTX_check_private_key(native) != 1) {
    ERR_clear_error();
    return tls_error("key_file", options.key_file, "does not match the certificate of cert_file");
  }
  if (!options.client_ca_file.empty()) {
    if (context.load_verify_file(options.client_ca_file, ec); ec) {
      return tls_error("client_ca_file", options.client_ca_file, "cannot load: " + ssl_reason(ec));
    }
    // The CA names sent in the CertificateRequest: the client picks a certificate by them.
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(options.client_ca_file.c_str());
    if (names == nullptr) {
      ERR_clear_error();
      return tls_error("client_ca_file", options.client_ca_file, "holds no CA certificate");
    }
    SSL_CTX_set_client_CA_list(native, names);
    context.set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert, ec);
  } else {
    context.set_verify_mode(ssl::verify_none, ec);
  }
  // Session resumption across the listener's connections (tickets are OpenSSL's default).
  static constexpr unsigned char kSessionContext[] = "ratekeeper";
  SSL_CTX_set_session_id_context(native, kSessionContext, sizeof kSessionContext - 1);
  return std::make_shared<TlsServerContext>(std::move(context), options);
}

}  // namespace ratekeeper
