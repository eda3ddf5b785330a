#pragma once
// One auto-pipelined connection to one Redis server, shared by many concurrent callers.
//
// Commands issued while a write is in flight join the next write (at most one write
// outstanding); replies are matched FIFO. Every command has a deadline: when it passes the
// command completes with ErrorCode::timeout and its late reply is discarded. When the oldest
// pending command is overdue by more than the grace period the connection is considered
// broken: it is closed, everything pending fails with unavailable, and it reconnects.
// Connect (TCP, TLS over TCP, or unix socket), the TLS handshake and the handshake (AUTH,
// SELECT, or PING) have their own deadline; reconnection backs off exponentially. While a connection attempt is in progress
// commands wait (within their deadline); while backing off they fail at once with
// unavailable (or auth, when the server refused the credentials). A circuit breaker fails
// calls with circuit_open in microseconds after repeated timeouts and connection errors.
//
// Thread-safe: command() may be called from any thread. Callbacks run on the connection's
// event-loop thread, or on the caller's stack when the command fails before being queued
// (breaker open, disconnected, closed); they must not block.

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ratekeeper/core/clock.hpp"
#include "ratekeeper/core/error.hpp"
#include "ratekeeper/core/event_loop.hpp"
#include "ratekeeper/core/time.hpp"
#include "redis/circuit_breaker.hpp"
#include "redis/reply.hpp"
#include "ratekeeper/redis/tls.hpp"
#include "ratekeeper/redis/url.hpp"

namespace ratekeeper::redis {

struct ConnectionOptions {
  Endpoint endpoint;
  Credentials credentials;
  int db = 0;
  // Set: TLS over TCP, with this context's certificates and checks (make_tls_context).
  std::shared_ptr<TlsContext> tls;
  Micros connect_timeout = 1 * kMicrosPerSecond;   // connect, TLS handshake, AUTH/SELECT/PING
  Micros command_timeout = 100 * kMicrosPerMilli;  // default deadline of a command
  // Overdue time of the oldest pending command after which the connection is dropped.
  // 0: max(command_timeout, 200 ms).
  Micros broken_after = 0;
  Micros reconnect_min = 50 * kMicrosPerMilli;
  Micros reconnect_max = 2 * kMicrosPerSecond;
  CircuitBreaker::Options breaker;
  // Extra commands sent after AUTH/SELECT on every (re)connect (e.g. READONLY); an error
  // reply to one of them fails the connection attempt.
  std::vector<std::vector<std::string>> on_connect;
  // Times deadlines and the breaker's open interval (steady()); nullptr: the system clock.
  // Must outlive the connection.
  const Clock* clock = nullptr;
};

// A reply (error replies included: check Reply::is_error()) or a transport-level error:
// timeout, unavailable, circuit_open, auth, protocol.
using ReplyCallback = std::function<void(Result<Reply>)>;

enum class ConnectionState : std::uint8_t { connecting, connected, backing_off, closed };
std::string_view to_string(ConnectionState state) noexcept;

class Connection {
 public:
  // Starts connecting at once, in the background, on `loop`'s thread number `context`
  // (EventLoop::kNoContext: the next one round-robin).
  Connection(EventLoop& loop, ConnectionOptions options, std::size_t context = EventLoop::kNoContext);
  // Fails everything pending with unavailable before returning (unless called on the
  // loop thread, where pending callbacks run before the connection's memory is released).
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Sends one command; `timeout` 0 means options.command_timeout.
  void command(std::span<const std::string_view> argv, ReplyCallback done, Micros timeout = 0);
  void command(std::initializer_list<std::string_view> argv, ReplyCallback done, Micros timeout = 0) {
    command(std::span<const std::string_view>(argv.begin(), argv.size()), std::move(done), timeout);
  }
  // Blocking form. Not for use on the loop's threads.
  Result<Reply> command_sync(std::span<const std::string_view> argv, Micros timeout = 0);
  Result<Reply> command_sync(std::initializer_list<std::string_view> argv, Micros timeout = 0) {
    return command_sync(std::span<const std::string_view>(argv.begin(), argv.size()), timeout);
  }

  ConnectionState state() const noexcept;
  CircuitBreaker::State breaker_state() const noexcept;
  // Why the connection is not usable, or "ok"; the last connection error when backing off.
  std::string status() const;
  const ConnectionOptions& options() const noexcept;

  struct Stats {
    std::uint64_t commands = 0;    // accepted into the queue
    std::uint64_t writes = 0;      // write system calls issued (batches)
    std::uint64_t timeouts = 0;
    std::uint64_t reconnects = 0;  // successful connects after the first
    std::uint64_t breaker_opened = 0;
  };
  Stats stats() const noexcept;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace ratekeeper::redis
