#pragma once
// The server's configuration, loaded from YAML. Loading validates everything: an unknown
// field, a duplicate key, a missing required field or a bad value throws ConfigError naming
// the file, the field path (e.g. `rules[2].limits[0].rate`) and the reason. The document is
// bounded (size, nesting, nodes with aliases expanded) before any field is read. It fills
// the options of each part of the server directly (http::ServerOptions, store::StoreOptions,
// limiter::LimiterConfig, http::MiddlewareOptions): their defaults are the configuration's.
// A loaded Config is immutable and safe to share between threads. See docs/configuration.md
// for every field.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "ratekeeper/algorithms/limit.hpp"
#include "ratekeeper/core/error.hpp"
#include "ratekeeper/core/tls.hpp"
#include "logging.hpp"
#include "ratekeeper/http/access_log.hpp"
#include "ratekeeper/http/middleware.hpp"
#include "ratekeeper/http/proxy.hpp"
#include "ratekeeper/http/server.hpp"
#include "ratekeeper/limiter/limiter.hpp"
#include "ratekeeper/store/open_store.hpp"

namespace ratekeeper::server {

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

struct LoggingConfig {
  std::string level = "info";  // trace, debug, info, warn, error, critical, off
  LogFormat format = LogFormat::text;  // the server's own log, on stderr (logging.hpp)
};

// ratekeeper's own endpoints (/healthz, /readyz, /metrics, /v1/...) when an upstream is set.
// A listener's TLS as configured, and the context made from its files when they were read.
struct ListenerTls {
  TlsServerOptions options;
  std::shared_ptr<TlsServerContext> context;
};

struct AdminConfig {
  std::string host = "127.0.0.1";
  std::uint16_t port = 9090;
  std::optional<ListenerTls> tls;  // admin.tls: the admin listener speaks TLS
};

// Envoy's gRPC rate limit service (envoy.service.ratelimit.v3): where it listens and the
// directory of its domain files (envoyproxy/ratelimit's format, loaded by load_rls_config in
// rls_config.hpp when the server starts and again on each reload).
struct GrpcConfig {
  std::string host = "127.0.0.1";
  std::uint16_t port = 8081;
  // The directory of the domain files; a relative `config` is resolved against the directory
  // of the main configuration file.
  std::string config_dir;
  bool response_headers = true;  // RateLimitResponse carries the rate-limit headers
  std::size_t max_message_bytes = 65536;  // largest request message accepted
  int threads = 1;                        // the gRPC server's completion-queue threads
  Micros handshake_timeout = 10 * kMicrosPerSecond;  // rls::GrpcServerOptions::handshake_timeout
};

// Bounds of grpc.max_message_bytes.
inline constexpr std::size_t kMinGrpcMessageBytes = 1024;
inline constexpr std::size_t kMaxGrpcMessageBytes = std::size_t{4} << 20;

struct Config {
  std::string source = "<inline>";  // the file it was loaded from
  // listen (host, port), threads, http.* (header and body limits, read timeout, pipelining).
  // Its loop and signal handling are the program's, not configured.
  http::ServerOptions http;
  store::StoreOptions store;      // url memory:// unless configured
  bool store_configured = false;  // false: the `store` section was absent
  // Denials held in front of a Redis store (store.denied_cache_keys; 0: off). See
  // store/denial_cache.hpp.
  std::size_t denied_cache_keys = 100'000;
  limiter::LimiterConfig limiter;            // prefix, rules, tiers, failure policy, decision log
  std::vector<std::string> trusted_proxies;  // as written
  http::MiddlewareOptions middleware;        // response headers, trusted proxies (parsed)
  LoggingConfig logging;
  bool metrics_enabled = true;
  // Set: every request to `listen` goes through the rules to this upstream (http/proxy.hpp),
  // and ratekeeper's own endpoints are served on `admin` instead. Unset: `listen` serves the
  // own endpoints (and the demo API when `demo_api` asks for it).
  std::optional<http::UpstreamOptions> upstream;
  // `demo_api: true`: without an upstream, `listen` also serves the demo API (/api/data,
  // /api/profile, /api/search, /api/export/..., /auth/login). Off unless asked for.
  bool demo_api = false;
  AdminConfig admin;  // used only with an upstream
  // `access_log`: one JSON line per request served (http/access_log.hpp); unset: none.
  std::optional<http::AccessLogOptions> access_log;
  // `tls`: the `listen` listener speaks TLS (its files are read at load: again on reload).
  std::optional<ListenerTls> tls;
  std::optional<GrpcConfig> grpc;  // set: serve the gRPC rate limit service too
  // `overrides.refresh`: how often the per-identity overrides (limiter/overrides.hpp) are read
  // again from the store when they changed; a change on another instance takes effect here
  // within it. 10 ms .. 1 h.
  Micros overrides_refresh = 1 * kMicrosPerSecond;
};

// A sliding window log key holds one sorted-set entry (about 50-100 bytes in Redis) per unit
// admitted in the window; beyond this, one key could hold megabytes.
inline constexpr std::int64_t kMaxSlidingLogLimit = 100'000;

// Why a configured limit is refused beyond its own validation (a sliding window log above
// kMaxSlidingLogLimit); nullopt when it is accepted.
std::optional<std::string> refused_limit_reason(const algorithms::Limit& limit);

// Largest configuration accepted, file or text.
inline constexpr std::size_t kMaxConfigBytes = std::size_t{1024} * 1024;

// Loads and validates a YAML file. Throws ConfigError, also when the path is a directory,
// cannot be opened or read, or is larger than kMaxConfigBytes. An empty file is an empty
// configuration.
Config load_config(const std::string& path);
// Parses YAML text; `source` names it in errors. Throws ConfigError.
Config parse_config(std::string_view yaml, std::string_view source = "<inline>");

// How long a concurrency limit's slot lasts unless renewed or released (`slot_ttl`).
inline constexpr Micros kDefaultSlotTtl = 60 * kMicrosPerSecond;

// Durations as written in the configuration: "250us", "100ms", "1s", "1m", "1h", "1d";
// a bare number is seconds. nullopt when invalid, negative or above 2^53 microseconds.
std::optional<Micros> parse_duration(std::string_view text);

// A listen address, as `listen` and `serve --listen` write it: "HOST:PORT", "[V6]:PORT" or
// ":PORT" (every interface, 0.0.0.0). The host is an IP address or localhost (IPv6 in
// brackets, without zone), the port 0-65535 (0: any free port). invalid_argument with the
// reason.
struct ListenAddress {
  std::string host;
  std::uint16_t port = 0;
};
Result<ListenAddress> parse_listen_address(std::string_view text);

}  // namespace ratekeeper::server
