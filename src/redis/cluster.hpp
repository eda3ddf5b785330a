#pragma once
// A Redis Cluster client: the slot map from CLUSTER SLOTS, one auto-pipelined Connection per
// node and I/O thread, and commands routed to the master of a slot. MOVED and ASK are
// followed (max_redirects, then ErrorCode::redirect); TRYAGAIN, CLUSTERDOWN, LOADING,
// READONLY, MASTERDOWN and commands that could not be sent are retried with a bounded backoff
// until their deadline; a command sent and then lost may have run: the caller gets the error
// (docs/design/architecture.md, "The Redis clients"). The map is refreshed on redirections and
// errors (coalesced) and every refresh_interval.
//
// Time: deadlines and backoffs are read from options.node.clock (nullptr: the system clock).
// Thread-safe. Callbacks run on the event loop's threads; they must not block. Destroy the
// client off the loop's threads, or on one of them while no other thread sends.

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

struct ClusterOptions {
  std::vector<Endpoint> seeds;  // any nodes of the cluster; the rest is discovered
  // Template of every node connection (credentials, deadlines, breaker); endpoint and db
  // are replaced (a cluster has only db 0).
  ConnectionOptions node;
  int max_redirects = 5;                            // MOVED + ASK per command
  Micros refresh_interval = 5 * kMicrosPerSecond;   // periodic slot-map refresh
  Micros min_refresh_gap = 50 * kMicrosPerMilli;    // refreshes asked on errors coalesce
  Micros retry_min = 1 * kMicrosPerMilli;           // backoff of TRYAGAIN, CLUSTERDOWN, unsent
  Micros retry_max = 50 * kMicrosPerMilli;
  // Run the node connections on this loop (shared with e.g. the HTTP server and RedisStore)
  // instead of starting io_threads threads of its own; it must outlive the client.
  std::shared_ptr<EventLoop> loop;
  int io_threads = 1;
};

class Cluster {
 public:
  // Starts discovering the topology in the background at once.
  explicit Cluster(ClusterOptions options);
  // Pending commands fail with unavailable.
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  // Sends `argv` to the master of `slot` (see key_slot()). `argv` must stay valid until
  // `done` runs. `timeout` 0 means options.node.command_timeout; it covers every retry.
  void command(std::uint16_t slot, std::span<const std::string_view> argv, ReplyCallback done,
               Micros timeout = 0);

  // Reloads the slot map now (coalesced).
  void refresh();

  // True when every slot has a master in the map and every master's connection is up.
  bool ready() const;
  // "ok", or why not ready.
  std::string status() const;
  // The masters of the current map, and the master of one slot (none before discovery).
  std::vector<Endpoint> masters() const;
  std::optional<Endpoint> master_of(std::uint16_t slot) const;

  struct Stats {
    std::uint64_t moved = 0;
    std::uint64_t ask = 0;
    std::uint64_t tryagain = 0;
    std::uint64_t clusterdown = 0;
    std::uint64_t topology_errors = 0;  // READONLY, MASTERDOWN, LOADING
    std::uint64_t unsent_retries = 0;   // retries of commands that could not be sent
    std::uint64_t redirect_exhausted = 0;
    std::uint64_t refreshes = 0;        // slot maps loaded
    std::uint64_t map_changes = 0;      // loaded maps that differed from the previous one
  };
  Stats stats() const noexcept;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace ratekeeper::redis
