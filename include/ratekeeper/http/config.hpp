#pragma once
// The server's configuration, loaded from YAML. Loading validates everything: an unknown
// field, a duplicate key, a missing required field or a bad value throws ConfigError naming
// the file, the field path (e.g. `rules[2].limits[0].rate`) and the reason. The document is
// bounded (size, nesting, nodes with aliases expanded) before any field is read. A loaded
// Config is immutable and safe to share between threads. See docs/configuration.md for
// every field.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "ratekeeper/http/headers.hpp"
#include "ratekeeper/limiter/identity.hpp"
#include "ratekeeper/limiter/limiter.hpp"
#include "ratekeeper/store/open_store.hpp"

namespace ratekeeper::http {

class ConfigError : public std::runtime_error {
 public:
  ConfigError(std::string file, std::string field, std::string reason);
  const std::string& file() const noexcept { return file_; }
  const std::string& field() const noexcept { return field_; }
  const std::string& reason() const noexcept { return reason_; }

 private:
  std::string file_;
  std::string field_;
  std::string reason_;
};

struct ListenAddress {
  std::string host = "0.0.0.0";
  std::uint16_t port = 8080;
};

struct HttpLimits {
  std::size_t max_header_bytes = 8 * 1024;
  std::size_t max_body_bytes = 1024 * 1024;
  Micros read_timeout = 30 * kMicrosPerSecond;
  int max_pipelined = 16;  // requests read ahead per connection
};

struct LoggingConfig {
  std::string level = "info";  // trace, debug, info, warn, error, critical, off
};

struct Config {
  std::string source = "<inline>";  // the file it was loaded from
  ListenAddress listen;
  int threads = 2;                           // HTTP worker threads
  store::StoreOptions store;                 // url memory:// unless configured
  bool store_configured = false;             // false: the `store` section was absent
  // Denials held in front of a Redis store (store.denied_cache_keys; 0: off). See
  // store/denial_cache.hpp.
  std::size_t denied_cache_keys = 100'000;
  limiter::LimiterConfig limiter;            // prefix, rules, tiers, failure policy, decision log
  std::vector<std::string> trusted_proxies;  // as written
  limiter::TrustedProxies proxies;           // parsed
  HeaderOptions headers;
  LoggingConfig logging;
  bool metrics_enabled = true;
  HttpLimits http;
};

// Largest configuration accepted, file or text.
inline constexpr std::size_t kMaxConfigBytes = 1024 * 1024;

// Loads and validates a YAML file. Throws ConfigError, also when the path is a directory,
// cannot be opened or read, or is larger than kMaxConfigBytes. An empty file is an empty
// configuration.
Config load_config(const std::string& path);
// Parses YAML text; `source` names it in errors. Throws ConfigError.
Config parse_config(std::string_view yaml, std::string_view source = "<inline>");

// Durations as written in the configuration: "250us", "100ms", "1s", "1m", "1h", "1d";
// a bare number is seconds. nullopt when invalid, negative or above 2^53 microseconds.
std::optional<Micros> parse_duration(std::string_view text);

}  // namespace ratekeeper::http
