#pragma once
// A client of the master that Redis Sentinel monitors under a name: the master's address
// comes from `SENTINEL get-master-addr-by-name` (sentinels asked in turn), is verified with
// ROLE, and the master is reached over one auto-pipelined Connection.
//
// Following failovers: the address is re-resolved periodically (poll_interval; +switch-master
// is not subscribed to, since the pipelined Connection does not carry pub/sub pushes) and at
// once after a connection error, READONLY, MASTERDOWN or LOADING. READONLY, MASTERDOWN,
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
  // Template of the sentinel connections (no credentials: sentinels rarely have them).
  ConnectionOptions sentinel;
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

  struct Stats {
    std::uint64_t resolutions = 0;     // successful answers from a sentinel
    std::uint64_t switches = 0;        // changes of master after the first
    std::uint64_t topology_errors = 0; // READONLY, MASTERDOWN, LOADING replies
    std::uint64_t unsent_retries = 0;
  };
  Stats stats() const noexcept;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace ratekeeper::redis
