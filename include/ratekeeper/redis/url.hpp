#pragma once
// Redis URLs: redis://[user:pass@]host[:port][/db], unix://[user:pass@]/path.sock[?db=N],
// redis-cluster://[user:pass@]h:p[,h:p...] and redis-sentinel://[user:pass@]h:p[,h:p...]/master[?db=N].
// Their TLS forms add an s to "redis": rediss://, rediss-cluster://, rediss-sentinel:// (TLS to
// every server the store talks to: the cluster's nodes, the sentinels and the master), with
// optional query parameters ca_file, ca_dir, cert_file, key_file, server_name (percent-encoded
// values) and verify=false; see tls.hpp.
// Pure functions; errors are invalid_argument naming the part of the URL that is wrong.

#include <string>
#include <string_view>
#include <vector>

#include "ratekeeper/core/error.hpp"
#include "ratekeeper/redis/tls.hpp"

namespace ratekeeper::redis {

// Where one Redis server listens: a TCP host and port, or a unix socket path.
struct Endpoint {
  std::string host;  // empty for a unix socket
  int port = 6379;
  std::string path;  // unix socket path; empty for TCP

  bool is_unix() const noexcept { return !path.empty(); }
  std::string to_string() const;  // "host:port", "[v6]:port" or "unix:/path"
  friend bool operator==(const Endpoint&, const Endpoint&) = default;
};

// AUTH arguments: password only (user empty) or ACL user and password. Empty: no AUTH.
struct Credentials {
  std::string user;
  std::string password;

  bool empty() const noexcept { return user.empty() && password.empty(); }
  friend bool operator==(const Credentials&, const Credentials&) = default;
};

enum class UrlScheme { redis, unix_socket, cluster, sentinel };

struct Url {
  UrlScheme scheme = UrlScheme::redis;
  std::vector<Endpoint> endpoints;  // exactly one for redis:// and unix://
  Credentials credentials;
  int db = 0;
  std::string master;  // redis-sentinel:// only: the monitored master's name
  TlsOptions tls;      // enabled by the rediss* schemes; files and checks from the query
};

// Parses any of the schemes above. User and password may be percent-encoded.
Result<Url> parse_url(std::string_view url);

// "host", "host:port", "[v6]:port", "[v6]" (port defaults to `default_port`).
Result<Endpoint> parse_host_port(std::string_view text, int default_port = 6379);

// The URL as logs and error messages show it: the password (what parse_url would take as
// one) replaced by "***"; anything else as given.
std::string redact_url(std::string_view url);

// "%40" → "@"; a malformed escape is an error.
Result<std::string> percent_decode(std::string_view text);

}  // namespace ratekeeper::redis
