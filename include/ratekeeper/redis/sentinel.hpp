#pragma once
// A client of the master that Redis Sentinel monitors under a name: the master's address
// comes from `SENTINEL get-master-addr-by-name` (sentinels asked in turn), is verified with
// ROLE, and the master is reached over one auto-pipelined Connection.
//
// Following failovers: one pub/sub connection, to the first sentinel that answers (the next
// one in turn when it drops, after a backoff; a PING every 2 s notices a silent one),
// subscribes to +switch-master. A message naming master_name makes the client re-resolve at
// once: the new address is asked of the sentinels and verified with ROLE, never taken from
// the message. Messages published while the subscription was down are lost, so the client
// also re-resolves when it subscribes again, periodically (poll_interval, the fallback), and
// at once after a connection error, READONLY, MASTERDOWN or LOADING. READONLY, MASTERDOWN,
// LOADING and commands that could not be sent (connection down, breaker open, no master
// known) did not run: they are retried with a bounded backoff until their deadline. A command
// that was sent and then lost (timeout, connection dropped) may have run: the caller gets the
// error.
//
// Thread-safe. Callbacks run on the client's event-loop threads; they must not block.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ratekeeper/redis/connection.hpp"
#include "ratekeeper/redis/url.hpp"

namespace ratekeeper::redis {

struct SentinelOptions {
  std::vector<Endpoint> sentinels;
  std::string master_name;
  // Template of the master connection (credentials, db, deadlines, breaker); the endpoint is
  // replaced by the resolved one.
  ConnectionOptions master;
  // Template of the sentinel connections, the +switch-master subscription included (no
  // credentials: sentinels rarely have them; when set, AUTH is sent first).
  ConnectionOptions sentinel;
  // Re-resolution when nothing else asked for one: the fallback for +switch-master messages
  // lost while the subscription was down.
  Micros poll_interval = 1 * kMicrosPerSecond;
  Micros min_resolve_gap = 50 * kMicrosPerMilli;  // re-resolutions asked on errors coalesce
  Micros retry_min = 1 * kMicrosPerMilli;
  Micros retry_max = 50 * kMicrosPerMilli;
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
  // "subscribed to <sentinel>" or why the +switch-master subscription is down (polling and
  // errors still find a new master then).
  std::string subscription_status() const;

  struct Stats {
    std::uint64_t resolutions = 0;     // successful answers from a sentinel
    std::uint64_t switches = 0;        // changes of master after the first
    std::uint64_t topology_errors = 0; // READONLY, MASTERDOWN, LOADING replies
    std::uint64_t unsent_retries = 0;
    std::uint64_t switch_messages = 0;        // +switch-master messages naming this master
    std::uint64_t subscriptions = 0;          // +switch-master subscriptions confirmed
    std::uint64_t subscription_failures = 0;  // subscription connections lost or refused
  };
  Stats stats() const noexcept;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace ratekeeper::redis
