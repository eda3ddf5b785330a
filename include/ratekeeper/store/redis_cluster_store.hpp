#pragma once
// The distributed store on Redis Cluster: the Lua scripts of lua/*.lua by EVALSHA on the
// master of each key's slot, through redis::Cluster (MOVED/ASK/TRYAGAIN/CLUSTERDOWN handled
// there). Scripts are loaded per node on NOSCRIPT (EVAL once), e.g. on a promoted replica.
//
// Atomicity: the keys of one identity share a hash tag, hence a slot, and a check whose keys
// are all in one slot is one script call: all-or-nothing, exactly as RedisStore (a check
// that may wait for its turn, CheckItem::max_delay, included: "multi_delay").
//
// A check spanning several slots (several identities, e.g. a per-IP and a per-user rule on
// one request) is split into one atomic call per slot ("multi_at": "multi" that also
// reports the instant it decided at, the node's TIME unless `now` is given), sent
// concurrently; such a check never waits for its turn (its max_delays count as 0: one send
// time for all slots cannot be agreed atomically). When every slot admits, the check is admitted. When some slot denies, each
// slot that admitted a positive cost is sent a refund ("refund", lua/refund.lua) within the
// check's deadline, and only then is the combined denial answered; the items of refunded
// slots report a peek taken right after the refund. The refund gives back what that call's
// consumption still holds, whatever order the refunds of several checks arrive in, never
// more than the cost and never below empty (token bucket: min(cost·T, tat_c − now, tat −
// now), tat_c the tat the consumption left, so refunding every consumption leaves the
// bucket full; fixed window and sliding window counter: the cost, from the count of the
// window the consumption was counted in, while it still counts; sliding window log: that
// many entries stamped with the check's instant, while it is in the window), and leaves
// exact key lifetimes. See lua/refund.lua and docs/configuration.md, "Redis Cluster: checks
// that span slots".
// The refund is NOT atomic with the check: from the moment a slot's call consumed until its
// refund runs (at most the deadline, normally one round trip after the slowest slot
// answered), other clients see that consumption and may be denied because of it. A refund
// that fails (deadline passed, timeout, node down, error reply) is counted in
// Stats::refunds_failed and logged, never retried: that consumption stays (a timed-out
// refund may still have run on the node). Set reject_cross_slot to get invalid_argument
// instead of any of this.
// If any slot's call fails, the check fails (the failure policy above the store applies),
// nothing is refunded and the slots that admitted keep their consumption.
// Thread-safe.

#include <atomic>
#include <memory>
#include <span>
#include <string_view>

#include "ratekeeper/redis/cluster.hpp"
#include "ratekeeper/store/open_store.hpp"
#include "ratekeeper/store/store.hpp"

namespace ratekeeper::redis {
struct Url;
}

namespace ratekeeper::store {

namespace detail {
struct TimedOutcome;
struct RefundOutcome;
class ScriptClient;
class ScriptHealth;
}  // namespace detail

struct RedisClusterStoreOptions {
  redis::ClusterOptions cluster;
  bool reject_cross_slot = false;  // true: a check spanning slots is invalid_argument
  ReplyHealthOptions health;
  // Call the scripts as Redis Functions (FCALL; the library loaded on first use), falling
  // back to EVALSHA where the server refuses them; false: EVALSHA only.
  bool functions = true;
  // Deadlines and health are measured on its steady reading (nullptr: the system clock).
  const Clock* clock = nullptr;
};

// StoreOptions + a parsed redis-cluster:// URL → RedisClusterStoreOptions.
RedisClusterStoreOptions redis_cluster_store_options(const StoreOptions& options, const redis::Url& url);

class RedisClusterStore final : public Store {
 public:
  explicit RedisClusterStore(RedisClusterStoreOptions options);
  ~RedisClusterStore() override;

  // Store interface. Invalid arguments are answered on the caller's stack, as MemoryStore.
  void check(std::vector<CheckItem> items, std::optional<Micros> now, CheckCallback done) override;
  std::string_view kind() const noexcept override { return "redis-cluster"; }
  // Ready iff every slot has a master and every master's connection is up, and no script
  // call (on any node) got an error reply within the last health.error_window (see
  // ReplyHealthOptions).
  StoreHealth health() const override;
  // Leases (lua/lease.lua; the return through lua/refund.lua), one script call each to the
  // master of the key's slot.
  bool supports_leases() const noexcept override { return true; }
  void lease_grant(const CheckItem& item, std::int64_t want, LeaseCallback done) override;
  void lease_return(const CheckItem& item, std::int64_t units, Micros at, Micros reset_after,
                    LeaseReturnCallback done) override;

  struct Stats {
    std::uint64_t noscript_reloads = 0;
    std::uint64_t cross_slot_checks = 0;   // checks split over several slots
    std::uint64_t cross_slot_partial = 0;  // of those: a refund was needed (some slots consumed, another denied)
    std::uint64_t refunds_sent = 0;        // refund calls sent, one per slot that consumed
    std::uint64_t refunds_failed = 0;      // refunds not confirmed: failed calls, and those the deadline left unsent
    std::uint64_t library_loads = 0;       // FUNCTION LOADs of the library (first use, after a flush or restart)
  };
  Stats stats() const noexcept;
  redis::Cluster& cluster() noexcept { return *cluster_; }
  // Stats and the cluster client's redirections, in Prometheus' text format:
  // ratekeeper_cluster_cross_slot_checks_total, ..._cross_slot_partial_total,
  // ..._refunds_total, ..._refund_failures_total, ..._redirects_total{kind="moved"|"ask"},
  // ..._slot_map_refreshes_total.
  std::string metrics_text() const;

 private:
  void run(std::vector<CheckItem> items, std::uint16_t slot, std::optional<Micros> now, Micros deadline,
           CheckCallback done);
  struct CrossSlotCheck;
  void check_across_slots(std::vector<CheckItem> items, std::span<const std::uint16_t> slots,
                          std::optional<Micros> now, Micros deadline, CheckCallback done);
  void part_answered(const std::shared_ptr<CrossSlotCheck>& check, std::size_t part,
                     Result<detail::TimedOutcome> outcome);
  void refund_answered(const std::shared_ptr<CrossSlotCheck>& check, std::size_t part,
                       std::span<const std::size_t> positions, Result<detail::RefundOutcome> outcome);
  void answer(const std::shared_ptr<CrossSlotCheck>& check);

  RedisClusterStoreOptions options_;
  const Clock* clock_;
  std::unique_ptr<detail::ScriptHealth> health_;  // outlives the client
  std::unique_ptr<detail::ScriptClient> client_;  // outlives the cluster's callbacks
  std::unique_ptr<redis::Cluster> cluster_;
  std::atomic<std::uint64_t> cross_slot_checks_{0};
  std::atomic<std::uint64_t> cross_slot_partial_{0};
  std::atomic<std::uint64_t> refunds_sent_{0};
  std::atomic<std::uint64_t> refunds_failed_{0};
};

}  // namespace ratekeeper::store
