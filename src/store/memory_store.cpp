#include "ratekeeper/store/memory_store.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <mutex>
#include <unordered_map>

#include "ratekeeper/algorithms/step.hpp"

namespace ratekeeper::store {
namespace {

struct KeyHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};

struct KeyEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const noexcept { return a == b; }
};

struct Entry {
  algorithms::State state;
  Micros expires_at = 0;
  algorithms::Algorithm algorithm{};
};

// Buckets examined per insertion; more when the shard is full.
constexpr std::size_t kSweepBuckets = 4;
constexpr std::size_t kSweepBucketsWhenFull = 256;

}  // namespace

struct alignas(64) MemoryStore::Shard {
  std::mutex mutex;
  std::unordered_map<std::string, Entry, KeyHash, KeyEq> map;
  std::size_t cursor = 0;

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
            map.erase(map.find(it->first));
            ++erased;
            again = true;
            break;
          }
        }
      }
    }
    return erased;
  }

  // The live state of `key` at `now`, or absent.
  algorithms::State take(std::string_view key, const Limit& limit, Micros now) {
    auto it = map.find(key);
    if (it == map.end() || it->second.expires_at <= now || it->second.algorithm != limit.algorithm) {
      return {};
    }
    return std::move(it->second.state);
  }
};

MemoryStore::MemoryStore(MemoryStoreOptions options)
    : options_(options),
      shard_mask_(std::bit_ceil(std::max<std::size_t>(1, options.shards)) - 1),
      max_per_shard_(std::max<std::size_t>(1, (options.max_keys + shard_mask_) / (shard_mask_ + 1))),
      shards_(std::make_unique<Shard[]>(shard_mask_ + 1)) {
  if (options_.clock == nullptr) options_.clock = &SystemClock::instance();
}

MemoryStore::~MemoryStore() = default;

MemoryStore::Shard& MemoryStore::shard_for(std::string_view key, std::size_t* index) const {
  // The top bits pick the shard; the map uses the full hash for its buckets.
  const std::size_t h = KeyHash{}(key);
  const std::size_t i = (h >> 40) & shard_mask_;
  if (index != nullptr) *index = i;
  return shards_[i];
}

Result<Decision> MemoryStore::check_one(std::string_view key, const Limit& limit, std::int64_t cost,
                                        std::optional<Micros> now_opt) {
  const Micros now = now_opt ? *now_opt : options_.clock->now();
  // Validated before the state is taken out of its entry.
  if (auto ok = algorithms::validate_cost(limit, cost); !ok) return std::unexpected(ok.error());
  if (now < 0) return make_error(ErrorCode::invalid_argument, fmt::format("now must be >= 0, got {}", now));
  Shard& shard = shard_for(key);
  std::lock_guard lock(shard.mutex);
  auto step = algorithms::step(limit, shard.take(key, limit, now), now, cost);
  if (!step) return std::unexpected(step.error());
  auto it = shard.map.find(key);
  if (step->expires_at == 0) {
    if (it != shard.map.end()) shard.map.erase(it);
    return step->decision;
  }
  if (it == shard.map.end()) {
    reclaimed_.fetch_add(shard.sweep(now, kSweepBuckets), std::memory_order_relaxed);
    if (shard.map.size() >= max_per_shard_) {
      reclaimed_.fetch_add(shard.sweep(now, kSweepBucketsWhenFull), std::memory_order_relaxed);
      if (shard.map.size() >= max_per_shard_) {
        rejected_full_.fetch_add(1, std::memory_order_relaxed);
        return make_error(ErrorCode::store_full,
                          fmt::format("memory store is full ({} keys)", options_.max_keys));
      }
    }
    it = shard.map.try_emplace(std::string(key)).first;
  }
  it->second.state = std::move(step->state);
  it->second.expires_at = step->expires_at;
  it->second.algorithm = limit.algorithm;
  return step->decision;
}

Result<CheckOutcome> MemoryStore::check_batch(std::span<const CheckItem> items,
                                              std::optional<Micros> now_opt) {
  const Micros now = now_opt ? *now_opt : options_.clock->now();
  if (items.size() == 1) {
    auto d = check_one(items[0].key, items[0].limit, items[0].cost, now);
    if (!d) return std::unexpected(d.error());
    return CheckOutcome{*d, {*d}};
  }
  // Lock every shard involved, in index order, so batches never deadlock each other.
  std::vector<std::size_t> shard_ids(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) shard_for(items[i].key, &shard_ids[i]);
  std::vector<std::size_t> order = shard_ids;
  std::sort(order.begin(), order.end());
  order.erase(std::unique(order.begin(), order.end()), order.end());
  std::vector<std::unique_lock<std::mutex>> locks;
  locks.reserve(order.size());
  for (std::size_t s : order) locks.emplace_back(shards_[s].mutex);

  std::vector<Limit> limits;
  std::vector<algorithms::State> states;
  std::vector<std::int64_t> costs;
  for (std::size_t i = 0; i < items.size(); ++i) {
    limits.push_back(items[i].limit);
    costs.push_back(items[i].cost);
    // A key named twice in one batch is checked against one state: refuse it.
    for (std::size_t j = 0; j < i; ++j) {
      if (items[j].key == items[i].key) {
        return make_error(ErrorCode::invalid_argument,
                          fmt::format("key '{}' appears twice in one check", items[i].key));
      }
    }
    auto it = shards_[shard_ids[i]].map.find(items[i].key);
    const bool live = it != shards_[shard_ids[i]].map.end() && it->second.expires_at > now &&
                      it->second.algorithm == items[i].limit.algorithm;
    states.push_back(live ? it->second.state : algorithms::State{});
  }
  auto multi = algorithms::step_all(limits, std::move(states), now, costs);
  if (!multi) return std::unexpected(multi.error());

  // Room for the keys this batch would create, before writing any of them.
  if (multi->decision.allowed) {
    for (std::size_t i = 0; i < items.size(); ++i) {
      Shard& shard = shards_[shard_ids[i]];
      if (multi->expires_at[i] == 0 || shard.map.contains(items[i].key)) continue;
      reclaimed_.fetch_add(shard.sweep(now, kSweepBuckets), std::memory_order_relaxed);
      if (shard.map.size() >= max_per_shard_) {
        reclaimed_.fetch_add(shard.sweep(now, kSweepBucketsWhenFull), std::memory_order_relaxed);
        if (shard.map.size() >= max_per_shard_) {
          rejected_full_.fetch_add(1, std::memory_order_relaxed);
          return make_error(ErrorCode::store_full,
                            fmt::format("memory store is full ({} keys)", options_.max_keys));
        }
      }
    }
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    Shard& shard = shards_[shard_ids[i]];
    auto it = shard.map.find(items[i].key);
    if (multi->expires_at[i] == 0) {
      if (it != shard.map.end()) shard.map.erase(it);
      continue;
    }
    if (it == shard.map.end()) {
      if (!multi->decision.allowed) continue;  // a denial creates no key
      it = shard.map.try_emplace(items[i].key).first;
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
