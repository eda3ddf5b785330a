#pragma once
// The Store interface: check a batch of {key, limit, cost} at one instant, all-or-nothing.

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>
#include <utility>

#include "ratekeeper/algorithms/decision.hpp"
#include "ratekeeper/algorithms/limit.hpp"
#include "ratekeeper/core/error.hpp"
#include "ratekeeper/core/thread_cache.hpp"
#include "ratekeeper/store/lease.hpp"

namespace ratekeeper {
class MetricsWriter;
}

namespace ratekeeper::store {

using algorithms::Decision;
using algorithms::Limit;

struct CheckItem {
  std::string key;  // full key, see limiter/keys.hpp
  Limit limit;
  std::int64_t cost = 1;
  // How long the request may wait for its turn instead of being denied (token buckets only,
  // in [0, algorithms::kMaxDelay]); 0: denied when it does not fit now. A check with any
  // max_delay > 0 is decided as algorithms::step_all with max_delays: one send time for the
  // whole check, Decision::delay.
  Micros max_delay = 0;
  // Admit this item from a lease held by this instance (LeasingStore; max 0: never leased).
  LeasePolicy lease = {};

  friend bool operator==(const CheckItem&, const CheckItem&) = default;
};

// Lists of check items given back by a store once it holds what it needs of them (per
// thread), for the next check's: their keys keep their capacity. The Limiter takes them.
using CheckItemLists = ThreadCache<std::vector<CheckItem>, 64>;

// Whether some item of a check may wait for its turn (max_delay > 0).
inline bool may_delay(std::span<const CheckItem> items) noexcept {
  for (const auto& item : items) {
    if (item.max_delay > 0) return true;
  }
  return false;
}

struct CheckOutcome {
  Decision decision;            // combined (algorithms::combine); `delay`: the check's send delay
  std::vector<Decision> items;  // one per CheckItem, in order
  bool recorded = false;        // Store::reserve: admitted, and the reservation's record written
};

// A reservation's record (Store::reserve): its key, how long it lives (µs), and which of the
// check's items it holds: items[first, first + count), every item by default.
struct ReservationRecord {
  std::string key;
  Micros ttl = 0;
  std::size_t first = 0;
  std::size_t count = static_cast<std::size_t>(-1);

  // The index past the last item held, of a check of `items` items.
  std::size_t end(std::size_t items) const noexcept { return count > items - first ? items : first + count; }
};

using CheckCallback = std::function<void(Result<CheckOutcome>)>;

// A block of units consumed from one key at once (algorithms::lease_grant): `granted` units
// (0: none, `decision` is then the denial of the minimum asked for, with its exact
// retry_after), the decision of that consumption, and the instant `at` (µs, the store's
// clock: Redis TIME) it was decided at, which the return of unused units needs.
struct LeaseGrant {
  std::int64_t granted = 0;
  Decision decision;
  Micros at = 0;
};
using LeaseCallback = std::function<void(Result<LeaseGrant>)>;
using LeaseReturnCallback = std::function<void(Result<void>)>;
// How many of the keys a reset deleted existed (held live state).
using ResetCallback = std::function<void(Result<std::int64_t>)>;
// Whether a settlement found its reservation (false: unknown, settled already, or expired:
// the estimate stays charged).
using SettleCallback = std::function<void(Result<bool>)>;

// A settlement's cost that leaves the estimate charged (a concurrency slot released, the rate
// limits as reserved).
inline constexpr std::int64_t kAsEstimated = -1;

// The arguments of Store::reserve, of Store::settle (each item's cost the actual cost,
// 0 .. algorithms::kMaxCharged, or kAsEstimated), and of Store::renew, as every store checks
// them.
Result<void> validate_reservation(const ReservationRecord& record, std::span<const CheckItem> items);
Result<void> validate_settlement(std::string_view record, std::span<const CheckItem> items);
Result<void> validate_renewal(std::string_view record, std::span<const CheckItem> items, Micros ttl);

// A concurrency slot is taken only by Store::reserve, whose record is what releases it: a
// check (or the items of a reservation that its record does not hold) with a concurrency
// item of cost 1 is an invalid_argument.
Result<void> refuse_unheld_slots(std::span<const CheckItem> items);
std::unexpected<Error> unheld_slot(std::string_view key);

// A shared table (Store::read_table): its version (0: it holds nothing) and its entries,
// field → value, in no order.
struct SharedTable {
  std::int64_t version = 0;
  std::vector<std::pair<std::string, std::string>> entries;
};
// nullopt: the table's version is still the one the reader knew.
using TableCallback = std::function<void(Result<std::optional<SharedTable>>)>;
// A write's outcome: the table's version after it, and whether the entry existed before.
struct TableWrite {
  std::int64_t version = 0;
  bool existed = false;
};
using TableWriteCallback = std::function<void(Result<TableWrite>)>;

// The most entries a shared table holds; a write of one more is refused.
inline constexpr std::size_t kMaxTableEntries = 100'000;

struct StoreHealth {
  bool ready = true;
  std::string detail;  // "ok", or why not: breaker open, connection refused...
};

class Store {
 public:
  virtual ~Store() = default;

  // Checks every item at one instant and consumes from all of them or from none.
  // `now` is an explicit time; without it the store's own clock is used (Redis: TIME).
  // Thread-safe. `done` is called exactly once, possibly before check() returns, on the
  // caller's thread or on one of the store's threads; it must not block.
  virtual void check(std::vector<CheckItem> items, std::optional<Micros> now,
                     CheckCallback done) = 0;

  // Blocking convenience over check(). Not for use on a thread that runs the store's callbacks.
  Result<CheckOutcome> check_sync(std::vector<CheckItem> items, std::optional<Micros> now = {});

  // "memory", "redis", "redis-cluster", "redis-sentinel".
  virtual std::string_view kind() const noexcept = 0;

  // Whether the store can currently answer, for /readyz. Thread-safe.
  virtual StoreHealth health() const { return {}; }

  // Leases (see LeasingStore). Whether lease_grant and lease_return are supported; the
  // defaults answer invalid_argument ("this store does not grant leases").
  virtual bool supports_leases() const noexcept { return false; }
  // Consumes min(want, available) units of item.key at the store's own time in one atomic
  // step, or none when fewer than item.cost are available (algorithms::lease_grant).
  // item.limit must be leasable, 1 <= item.cost <= want <= item.limit.capacity. Thread-safe;
  // `done` as for check().
  virtual void lease_grant(const CheckItem& item, std::int64_t want, LeaseCallback done);
  // Gives back `units` unused units of a grant (its `at` and decision.reset_after) at the
  // store's own time (algorithms::lease_return). Thread-safe; `done` as for check().
  virtual void lease_return(const CheckItem& item, std::int64_t units, Micros at, Micros reset_after,
                            LeaseReturnCallback done);

  // Deletes the state of `keys` (one identity's keys: one Redis Cluster slot), and whatever a
  // decorator holds for them (cached denials, leases), so that their next check starts from
  // full limits; one atomic call on Redis. Answers how many of them held live state.
  // Thread-safe; `done` as for check(). The default answers invalid_argument.
  virtual void reset(std::vector<std::string> keys, ResetCallback done);

  // Reservations: a cost known only after the request (a response's usage). reserve() is
  // check() at the items' costs (the estimate) that, when it admits, also records the
  // estimate of each item `record` holds under the key record.key (in the items' cluster
  // slot) for record.ttl µs, in the same atomic step (CheckOutcome::recorded); settle()
  // applies the actual cost of each item to the keys the record holds (algorithms::settle:
  // the difference given back, or charged as debt) and deletes the record, in one atomic step:
  // a reservation settles once, and one never settled keeps its estimate. The items the record
  // holds: token bucket and fixed window limits only (algorithms::reservable); the record's
  // and the items' keys differ. Thread-safe; `done` as for check(). The defaults answer
  // invalid_argument.
  //
  // Concurrency limits (algorithms::concurrency) are held the same way: reserve() takes a
  // slot of each concurrency item the record holds (cost 1), settle() gives it back (its cost
  // is not used), and renew() moves each slot's expiry to now + its slot_ttl and the record's
  // to now + ttl (heartbeats of a request that outlasts them), answering whether the record
  // and every slot it holds were still there (false: expired; a slot reclaimed is not taken
  // again). Settling at kAsEstimated leaves the rate limits as reserved.
  virtual bool supports_reservations() const noexcept { return false; }
  virtual void reserve(ReservationRecord record, std::vector<CheckItem> items, std::optional<Micros> now,
                       CheckCallback done);
  virtual void settle(std::string record, std::vector<CheckItem> items, std::optional<Micros> now,
                      SettleCallback done);
  virtual void renew(std::string record, std::vector<CheckItem> items, Micros ttl, std::optional<Micros> now,
                     SettleCallback done);

  // Shared tables: a few settings every instance reads, under one key (in one cluster slot),
  // with a version that every change moves on (never back, even when the table is emptied
  // and written again), so that a reader asks for the entries only when they changed.
  // read_table() answers nullopt when the version is still `known_version`, else every entry;
  // write_table() sets `field` (not empty) to `value`, or removes it when `value` is nullopt,
  // in one atomic step, refusing (invalid_argument) a new entry in a table that holds
  // `max_entries` (at most kMaxTableEntries). Thread-safe; `done` as for check(). The defaults
  // answer invalid_argument.
  virtual bool supports_tables() const noexcept { return false; }
  virtual void read_table(std::string key, std::int64_t known_version, TableCallback done);
  virtual void write_table(std::string key, std::string field, std::optional<std::string> value,
                           std::size_t max_entries, TableWriteCallback done);

  // The store's own metrics (a decorator: its own, then its inner store's). Thread-safe.
  virtual void write_metrics(MetricsWriter&) const {}
};

}  // namespace ratekeeper::store
