#pragma once
// TLS to Redis: what a store's URL (rediss://, rediss-cluster://, rediss-sentinel://) and its
// options say about certificates, and the client context every connection of one store shares.
//
// Verification is on unless asked off: the server's certificate chain must lead to a trusted
// CA (the system's, or ca_file / ca_dir), and its name must match the host connected to (a
// DNS name, or an IP address in the certificate's IP SANs), or server_name when it is set.
// server_name is also sent as SNI; without it a host name (never an IP address) is.

#include <memory>
#include <string>

#include "ratekeeper/core/error.hpp"

namespace ratekeeper::redis {

struct TlsOptions {
  bool enabled = false;     // set by the rediss* schemes
  std::string ca_file;      // PEM bundle of trusted CAs; empty (with ca_dir): the system's
  std::string ca_dir;       // directory of hashed CA certificates (c_rehash)
  std::string cert_file;    // client certificate (PEM, chain allowed), for mutual TLS
  std::string key_file;     // its private key (PEM); required with cert_file
  std::string server_name;  // expected name in the server's certificate, and SNI
  bool verify = true;       // false: no chain or name check (the connection is not authenticated)

  friend bool operator==(const TlsOptions&, const TlsOptions&) = default;
};

// The OpenSSL client context of one store, built once from TlsOptions (CA, client certificate
// and key loaded and checked then). Opaque outside src/redis; shared by the store's connections.
class TlsContext;

// Errors (invalid_argument) name the option and the file: "tls ca_file '/x.pem': cannot load:
// No such file or directory", a key that does not match its certificate, a key without a
// certificate.
Result<std::shared_ptr<TlsContext>> make_tls_context(const TlsOptions& options);

}  // namespace ratekeeper::redis
