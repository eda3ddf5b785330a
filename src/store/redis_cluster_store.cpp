#include "ratekeeper/store/redis_cluster_store.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>

#include "ratekeeper/algorithms/step.hpp"
#include "ratekeeper/redis/circuit_breaker.hpp"
#include "ratekeeper/redis/key_slot.hpp"
#include "ratekeeper/redis/url.hpp"
#include "script_call.hpp"

namespace ratekeeper::store {
namespace {

// The per-slot answers of one check spanning several slots, combined when the last arrives.
struct Join {
  std::mutex mu;
  std::size_t left = 0;
  std::vector<Decision> items;
  std::optional<Error> error;
  bool consumed = false;  // some slot allowed a positive cost
  bool denied = false;
  CheckCallback done;
};

}  // namespace

RedisClusterStoreOptions redis_cluster_store_options(const StoreOptions& options, const redis::Url& url) {
  RedisClusterStoreOptions out;
  auto& c = out.cluster;
  c.seeds = url.endpoints;
  c.node = detail::connection_options(options, url);
  c.node.endpoint = {};  // each node's own, from the slot map
  c.io_threads = std::max(1, options.io_threads);
  return out;
}

RedisClusterStore::RedisClusterStore(RedisClusterStoreOptions options)
    : options_(std::move(options)), cluster_(std::make_unique<redis::Cluster>(options_.cluster)) {}

RedisClusterStore::~RedisClusterStore() = default;

void RedisClusterStore::check(std::vector<CheckItem> items, std::optional<Micros> now, CheckCallback done) {
  if (detail::answered_locally(items, now, done)) return;
  const Micros deadline = redis::steady_micros() + options_.cluster.node.command_timeout;
  const std::uint16_t first = redis::key_slot(items[0].key);
  std::vector<std::uint16_t> slots;
  slots.reserve(items.size());
  bool one_slot = true;
  for (const auto& item : items) {
    slots.push_back(redis::key_slot(item.key));
    one_slot = one_slot && slots.back() == first;
  }
  if (one_slot) {
    run(std::move(items), first, now, deadline, std::move(done));
    return;
  }
  if (options_.reject_cross_slot) {
    done(make_error(ErrorCode::invalid_argument,
                    fmt::format("keys span slots: '{}' and '{}' have different hash tags", items[0].key,
                                items[static_cast<std::size_t>(
                                          std::find_if(slots.begin(), slots.end(),
                                                       [&](std::uint16_t s) { return s != first; }) -
                                          slots.begin())]
                                    .key)));
    return;
  }
  cross_slot_checks_.fetch_add(1, std::memory_order_relaxed);
  // One group per slot, in order of first appearance; `index` maps back to the batch.
  std::vector<std::uint16_t> group_slots;
  std::vector<std::vector<std::size_t>> index;
  for (std::size_t i = 0; i < items.size(); ++i) {
    auto it = std::find(group_slots.begin(), group_slots.end(), slots[i]);
    if (it == group_slots.end()) {
      group_slots.push_back(slots[i]);
      index.emplace_back();
      it = group_slots.end() - 1;
    }
    index[static_cast<std::size_t>(it - group_slots.begin())].push_back(i);
  }
  auto join = std::make_shared<Join>();
  join->left = group_slots.size();
  join->items.resize(items.size());
  join->done = std::move(done);
  for (std::size_t g = 0; g < group_slots.size(); ++g) {
    std::vector<CheckItem> group;
    group.reserve(index[g].size());
    bool costs = false;
    for (std::size_t i : index[g]) {
      costs = costs || items[i].cost > 0;
      group.push_back(std::move(items[i]));
    }
    run(std::move(group), group_slots[g], now, deadline,
        [this, join, positions = std::move(index[g]), costs](Result<CheckOutcome> r) {
          CheckCallback finish;
          Result<CheckOutcome> out = CheckOutcome{};
          {
            std::lock_guard lock(join->mu);
            if (!r) {
              if (!join->error) join->error = r.error();
            } else {
              for (std::size_t k = 0; k < positions.size() && k < r->items.size(); ++k) {
                join->items[positions[k]] = r->items[k];
              }
              if (r->decision.allowed) {
                join->consumed = join->consumed || costs;
              } else {
                join->denied = true;
              }
            }
            if (--join->left > 0) return;
            finish = std::move(join->done);
            if (join->error) {
              out = std::unexpected(*join->error);
            } else {
              if (join->consumed && join->denied) cross_slot_partial_.fetch_add(1, std::memory_order_relaxed);
              out->decision = algorithms::combine(join->items);
              out->items = std::move(join->items);
            }
          }
          finish(std::move(out));
        });
  }
}

void RedisClusterStore::run(std::vector<CheckItem> items, std::uint16_t slot, std::optional<Micros> now,
                            Micros deadline, CheckCallback done) {
  auto call = std::make_shared<detail::ScriptCall>(std::move(items), now);
  detail::run_script(
      call, deadline,
      [this, slot](std::span<const std::string_view> argv, Micros timeout, redis::ReplyCallback cb) {
        cluster_->command(slot, argv, std::move(cb), timeout);
      },
      std::move(done), &noscript_reloads_);
}

StoreHealth RedisClusterStore::health() const {
  auto status = cluster_->status();
  return {status == "ok", std::move(status)};
}

RedisClusterStore::Stats RedisClusterStore::stats() const noexcept {
  return Stats{noscript_reloads_.load(std::memory_order_relaxed), cross_slot_checks_.load(std::memory_order_relaxed),
               cross_slot_partial_.load(std::memory_order_relaxed)};
}

}  // namespace ratekeeper::store
