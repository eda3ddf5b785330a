#pragma once
// The embedded store: in-process, sharded by key hash, one lock per shard, no global lock.
//
// Expired keys are reclaimed incrementally: every insertion into a shard examines a few
// buckets of that shard and erases what has expired; no sweep ever stops the world.
// When a shard holds its share of max_keys and nothing in it has expired, a new key is
// refused with ErrorCode::store_full (counted in stats().rejected_full), so the caller's
// failure policy decides; keys already present keep working. Evicting live keys instead
// would let a flood of new identities reset everybody else's limits.

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>

#include "ratekeeper/algorithms/state.hpp"
#include "ratekeeper/core/clock.hpp"
#include "ratekeeper/store/store.hpp"

namespace ratekeeper::store {

struct MemoryStoreOptions {
  std::size_t max_keys = 1'000'000;
  std::size_t shards = 64;  // rounded up to a power of two; fewer when max_keys / shards < 256
  const Clock* clock = &SystemClock::instance();  // used when a check carries no `now`
};

class MemoryStore final : public Store {
 public:
  explicit MemoryStore(MemoryStoreOptions options = {});
  ~MemoryStore() override;

  // Store interface; `done` always runs before check() returns. Thread-safe.
  void check(std::vector<CheckItem> items, std::optional<Micros> now, CheckCallback done) override;
  std::string_view kind() const noexcept override { return "memory"; }
  // Leases, at the store's clock (algorithms::lease_grant, lease_return); `done` runs before
  // the call returns. A LeasingStore over a MemoryStore gains nothing in one process, but
  // it is the twin of the Redis scripts the tests compare against.
  bool supports_leases() const noexcept override { return true; }
  void lease_grant(const CheckItem& item, std::int64_t want, LeaseCallback done) override;
  void lease_return(const CheckItem& item, std::int64_t units, Micros at, Micros reset_after,
                    LeaseReturnCallback done) override;

  // Erases the keys; counts those live at the store's clock. `done` runs before it returns.
  void reset(std::vector<std::string> keys, ResetCallback done) override;

  // Reservations, as the Redis scripts hold them (lua/reservation.lua): records in a map of
  // their own, at most max_keys of them (expired ones swept when it is full; then a new one is
  // refused with store_full before anything is consumed). `done` runs before the call returns.
  bool supports_reservations() const noexcept override { return true; }
  void reserve(ReservationRecord record, std::vector<CheckItem> items, std::optional<Micros> now,
               CheckCallback done) override;
  void settle(std::string record, std::vector<CheckItem> items, std::optional<Micros> now,
              SettleCallback done) override;
  void renew(std::string record, std::vector<CheckItem> items, Micros ttl, std::optional<Micros> now,
             SettleCallback done) override;

  // Shared tables, held in process (versions on the store's clock, as Redis's on its TIME).
  // `done` runs before the call returns.
  bool supports_tables() const noexcept override { return true; }
  void read_table(std::string key, std::int64_t known_version, TableCallback done) override;
  void write_table(std::string key, std::string field, std::optional<std::string> value, std::size_t max_entries,
                   TableWriteCallback done) override;

  // Synchronous forms. Thread-safe. check_one allocates nothing for a key already present.
  Result<Decision> check_one(std::string_view key, const Limit& limit, std::int64_t cost,
                             std::optional<Micros> now = {});
  Result<CheckOutcome> check_batch(std::span<const CheckItem> items, std::optional<Micros> now = {});

  struct Stats {
    std::uint64_t keys = 0;           // keys held now (expired ones not yet reclaimed included)
    std::uint64_t reclaimed = 0;      // expired keys erased so far
    std::uint64_t rejected_full = 0;  // new keys refused because the store was full
  };
  Stats stats() const;

 private:
  struct Shard;
  struct Reservations;
  struct Tables;
  Shard& shard_for(std::string_view key, std::size_t* index = nullptr) const;
  // check_batch without refusing concurrency items of cost 1 (reserve() holds them).
  Result<CheckOutcome> batch(std::span<const CheckItem> items, std::optional<Micros> now);
  // Steps one key under its shard's lock: `fn(live state) -> Step` and stores what it leaves.
  template <class F>
  Result<algorithms::Step> update(std::string_view key, algorithms::Algorithm algorithm, Micros now, F&& fn);

  MemoryStoreOptions options_;
  std::size_t shard_mask_;
  std::size_t max_per_shard_;
  std::unique_ptr<Shard[]> shards_;
  std::unique_ptr<Reservations> reservations_;
  std::unique_ptr<Tables> tables_;
  mutable std::atomic<std::uint64_t> reclaimed_{0};
  mutable std::atomic<std::uint64_t> rejected_full_{0};
};

}  // namespace ratekeeper::store
