#include "ratekeeper/store/denial_cache.hpp"

#include "ratekeeper/core/metrics_writer.hpp"

#include <algorithm>
#include <bit>
#include <mutex>
#include <string>
#include <unordered_map>

#include "algorithms/step.hpp"

namespace ratekeeper::store {

namespace {

struct Denial {
  Limit limit;
  std::int64_t cost = 0;    // denied for this cost and every larger one
  Micros until = 0;         // steady clock: the earliest instant the store could admit it
  Micros reset_until = 0;   // steady clock: when the key would be full again
  std::int64_t remaining = 0;
};

}  // namespace

struct DenialCache::Shard {
  mutable std::mutex mu;
  std::unordered_map<std::string, Denial> denials;
};

struct DenialCache::Passed {
  std::vector<CheckItem> items;
  Micros sent_at = 0;
  CheckCallback done;
};

DenialCache::DenialCache(std::unique_ptr<Store> inner, DenialCacheOptions options)
    : inner_(std::move(inner)), options_(options), clock_(&clock_or_system(options_.clock)) {
  const std::size_t n = std::bit_ceil(std::max<std::size_t>(1, options_.shards));
  shards_ = std::make_unique<Shard[]>(n);
  shard_mask_ = n - 1;
}

DenialCache::~DenialCache() = default;

void DenialCache::clear() {
  for (std::size_t i = 0; i <= shard_mask_; ++i) {
    Shard& shard = shards_[i];
    std::lock_guard lock(shard.mu);
    held_.fetch_sub(shard.denials.size(), std::memory_order_relaxed);
    shard.denials.clear();
  }
}

DenialCache::Shard& DenialCache::shard_for(std::size_t hash) const noexcept { return shards_[hash & shard_mask_]; }

std::optional<CheckOutcome> DenialCache::lookup(const std::vector<CheckItem>& items, Micros now_steady) {
  if (held_.load(std::memory_order_relaxed) == 0) return std::nullopt;
  CheckOutcome out;
  out.items.reserve(items.size());
  for (const auto& item : items) {
    if (item.cost == 0) return std::nullopt;  // a peek is never denied
    auto& shard = shard_for(std::hash<std::string>{}(item.key));
    std::lock_guard lock(shard.mu);
    auto it = shard.denials.find(item.key);
    if (it == shard.denials.end()) return std::nullopt;
    const Denial& d = it->second;
    if (d.until <= now_steady) {
      shard.denials.erase(it);
      held_.fetch_sub(1, std::memory_order_relaxed);
      return std::nullopt;
    }
    if (d.limit != item.limit || item.cost < d.cost) return std::nullopt;
    Decision decision;
    decision.allowed = false;
    decision.limit = d.limit.capacity;
    decision.remaining = d.remaining;
    decision.retry_after = d.until - now_steady;
    decision.reset_after = std::max<Micros>(0, d.reset_until - now_steady);
    out.items.push_back(decision);
  }
  out.decision = algorithms::combine(out.items);
  return out;
}

void DenialCache::record(const std::vector<CheckItem>& items, const CheckOutcome& outcome, Micros sent_at) {
  if (outcome.items.size() != items.size()) return;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const Decision& d = outcome.items[i];
    if (d.allowed || d.retry_after <= 0 || items[i].cost == 0 ||
        items[i].limit.algorithm == algorithms::Algorithm::concurrency) {
      continue;
    }
    auto& shard = shard_for(std::hash<std::string>{}(items[i].key));
    const std::size_t per_shard = std::max<std::size_t>(1, options_.max_keys / (shard_mask_ + 1));
    std::lock_guard lock(shard.mu);
    if (shard.denials.size() >= per_shard && !shard.denials.contains(items[i].key)) {
      const auto swept =
          std::erase_if(shard.denials, [sent_at](const auto& kv) { return kv.second.until <= sent_at; });
      held_.fetch_sub(swept, std::memory_order_relaxed);
      if (shard.denials.size() >= per_shard) continue;
    }
    const bool added = shard.denials
                           .insert_or_assign(items[i].key,
                                             Denial{items[i].limit, items[i].cost, sent_at + d.retry_after,
                                                    sent_at + d.reset_after, d.remaining})
                           .second;
    if (added) held_.fetch_add(1, std::memory_order_relaxed);
    recorded_.fetch_add(1, std::memory_order_relaxed);
  }
}

DenialCache::Passed* DenialCache::pass(const std::vector<CheckItem>& items, Micros sent_at, CheckCallback done) {
  Passed* passed = nullptr;
  {
    const std::lock_guard lock(passed_mu_);
    passed = passed_.acquire();
  }
  passed->items = items;  // assigned: the vector's and the keys' capacity is reused
  passed->sent_at = sent_at;
  passed->done = std::move(done);
  return passed;
}

// The inner store's answer: a denial recorded, the check's own callback called. The callable
// holds two pointers (no allocation of its own).
CheckCallback DenialCache::answer_of(Passed* passed) {
  return [this, passed](Result<CheckOutcome> outcome) {
    if (outcome && !outcome->decision.allowed) record(passed->items, *outcome, passed->sent_at);
    CheckCallback done = std::move(passed->done);
    passed->done = nullptr;
    {
      const std::lock_guard lock(passed_mu_);
      passed_.release(passed);
    }
    done(std::move(outcome));
  };
}

void DenialCache::check(std::vector<CheckItem> items, std::optional<Micros> now, CheckCallback done) {
  // A check that may wait for its turn is admitted where a plain one is denied: always asked.
  if (now || items.empty() || may_delay(items)) {
    inner_->check(std::move(items), now, std::move(done));
    return;
  }
  const Micros sent_at = clock_->steady();
  if (auto local = lookup(items, sent_at)) {
    hits_.fetch_add(1, std::memory_order_relaxed);
    done(std::move(*local));
    return;
  }
  // The items are needed again to record a denial (the store takes the originals).
  Passed* passed = pass(items, sent_at, std::move(done));
  inner_->check(std::move(items), now, answer_of(passed));
}

void DenialCache::reset(std::vector<std::string> keys, ResetCallback done) {
  for (const auto& key : keys) {
    auto& shard = shard_for(std::hash<std::string>{}(key));
    std::lock_guard lock(shard.mu);
    if (shard.denials.erase(key) > 0) held_.fetch_sub(1, std::memory_order_relaxed);
  }
  inner_->reset(std::move(keys), std::move(done));
}

void DenialCache::reserve(ReservationRecord reservation, std::vector<CheckItem> items, std::optional<Micros> now,
                          CheckCallback done) {
  if (now) return inner_->reserve(std::move(reservation), std::move(items), now, std::move(done));
  Passed* passed = pass(items, clock_->steady(), std::move(done));
  inner_->reserve(std::move(reservation), std::move(items), now, answer_of(passed));
}

void DenialCache::settle(std::string record, std::vector<CheckItem> items, std::optional<Micros> now,
                         SettleCallback done) {
  for (const auto& item : items) {
    auto& shard = shard_for(std::hash<std::string>{}(item.key));
    std::lock_guard lock(shard.mu);
    if (shard.denials.erase(item.key) > 0) held_.fetch_sub(1, std::memory_order_relaxed);
  }
  inner_->settle(std::move(record), std::move(items), now, std::move(done));
}

DenialCache::Stats DenialCache::stats() const {
  Stats s;
  s.hits = hits_.load(std::memory_order_relaxed);
  s.recorded = recorded_.load(std::memory_order_relaxed);
  for (std::size_t i = 0; i <= shard_mask_; ++i) {
    std::lock_guard lock(shards_[i].mu);
    s.size += shards_[i].denials.size();
  }
  return s;
}

void DenialCache::write_metrics(MetricsWriter& out) const {
  const Stats s = stats();
  out.counter("ratekeeper_denial_cache_hits_total", "Checks answered as denied without the store (known denials).",
              s.hits);
  out.gauge("ratekeeper_denial_cache_entries", "Denials held (expired ones until swept).",
            static_cast<std::int64_t>(s.size));
  inner_->write_metrics(out);
}

}  // namespace ratekeeper::store
