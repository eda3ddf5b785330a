#pragma once
// The rate-limiting reverse proxy: every request received on its listen address goes through
// the Middleware (all rules, any method, any path); an admitted one is forwarded to one
// upstream over a pool of HTTP/1.1 keep-alive connections, its body and the response's body
// streamed both ways through bounded buffers; a rejected one is answered (429, 400) and never
// reaches the upstream. The upstream's response goes back with the rate-limit headers added.
// The transport (Boost.Beast) stays inside the implementation.
//
// Thread-safety: stop() may be called from any thread; everything else from the thread that
// owns the Proxy. A Middleware given by reference must outlive the Proxy.

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ratekeeper/core/error.hpp"
#include "ratekeeper/core/time.hpp"
#include "ratekeeper/core/tls.hpp"
#include "ratekeeper/http/server.hpp"

namespace ratekeeper {
class MetricsWriter;
}

namespace ratekeeper::http {

class Middleware;

// The middleware to decide the next request with (e.g. the current one of a configuration
// that can be reloaded); a request holds what it returned until it is decided. Called on the
// io threads, concurrently: thread-safe, quick, never null.
using MiddlewareSource = std::function<std::shared_ptr<Middleware>()>;

// The defaults are the configuration's (docs/configuration.md: upstream.*).
struct UpstreamOptions {
  std::string host;  // an IP address or a name, resolved when connecting
  std::uint16_t port = 80;
  // TLS to the upstream (https://: enabled): the certificate verified as TlsOptions says
  // (core/tls.hpp: the system's CAs or ca_file, the name `host` or server_name, SNI).
  TlsOptions tls;
  Micros connect_timeout = 5 * kMicrosPerSecond;
  // Until the upstream's response header has arrived, and between two reads or writes of
  // either body: longer → 504 (or the connection closed, once the response has begun).
  Micros timeout = 60 * kMicrosPerSecond;
  // Idle keep-alive connections kept per io thread, and how long one may stay idle. An HTTP/2
  // client's streams each take a connection: with fewer kept than streams in flight, every
  // burst opens (and closes) the difference.
  std::size_t max_idle = 256;
  Micros idle_timeout = 60 * kMicrosPerSecond;
  std::size_t buffer_size = std::size_t{64} * 1024;  // per direction and request
  // Rules match, and the upstream receives, the normalised path lowercased (for
  // case-insensitive applications); off: case is kept (http/path.hpp).
  bool lowercase_path = false;
  // Upgrades (WebSocket): an admitted request asking for one is sent on with its Upgrade
  // field; after the upstream's 101 the connection carries bytes both ways until either side
  // closes, no byte either way for tunnel_idle_timeout, or tunnel_max_duration has passed.
  // Off: the Upgrade field is dropped (the request goes on as a plain one).
  bool upgrades = true;
  // The protocols relayed (names, without case): a request offering any other has its Upgrade
  // field dropped, as with upgrades off. Never h2c: the requests inside its tunnel would not
  // meet the rules (the configuration refuses it).
  std::vector<std::string> upgrade_protocols{"websocket"};
  Micros tunnel_idle_timeout = 300 * kMicrosPerSecond;
  Micros tunnel_max_duration = 86400 * kMicrosPerSecond;

  // Every field: a reload that changes any of them needs a restart.
  friend bool operator==(const UpstreamOptions&, const UpstreamOptions&) = default;
};

// "http://host[:port][/]" or "https://host[:port][/]" (port 443, TLS enabled with
// verification): no path, query or credentials. invalid_argument with the reason.
Result<UpstreamOptions> parse_upstream_url(std::string_view url);

// Why an upgraded connection (a tunnel) ended; ProxyStats::tunnels_closed is indexed by it.
enum class TunnelEnd : std::uint8_t { client, upstream, idle, max_duration, error, shutdown };
inline constexpr std::size_t kTunnelEnds = static_cast<std::size_t>(TunnelEnd::shutdown) + 1;
std::string_view to_string(TunnelEnd end) noexcept;

struct ProxyStats {
  std::uint64_t forwarded = 0;             // admitted requests sent to the upstream
  std::uint64_t answered_by_limiter = 0;   // 429 / 400 / 500 from the middleware
  std::uint64_t delayed = 0;               // forwarded after waiting (on_limit: delay)
  // Held for their turn, their client gone meanwhile: dropped, never forwarded (counted in
  // `delayed` too, and in client_aborted).
  std::uint64_t held_client_gone = 0;
  std::uint64_t upstream_unreachable = 0;  // 502: cannot connect
  std::uint64_t upstream_timeout = 0;      // 504
  std::uint64_t upstream_bad_response = 0; // 502: malformed, or closed before the header
  // The upstream closed, stalled or sent garbage mid-body: the client's connection closed.
  std::uint64_t upstream_aborted = 0;
  std::uint64_t client_aborted = 0;        // the client went away mid-request
  std::uint64_t upstream_connections_opened = 0;
  std::uint64_t upstream_connections_reused = 0;
  std::uint64_t upstream_tls_failures = 0;  // https upstream: handshakes failed (502)
  std::uint64_t upgrades = 0;          // upgrades relayed (the upstream answered 101)
  std::uint64_t tunnels_open = 0;      // upgraded connections relaying now
  // Upgraded connections ended, by why (TunnelEnd): the client or the upstream closed, no
  // byte either way for tunnel_idle_timeout, tunnel_max_duration reached, a write failed,
  // the server stopping.
  std::array<std::uint64_t, kTunnelEnds> tunnels_closed{};
  std::uint64_t http2_connections = 0;  // client connections that spoke HTTP/2
  // HTTP/2 connections the proxy ended for an error of the client's (a flood, a protocol
  // error), by the GOAWAY's error code (RFC 9113 7: index 1 PROTOCOL_ERROR ... 13
  // HTTP_1_1_REQUIRED; 0 unused).
  std::array<std::uint64_t, 14> http2_goaways{};
  // HTTP/2 streams reset because their client let none of the response through (its
  // flow-control window shut) for upstream.timeout; their upstream connections closed.
  std::uint64_t http2_streams_stalled = 0;
  // The most body bytes held at once, over all connections, between being read from one side
  // and written to the other: a few buffer_size per request in flight, whatever the bodies'
  // sizes.
  std::uint64_t buffered_bytes_high_water = 0;
};

class Proxy {
 public:
  // Listens and serves as `server` says (address, threads or shared loop, header limit, read
  // timeout, drain, signals); its body_limit does not apply: bodies are streamed.
  Proxy(ServerOptions server, UpstreamOptions upstream, Middleware& middleware);
  // Each request decided by the middleware `middleware` returns at the time.
  Proxy(ServerOptions server, UpstreamOptions upstream, MiddlewareSource middleware);
  ~Proxy();
  Proxy(const Proxy&) = delete;
  Proxy& operator=(const Proxy&) = delete;

  // As http::Server's.
  Result<void> listen();
  std::string address() const;
  std::uint16_t port() const;
  void run();
  void stop();

  Server::Stats stats() const;
  ProxyStats proxy_stats() const;

  struct Impl;

 private:
  std::shared_ptr<EventLoop> loop_;  // destroyed last
  std::shared_ptr<Impl> impl_;
};

// The proxy's counters (ratekeeper_proxy_*), for /metrics.
void write_proxy_metrics(MetricsWriter& out, const Proxy& proxy);

}  // namespace ratekeeper::http
