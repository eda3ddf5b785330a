#pragma once
// Certificates for TLS tests, made with the `openssl` command once per test process in a
// temporary directory (EC P-256 keys): a CA, a second CA nobody trusts, a server certificate
// for localhost / 127.0.0.1 signed by the CA, the same server key under an expired
// certificate and under one for another name, and a client certificate signed by the CA.
// Also the redis-server arguments that open a TLS port with them. Not thread-safe.

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "support/redis_server.hpp"

namespace ratekeeper::testing {

struct TlsCerts {
  std::filesystem::path dir;
  std::filesystem::path ca;          // ca.crt: trusted by the server and by clients
  std::filesystem::path other_ca;    // other-ca.crt: a CA that signed nothing here
  std::filesystem::path server_cert; // server.crt: DNS:localhost, IP:127.0.0.1
  std::filesystem::path server_key;
  std::filesystem::path expired_cert;     // the server key, expired yesterday
  std::filesystem::path wrong_name_cert;  // the server key, for DNS:redis.example only
  std::filesystem::path client_cert;      // client.crt: signed by the CA
  std::filesystem::path client_key;
};

// Made on first use, removed at exit; throws when openssl fails (its output in the message).
const TlsCerts& tls_certs();

// redis-server arguments for a TLS port `tls_port` (the plain port stays open for the test's
// own commands) serving `cert` (default: server.crt); `client_certs`: clients must present a
// certificate signed by the CA.
std::vector<std::string> redis_tls_args(int tls_port, bool client_certs = false,
                                        const std::filesystem::path& cert = {});

// A redis-server serving TLS on tls_port (redis_tls_args) and plain TCP on server.port() for
// the test's own commands; `extra`: more redis-server arguments (e.g. an ACL user).
struct TlsRedisServer {
  explicit TlsRedisServer(bool client_certs = false, const std::filesystem::path& cert = {},
                          std::vector<std::string> extra = {});
  // rediss://[credentials]127.0.0.1:<tls_port>
  std::string url(std::string_view credentials = {}) const;

  int tls_port = 0;
  RedisServer server;
};

}  // namespace ratekeeper::testing
