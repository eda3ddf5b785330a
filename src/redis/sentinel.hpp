#pragma once
// A client of the master that Redis Sentinel monitors under a name: the master's address
// from `SENTINEL get-master-addr-by-name`, verified with ROLE, reached over one auto-pipelined
// Connection per I/O thread. Failovers are followed through every sentinel's +switch-master
// announcements, re-resolution on errors and a periodic poll (docs/design/architecture.md,
// "The Redis clients"). Commands that did not run (READONLY, MASTERDOWN, LOADING, NOREPLICAS,
// not sent) are retried with a bounded backoff until their deadline; a command sent and then
// lost may have run: the caller gets the error.
//
// Time: deadlines, backoffs and the age of replaced connections are read from
// options.master.clock (nullptr: the system clock). Thread-safe. Callbacks run on the event
// loop's threads; they must not block. Destroy the client off the loop's threads, or on one
// of them while no other thread sends.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "redis/connection.hpp"
#include "ratekeeper/redis/url.hpp"

namespace ratekeeper {
class EventLoop;
}

namespace ratekeeper::redis {

struct SentinelOptions {
  std::vector<Endpoint> sentinels;
  std::string master_name;
  // Template of the master connection (credentials, db, deadlines, breaker); the endpoint is
  // replaced by the resolved one.
  ConnectionOptions master;
  // Template of the sentinel connections, the +switch-master subscriptions included (no
  // credentials: sentinels rarely have them; when set, AUTH is sent first).
  ConnectionOptions sentinel;
  // Re-resolution when nothing else asked for one: the fallback for +switch-master messages
  // lost while the subscription was down.
  Micros poll_interval = 1 * kMicrosPerSecond;
  Micros min_resolve_gap = 50 * kMicrosPerMilli;  // re-resolutions asked on errors coalesce
  Micros retry_min = 1 * kMicrosPerMilli;
  Micros retry_max = 50 * kMicrosPerMilli;
  // Run the connections and subscriptions on this loop (shared with e.g. the HTTP server and
  // RedisStore) instead of starting io_threads threads of its own; it must outlive the client.
  std::shared_ptr<EventLoop> loop;
  int io_threads = 1;
};

class Sentinel {
 public:
  // Starts resolving the master in the background at once.
  explicit Sentinel(SentinelOptions options);
  ~Sentinel();  // pending commands fail with unavailable
  Sentinel(const Sentinel&) = delete;
  Sentinel& operator=(const Sentinel&) = delete;

  // Sends `argv` to the current master. `argv` must stay valid until `done` runs. `timeout` 0
  // means options.master.command_timeout; it covers every retry.
  void command(std::span<const std::string_view> argv, ReplyCallback done, Micros timeout = 0);

  // Asks for a re-resolution now (coalesced).
  void resolve();

  // The master currently in use, if any.
  std::optional<Endpoint> master() const;
  bool ready() const;
  std::string status() const;  // "ok" or why not ready
  // "subscribed to <n> of <m> sentinels", followed by why each subscription that is down is
  // down ("; <sentinel>: <why>"). While none is up, polling and errors still find a new master.
  std::string subscription_status() const;

  struct Stats {
    std::uint64_t resolutions = 0;      // successful answers from a sentinel
    std::uint64_t switches = 0;         // changes of master after the first
    std::uint64_t topology_errors = 0;  // READONLY, MASTERDOWN, LOADING, NOREPLICAS replies
    std::uint64_t unsent_retries = 0;
    std::uint64_t switch_messages = 0;        // +switch-master messages naming this master
    std::uint64_t switch_announcements = 0;   // of those, the first of each switch (acted on)
    std::uint64_t subscriptions = 0;          // +switch-master subscriptions confirmed (all)
    std::uint64_t subscription_failures = 0;  // subscription connections lost or refused
    std::uint64_t subscribed = 0;             // sentinels whose subscription is up now
  };
  Stats stats() const noexcept;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace ratekeeper::redis
