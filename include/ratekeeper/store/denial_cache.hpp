#pragma once
// A Store in front of another (a Redis store) that answers, without asking it, the checks it
// already knows to be denied: after the store denies an item (key, limit, cost) with
// retry_after R, checks of that key with the same limit and a cost at least as large are
// denied locally until R has passed, counted from when the first check was sent
// (docs/design/architecture.md, "The denial cache"). Only checks without an explicit `now` are
// cached, and a check is answered locally only when every one of its items has a live denial;
// checks that may wait for their turn pass through. The answer reports the recorded denial,
// retry_after and reset_after shortened by the time elapsed. At most max_keys denials are
// held. Thread-safe.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "ratekeeper/core/clock.hpp"
#include "ratekeeper/core/reuse_pool.hpp"
#include "ratekeeper/store/store.hpp"

namespace ratekeeper::store {

struct DenialCacheOptions {
  std::size_t max_keys = 100'000;
  std::size_t shards = 16;  // rounded up to a power of two
  // Times the denials on its steady reading (nullptr: the system clock); give it the
  // store's clock (StoreOptions::clock).
  const Clock* clock = nullptr;
};

class DenialCache final : public Store {
 public:
  DenialCache(std::unique_ptr<Store> inner, DenialCacheOptions options = {});
  ~DenialCache() override;

  void check(std::vector<CheckItem> items, std::optional<Micros> now, CheckCallback done) override;
  std::string_view kind() const noexcept override { return inner_->kind(); }
  StoreHealth health() const override { return inner_->health(); }
  // Leases pass through to the inner store.
  bool supports_leases() const noexcept override { return inner_->supports_leases(); }
  void lease_grant(const CheckItem& item, std::int64_t want, LeaseCallback done) override {
    inner_->lease_grant(item, want, std::move(done));
  }
  void lease_return(const CheckItem& item, std::int64_t units, Micros at, Micros reset_after,
                    LeaseReturnCallback done) override {
    inner_->lease_return(item, units, at, reset_after, std::move(done));
  }

  // Forgets the keys' denials, then resets them in the inner store.
  void reset(std::vector<std::string> keys, ResetCallback done) override;
  // Reservations go to the inner store; a reservation's denials are recorded as a check's,
  // and a settlement first forgets the keys' denials (it may give units back). A concurrency
  // limit's denials are never recorded: a release may free a slot at any time.
  bool supports_reservations() const noexcept override { return inner_->supports_reservations(); }
  void reserve(ReservationRecord record, std::vector<CheckItem> items, std::optional<Micros> now,
               CheckCallback done) override;
  void settle(std::string record, std::vector<CheckItem> items, std::optional<Micros> now,
              SettleCallback done) override;
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
  // ratekeeper_denial_cache_*, then the inner store's metrics.
  void write_metrics(MetricsWriter& out) const override;

  struct Stats {
    std::uint64_t hits = 0;      // checks answered locally
    std::uint64_t recorded = 0;  // denials recorded
    std::size_t size = 0;        // denials held now (expired ones included until swept)
  };
  Stats stats() const;
  // Forgets every denial held (a reloaded configuration may admit what was denied): the
  // next check of each key goes to the store. Checks in flight may record theirs afterwards.
  void clear();

 private:
  struct Shard;
  Shard& shard_for(std::size_t hash) const noexcept;
  std::optional<CheckOutcome> lookup(const std::vector<CheckItem>& items, Micros now_steady);
  void record(const std::vector<CheckItem>& items, const CheckOutcome& outcome, Micros sent_at);
  // A check passed on to the inner store: a copy of its items (to record the denial it may
  // answer), when it was sent, and its callback. Kept for reuse, with the capacity of its
  // items and their keys: in the steady state a check allocates nothing here.
  struct Passed;
  Passed* pass(const std::vector<CheckItem>& items, Micros sent_at, CheckCallback done);
  CheckCallback answer_of(Passed* passed);

  std::unique_ptr<Store> inner_;
  DenialCacheOptions options_;
  const Clock* clock_;
  std::unique_ptr<Shard[]> shards_;
  std::size_t shard_mask_ = 0;
  std::atomic<std::uint64_t> hits_{0};
  std::atomic<std::uint64_t> recorded_{0};
  // Denials held over all shards, changed under their shard's lock: while none is held, a
  // check is passed on without hashing its keys or taking a lock.
  std::atomic<std::size_t> held_{0};
  std::mutex passed_mu_;
  ReusePool<Passed> passed_;  // under passed_mu_
};

}  // namespace ratekeeper::store
