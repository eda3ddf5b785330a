#pragma once
// The gRPC server of Envoy's rate limit service: envoy.service.ratelimit.v3.RateLimitService
// on one listen address (HTTP/2, plaintext), answering ShouldRateLimit through a Service.
// Completion-queue threads read and write the calls and hand them to the store's event loop,
// where the Service decides them. A call's answer goes out as soon as the Service gives it; stop()
// refuses new calls, waits for the calls in flight (each bounded by the store's deadlines),
// then ends the threads.
//
// Thread-safe: start() and stop() from one thread; a Service given by reference must outlive
// the server.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "ratekeeper/core/error.hpp"
#include "ratekeeper/core/time.hpp"

namespace ratekeeper {
class EventLoop;
}

namespace ratekeeper::rls {

class Service;

// The service to answer the next call with (e.g. the current one of a configuration that can
// be reloaded); a call holds what it returned until it is answered. Called concurrently:
// thread-safe, quick, never null.
using ServiceSource = std::function<std::shared_ptr<Service>()>;

struct GrpcServerOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;  // 0: any free port (address() tells)
  int threads = 1;         // completion-queue threads
  // A connection that has not sent its HTTP/2 preface and SETTINGS within this long is closed
  // (gRPC's server handshake timeout), so that idle connections hold nothing for long.
  Micros handshake_timeout = 10 * kMicrosPerSecond;
  // The transport's bound on a received message; the Service answers INVALID_ARGUMENT above
  // its own (smaller) max_message_bytes. Larger messages are refused by gRPC itself
  // (RESOURCE_EXHAUSTED).
  std::size_t max_receive_bytes = std::size_t{4} << 20;
  Micros drain_timeout = 5 * kMicrosPerSecond;  // stop(): calls in flight get this long
  // The loop of the store's connections: each call is handed to one of its threads (round
  // robin), where the checks of the calls that arrived together reach the store together and
  // go out in fewer, larger script calls. Null: calls are checked on the completion-queue
  // thread.
  std::shared_ptr<EventLoop> loop;
};

class GrpcServer {
 public:
  GrpcServer(Service& service, GrpcServerOptions options);
  // Each call answered by the service `service` returns at the time.
  GrpcServer(ServiceSource service, GrpcServerOptions options);
  ~GrpcServer();  // stop()
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  // Binds and starts serving. Errors: the address cannot be bound.
  Result<void> start();
  // "host:port" actually bound (after start()).
  std::string address() const;
  void stop();

  struct Stats {
    std::uint64_t calls = 0;      // calls accepted
    std::uint64_t cancelled = 0;  // answers that found their call gone (deadline, client)
  };
  Stats stats() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ratekeeper::rls
