#pragma once
// A Store in front of another (a Redis store) that admits the items of leased limits
// (CheckItem::lease) from leases this instance holds: blocks of a key's units consumed from
// the inner store at once (Store::lease_grant), admitted locally until used up or expired,
// their unused units given back (Store::lease_return). What every instance admits together
// never exceeds what the store granted; all-or-nothing checks stay exact. The price is
// bounded under-admission and stale `remaining` on local admissions: see
// docs/design/architecture.md, "Leases".
//
// Passed through untouched: checks with an explicit `now`, checks that may wait for their
// turn (may_delay), a key named twice, more than kMaxLeasedItems items, and everything when
// the inner store does not support leases or after shutdown(). Items of cost 0 and of limits
// that cannot be leased (algorithms::leasable) go to the inner store as if not leased.
//
// Thread-safe. Callbacks of the inner store run on its threads; this store's own state is
// guarded by sharded locks, never held while a callback runs.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "ratekeeper/core/clock.hpp"
#include "ratekeeper/store/store.hpp"

namespace ratekeeper::store {

struct LeasingStoreOptions {
  // Leases expire on its steady reading (nullptr: the system clock); give it the store's.
  const Clock* clock = nullptr;
  // Expired leases' units go back at most this long after expiry: reap() (which visits every
  // key's lease) runs on a check that finds the last run this long ago (steady reading of
  // `clock`) or, with reaper_thread, from a thread of its own every this long (real time),
  // which also serves idle instances and keeps the visits off the checks.
  Micros reap_every = 50 * kMicrosPerMilli;
  bool reaper_thread = false;
  // shutdown() waits at most this long (real time) for the returns and grants in flight.
  Micros shutdown_timeout = 2 * kMicrosPerSecond;
  std::size_t shards = 16;  // rounded up to a power of two
};

class LeasingStore final : public Store {
 public:
  // A check with more items is passed through.
  static constexpr std::size_t kMaxLeasedItems = 8;

  LeasingStore(std::unique_ptr<Store> inner, LeasingStoreOptions options = {});
  // shutdown(), then the inner store goes.
  ~LeasingStore() override;

  void check(std::vector<CheckItem> items, std::optional<Micros> now, CheckCallback done) override;
  std::string_view kind() const noexcept override { return inner_->kind(); }
  StoreHealth health() const override { return inner_->health(); }

  // Ends the keys' leases without giving their unused units back (they were taken from the
  // state being deleted) and forgets their refused grants, then resets them in the inner store.
  void reset(std::vector<std::string> keys, ResetCallback done) override;
  // Reservations pass through to the inner store, unleased.
  bool supports_reservations() const noexcept override { return inner_->supports_reservations(); }
  void reserve(ReservationRecord record, std::vector<CheckItem> items, std::optional<Micros> now,
               CheckCallback done) override {
    inner_->reserve(std::move(record), std::move(items), now, std::move(done));
  }
  void settle(std::string record, std::vector<CheckItem> items, std::optional<Micros> now,
              SettleCallback done) override {
    inner_->settle(std::move(record), std::move(items), now, std::move(done));
  }
  void renew(std::string record, std::vector<CheckItem> items, Micros ttl, std::optional<Micros> now,
             SettleCallback done) override {
    inner_->renew(std::move(record), std::move(items), ttl, now, std::move(done));
  }
  // Shared tables pass through to the inner store.
  bool supports_tables() const noexcept override { return inner_->supports_tables(); }
  void read_table(std::string key, std::int64_t known_version, TableCallback done) override {
    inner_->read_table(std::move(key), known_version, std::move(done));
  }
  void write_table(std::string key, std::string field, std::optional<std::string> value, std::size_t max_entries,
                   TableWriteCallback done) override {
    inner_->write_table(std::move(key), std::move(field), std::move(value), max_entries, std::move(done));
  }
  Store& inner() noexcept { return *inner_; }

  // Returns the unused units of every lease expired by now (steady reading) to the inner
  // store. Returns how many leases were returned.
  std::size_t reap();

  // Returns the unused units of every lease and waits for the inner store to confirm (and for
  // grants in flight, whose units go straight back), at most options.shutdown_timeout; checks
  // from then on pass through unleased. Idempotent. Not on a thread that runs the inner
  // store's callbacks.
  void shutdown();

  struct Stats {
    std::uint64_t leases_taken = 0;       // grants of at least one unit
    std::uint64_t grants_denied = 0;      // grants refused (nothing available)
    std::uint64_t grants_failed = 0;      // grants the store failed to answer
    std::uint64_t units_granted = 0;      // units granted in all
    std::uint64_t returns = 0;            // returns of unused units sent
    std::uint64_t units_returned = 0;     // unused units given back (confirmed)
    std::uint64_t local_admissions = 0;   // checks admitted from leases without a store call
    std::uint64_t local_denials = 0;      // checks denied by a remembered refused grant
    std::size_t leases = 0;               // keys with a lease record now
  };
  Stats stats() const;
  // The stats (ratekeeper_lease_*), then the inner store's metrics.
  void write_metrics(MetricsWriter& out) const override;

 private:
  struct Lease;
  struct Shard;
  struct Waiting;
  struct Taken;
  class Attempt;

  Shard& shard_for(std::string_view key) const noexcept;
  void try_local(std::vector<CheckItem> items, CheckCallback done);
  void start_grant(const CheckItem& item, std::int64_t want, Micros sent);
  void granted(std::string key, Micros sent, std::int64_t min, std::int64_t want, Result<LeaseGrant> grant);
  void give_back(const CheckItem& item, std::int64_t units, Micros at, Micros reset_after);
  void put_back(const Taken* taken, std::size_t count);
  void maybe_reap(Micros steady);
  void reaper_loop();
  void op_started();
  void op_finished();

  std::unique_ptr<Store> inner_;
  LeasingStoreOptions options_;
  const Clock* clock_;
  std::unique_ptr<Shard[]> shards_;
  std::size_t shard_mask_ = 0;
  std::atomic<bool> closed_{false};
  std::atomic<bool> inner_gone_{false};  // the inner store is being destroyed: nothing more to it
  std::atomic<Micros> next_reap_{0};

  // Grants and returns in flight, for shutdown().
  std::mutex ops_mu_;
  std::condition_variable ops_cv_;
  std::size_t ops_ = 0;

  std::atomic<std::uint64_t> leases_taken_{0}, grants_denied_{0}, grants_failed_{0}, units_granted_{0},
      returns_{0}, units_returned_{0}, local_admissions_{0}, local_denials_{0};

  std::mutex reaper_mu_;
  std::condition_variable reaper_cv_;
  bool stop_reaper_ = false;
  std::thread reaper_;
};

}  // namespace ratekeeper::store
