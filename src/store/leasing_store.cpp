#include "ratekeeper/store/leasing_store.hpp"

#include "ratekeeper/core/metrics_writer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <functional>
#include <unordered_map>

#include "ratekeeper/algorithms/lease.hpp"
#include "algorithms/step.hpp"
#include "ratekeeper/core/contained.hpp"

namespace ratekeeper::store {

namespace {

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

// Whether `item` is admitted from a lease.
bool leased(const CheckItem& item) noexcept {
  return item.lease.enabled() && item.cost > 0 && item.cost <= item.limit.capacity &&
         algorithms::leasable(item.limit.algorithm);
}

// Units of one lease at most: the policy's max, within the limit's capacity.
std::int64_t lease_cap(const CheckItem& item) noexcept { return std::min(item.lease.max, item.limit.capacity); }

std::atomic<std::uint64_t> generations{0};
std::uint64_t next_generation() noexcept { return generations.fetch_add(1, std::memory_order_relaxed) + 1; }

// A lease's unused units on their way back.
struct Return {
  CheckItem item;
  std::int64_t units = 0;
  Micros at = 0;
  Micros reset_after = 0;
};

}  // namespace

struct LeasingStore::Waiting {
  std::vector<CheckItem> items;
  CheckCallback done;
};

// One key's lease and what is known about its next one. Guarded by its shard's lock.
struct LeasingStore::Lease {
  Limit limit;
  LeasePolicy policy;
  std::int64_t left = 0;     // units still to admit locally
  std::int64_t granted = 0;  // units of the current grant (0: no lease)
  std::int64_t size = 1;     // k: the units the next grant asks for
  Micros sent = 0;           // steady: when the current grant was sent
  Micros expires = 0;        // steady: when the current lease ends
  Micros at = 0;             // the store's instant of the current grant
  Decision decision;         // the current grant's decision
  // Unique store-wide for every lease (next_generation()): units taken go back to theirs only.
  std::uint64_t generation = 0;
  bool in_flight = false;
  std::vector<Waiting> waiting;  // checks queued behind the grant in flight
  // A refused grant: checks of cost >= denied_cost are denied until denied_until (steady).
  Micros denied_until = 0;
  Micros denied_sent = 0;
  std::int64_t denied_cost = 0;
  Decision denial;

  // Ends the current lease; returns its unused units. k doubles when the lease was used up
  // before it expired, halves when less than half of an expired lease was used.
  std::int64_t retire(Micros now) {
    const std::int64_t unused = left;
    if (granted > 0) {
      const std::int64_t cap = std::min(policy.max, limit.capacity);
      if (now < expires) {
        size = std::min(cap, size * 2);
      } else if ((granted - left) * 2 < granted) {
        size = std::max<std::int64_t>(1, size / 2);
      }
    }
    left = 0;
    granted = 0;
    expires = 0;
    generation = next_generation();
    return unused;
  }

  Return to_return(std::string_view key, std::int64_t units) const {
    return Return{CheckItem{std::string(key), limit, units}, units, at, decision.reset_after};
  }

  // The decision of an admission from this lease at `now`, `left` already lowered: what the
  // store showed at the grant plus what is still unused here (and, for a token bucket, what
  // refilled since).
  Decision admitted(Micros now) const {
    Decision d;
    d.allowed = true;
    d.limit = limit.capacity;
    const Micros elapsed = std::max<Micros>(0, now - sent);
    if (limit.algorithm == algorithms::Algorithm::token_bucket) {
      d.remaining = std::min(limit.capacity, decision.remaining + left + elapsed / limit.period);
      d.reset_after = std::max<Micros>(0, decision.reset_after - elapsed - left * limit.period);
    } else {
      d.remaining = std::min(limit.capacity, decision.remaining + left);
      d.reset_after = std::max<Micros>(0, decision.reset_after - elapsed);
    }
    return d;
  }

  Decision denied(Micros now) const {
    Decision d = denial;
    d.allowed = false;
    d.retry_after = denied_until - now;
    d.reset_after = std::max<Micros>(0, denial.reset_after - (now - denied_sent));
    return d;
  }
};

struct LeasingStore::Shard {
  std::mutex mu;
  std::unordered_map<std::string, Lease, StringHash, std::equal_to<>> leases;
};

// Units taken tentatively from a lease.
struct LeasingStore::Taken {
  Shard* shard = nullptr;
  std::string_view key;
  std::uint64_t generation = 0;
  std::int64_t units = 0;
};

LeasingStore::LeasingStore(std::unique_ptr<Store> inner, LeasingStoreOptions options)
    : inner_(std::move(inner)), options_(options), clock_(&clock_or_system(options_.clock)) {
  const std::size_t n = std::bit_ceil(std::max<std::size_t>(1, options_.shards));
  shards_ = std::make_unique<Shard[]>(n);
  shard_mask_ = n - 1;
  next_reap_.store(clock_->steady() + options_.reap_every, std::memory_order_relaxed);
  if (options_.reaper_thread && options_.reap_every > 0) reaper_ = std::thread([this] { reaper_loop(); });
}

LeasingStore::~LeasingStore() {
  shutdown();
  // Whatever the inner store still holds is failed while it goes: nothing is sent to it then.
  inner_gone_.store(true, std::memory_order_release);
  inner_.reset();
}

void LeasingStore::reset(std::vector<std::string> keys, ResetCallback done) {
  for (const auto& key : keys) {
    Shard& shard = shard_for(key);
    std::lock_guard lock(shard.mu);
    const auto it = shard.leases.find(key);
    if (it == shard.leases.end()) continue;
    Lease& lease = it->second;
    // Ended, its unused units not given back; under a new generation, units taken from it and
    // put back later go nowhere.
    lease.retire(clock_->steady());
    lease.denied_until = 0;
    if (!lease.in_flight && lease.waiting.empty()) shard.leases.erase(it);
  }
  inner_->reset(std::move(keys), std::move(done));
}

LeasingStore::Shard& LeasingStore::shard_for(std::string_view key) const noexcept {
  return shards_[StringHash{}(key) & shard_mask_];
}

void LeasingStore::op_started() {
  std::lock_guard lock(ops_mu_);
  ++ops_;
}

void LeasingStore::op_finished() {
  std::lock_guard lock(ops_mu_);
  if (--ops_ == 0) ops_cv_.notify_all();
}

void LeasingStore::check(std::vector<CheckItem> items, std::optional<Micros> now, CheckCallback done) {
  bool any = false;
  for (const auto& item : items) any = any || leased(item);
  bool pass = !any || now || items.size() > kMaxLeasedItems || closed_.load(std::memory_order_acquire) ||
              may_delay(items) || !inner_->supports_leases();
  for (std::size_t i = 0; !pass && i < items.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) pass = pass || items[i].key == items[j].key;
  }
  if (pass) {
    inner_->check(std::move(items), now, std::move(done));
    return;
  }
  if (!reaper_.joinable()) maybe_reap(clock_->steady());  // else the reaper thread does it
  try_local(std::move(items), std::move(done));
}

void LeasingStore::try_local(std::vector<CheckItem> items, CheckCallback done) {
  for (;;) {
    const Micros t = clock_->steady();
    std::array<Taken, kMaxLeasedItems> taken;
    std::size_t n_taken = 0;
    std::array<Decision, kMaxLeasedItems> local{};
    std::array<bool, kMaxLeasedItems> known{};  // local[i] holds item i's decision
    std::optional<Return> back;
    bool denied = false;
    std::size_t blocked = items.size();  // the item that needs its key's next lease
    bool start = false;
    std::int64_t want = 0;

    for (std::size_t i = 0; i < items.size(); ++i) {
      const CheckItem& item = items[i];
      if (!leased(item)) continue;
      Shard& shard = shard_for(item.key);
      std::lock_guard lock(shard.mu);
      auto it = shard.leases.find(std::string_view(item.key));
      if (it == shard.leases.end()) {
        it = shard.leases.try_emplace(item.key).first;
        it->second.limit = item.limit;
        it->second.policy = item.lease;
      }
      Lease& l = it->second;
      if (l.limit != item.limit || l.policy != item.lease) {
        // The limit changed: its units go back, the lease starts over.
        if (const auto unused = l.retire(t); unused > 0) back = l.to_return(item.key, unused);
        l.limit = item.limit;
        l.policy = item.lease;
        l.size = 1;
        l.denied_until = 0;
      }
      if (l.expires > t && l.left >= item.cost) {
        if (denied) {
          // The check is denied already: this item's view, nothing taken.
          l.left -= item.cost;
          local[i] = l.admitted(t);
          l.left += item.cost;
        } else {
          l.left -= item.cost;
          local[i] = l.admitted(t);
          taken[n_taken++] = Taken{&shard, item.key, l.generation, item.cost};
        }
        known[i] = true;
        continue;
      }
      if (l.denied_until > t && item.cost >= l.denied_cost) {
        local[i] = l.denied(t);
        known[i] = true;
        denied = true;  // what was taken goes back below, under no lock
        continue;
      }
      if (denied) continue;  // asked of the inner store as a peek below
      if (!l.in_flight) {
        if (const auto unused = l.retire(t); unused > 0) back = l.to_return(item.key, unused);
        l.in_flight = true;
        start = true;
        want = std::clamp(l.size, item.cost, std::max(item.cost, lease_cap(item)));
      }
      blocked = i;
      break;
    }

    if (blocked < items.size()) {
      put_back(taken.data(), n_taken);
      if (back) give_back(back->item, back->units, back->at, back->reset_after);
      const CheckItem grant{items[blocked].key, items[blocked].limit, items[blocked].cost};
      Shard& shard = shard_for(grant.key);
      {
        std::lock_guard lock(shard.mu);
        auto it = shard.leases.find(std::string_view(grant.key));
        if (it != shard.leases.end() && it->second.in_flight) {
          it->second.waiting.push_back(Waiting{std::move(items), std::move(done)});
          items.clear();
        }
      }
      if (start) start_grant(grant, want, t);
      if (items.empty()) return;
      continue;  // the grant was answered meanwhile: again
    }
    if (back) give_back(back->item, back->units, back->at, back->reset_after);

    // Everything leased is decided locally; the other items (and, after a denial, the leased
    // ones without a local view) go to the inner store.
    std::vector<CheckItem> rest;
    std::array<std::size_t, kMaxLeasedItems> index{};
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (known[i]) continue;
      index[rest.size()] = i;
      rest.push_back(std::move(items[i]));
      if (denied) rest.back().cost = 0;  // a peek: the check is denied, nothing is consumed
    }
    if (rest.empty()) {
      CheckOutcome out;
      out.items.assign(local.begin(), local.begin() + static_cast<std::ptrdiff_t>(items.size()));
      out.decision = algorithms::combine(out.items);
      if (denied) {
        put_back(taken.data(), n_taken);
        local_denials_.fetch_add(1, std::memory_order_relaxed);
      } else {
        local_admissions_.fetch_add(1, std::memory_order_relaxed);
      }
      done(std::move(out));
      CheckItemLists::give(std::move(items));
      return;
    }
    if (denied) {
      put_back(taken.data(), n_taken);
      n_taken = 0;
      local_denials_.fetch_add(1, std::memory_order_relaxed);
    }
    // The units taken go back if the inner check denies or fails: the keys are kept for it.
    struct Held {
      Shard* shard;
      std::string key;
      std::uint64_t generation;
      std::int64_t units;
    };
    std::vector<Held> held;
    held.reserve(n_taken);
    for (std::size_t k = 0; k < n_taken; ++k) {
      held.push_back(Held{taken[k].shard, std::string(taken[k].key), taken[k].generation, taken[k].units});
    }
    const std::size_t n = items.size();
    inner_->check(std::move(rest), std::nullopt,
                  [this, n, local, known, index, held = std::move(held),
                   done = std::move(done)](Result<CheckOutcome> outcome) mutable {
                    if (!outcome || !outcome->decision.allowed) {
                      std::array<Taken, kMaxLeasedItems> back_taken;
                      for (std::size_t k = 0; k < held.size(); ++k) {
                        back_taken[k] = Taken{held[k].shard, held[k].key, held[k].generation, held[k].units};
                      }
                      put_back(back_taken.data(), held.size());
                    }
                    if (!outcome) return done(std::unexpected(std::move(outcome.error())));
                    CheckOutcome out;
                    out.items.assign(local.begin(), local.begin() + static_cast<std::ptrdiff_t>(n));
                    std::size_t r = 0;
                    for (std::size_t i = 0; i < n; ++i) {
                      if (known[i]) continue;
                      if (r < outcome->items.size() && index[r] == i) out.items[i] = outcome->items[r];
                      ++r;
                    }
                    out.decision = algorithms::combine(out.items);
                    done(std::move(out));
                  });
    return;
  }
}

void LeasingStore::put_back(const Taken* taken, std::size_t count) {
  for (std::size_t k = 0; k < count; ++k) {
    std::lock_guard lock(taken[k].shard->mu);
    auto it = taken[k].shard->leases.find(taken[k].key);
    // A lease that has ended since keeps nothing: the units are lost to this instance (and
    // the store counts them consumed), never admitted twice.
    if (it != taken[k].shard->leases.end() && it->second.generation == taken[k].generation) {
      it->second.left += taken[k].units;
    }
  }
}

void LeasingStore::start_grant(const CheckItem& item, std::int64_t want, Micros sent) {
  op_started();
  inner_->lease_grant(item, want,
                      [this, key = item.key, sent, min = item.cost, want](Result<LeaseGrant> grant) mutable {
                        contain("lease grant",
                                [&] { granted(std::move(key), sent, min, want, std::move(grant)); });
                        op_finished();
                      });
}

void LeasingStore::granted(std::string key, Micros sent, std::int64_t min, std::int64_t want,
                           Result<LeaseGrant> grant) {
  bool closed = false;
  std::vector<Waiting> waiting;
  std::optional<Return> back;
  {
    Shard& shard = shard_for(key);
    std::lock_guard lock(shard.mu);
    // Read under the lock: shutdown() sets it before it takes every shard's lock to collect
    // the leases, so a lease installed here either is collected there or goes straight back.
    closed = closed_.load(std::memory_order_acquire);
    auto it = shard.leases.find(std::string_view(key));
    if (it != shard.leases.end()) {
      Lease& l = it->second;
      l.in_flight = false;
      waiting = std::move(l.waiting);
      l.waiting.clear();
      if (!grant) {
        grants_failed_.fetch_add(1, std::memory_order_relaxed);
      } else if (grant->granted == 0) {
        grants_denied_.fetch_add(1, std::memory_order_relaxed);
        l.denied_until = sent + grant->decision.retry_after;
        l.denied_sent = sent;
        l.denied_cost = min;
        l.denial = grant->decision;
        if (l.limit.algorithm == algorithms::Algorithm::token_bucket) {
          // An empty bucket: the next grant waits until the whole lease has refilled, so that
          // under overload a grant still brings k units, not the one that refilled last.
          l.denied_until = std::max(l.denied_until, sent + want * l.limit.period);
          l.denied_cost = 1;
        }
      } else {
        leases_taken_.fetch_add(1, std::memory_order_relaxed);
        units_granted_.fetch_add(static_cast<std::uint64_t>(grant->granted), std::memory_order_relaxed);
        l.generation = next_generation();
        l.left = grant->granted;
        l.granted = grant->granted;
        l.sent = sent;
        l.at = grant->at;
        l.decision = grant->decision;
        // A fixed window's units are its window's: the lease ends with it at the latest.
        Micros ttl = l.policy.ttl;
        if (l.limit.algorithm == algorithms::Algorithm::fixed_window) ttl = std::min(ttl, grant->decision.reset_after);
        l.expires = sent + ttl;
        l.denied_until = 0;
        if (l.limit.algorithm == algorithms::Algorithm::token_bucket && grant->granted < want) {
          // A bucket running dry: once these units are used, the next grant waits until the
          // rest of the lease asked for has refilled (see above).
          l.denied_until = sent + (want - grant->granted) * l.limit.period;
          l.denied_sent = sent;
          l.denied_cost = 1;
          l.denial = grant->decision;
          l.denial.remaining = 0;
        }
        if (closed) {
          // Nothing is admitted from leases any more: straight back.
          back = l.to_return(key, l.retire(sent));
        }
      }
    } else if (grant && grant->granted > 0) {
      // Never happens (a record is kept while its grant is in flight); should it, give back.
      grants_failed_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (back && back->units > 0) give_back(back->item, back->units, back->at, back->reset_after);
  for (auto& w : waiting) {
    if (!grant) {
      w.done(std::unexpected(grant.error()));
    } else if (closed) {
      w.done(make_error(ErrorCode::unavailable, "the store is shutting down"));
    } else {
      try_local(std::move(w.items), std::move(w.done));
    }
  }
}

void LeasingStore::give_back(const CheckItem& item, std::int64_t units, Micros at, Micros reset_after) {
  if (units <= 0 || inner_gone_.load(std::memory_order_acquire)) return;
  op_started();
  returns_.fetch_add(1, std::memory_order_relaxed);
  inner_->lease_return(item, units, at, reset_after, [this, units](Result<void> done) {
    if (done) units_returned_.fetch_add(static_cast<std::uint64_t>(units), std::memory_order_relaxed);
    op_finished();
  });
}

std::size_t LeasingStore::reap() {
  const Micros t = clock_->steady();
  std::vector<Return> backs;
  std::size_t count = 0;
  for (std::size_t s = 0; s <= shard_mask_; ++s) {
    Shard& shard = shards_[s];
    std::lock_guard lock(shard.mu);
    for (auto it = shard.leases.begin(); it != shard.leases.end();) {
      Lease& l = it->second;
      if (l.in_flight) {
        ++it;
        continue;
      }
      if (l.granted > 0 && l.expires <= t) {
        ++count;
        if (const auto unused = l.retire(t); unused > 0) backs.push_back(l.to_return(it->first, unused));
        l.expires = t;  // idle from now on
      }
      // A key idle for a ttl since its lease ended is forgotten (its k with it).
      if (l.granted == 0 && l.expires + l.policy.ttl <= t && l.denied_until <= t) {
        it = shard.leases.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (const auto& b : backs) give_back(b.item, b.units, b.at, b.reset_after);
  return count;
}

void LeasingStore::maybe_reap(Micros steady) {
  Micros next = next_reap_.load(std::memory_order_relaxed);
  if (steady < next) return;
  if (!next_reap_.compare_exchange_strong(next, steady + options_.reap_every, std::memory_order_relaxed)) return;
  reap();
}

void LeasingStore::reaper_loop() {
  std::unique_lock lock(reaper_mu_);
  while (!stop_reaper_) {
    reaper_cv_.wait_for(lock, std::chrono::microseconds(options_.reap_every), [this] { return stop_reaper_; });
    if (stop_reaper_) break;
    lock.unlock();
    contain("lease reaper", [this] { reap(); });
    lock.lock();
  }
}

void LeasingStore::shutdown() {
  if (reaper_.joinable()) {
    {
      std::lock_guard lock(reaper_mu_);
      stop_reaper_ = true;
    }
    reaper_cv_.notify_all();
    reaper_.join();
  }
  if (!closed_.exchange(true, std::memory_order_acq_rel)) {
    const Micros t = clock_->steady();
    std::vector<Return> backs;
    for (std::size_t s = 0; s <= shard_mask_; ++s) {
      std::lock_guard lock(shards_[s].mu);
      for (auto& [key, l] : shards_[s].leases) {
        if (l.granted == 0) continue;
        if (const auto unused = l.retire(t); unused > 0) backs.push_back(l.to_return(key, unused));
      }
    }
    for (const auto& b : backs) give_back(b.item, b.units, b.at, b.reset_after);
  }
  std::unique_lock lock(ops_mu_);
  ops_cv_.wait_for(lock, std::chrono::microseconds(options_.shutdown_timeout), [this] { return ops_ == 0; });
}

LeasingStore::Stats LeasingStore::stats() const {
  Stats s;
  s.leases_taken = leases_taken_.load(std::memory_order_relaxed);
  s.grants_denied = grants_denied_.load(std::memory_order_relaxed);
  s.grants_failed = grants_failed_.load(std::memory_order_relaxed);
  s.units_granted = units_granted_.load(std::memory_order_relaxed);
  s.returns = returns_.load(std::memory_order_relaxed);
  s.units_returned = units_returned_.load(std::memory_order_relaxed);
  s.local_admissions = local_admissions_.load(std::memory_order_relaxed);
  s.local_denials = local_denials_.load(std::memory_order_relaxed);
  for (std::size_t i = 0; i <= shard_mask_; ++i) {
    std::lock_guard lock(shards_[i].mu);
    s.leases += shards_[i].leases.size();
  }
  return s;
}

void LeasingStore::write_metrics(MetricsWriter& out) const {
  const Stats s = stats();
  out.counter("ratekeeper_lease_leases_taken_total", "Leases granted by the store (at least one unit).", s.leases_taken);
  out.counter("ratekeeper_lease_grants_denied_total", "Lease grants refused: nothing available.", s.grants_denied);
  out.counter("ratekeeper_lease_grants_failed_total", "Lease grants the store failed to answer.", s.grants_failed);
  out.counter("ratekeeper_lease_units_granted_total", "Units granted in leases.", s.units_granted);
  out.counter("ratekeeper_lease_returns_total", "Returns of unused lease units sent to the store.", s.returns);
  out.counter("ratekeeper_lease_units_returned_total", "Unused lease units given back to the store.", s.units_returned);
  out.counter("ratekeeper_lease_local_admissions_total", "Checks admitted from leases without a store call.",
              s.local_admissions);
  out.counter("ratekeeper_lease_local_denials_total", "Checks denied locally after a refused grant.", s.local_denials);
  out.gauge("ratekeeper_lease_keys", "Keys with a lease record.", static_cast<std::int64_t>(s.leases));
  inner_->write_metrics(out);
}

}  // namespace ratekeeper::store
