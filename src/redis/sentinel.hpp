#pragma once
// A client of the master that Redis Sentinel monitors under a name: the master's address
// comes from `SENTINEL get-master-addr-by-name` (sentinels asked in turn, from the one that
// announced the last switch), is verified with ROLE, and the master is reached over one
// auto-pipelined Connection.
//
// Following failovers: every sentinel is listened to on its own pub/sub connection (each
// reconnecting with its own backoff, a PING every 2 s noticing a silent one) for
// +switch-master, and the first announcement of a switch of master_name by any of them makes
// the client re-resolve at once. The sentinel that leads a failover may announce it only once
// it has reconfigured every replica, seconds after the promotion, while the others announce
// it as soon as they learn the new configuration: listening to one sentinel alone would keep
// the client writing to the old master meanwhile. Later announcements of the same switch (the
// other sentinels') are counted and ignored. The new address is not taken from the message:
// the announcing sentinel is asked first (then the others in turn) and the answer is verified
// with ROLE. Messages published while a subscription was down are lost, so the client also
// re-resolves when a subscription is confirmed again, periodically (poll_interval, the
// fallback), and at once after a connection error, READONLY, MASTERDOWN, LOADING or
// NOREPLICAS. Commands answered READONLY, MASTERDOWN, LOADING or NOREPLICAS, and commands that
// could not be sent (connection down, breaker open, no master known) did not run: they are
// retried with a bounded backoff until their deadline. A command that was sent and then lost
// (timeout, connection dropped) may have run: the caller gets the error. (The routing and
// retrying is src/redis/routed_command.hpp, shared with Cluster.) Resolutions run on the event
// loop (src/redis/refresher.hpp): one at a time, those asked meanwhile coalesced.
//
// Time: deadlines, backoffs and the age of replaced connections are read from
// options.master.clock (nullptr: the system clock).
//
// Writes the old master acknowledged and had not replicated when the replica was promoted,
// and writes it took until the first announcement reached the client, are lost (replication
// is asynchronous); docs/configuration.md says how min-replicas-to-write bounds them.
//
// Thread-safe. Callbacks run on the event loop's threads (options.loop's, or the client's
// own); they must not block. Destroy the client off the loop's threads, or on one of them
// while no other thread sends.

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
