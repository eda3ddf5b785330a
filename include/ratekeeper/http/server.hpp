#pragma once
// The HTTP/1.1 server of `ratekeeper serve`: keep-alive, bounded pipelining, header and body
// limits, read deadlines and graceful drain. Requests go to one asynchronous handler; the
// transport (Boost.Beast) stays inside the implementation.
//
// Thread-safety: stop() may be called from any thread (and from a signal handler's
// io-thread callback); everything else from the thread that owns the Server.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ratekeeper/core/error.hpp"
#include "ratekeeper/core/time.hpp"
#include "ratekeeper/http/path.hpp"
#include "ratekeeper/http/request.hpp"

namespace ratekeeper {
class EventLoop;
class TlsServerContext;
}

namespace ratekeeper::http {

class AccessLog;
class LatencyMetrics;

// Delivers the response of one request. Callable from any thread, exactly once.
using Responder = std::function<void(Response)>;
// Runs on the connection's thread; may answer inline or later from another thread. The request's
// target is in normal form (http/path.hpp): a target without one is answered 400 before it.
using Handler = std::function<void(Request, Responder)>;

// The defaults are the configuration's (docs/configuration.md: listen, threads, http.*).
struct ServerOptions {
  std::string host = "0.0.0.0";
  std::uint16_t port = 8080;                     // 0: any free port (see Server::port())
  int threads = 2;                               // io threads running the connections
  // Run on this loop (shared, e.g., with the Redis store: see core/event_loop.hpp) instead
  // of starting `threads` threads. Must outlive the Server.
  std::shared_ptr<EventLoop> loop;
  // Request line + headers; larger → 431 (≤ 4 GiB).
  std::size_t header_limit = std::size_t{8} * 1024;
  std::size_t body_limit = std::size_t{1024} * 1024;  // larger → 413
  Micros read_timeout = 30 * kMicrosPerSecond;   // per request, idle keep-alive included
  // The proxy streams bodies: each read within read_timeout, and the whole body within this
  // long of its first read (slower: 408, the connection closed). The server reads a whole
  // request, body included, within read_timeout.
  Micros request_timeout = 60 * kMicrosPerSecond;
  std::size_t max_pipelined = 16;                // requests read ahead of their responses
  // A path whose requests are answered 403, with X-RateLimit-Status the status they would
  // have had, when they cannot be read (400, 413, 431): nginx's auth_request takes any answer
  // but 2xx, 401 and 403 for an outage, which a configuration may let through unlimited.
  std::string deny_unreadable_path;
  // The normal form of every request's target (http/path.hpp), made before the handler runs;
  // a target without one is answered 400. The proxy lower-cases as its upstream says.
  PathOptions paths;
  Micros drain_timeout = 10 * kMicrosPerSecond;  // stop(): in-flight requests get this long
  // SIGINT/SIGTERM call stop(); SIGHUP calls on_reload, or is logged and ignored without one.
  bool handle_signals = true;
  // Set: the listener speaks TLS (core/tls.hpp); each connection accepted takes the context
  // this returns then (the current one of a configuration that can be reloaded: a renewed
  // certificate serves the connections accepted after it, those open keep theirs). Called on
  // the listener's thread; must not return null.
  std::function<std::shared_ptr<TlsServerContext>()> tls;
  // The proxy: HTTP/2 to clients too (h2 by ALPN on a TLS listener whose context offers it,
  // h2c with prior knowledge on a plain one). The server's own routes speak HTTP/1.1.
  bool http2 = true;
  // Set: every request served leaves a line here (http/access_log.hpp).
  std::shared_ptr<AccessLog> access_log;
  // Set: request latencies are recorded here (http/latency_metrics.hpp): the proxy's every
  // request; the server's, those its handler asked the middleware about (Response::outcome).
  std::shared_ptr<LatencyMetrics> latency;
  // Called on an io thread when SIGHUP arrives (with handle_signals): it must return quickly
  // (hand the work to another thread). What it throws is contained.
  std::function<void()> on_reload;
};

class Server {
 public:
  Server(ServerOptions options, Handler handler);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and listens. Errors: invalid_argument for a bad address, unavailable when the
  // port cannot be bound.
  Result<void> listen();
  // The bound address, e.g. "127.0.0.1:8080" (valid after listen()).
  std::string address() const;
  std::uint16_t port() const;

  // Serves on the loop's threads; returns once stop() has drained every connection or the
  // drain timeout has passed. Call at most once.
  void run();

  // Graceful drain: stop accepting, finish the requests already received (their responses
  // say Connection: close), close idle keep-alive connections, then let run() return.
  void stop();

  struct Stats {
    std::uint64_t connections_accepted = 0;
    std::uint64_t connections_open = 0;
    std::uint64_t requests = 0;
    std::uint64_t accept_errors = 0;       // failed accepts (e.g. out of file descriptors)
    std::uint64_t handler_exceptions = 0;  // requests answered 500 because handling threw
    std::uint64_t tls_handshake_failures = 0;  // TLS listeners: connections closed in the handshake
  };
  Stats stats() const;

  struct Impl;

 private:
  std::shared_ptr<EventLoop> loop_;  // destroyed last
  std::shared_ptr<Impl> impl_;
};

}  // namespace ratekeeper::http
