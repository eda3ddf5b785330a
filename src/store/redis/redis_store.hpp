#pragma once
// The distributed store: the scripts of lua/*.lua on Redis, as Redis Functions (FCALL) or,
// where the server refuses them, by EVALSHA (script_client.hpp). One store over three
// topologies, which only decide where a call goes and whether the store is ready:
//   - one server (TCP or unix socket), one auto-pipelined connection per I/O thread;
//   - the master a Sentinel deployment names, followed across failovers (redis::Sentinel);
//   - a Cluster's masters, each call to the master of its keys' slot (redis::Cluster).
// Every check is one atomic script call on one server, except a check whose keys span
// slots of a cluster (cross_slot.hpp). Decisions are identical to MemoryStore's for the same
// explicit `now`. Internal: users open it by URL (open_store.hpp). Thread-safe.
//
// Each I/O thread is a lane: its own script client and, per destination (the server, or a
// cluster slot), a Coalescer that sends the checks that wait for a call in flight together
// as one batch script call (docs/design/architecture.md, "Coalescing").

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "redis/cluster.hpp"
#include "redis/connection.hpp"
#include "redis/sentinel.hpp"
#include "ratekeeper/store/open_store.hpp"
#include "ratekeeper/store/store.hpp"

namespace ratekeeper {
class EventLoop;
}

namespace ratekeeper::store::detail {
class CrossSlotChecks;
class ScriptHealth;
}  // namespace ratekeeper::store::detail

namespace ratekeeper::store {

// Where the scripts run. The loop and io_threads of SentinelOptions and ClusterOptions are
// the store's (RedisStoreOptions::loop, ::connections), whatever they say.
using RedisTopology = std::variant<redis::ConnectionOptions, redis::SentinelOptions, redis::ClusterOptions>;

struct RedisStoreOptions {
  RedisTopology topology;
  int connections = 1;  // I/O threads (lanes), each with its own connections
  // Run on this loop instead of starting threads: one lane per loop thread, and a check
  // issued on a loop thread uses that thread's lane (no hand-off between threads; see
  // core/event_loop.hpp). `connections` is then ignored.
  std::shared_ptr<EventLoop> loop;
  std::size_t max_batch = 64;  // checks coalesced into one script call at most; 1: never
  // Script calls in flight per lane and destination before new checks wait for one to
  // complete (and then go out together). Bounds nothing else: each check keeps its deadline.
  std::size_t max_in_flight = 4;
  bool reject_cross_slot = false;  // cluster: a check spanning slots is invalid_argument
  ReplyHealthOptions health;
  // Call the scripts as Redis Functions (FCALL; the library loaded on first use), falling
  // back to EVALSHA where the server refuses them; false: EVALSHA only.
  bool functions = true;
  // Deadlines and health are measured on its steady reading (nullptr: the system clock).
  const Clock* clock = nullptr;
};

// StoreOptions + a parsed Redis URL (any scheme but memory) → RedisStoreOptions. A cluster's
// and a Sentinel's URL credentials and db apply to the data nodes, not to the sentinels.
RedisStoreOptions redis_store_options(const StoreOptions& options, const redis::Url& url);

class RedisStore final : public Store {
 public:
  explicit RedisStore(RedisStoreOptions options);
  ~RedisStore() override;

  // Store interface. Invalid arguments (cost above capacity, a key twice, now < 0) are
  // answered on the caller's stack, exactly as MemoryStore answers them.
  void check(std::vector<CheckItem> items, std::optional<Micros> now, CheckCallback done) override;
  // "redis", "redis-sentinel" or "redis-cluster".
  std::string_view kind() const noexcept override;
  // Ready iff the topology is (every connection up and its breaker closed; the master
  // resolved; every slot's master reachable) and no script call got an error reply within
  // the last health.error_window (e.g. OOM under maxmemory with noeviction).
  StoreHealth health() const override;
  // Leases: lua/lease.lua grants, lua/refund.lua takes unused units back; one script call
  // each, not coalesced.
  bool supports_leases() const noexcept override { return true; }
  void lease_grant(const CheckItem& item, std::int64_t want, LeaseCallback done) override;
  void lease_return(const CheckItem& item, std::int64_t units, Micros at, Micros reset_after,
                    LeaseReturnCallback done) override;
  // One call of lua/reset.lua; the keys must share a cluster slot (one identity's keys do).
  void reset(std::vector<std::string> keys, ResetCallback done) override;
  // One call of lua/reservation.lua each, bounded by its deadline as a check is (a settlement
  // is not: one that runs late still settles). On a cluster, a reservation whose keys span
  // slots (the identities of several rules) is checked as check() checks it, and recorded
  // nowhere (CheckOutcome::recorded false: its estimate stays), unless it holds concurrency
  // slots: then the keys in the record's slot are reserved first (the record holding all of
  // them), the others checked after, and the first part settled at 0 when they deny or fail
  // (not atomic across slots, as check() is not: a request may be denied by the second part
  // after the first held its slot for a round trip). A settlement's keys must share the
  // record's slot.
  bool supports_reservations() const noexcept override { return true; }
  void reserve(ReservationRecord record, std::vector<CheckItem> items, std::optional<Micros> now,
               CheckCallback done) override;
  void settle(std::string record, std::vector<CheckItem> items, std::optional<Micros> now,
              SettleCallback done) override;
  void renew(std::string record, std::vector<CheckItem> items, Micros ttl, std::optional<Micros> now,
             SettleCallback done) override;
  // One call of lua/table.lua each, bounded by the command timeout.
  bool supports_tables() const noexcept override { return true; }
  void read_table(std::string key, std::int64_t known_version, TableCallback done) override;
  void write_table(std::string key, std::string field, std::optional<std::string> value, std::size_t max_entries,
                   TableWriteCallback done) override;
  void write_metrics(MetricsWriter& out) const override;

  struct Stats {
    std::uint64_t batches = 0;            // batch script calls sent
    std::uint64_t batched_checks = 0;     // checks answered through them
    std::uint64_t noscript_reloads = 0;   // scripts sent again as EVAL (NOSCRIPT)
    std::uint64_t library_loads = 0;      // FUNCTION LOADs of the library
    std::uint64_t cross_slot_checks = 0;  // cluster: checks split over several slots
    std::uint64_t cross_slot_partial = 0;  // of those: some slots consumed, another denied
    std::uint64_t refunds_sent = 0;       // refund calls sent, one per slot that consumed
    std::uint64_t refunds_failed = 0;     // refunds not confirmed (their consumption stays)
  };
  Stats stats() const noexcept;
  std::uint64_t noscript_reloads() const noexcept { return stats().noscript_reloads; }
  std::uint64_t library_loads() const noexcept { return stats().library_loads; }
  // Whether calls go out as FCALL on every lane (false: functions are off, or refused).
  bool using_functions() const noexcept;

  // The topology's client; each valid only on its topology (std::bad_variant_access otherwise).
  redis::Connection& connection(std::size_t lane = 0);
  redis::Sentinel& sentinel();
  redis::Cluster& cluster();

 private:
  struct Lane;
  Lane& lane();
  std::uint16_t slot_of(std::string_view key) const;  // 0 outside a cluster
  // The one slot of `keys` (non-empty); invalid_argument when they span several.
  Result<std::uint16_t> one_slot(std::span<const std::string> keys) const;
  // A reservation whose keys span cluster slots (reserve()).
  void reserve_across_slots(ReservationRecord record, std::vector<CheckItem> items, std::optional<Micros> now,
                            CheckCallback done);
  // A call of "settle" or "renew" (with its ttl) over a record and its items: answers 1 or 0.
  void send_settlement(std::string_view script, std::optional<Micros> ttl, std::string record,
                       std::vector<CheckItem> items, std::optional<Micros> now, SettleCallback done);

  RedisStoreOptions options_;
  const Clock* clock_;
  Micros command_timeout_ = 0;
  std::unique_ptr<detail::ScriptHealth> health_;  // outlives the lanes
  std::shared_ptr<EventLoop> loop_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  // The topology's client beyond the lanes' own connections (Sentinel or Cluster).
  std::variant<std::monostate, std::unique_ptr<redis::Sentinel>, std::unique_ptr<redis::Cluster>> router_;
  std::unique_ptr<detail::CrossSlotChecks> cross_slot_;
  std::atomic<std::size_t> next_{0};
};

}  // namespace ratekeeper::store
