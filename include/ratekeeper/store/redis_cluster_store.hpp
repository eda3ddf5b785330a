#pragma once
// The distributed store on Redis Cluster: the Lua scripts of lua/*.lua by EVALSHA on the
// master of each key's slot, through redis::Cluster (MOVED/ASK/TRYAGAIN/CLUSTERDOWN handled
// there). Scripts are loaded per node on NOSCRIPT (EVAL once), e.g. on a promoted replica.
//
// Atomicity: the keys of one identity share a hash tag, hence a slot, and a check whose keys
// are all in one slot is one script call: all-or-nothing, exactly as RedisStore. A check
// spanning several slots (several identities, e.g. a per-IP and a per-user rule on one
// request) is split into one atomic call per slot, sent concurrently, and the decisions are
// combined. Across slots it is NOT all-or-nothing and there is no refund: when one slot
// denies, the slots that allowed have consumed their cost (counted in
// Stats::cross_slot_partial). Set reject_cross_slot to get invalid_argument instead.
// If any slot's call fails, the check fails (the failure policy above the store applies)
// and the slots that succeeded keep their consumption.
// Thread-safe.

#include <atomic>
#include <memory>
#include <string_view>

#include "ratekeeper/redis/cluster.hpp"
#include "ratekeeper/store/open_store.hpp"
#include "ratekeeper/store/store.hpp"

namespace ratekeeper::redis {
struct Url;
}

namespace ratekeeper::store {

struct RedisClusterStoreOptions {
  redis::ClusterOptions cluster;
  bool reject_cross_slot = false;  // true: a check spanning slots is invalid_argument
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
  // Ready iff every slot has a master and every master's connection is up.
  StoreHealth health() const override;

  struct Stats {
    std::uint64_t noscript_reloads = 0;
    std::uint64_t cross_slot_checks = 0;   // checks split over several slots
    std::uint64_t cross_slot_partial = 0;  // of those: some slots consumed, another denied
  };
  Stats stats() const noexcept;
  redis::Cluster& cluster() noexcept { return *cluster_; }

 private:
  void run(std::vector<CheckItem> items, std::uint16_t slot, std::optional<Micros> now, Micros deadline,
           CheckCallback done);

  RedisClusterStoreOptions options_;
  std::unique_ptr<redis::Cluster> cluster_;
  std::atomic<std::uint64_t> noscript_reloads_{0};
  std::atomic<std::uint64_t> cross_slot_checks_{0};
  std::atomic<std::uint64_t> cross_slot_partial_{0};
};

}  // namespace ratekeeper::store
