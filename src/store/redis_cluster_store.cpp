#include "ratekeeper/store/redis_cluster_store.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <mutex>

#include "ratekeeper/algorithms/step.hpp"
#include "ratekeeper/redis/key_slot.hpp"
#include "ratekeeper/redis/url.hpp"
#include "check_validation.hpp"
#include "redis_options.hpp"
#include "lease_script.hpp"
#include "script_client.hpp"
#include "script_health.hpp"

namespace ratekeeper::store {

// One check spanning several slots: its parts (one per slot), answered concurrently, then
// the refunds of the parts that consumed when another part denied.
struct RedisClusterStore::CrossSlotCheck {
  struct Part {
    std::uint16_t slot = 0;
    std::vector<std::size_t> positions;  // of its items in the check
    bool allowed = false;
    Micros at = 0;  // the instant the part was decided at
  };

  std::vector<CheckItem> items;
  std::optional<Micros> now;
  Micros deadline = 0;
  std::vector<Part> parts;
  CheckCallback done;

  std::mutex mu;  // guards what follows, written by the parts' and refunds' callbacks
  std::size_t left = 0;  // parts, then refunds, not answered yet
  std::vector<Decision> decisions;
  std::optional<Error> error;
};

RedisClusterStoreOptions redis_cluster_store_options(const StoreOptions& options, const redis::Url& url) {
  RedisClusterStoreOptions out;
  auto& c = out.cluster;
  c.seeds = url.endpoints;
  c.node = detail::connection_options(options, url);
  c.node.endpoint = {};  // each node's own, from the slot map
  c.io_threads = std::max(1, options.io_threads);
  c.loop = options.loop;
  out.health = detail::reply_health_options(options);
  out.functions = options.redis_functions;
  out.clock = options.clock;
  return out;
}

RedisClusterStore::RedisClusterStore(RedisClusterStoreOptions options)
    : options_(std::move(options)),
      clock_(&clock_or_system(options_.clock)),
      health_(std::make_unique<detail::ScriptHealth>(options_.health, clock_)),
      // Script calls to the master of their slot.
      client_(std::make_unique<detail::ScriptClient>(
          [this](std::uint16_t slot, std::span<const std::string_view> argv, Micros timeout, redis::ReplyCallback cb) {
            cluster_->command(slot, argv, std::move(cb), timeout);
          },
          health_.get(), clock_, options_.functions)),
      cluster_(std::make_unique<redis::Cluster>(options_.cluster)) {}

RedisClusterStore::~RedisClusterStore() {
  cluster_.reset();  // fails what is pending; its callbacks still reach the client
}

void RedisClusterStore::check(std::vector<CheckItem> items, std::optional<Micros> now, CheckCallback done) {
  if (detail::answered_locally(items, now, done)) return;
  const Micros deadline = clock_->steady() + options_.cluster.node.command_timeout;
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
  check_across_slots(std::move(items), slots, now, deadline, std::move(done));
}

void RedisClusterStore::check_across_slots(std::vector<CheckItem> items, std::span<const std::uint16_t> slots,
                                           std::optional<Micros> now, Micros deadline, CheckCallback done) {
  cross_slot_checks_.fetch_add(1, std::memory_order_relaxed);
  auto check = std::make_shared<CrossSlotCheck>();
  // One part per slot, in order of first appearance.
  for (std::size_t i = 0; i < items.size(); ++i) {
    auto it = std::find_if(check->parts.begin(), check->parts.end(),
                           [&](const CrossSlotCheck::Part& p) { return p.slot == slots[i]; });
    if (it == check->parts.end()) {
      check->parts.push_back({slots[i], {}});
      it = check->parts.end() - 1;
    }
    it->positions.push_back(i);
  }
  check->decisions.resize(items.size());
  check->items = std::move(items);
  check->now = now;
  check->deadline = deadline;
  check->done = std::move(done);
  check->left = check->parts.size();
  // From here on the parts' callbacks may run, on this stack or another thread: the loop
  // only reads what they never write.
  const std::size_t count = check->parts.size();
  for (std::size_t g = 0; g < count; ++g) {
    const auto& part = check->parts[g];
    std::vector<CheckItem> group;
    group.reserve(part.positions.size());
    for (std::size_t i : part.positions) group.push_back(check->items[i]);
    detail::run_timed_check(
        *client_, part.slot, std::move(group), now, deadline,
        [this, check, g](Result<detail::TimedOutcome> r) { part_answered(check, g, std::move(r)); });
  }
}

void RedisClusterStore::part_answered(const std::shared_ptr<CrossSlotCheck>& check, std::size_t g,
                                      Result<detail::TimedOutcome> r) {
  {
    std::lock_guard lock(check->mu);
    auto& part = check->parts[g];
    if (!r) {
      if (!check->error) check->error = r.error();
    } else {
      for (std::size_t k = 0; k < part.positions.size(); ++k) {
        check->decisions[part.positions[k]] = r->outcome.items[k];
      }
      part.allowed = r->outcome.decision.allowed;
      part.at = r->at;
    }
    if (--check->left > 0) return;
  }
  // Every part has answered: nothing else touches `check` until the refunds are sent. A
  // part that failed (an error, its deadline) makes the check fail: what the admitted parts
  // consumed is then given back too, behind the answer, with a deadline of its own.
  const bool failed = check->error.has_value();
  const bool denied = failed || std::any_of(check->parts.begin(), check->parts.end(),
                                            [](const CrossSlotCheck::Part& p) { return !p.allowed; });
  // The parts that consumed: admitted, with some positive cost.
  std::vector<std::size_t> refunds;
  for (std::size_t p = 0; denied && p < check->parts.size(); ++p) {
    const auto& part = check->parts[p];
    if (part.allowed && std::any_of(part.positions.begin(), part.positions.end(),
                                    [&](std::size_t i) { return check->items[i].cost > 0; })) {
      refunds.push_back(p);
    }
  }
  CheckCallback failed_done;
  if (failed) failed_done = std::move(check->done);  // answered below, refunds or not
  if (refunds.empty()) {
    if (failed) return failed_done(std::unexpected(*check->error));
    answer(check);
    return;
  }
  cross_slot_partial_.fetch_add(1, std::memory_order_relaxed);
  const Micros refund_deadline =
      failed ? clock_->steady() + options_.cluster.node.command_timeout : check->deadline;
  // Built before any is sent: a refund's callback may answer the check on this stack.
  struct Refund {
    std::size_t part = 0;
    std::vector<std::size_t> positions;
    std::vector<CheckItem> items;
    std::vector<Micros> reset_after;
  };
  std::vector<Refund> pending;
  for (std::size_t p : refunds) {
    Refund& r = pending.emplace_back();
    r.part = p;
    for (std::size_t i : check->parts[p].positions) {
      if (check->items[i].cost == 0) continue;
      r.positions.push_back(i);
      r.items.push_back(check->items[i]);
      r.reset_after.push_back(check->decisions[i].reset_after);
    }
  }
  check->left = pending.size();
  for (auto& r : pending) {
    const auto& part = check->parts[r.part];
    if (clock_->steady() >= refund_deadline) {
      refund_answered(check, r.part, r.positions,
                      make_error(ErrorCode::timeout, "the deadline passed before the refund could be sent"));
      continue;
    }
    refunds_sent_.fetch_add(1, std::memory_order_relaxed);
    detail::run_refund(*client_, part.slot, std::move(r.items), std::move(r.reset_after), part.at, check->now,
                       refund_deadline,
                       [this, check, p = r.part, positions = r.positions](Result<detail::RefundOutcome> outcome) {
                         refund_answered(check, p, positions, std::move(outcome));
                       });
  }
  if (failed) failed_done(std::unexpected(*check->error));
}

void RedisClusterStore::refund_answered(const std::shared_ptr<CrossSlotCheck>& check, std::size_t p,
                                        std::span<const std::size_t> positions, Result<detail::RefundOutcome> r) {
  {
    std::lock_guard lock(check->mu);
    if (!r) {
      refunds_failed_.fetch_add(1, std::memory_order_relaxed);
      std::string keys;
      for (std::size_t i : positions) {
        keys += keys.empty() ? "" : ", ";
        keys += fmt::format("'{}' ({})", check->items[i].key, check->items[i].cost);
      }
      spdlog::warn("redis-cluster: refund on slot {} failed, the consumption of {} by a check denied or failed on another slot stays: {}",
                   check->parts[p].slot, keys, r.error().message);
    } else {
      // What the refunded keys hold now, as a peek reports it.
      for (std::size_t k = 0; k < positions.size(); ++k) check->decisions[positions[k]] = r->items[k];
    }
    if (--check->left > 0) return;
  }
  answer(check);
}

void RedisClusterStore::answer(const std::shared_ptr<CrossSlotCheck>& check) {
  if (!check->done) return;  // a failed check, answered before its refunds
  CheckOutcome out;
  out.decision = algorithms::combine(check->decisions);
  out.items = std::move(check->decisions);
  auto done = std::move(check->done);
  done(std::move(out));
}

void RedisClusterStore::run(std::vector<CheckItem> items, std::uint16_t slot, std::optional<Micros> now,
                            Micros deadline, CheckCallback done) {
  detail::run_check(*client_, slot, std::move(items), now, deadline, std::move(done));
}

StoreHealth RedisClusterStore::health() const {
  auto status = cluster_->status();
  if (status != "ok") return {false, std::move(status)};
  if (auto why = health_->failing()) return {false, std::move(*why)};
  return {true, "ok"};
}

RedisClusterStore::Stats RedisClusterStore::stats() const noexcept {
  return Stats{health_->noscript_reloads(), cross_slot_checks_.load(std::memory_order_relaxed),
               cross_slot_partial_.load(std::memory_order_relaxed), refunds_sent_.load(std::memory_order_relaxed),
               refunds_failed_.load(std::memory_order_relaxed), health_->library_loads()};
}

std::string RedisClusterStore::metrics_text() const {
  const Stats s = stats();
  const redis::Cluster::Stats c = cluster_->stats();
  return fmt::format(
      "# HELP ratekeeper_cluster_cross_slot_checks_total Checks whose keys span several slots of the cluster.\n"
      "# TYPE ratekeeper_cluster_cross_slot_checks_total counter\n"
      "ratekeeper_cluster_cross_slot_checks_total {}\n"
      "# HELP ratekeeper_cluster_cross_slot_partial_total Of those, checks some slots admitted while another denied or failed "
      "(their consumption refunded).\n"
      "# TYPE ratekeeper_cluster_cross_slot_partial_total counter\n"
      "ratekeeper_cluster_cross_slot_partial_total {}\n"
      "# HELP ratekeeper_cluster_refunds_total Refund calls sent, one per slot that consumed.\n"
      "# TYPE ratekeeper_cluster_refunds_total counter\n"
      "ratekeeper_cluster_refunds_total {}\n"
      "# HELP ratekeeper_cluster_refund_failures_total Refunds not confirmed (failed, or left unsent by the "
      "deadline): their consumption stays.\n"
      "# TYPE ratekeeper_cluster_refund_failures_total counter\n"
      "ratekeeper_cluster_refund_failures_total {}\n"
      "# HELP ratekeeper_cluster_redirects_total Redirections followed.\n"
      "# TYPE ratekeeper_cluster_redirects_total counter\n"
      "ratekeeper_cluster_redirects_total{{kind=\"moved\"}} {}\n"
      "ratekeeper_cluster_redirects_total{{kind=\"ask\"}} {}\n"
      "# HELP ratekeeper_cluster_slot_map_refreshes_total Slot maps loaded from the cluster.\n"
      "# TYPE ratekeeper_cluster_slot_map_refreshes_total counter\n"
      "ratekeeper_cluster_slot_map_refreshes_total {}\n",
      s.cross_slot_checks, s.cross_slot_partial, s.refunds_sent, s.refunds_failed, c.moved, c.ask, c.refreshes);
}

void RedisClusterStore::lease_grant(const CheckItem& item, std::int64_t want, LeaseCallback done) {
  const Micros deadline = clock_->steady() + options_.cluster.node.command_timeout;
  detail::run_lease_grant(*client_, redis::key_slot(item.key), item, want, std::nullopt, deadline, std::move(done));
}

void RedisClusterStore::lease_return(const CheckItem& item, std::int64_t units, Micros at, Micros reset_after,
                              LeaseReturnCallback done) {
  const Micros deadline = clock_->steady() + options_.cluster.node.command_timeout;
  detail::run_lease_return(*client_, redis::key_slot(item.key), item, units, at, reset_after, deadline, std::move(done));
}

}  // namespace ratekeeper::store
