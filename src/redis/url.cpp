#include "ratekeeper/redis/url.hpp"

#include <fmt/format.h>

#include <charconv>

#include "ratekeeper/core/host_port.hpp"

namespace ratekeeper::redis {
namespace {

std::unexpected<Error> bad(std::string_view url, std::string_view part, std::string_view why) {
  return make_error(ErrorCode::invalid_argument, fmt::format("redis url '{}': {}: {}", redact_url(url), part, why));
}

Result<int> parse_int(std::string_view text, int min, int max, std::string_view what) {
  int value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || ptr != text.data() + text.size() || value < min || value > max) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("{} must be an integer in [{}, {}], got '{}'", what, min, max, text));
  }
  return value;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Splits "user:pass@rest" into credentials and rest.
Result<std::string_view> take_credentials(std::string_view url, std::string_view rest, Credentials& out) {
  const auto at = rest.rfind('@');
  if (at == std::string_view::npos) return rest;
  std::string_view info = rest.substr(0, at);
  const auto colon = info.find(':');
  std::string_view user = colon == std::string_view::npos ? std::string_view{} : info.substr(0, colon);
  std::string_view pass = colon == std::string_view::npos ? info : info.substr(colon + 1);
  auto u = percent_decode(user);
  if (!u) return bad(url, "user", u.error().message);
  auto p = percent_decode(pass);
  if (!p) return bad(url, "password", p.error().message);
  if (u->empty() && p->empty()) return bad(url, "credentials", "empty user and password before '@'");
  out.user = std::move(*u);
  out.password = std::move(*p);
  return rest.substr(at + 1);
}

// "?db=N" and, on a TLS scheme, the TLS options (tls.hpp): ca_file, ca_dir, cert_file,
// key_file, server_name (percent-decoded), verify=true|false.
Result<void> parse_query(std::string_view url, std::string_view query, Url& out) {
  while (!query.empty()) {
    const auto amp = query.find('&');
    std::string_view param = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    const auto eq = param.find('=');
    std::string_view name = param.substr(0, eq);
    std::string_view value = eq == std::string_view::npos ? std::string_view{} : param.substr(eq + 1);
    if (name == "db") {
      auto n = parse_int(value, 0, 1'000'000, "db");
      if (!n) return bad(url, "db", n.error().message);
      out.db = *n;
      continue;
    }
    std::string* file = name == "ca_file"       ? &out.tls.ca_file
                        : name == "ca_dir"      ? &out.tls.ca_dir
                        : name == "cert_file"   ? &out.tls.cert_file
                        : name == "key_file"    ? &out.tls.key_file
                        : name == "server_name" ? &out.tls.server_name
                                                : nullptr;
    if (file == nullptr && name != "verify") {
      return bad(url, "query",
                 fmt::format("unknown parameter '{}' (db, and with rediss: ca_file, ca_dir, cert_file, "
                             "key_file, server_name, verify)",
                             name));
    }
    if (!out.tls.enabled) {
      return bad(url, name, "a TLS option: the scheme must be rediss, rediss-cluster or rediss-sentinel");
    }
    if (file == nullptr) {
      if (value != "true" && value != "false") return bad(url, "verify", "expected true or false");
      out.tls.verify = value == "true";
      continue;
    }
    auto decoded = percent_decode(value);
    if (!decoded) return bad(url, name, decoded.error().message);
    if (decoded->empty()) return bad(url, name, "empty");
    *file = std::move(*decoded);
  }
  return {};
}

Result<std::vector<Endpoint>> parse_hosts(std::string_view url, std::string_view hosts) {
  std::vector<Endpoint> out;
  while (true) {
    const auto comma = hosts.find(',');
    auto ep = parse_host_port(hosts.substr(0, comma));
    if (!ep) return bad(url, "host", ep.error().message);
    out.push_back(std::move(*ep));
    if (comma == std::string_view::npos) break;
    hosts = hosts.substr(comma + 1);
  }
  return out;
}

}  // namespace

std::string redact_url(std::string_view url) {
  // As parse_url reads it: the query first, then "user:pass@" up to the last '@'.
  const auto sep = url.find("://");
  if (sep == std::string_view::npos) return std::string(url);
  const std::size_t start = sep + 3;
  const std::string_view rest = url.substr(start, url.find('?', start) - start);
  const auto at = rest.rfind('@');
  if (at == std::string_view::npos) return std::string(url);
  const auto colon = rest.substr(0, at).find(':');
  const std::size_t secret = colon == std::string_view::npos ? 0 : colon + 1;  // no colon: a password alone
  return fmt::format("{}***{}", url.substr(0, start + secret), url.substr(start + at));
}

std::string Endpoint::to_string() const {
  if (is_unix()) return "unix:" + path;
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

Result<std::string> percent_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 2 >= text.size()) {
      return make_error(ErrorCode::invalid_argument, fmt::format("truncated escape at offset {}", i));
    }
    const int hi = hex_value(text[i + 1]);
    const int lo = hex_value(text[i + 2]);
    if (hi < 0 || lo < 0) {
      return make_error(ErrorCode::invalid_argument, fmt::format("bad escape at offset {}", i));
    }
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

Result<Endpoint> parse_host_port(std::string_view text, int default_port) {
  Endpoint ep;
  ep.port = default_port;
  auto split = split_host_port(text);
  if (!split) return std::unexpected(split.error());
  const std::string_view host = split->host;
  const std::string_view port = split->port.value_or(std::string_view{});
  if (!split->bracketed && host.find(':') != std::string_view::npos) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("'{}': IPv6 addresses go in brackets, [::1]:6379", text));
  }
  if (split->port && port.empty()) {
    return make_error(ErrorCode::invalid_argument, fmt::format("'{}': empty port", text));
  }
  if (host.empty()) return make_error(ErrorCode::invalid_argument, fmt::format("'{}': empty host", text));
  for (char c : host) {
    // Brackets only delimit an IPv6 address: inside a host, "[a" would print as "[a:6379".
    if (c == '/' || c == '@' || c == '?' || c == ' ' || c == '[' || c == ']' ||
        static_cast<unsigned char>(c) < 0x20) {
      return make_error(ErrorCode::invalid_argument, fmt::format("'{}': bad character in host", text));
    }
  }
  if (!port.empty()) {
    auto p = parse_port(port);
    if (!p) return make_error(ErrorCode::invalid_argument, fmt::format("'{}': {}", text, p.error().message));
    ep.port = *p;
  }
  ep.host = std::string(host);
  return ep;
}

Result<Url> parse_url(std::string_view url) {
  Url out;
  const auto sep = url.find("://");
  if (sep == std::string_view::npos) return bad(url, "scheme", "missing '://'");
  const std::string_view scheme = url.substr(0, sep);
  std::string_view rest = url.substr(sep + 3);
  if (scheme == "redis" || scheme == "rediss") {
    out.scheme = UrlScheme::redis;
  } else if (scheme == "unix") {
    out.scheme = UrlScheme::unix_socket;
  } else if (scheme == "redis-cluster" || scheme == "rediss-cluster") {
    out.scheme = UrlScheme::cluster;
  } else if (scheme == "redis-sentinel" || scheme == "rediss-sentinel") {
    out.scheme = UrlScheme::sentinel;
  } else {
    return bad(url, "scheme",
               fmt::format("unsupported '{}' (redis, rediss, unix, redis-cluster, rediss-cluster, "
                           "redis-sentinel, rediss-sentinel)",
                           scheme));
  }
  out.tls.enabled = scheme.starts_with("rediss");

  // Query first (a password may not contain a raw '?': percent-encode it).
  std::string_view query;
  if (const auto q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  auto after_credentials = take_credentials(url, rest, out.credentials);
  if (!after_credentials) return std::unexpected(after_credentials.error());
  rest = *after_credentials;

  if (out.scheme == UrlScheme::unix_socket) {
    if (rest.empty() || rest[0] != '/') return bad(url, "path", "expected an absolute socket path, unix:///path/redis.sock");
    if (rest.size() == 1) return bad(url, "path", "empty socket path");
    Endpoint ep;
    ep.path = std::string(rest);
    out.endpoints.push_back(std::move(ep));
    if (auto ok = parse_query(url, query, out); !ok) return std::unexpected(ok.error());
    return out;
  }

  const auto slash = rest.find('/');
  std::string_view hosts = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);
  if (hosts.empty()) return bad(url, "host", "missing");
  auto endpoints = parse_hosts(url, hosts);
  if (!endpoints) return std::unexpected(endpoints.error());
  out.endpoints = std::move(*endpoints);
  if (auto ok = parse_query(url, query, out); !ok) return std::unexpected(ok.error());

  switch (out.scheme) {
    case UrlScheme::redis:
      if (out.endpoints.size() != 1) {
        return bad(url, "host", "redis:// takes one host (use redis-cluster:// for several)");
      }
      if (!path.empty()) {
        auto n = parse_int(path, 0, 1'000'000, "db");
        if (!n) return bad(url, "db", n.error().message);
        out.db = *n;
      }
      break;
    case UrlScheme::cluster:
      if (!path.empty()) return bad(url, "path", "redis-cluster:// takes no path (a cluster has only db 0)");
      if (out.db != 0) return bad(url, "db", "a cluster has only db 0");
      break;
    case UrlScheme::sentinel:
      if (path.empty() || path.find('/') != std::string_view::npos) {
        return bad(url, "master", "expected redis-sentinel://host:port[,host:port...]/master-name");
      }
      out.master = std::string(path);
      break;
    case UrlScheme::unix_socket: break;
  }
  return out;
}

}  // namespace ratekeeper::redis
