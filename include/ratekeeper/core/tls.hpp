#pragma once
// TLS, both ways, on OpenSSL (Boost.Asio's ssl inside the implementation):
//
// - As a client (to Redis, to an https upstream): TlsOptions, and the TlsContext every
//   connection of one store or one upstream shares. Verification is on unless asked off: the
//   server's certificate chain must lead to a trusted CA (the system's, or ca_file / ca_dir),
//   and its name must match the host connected to (a DNS name, or an IP address in the
//   certificate's IP SANs), or server_name when it is set. server_name is also sent as SNI;
//   without it a host name (never an IP address) is.
// - As a server (the HTTP listeners): TlsServerOptions, and the TlsServerContext a listener's
//   new connections take. A context is immutable once made: re-reading the certificate (on a
//   reload) makes a new one; connections already open keep the one they started with.

#include <memory>
#include <string>

#include "ratekeeper/core/error.hpp"

namespace ratekeeper {

struct TlsOptions {
  bool enabled = false;     // set by the rediss* schemes / the https scheme
  std::string ca_file;      // PEM bundle of trusted CAs; empty (with ca_dir): the system's
  std::string ca_dir;       // directory of hashed CA certificates (c_rehash)
  std::string cert_file;    // client certificate (PEM, chain allowed), for mutual TLS
  std::string key_file;     // its private key (PEM); required with cert_file
  std::string server_name;  // expected name in the server's certificate, and SNI
  bool verify = true;       // false: no chain or name check (the connection is not authenticated)

  friend bool operator==(const TlsOptions&, const TlsOptions&) = default;
};

// The OpenSSL client context built once from TlsOptions (CA, client certificate and key
// loaded and checked then). Opaque outside src/.
class TlsContext;

// Errors (invalid_argument) name the option and the file: "tls ca_file '/x.pem': cannot load:
// No such file or directory", a key that does not match its certificate, a key without a
// certificate.
Result<std::shared_ptr<TlsContext>> make_tls_context(const TlsOptions& options);

// A listener's TLS. Protocols TLS 1.2 and 1.3 only (min_version "1.3": 1.3 only); for 1.2,
// forward-secret AEAD cipher suites only (ECDHE with AES-GCM or ChaCha20-Poly1305); no
// compression, no renegotiation. ALPN: h2 (with http2) preferred, http/1.1.
struct TlsServerOptions {
  std::string cert_file;       // the server's certificate chain (PEM, leaf first)
  std::string key_file;        // its private key (PEM)
  // Set: mutual TLS. Every client must present a certificate that chains to a CA of this
  // bundle (PEM), or its handshake fails.
  std::string client_ca_file;
  std::string min_version = "1.2";  // "1.2" or "1.3"
  bool http2 = false;               // offer h2 by ALPN (the listener speaks HTTP/2 too)

  friend bool operator==(const TlsServerOptions&, const TlsServerOptions&) = default;
};

class TlsServerContext;

// Reads the files now. Errors (invalid_argument) name the option, the file and the reason:
// "tls cert_file '/etc/x.pem': cannot load: no start line", a key that does not match the
// certificate, an unknown min_version.
Result<std::shared_ptr<TlsServerContext>> make_tls_server_context(const TlsServerOptions& options);

}  // namespace ratekeeper
