#include "coalescer.hpp"

#include <algorithm>
#include <bit>
#include <string_view>
#include <utility>

#include "ratekeeper/core/contained.hpp"

namespace ratekeeper::store::detail {

// One check: queued, then sent alone (`call`) or as part of one batch.
struct Coalescer::Check {
  std::vector<CheckItem> items;
  std::optional<Micros> now;
  Micros deadline = 0;  // steady clock
  CheckCallback done;
  ScriptCall call;  // when sent alone
};

// Checks sent together in one call of the batch script; identical checks share one entry.
struct Coalescer::Batch {
  std::vector<BatchEntry> entries;
  // Per entry, in issue order; the first entries.size() are this batch's (the vectors are kept
  // with their capacity for the next batch).
  std::vector<std::vector<Check*>> checks;
  ScriptCall call;
  // The entries by the hash of their keys (open addressing; entry + 1, 0 empty), so that a
  // check finds its identical entry without comparing itself with every other.
  std::vector<std::uint32_t> by_hash;
  std::vector<std::size_t> hashes;  // per entry

  void start(std::size_t checks_in_batch) {
    entries.clear();
    for (auto& entry : checks) entry.clear();
    hashes.clear();
    by_hash.assign(std::bit_ceil(2 * checks_in_batch), 0);
  }

  // The entry of a check's items: an identical earlier one's, or a new one.
  std::size_t entry_of(const std::vector<CheckItem>& items) {
    std::size_t h = items.size();
    for (const auto& item : items) h = h * 31 + std::hash<std::string_view>{}(item.key);
    const std::size_t mask = by_hash.size() - 1;
    for (std::size_t at = h & mask;; at = (at + 1) & mask) {
      const std::uint32_t slot = by_hash[at];
      if (slot == 0) {
        by_hash[at] = static_cast<std::uint32_t>(entries.size() + 1);
        entries.push_back({&items, 0});
        if (checks.size() < entries.size()) checks.emplace_back();
        hashes.push_back(h);
        return entries.size() - 1;
      }
      if (hashes[slot - 1] == h && *entries[slot - 1].items == items) return slot - 1;
    }
  }
};

Coalescer::Coalescer(const ScriptClient& client, Post post, Options options)
    : client_(client), post_(std::move(post)), options_(options) {
  options_.max_batch = std::max<std::size_t>(1, options_.max_batch);
  options_.max_in_flight = std::max<std::size_t>(1, options_.max_in_flight);
}

Coalescer::~Coalescer() { close(); }

void Coalescer::close() {
  std::vector<CheckCallback> left;
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    for (Check* check : queued_) {
      left.push_back(std::move(check->done));
      check_pool_.release(check);
    }
    queued_.clear();
  }
  for (auto& done : left) done(make_error(ErrorCode::unavailable, "redis store closed"));
}

void Coalescer::check(std::vector<CheckItem> items, std::optional<Micros> now, Micros deadline, CheckCallback done) {
  {
    std::unique_lock lock(mu_);
    if (closed_) {
      lock.unlock();
      done(make_error(ErrorCode::unavailable, "redis store closed"));
      return;
    }
    Check* check = check_pool_.acquire();
    check->items.swap(items);  // `items` now holds an earlier check's, given back below
    check->now = now;
    check->deadline = deadline;
    check->done = std::move(done);
    queued_.push_back(check);
  }
  if (items.capacity() > 0) CheckItemLists::give(std::move(items));
  schedule_flush();
}

void Coalescer::schedule_flush() {
  if (!post_) {
    flush();
    return;
  }
  {
    std::lock_guard lock(mu_);
    if (std::exchange(flush_posted_, true)) return;
  }
  post_([this] { flush(); });
}

void Coalescer::flush() {
  std::vector<Check*> checks;
  {
    std::lock_guard lock(mu_);
    flush_posted_ = false;
    // Enough in flight: what is queued goes with the next completion, in fewer, larger calls.
    if (closed_ || in_flight_ >= options_.max_in_flight || queued_.empty()) return;
    checks.swap(queued_);
  }
  // Checks of different keys are concurrent: their order among each other is free. With
  // same_keys_only, the checks of one key set are brought together, each set in issue order.
  const auto same_keys = [](const Check* a, const Check* b) {
    return std::equal(a->items.begin(), a->items.end(), b->items.begin(), b->items.end(),
                      [](const CheckItem& x, const CheckItem& y) { return x.key == y.key; });
  };
  if (options_.same_keys_only && checks.size() > 2) {
    std::stable_sort(checks.begin(), checks.end(), [](const Check* a, const Check* b) {
      return std::lexicographical_compare(a->items.begin(), a->items.end(), b->items.begin(), b->items.end(),
                                          [](const CheckItem& x, const CheckItem& y) { return x.key < y.key; });
    });
  }
  // Runs of checks with the same `now` (the script takes one), at most max_batch each. A check
  // that may wait for its turn goes out alone ("multi_delay"), never in a batch.
  for (std::size_t i = 0; i < checks.size();) {
    std::size_t j = i + 1;
    if (!may_delay(checks[i]->items)) {
      while (j < checks.size() && j - i < options_.max_batch && checks[j]->now == checks[i]->now &&
             !may_delay(checks[j]->items) && (!options_.same_keys_only || same_keys(checks[i], checks[j]))) {
        ++j;
      }
    }
    Batch* batch = started(j - i > 1);
    if (batch == nullptr) {
      send_one(checks[i]);
      i = j;
      continue;
    }
    batch->start(j - i);
    batch->call.deadline = checks[i]->deadline;
    batch->call.slot = options_.slot;
    for (std::size_t k = i; k < j; ++k) {
      const auto& items = checks[k]->items;
      // Identical to an earlier check of the batch (typically one client's key): one entry.
      const std::size_t e = batch->entry_of(items);
      ++batch->entries[e].repeats;
      batch->checks[e].push_back(checks[k]);
      batch->call.deadline = std::min(batch->call.deadline, checks[k]->deadline);
    }
    batches_.fetch_add(1, std::memory_order_relaxed);
    batched_checks_.fetch_add(j - i, std::memory_order_relaxed);
    batch->call.argv.batch(batch->entries, checks[i]->now);
    send_batch(batch);
    i = j;
  }
}

Coalescer::Batch* Coalescer::started(bool batch) {
  std::lock_guard lock(mu_);
  ++in_flight_;
  return batch ? batch_pool_.acquire() : nullptr;
}

void Coalescer::finished() {
  {
    std::lock_guard lock(mu_);
    --in_flight_;
    if (queued_.empty() || closed_) return;
  }
  schedule_flush();
}

void Coalescer::send_one(Check* check) {
  check->call.argv.check(check->items, check->now);
  check->call.deadline = check->deadline;
  check->call.slot = options_.slot;
  check->call.done = [this, check](Result<redis::Reply> reply) { on_reply(check, std::move(reply)); };
  client_.send(check->call);
}

void Coalescer::on_reply(Check* check, Result<redis::Reply> reply) {
  auto done = std::move(check->done);
  Result<CheckOutcome> outcome = reply ? parse_check_outcome(*reply, check->items)
                                       : Result<CheckOutcome>(std::unexpected(std::move(reply.error())));
  {
    std::lock_guard lock(mu_);
    check_pool_.release(check);
  }
  finished();
  done(std::move(outcome));
}

void Coalescer::send_batch(Batch* batch) {
  batch->call.done = [this, batch](Result<redis::Reply> reply) { on_batch_reply(batch, std::move(reply)); };
  client_.send(batch->call);
}

void Coalescer::on_batch_reply(Batch* batch, Result<redis::Reply> reply) {
  std::vector<Result<CheckOutcome>> outcomes;  // entry by entry, each entry's repetitions in order
  if (reply) outcomes = parse_batch(*reply, batch->entries);
  finished();
  std::size_t at = 0;
  for (std::size_t e = 0; e < batch->entries.size(); ++e) {
    for (std::size_t r = 0; r < batch->checks[e].size(); ++r, ++at) {
      auto done = std::move(batch->checks[e][r]->done);
      // Each check's callback runs whatever the others do.
      contain("a coalesced check's callback", [&] {
        if (reply) {
          done(std::move(outcomes[at]));
        } else {
          done(std::unexpected(reply.error()));
        }
      });
    }
  }
  std::lock_guard lock(mu_);
  for (std::size_t e = 0; e < batch->entries.size(); ++e) {
    for (Check* check : batch->checks[e]) check_pool_.release(check);
  }
  batch_pool_.release(batch);
}

}  // namespace ratekeeper::store::detail
