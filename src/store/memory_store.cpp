#include "ratekeeper/store/memory_store.hpp"

#include "ratekeeper/algorithms/concurrency.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <atomic>
#include <mutex>
#include <unordered_map>

#include "ratekeeper/algorithms/lease.hpp"
#include "algorithms/step.hpp"

namespace ratekeeper::store {
namespace {

std::size_t hash_key(std::string_view key) noexcept { return std::hash<std::string_view>{}(key); }

// Keys carry their hash, so a key is hashed once per check (the shard and the bucket both come
// from it) and never again while it is stored (rehash, sweep).
struct StoredKey {
  std::string text;
  std::size_t hash;
};
struct KeyProbe {
  std::string_view text;
  std::size_t hash;
};

struct KeyHash {
  using is_transparent = void;
  std::size_t operator()(const StoredKey& k) const noexcept { return k.hash; }
  std::size_t operator()(const KeyProbe& k) const noexcept { return k.hash; }
};

struct KeyEq {
  using is_transparent = void;
  template <class A, class B>
  bool operator()(const A& a, const B& b) const noexcept {
    return a.hash == b.hash && std::string_view(a.text) == std::string_view(b.text);
  }
};

struct Entry {
  algorithms::State state;
  Micros expires_at = 0;
  algorithms::Algorithm algorithm{};
};

// The shard mutex. Critical sections last a few dozen nanoseconds, so a contended lock
// spins briefly before sleeping on a futex (std::atomic::wait): a hot key rarely costs a
// system call, and a holder descheduled on a busy machine does not keep others spinning.
// Free, it is one compare-and-swap to lock and one exchange to unlock, in 4 bytes.
class ShardLock {
 public:
  void lock() noexcept {
    std::uint32_t expected = kFree;
    if (state_.compare_exchange_strong(expected, kHeld, std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
      return;
    }
    lock_contended();
  }

  void unlock() noexcept {
    if (state_.exchange(kFree, std::memory_order_release) == kHeldWithSleepers) state_.notify_one();
  }

 private:
  static constexpr std::uint32_t kFree = 0, kHeld = 1, kHeldWithSleepers = 2;
  static constexpr int kSpins = 64;

  static void relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

  void lock_contended() noexcept {
    for (int i = 0; i < kSpins; ++i) {
      relax();
      std::uint32_t seen = state_.load(std::memory_order_relaxed);
      if (seen == kHeldWithSleepers) break;
      if (seen == kFree && state_.compare_exchange_weak(seen, kHeld, std::memory_order_acquire,
                                                        std::memory_order_relaxed)) {
        return;
      }
    }
    // Marked "with sleepers" from here on, so that the holder's unlock wakes one of them.
    while (state_.exchange(kHeldWithSleepers, std::memory_order_acquire) != kFree) {
      state_.wait(kHeldWithSleepers, std::memory_order_relaxed);
    }
  }

  std::atomic<std::uint32_t> state_{kFree};
};

// Buckets examined per insertion; more when the shard is full.
constexpr std::size_t kSweepBuckets = 4;
constexpr std::size_t kSweepBucketsWhenFull = 256;

// Fewer shards than asked when max_keys is small, so that every shard's share of max_keys
// stays large enough for the uneven spread of keys over shards not to refuse keys early.
constexpr std::size_t kMinKeysPerShard = 256;

std::size_t shard_count(const MemoryStoreOptions& options) {
  std::size_t n = std::bit_ceil(std::max<std::size_t>(1, options.shards));
  while (n > 1 && options.max_keys / n < kMinKeysPerShard) n /= 2;
  return n;
}

}  // namespace

// Lock, sweep cursor and map header share one cache line.
struct alignas(64) MemoryStore::Shard {
  ShardLock mutex;
  std::uint32_t cursor = 0;
  std::unordered_map<StoredKey, Entry, KeyHash, KeyEq> map;

  using Iterator = decltype(map)::iterator;

  // Erases expired entries in the next `buckets` buckets. Returns how many were erased.
  std::size_t sweep(Micros now, std::size_t buckets) {
    std::size_t erased = 0;
    const std::size_t count = map.bucket_count();
    for (std::size_t i = 0; i < buckets && i < count && !map.empty(); ++i) {
      const std::size_t b = cursor++ % count;
      bool again = true;
      while (again) {
        again = false;
        for (auto it = map.begin(b); it != map.end(b); ++it) {
          if (it->second.expires_at <= now) {
            map.erase(map.find(KeyProbe{it->first.text, it->first.hash}));
            ++erased;
            again = true;
            break;
          }
        }
      }
    }
    return erased;
  }

  // Whether one more key fits, after reclaiming what has expired nearby. `pending` keys are
  // already promised to the same check.
  bool make_room(Micros now, std::size_t pending, std::size_t max_keys,
                 std::atomic<std::uint64_t>& reclaimed) {
    reclaimed.fetch_add(sweep(now, kSweepBuckets), std::memory_order_relaxed);
    if (map.size() + pending < max_keys) return true;
    reclaimed.fetch_add(sweep(now, kSweepBucketsWhenFull), std::memory_order_relaxed);
    return map.size() + pending < max_keys;
  }
};

// A reservation's record: the instant it was decided at, and per key its estimate and the
// reset_after of its admitted decision (what a settlement gives back needs them).
struct MemoryStore::Reservations {
  struct Held {
    std::string key;
    std::int64_t estimate = 0;
    Micros reset_after = 0;
    Micros slot = 0;  // concurrency: when its slot expires (algorithms::concurrency)
  };
  struct Record {
    Micros expires_at = 0;
    Micros at = 0;
    std::vector<Held> keys;
  };
  std::mutex mu;  // taken before any shard's lock
  std::unordered_map<std::string, Record> records;
};

struct MemoryStore::Tables {
  struct Table {
    std::int64_t version = 0;
    std::unordered_map<std::string, std::string> entries;
  };
  std::mutex mu;
  std::unordered_map<std::string, Table> tables;
};

MemoryStore::MemoryStore(MemoryStoreOptions options)
    : options_(options),
      shard_mask_(shard_count(options) - 1),
      max_per_shard_(std::max<std::size_t>(1, (options.max_keys + shard_mask_) / (shard_mask_ + 1))),
      shards_(std::make_unique<Shard[]>(shard_mask_ + 1)),
      reservations_(std::make_unique<Reservations>()),
      tables_(std::make_unique<Tables>()) {
  if (options_.clock == nullptr) options_.clock = &SystemClock::instance();
}

MemoryStore::~MemoryStore() = default;

// The top bits pick the shard; the map uses the full hash for its buckets.
static std::size_t shard_index(std::size_t hash, std::size_t mask) noexcept { return (hash >> 40) & mask; }

MemoryStore::Shard& MemoryStore::shard_for(std::string_view key, std::size_t* index) const {
  const std::size_t i = shard_index(hash_key(key), shard_mask_);
  if (index != nullptr) *index = i;
  return shards_[i];
}

Result<Decision> MemoryStore::check_one(std::string_view key, const Limit& limit, std::int64_t cost,
                                        std::optional<Micros> now_opt) {
  const Micros now = now_opt ? *now_opt : options_.clock->now();
  if (auto ok = algorithms::validate_cost(limit, cost); !ok) return std::unexpected(ok.error());
  if (limit.algorithm == algorithms::Algorithm::concurrency && cost > 0) return unheld_slot(key);
  if (auto ok = algorithms::validate_now(now); !ok) return std::unexpected(ok.error());
  const KeyProbe probe{key, hash_key(key)};
  Shard& shard = shards_[shard_index(probe.hash, shard_mask_)];
  std::lock_guard lock(shard.mutex);
  auto it = shard.map.find(probe);
  const bool present = it != shard.map.end();
  const bool live = present && it->second.expires_at > now && it->second.algorithm == limit.algorithm;
  algorithms::Step step =
      algorithms::step_unchecked(limit, live ? std::move(it->second.state) : algorithms::State{}, now, cost);
  if (step.expires_at == 0) {
    if (present) shard.map.erase(it);
    return step.decision;
  }
  if (!present) {
    if (!shard.make_room(now, 0, max_per_shard_, reclaimed_)) {
      rejected_full_.fetch_add(1, std::memory_order_relaxed);
      return make_error(ErrorCode::store_full,
                        fmt::format("memory store is full ({} keys)", options_.max_keys));
    }
    it = shard.map.try_emplace(StoredKey{std::string(key), probe.hash}).first;
  }
  it->second.state = std::move(step.state);
  it->second.expires_at = step.expires_at;
  it->second.algorithm = limit.algorithm;
  return step.decision;
}

Result<CheckOutcome> MemoryStore::check_batch(std::span<const CheckItem> items,
                                              std::optional<Micros> now_opt) {
  if (auto ok = refuse_unheld_slots(items); !ok) return std::unexpected(ok.error());
  return batch(items, now_opt);
}

Result<CheckOutcome> MemoryStore::batch(std::span<const CheckItem> items, std::optional<Micros> now_opt) {
  const Micros now = now_opt ? *now_opt : options_.clock->now();
  const bool delays = may_delay(items);
  if (items.size() == 1 && !delays && items[0].limit.algorithm != algorithms::Algorithm::concurrency) {
    auto d = check_one(items[0].key, items[0].limit, items[0].cost, now);
    if (!d) return std::unexpected(d.error());
    return CheckOutcome{*d, {*d}};
  }
  // A key named twice in one batch would be checked twice against one state: refuse it.
  for (std::size_t i = 0; i < items.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (items[j].key == items[i].key) {
        return make_error(ErrorCode::invalid_argument,
                          fmt::format("key '{}' appears twice in one check", items[i].key));
      }
    }
  }
  std::vector<KeyProbe> probes;
  std::vector<std::size_t> shard_ids;
  probes.reserve(items.size());
  shard_ids.reserve(items.size());
  for (const CheckItem& item : items) {
    probes.push_back(KeyProbe{item.key, hash_key(item.key)});
    shard_ids.push_back(shard_index(probes.back().hash, shard_mask_));
  }
  // Lock every shard involved, in index order, so batches never deadlock each other.
  std::vector<std::size_t> order = shard_ids;
  std::sort(order.begin(), order.end());
  order.erase(std::unique(order.begin(), order.end()), order.end());
  std::vector<std::unique_lock<ShardLock>> locks;
  locks.reserve(order.size());
  for (std::size_t s : order) locks.emplace_back(shards_[s].mutex);

  std::vector<Limit> limits;
  std::vector<algorithms::State> states;
  std::vector<std::int64_t> costs;
  std::vector<bool> present;
  limits.reserve(items.size());
  states.reserve(items.size());
  costs.reserve(items.size());
  present.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    limits.push_back(items[i].limit);
    costs.push_back(items[i].cost);
    auto& map = shards_[shard_ids[i]].map;
    auto it = map.find(probes[i]);
    if (it != map.end() && it->second.expires_at <= now) {
      // Expired: gone now, so that no sweep below can take it from under this check.
      map.erase(it);
      reclaimed_.fetch_add(1, std::memory_order_relaxed);
      it = map.end();
    }
    present.push_back(it != map.end());
    const bool live = it != map.end() && it->second.algorithm == items[i].limit.algorithm;
    states.push_back(live ? it->second.state : algorithms::State{});
  }
  std::vector<Micros> max_delays;
  if (delays) {
    max_delays.reserve(items.size());
    for (const CheckItem& item : items) max_delays.push_back(item.max_delay);
  }
  auto multi = algorithms::step_all(limits, std::move(states), now, costs, max_delays);
  if (!multi) return std::unexpected(multi.error());

  // Room for the keys this batch would create, before writing any of them.
  if (multi->decision.allowed) {
    std::vector<std::size_t> pending(order.size(), 0);
    for (std::size_t i = 0; i < items.size(); ++i) {
      Shard& shard = shards_[shard_ids[i]];
      if (multi->expires_at[i] == 0 || present[i]) continue;
      const auto slot = static_cast<std::size_t>(
          std::lower_bound(order.begin(), order.end(), shard_ids[i]) - order.begin());
      if (!shard.make_room(now, pending[slot], max_per_shard_, reclaimed_)) {
        rejected_full_.fetch_add(1, std::memory_order_relaxed);
        return make_error(ErrorCode::store_full,
                          fmt::format("memory store is full ({} keys)", options_.max_keys));
      }
      ++pending[slot];
    }
  }
  // Insertions may rehash: look every key up again.
  for (std::size_t i = 0; i < items.size(); ++i) {
    auto& map = shards_[shard_ids[i]].map;
    auto it = map.find(probes[i]);
    if (multi->expires_at[i] == 0) {
      if (it != map.end()) map.erase(it);
      continue;
    }
    if (it == map.end()) {
      if (!multi->decision.allowed) continue;  // a denial creates no key
      it = map.try_emplace(StoredKey{items[i].key, probes[i].hash}).first;
    }
    it->second.state = std::move(multi->states[i]);
    it->second.expires_at = multi->expires_at[i];
    it->second.algorithm = items[i].limit.algorithm;
  }
  return CheckOutcome{multi->decision, std::move(multi->items)};
}

void MemoryStore::check(std::vector<CheckItem> items, std::optional<Micros> now, CheckCallback done) {
  done(check_batch(items, now));
}

template <class F>
Result<algorithms::Step> MemoryStore::update(std::string_view key, algorithms::Algorithm algorithm, Micros now,
                                            F&& fn) {
  const KeyProbe probe{key, hash_key(key)};
  Shard& shard = shards_[shard_index(probe.hash, shard_mask_)];
  std::lock_guard lock(shard.mutex);
  auto it = shard.map.find(probe);
  const bool present = it != shard.map.end();
  const bool live = present && it->second.expires_at > now && it->second.algorithm == algorithm;
  algorithms::Step step = fn(live ? it->second.state : algorithms::State{});
  if (step.expires_at == 0) {
    if (present) shard.map.erase(it);
    return step;
  }
  if (!present) {
    if (!shard.make_room(now, 0, max_per_shard_, reclaimed_)) {
      rejected_full_.fetch_add(1, std::memory_order_relaxed);
      return make_error(ErrorCode::store_full, fmt::format("memory store is full ({} keys)", options_.max_keys));
    }
    it = shard.map.try_emplace(StoredKey{std::string(key), probe.hash}).first;
  }
  it->second.state = step.state;
  it->second.expires_at = step.expires_at;
  it->second.algorithm = algorithm;
  return step;
}

namespace {

Result<void> validate_lease(const CheckItem& item, std::int64_t want) {
  if (!algorithms::leasable(item.limit.algorithm)) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("{} limits cannot be leased", algorithms::to_string(item.limit.algorithm)));
  }
  if (item.cost < 1 || want < item.cost || want > item.limit.capacity) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("a lease needs 1 <= cost ({}) <= want ({}) <= capacity ({})", item.cost, want,
                                  item.limit.capacity));
  }
  return {};
}

}  // namespace

void MemoryStore::lease_grant(const CheckItem& item, std::int64_t want, LeaseCallback done) {
  if (auto ok = validate_lease(item, want); !ok) return done(std::unexpected(ok.error()));
  const Micros now = options_.clock->now();
  if (auto ok = algorithms::validate_now(now); !ok) return done(std::unexpected(ok.error()));
  std::int64_t granted = 0;
  auto step = update(item.key, item.limit.algorithm, now, [&](algorithms::State state) {
    auto grant = algorithms::lease_grant(item.limit, std::move(state), now, item.cost, want);
    granted = grant.granted;
    return std::move(grant.step);
  });
  if (!step) return done(std::unexpected(step.error()));
  done(LeaseGrant{granted, step->decision, now});
}

void MemoryStore::lease_return(const CheckItem& item, std::int64_t units, Micros at, Micros reset_after,
                               LeaseReturnCallback done) {
  if (!algorithms::leasable(item.limit.algorithm) || units < 0 || reset_after < 0) {
    return done(make_error(ErrorCode::invalid_argument, "not a lease's return"));
  }
  const Micros now = options_.clock->now();
  auto step = update(item.key, item.limit.algorithm, now, [&](algorithms::State state) {
    return algorithms::lease_return(item.limit, std::move(state), now, units, at, reset_after);
  });
  if (!step) return done(std::unexpected(step.error()));
  done({});
}

void MemoryStore::reset(std::vector<std::string> keys, ResetCallback done) {
  const Micros now = options_.clock->now();
  std::int64_t live = 0;
  for (const auto& key : keys) {
    const KeyProbe probe{key, hash_key(key)};
    Shard& shard = shards_[shard_index(probe.hash, shard_mask_)];
    std::lock_guard lock(shard.mutex);
    const auto it = shard.map.find(probe);
    if (it == shard.map.end()) continue;
    if (it->second.expires_at > now) ++live;
    shard.map.erase(it);
  }
  done(live);
}

void MemoryStore::read_table(std::string key, std::int64_t known_version, TableCallback done) {
  // `done` runs once the lock is let go, as every answer here.
  auto answer = [&]() -> std::optional<SharedTable> {
    std::lock_guard lock(tables_->mu);
    const auto it = tables_->tables.find(key);
    const std::int64_t version = it == tables_->tables.end() ? 0 : it->second.version;
    if (version == known_version) return std::nullopt;
    SharedTable out{version, {}};
    if (it != tables_->tables.end()) out.entries.assign(it->second.entries.begin(), it->second.entries.end());
    return out;
  }();
  done(std::move(answer));
}

void MemoryStore::write_table(std::string key, std::string field, std::optional<std::string> value,
                              std::size_t max_entries, TableWriteCallback done) {
  if (field.empty()) return done(make_error(ErrorCode::invalid_argument, "an entry needs a name"));
  auto answer = [&]() -> Result<TableWrite> {
    std::lock_guard lock(tables_->mu);
    auto it = tables_->tables.find(key);
    const bool existed = it != tables_->tables.end() && it->second.entries.contains(field);
    if (!value && !existed) return TableWrite{it == tables_->tables.end() ? 0 : it->second.version, false};
    if (value && !existed && it != tables_->tables.end() && it->second.entries.size() >= max_entries) {
      return make_error(ErrorCode::invalid_argument,
                        fmt::format("the table holds {} entries: remove one first", max_entries));
    }
    if (it == tables_->tables.end()) it = tables_->tables.emplace(key, Tables::Table{}).first;
    Tables::Table& table = it->second;
    if (value) {
      table.entries.insert_or_assign(std::move(field), std::move(*value));
    } else {
      table.entries.erase(field);
    }
    if (table.entries.empty()) {
      tables_->tables.erase(it);  // emptied: its version goes with it (0)
      return TableWrite{0, existed};
    }
    table.version = std::max(table.version + 1, options_.clock->now());
    return TableWrite{table.version, existed};
  }();
  done(std::move(answer));
}

void MemoryStore::reserve(ReservationRecord reservation, std::vector<CheckItem> items, std::optional<Micros> now_opt,
                          CheckCallback done) {
  if (auto ok = validate_reservation(reservation, items); !ok) return done(std::unexpected(ok.error()));
  const Micros now = now_opt ? *now_opt : options_.clock->now();
  // `done` runs once the lock is let go: it may reserve or settle again (inline callers).
  auto answer = [&]() -> Result<CheckOutcome> {
    Reservations& r = *reservations_;
    std::lock_guard lock(r.mu);
    r.records.erase(reservation.key);
    if (r.records.size() >= options_.max_keys) {
      std::erase_if(r.records, [now](const auto& kv) { return kv.second.expires_at <= now; });
      if (r.records.size() >= options_.max_keys) {
        rejected_full_.fetch_add(1, std::memory_order_relaxed);
        return make_error(ErrorCode::store_full,
                          fmt::format("memory store is full ({} reservations)", options_.max_keys));
      }
    }
    const std::size_t end = reservation.end(items.size());
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (i >= reservation.first && i < end) continue;
      if (items[i].limit.algorithm == algorithms::Algorithm::concurrency && items[i].cost > 0) {
        return unheld_slot(items[i].key);
      }
    }
    auto outcome = batch(items, now);
    if (outcome && outcome->decision.allowed) {
      Reservations::Record held{now + reservation.ttl, now, {}};
      held.keys.reserve(end - reservation.first);
      for (std::size_t i = reservation.first; i < end; ++i) {
        const bool slot = items[i].limit.algorithm == algorithms::Algorithm::concurrency && items[i].cost > 0;
        held.keys.push_back({std::move(items[i].key), items[i].cost, outcome->items[i].reset_after,
                             slot ? now + items[i].limit.period : 0});
      }
      r.records.insert_or_assign(std::move(reservation.key), std::move(held));
      outcome->recorded = true;
    }
    return outcome;
  }();
  done(std::move(answer));
}

void MemoryStore::settle(std::string record, std::vector<CheckItem> items, std::optional<Micros> now_opt,
                         SettleCallback done) {
  if (auto ok = validate_settlement(record, items); !ok) return done(std::unexpected(ok.error()));
  const Micros now = now_opt ? *now_opt : options_.clock->now();
  // `done` runs once the lock is let go: it may reserve or settle again (inline callers).
  auto answer = [&]() -> Result<bool> {
    Reservations& r = *reservations_;
    std::lock_guard lock(r.mu);
    const auto it = r.records.find(record);
    if (it == r.records.end()) return false;
    const Reservations::Record held = std::move(it->second);
    r.records.erase(it);
    if (held.expires_at <= now) return false;
    for (const CheckItem& item : items) {
      const auto h = std::find_if(held.keys.begin(), held.keys.end(), [&](const auto& k) { return k.key == item.key; });
      if (h == held.keys.end()) continue;
      const bool slot = item.limit.algorithm == algorithms::Algorithm::concurrency;
      if (!slot && item.cost == kAsEstimated) continue;
      if (slot && h->slot == 0) continue;
      auto step = update(item.key, item.limit.algorithm, now, [&](algorithms::State state) {
        if (slot) return algorithms::concurrency::release(item.limit, std::move(state), now, h->slot);
        return algorithms::settle(item.limit, std::move(state), now, h->estimate, item.cost, held.at, h->reset_after);
      });
      if (!step) return std::unexpected(step.error());
    }
    return true;
  }();
  done(std::move(answer));
}

void MemoryStore::renew(std::string record, std::vector<CheckItem> items, Micros ttl, std::optional<Micros> now_opt,
                        SettleCallback done) {
  if (auto ok = validate_renewal(record, items, ttl); !ok) return done(std::unexpected(ok.error()));
  const Micros now = now_opt ? *now_opt : options_.clock->now();
  // `done` runs once the lock is let go: it may reserve or settle again (inline callers).
  auto answer = [&]() -> Result<bool> {
    Reservations& r = *reservations_;
    std::lock_guard lock(r.mu);
    const auto it = r.records.find(record);
    if (it == r.records.end()) return false;
    if (it->second.expires_at <= now) {
      r.records.erase(it);
      return false;
    }
    Reservations::Record& held = it->second;
    held.expires_at = now + ttl;
    bool all = true;
    for (const CheckItem& item : items) {
      if (item.limit.algorithm != algorithms::Algorithm::concurrency) continue;
      const auto h = std::find_if(held.keys.begin(), held.keys.end(), [&](const auto& k) { return k.key == item.key; });
      if (h == held.keys.end()) continue;
      if (h->slot == 0) {  // lost to an earlier heartbeat, or never taken (a cost of 0)
        all = false;
        continue;
      }
      bool kept = true;
      auto step = update(item.key, item.limit.algorithm, now, [&](algorithms::State state) {
        auto renewed = algorithms::concurrency::renew(item.limit, state, now, h->slot);
        if (renewed) return std::move(*renewed);
        kept = false;
        return algorithms::concurrency::step(item.limit, std::move(state), now, 0);
      });
      if (!step) return std::unexpected(step.error());
      if (kept) {
        h->slot = now + item.limit.period;
      } else {
        h->slot = 0;
        all = false;
      }
    }
    return all;
  }();
  done(std::move(answer));
}

MemoryStore::Stats MemoryStore::stats() const {
  Stats s;
  for (std::size_t i = 0; i <= shard_mask_; ++i) {
    std::lock_guard lock(shards_[i].mutex);
    s.keys += shards_[i].map.size();
  }
  s.reclaimed = reclaimed_.load(std::memory_order_relaxed);
  s.rejected_full = rejected_full_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace ratekeeper::store
