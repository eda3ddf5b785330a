#include "redis_store.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <mutex>
#include <utility>

#include "ratekeeper/core/event_loop.hpp"
#include "ratekeeper/core/metrics_writer.hpp"
#include "core/overloaded.hpp"
#include "redis/key_slot.hpp"
#include "check_validation.hpp"
#include "coalescer.hpp"
#include "algorithms/step.hpp"
#include "cross_slot.hpp"
#include "lease_script.hpp"
#include "script_client.hpp"
#include "script_health.hpp"
#include "script_reply.hpp"

namespace ratekeeper::store {
namespace {

// The integer a script answers (reset, settle), or the error its reply is.
Result<std::int64_t> integer_reply(Result<redis::Reply> reply, std::string_view script) {
  if (!reply) return std::unexpected(std::move(reply.error()));
  if (reply->is_error()) return std::unexpected(redis::reply_error(*reply));
  if (!reply->is_integer()) {
    return make_error(ErrorCode::protocol,
                      fmt::format("{} reply: expected an integer, got {}", script, reply->to_string()));
  }
  return reply->integer;
}

Micros command_timeout_of(const RedisTopology& topology) {
  return std::visit(Overloaded{[](const redis::ConnectionOptions& c) { return c.command_timeout; },
                               [](const redis::SentinelOptions& s) { return s.master.command_timeout; },
                               [](const redis::ClusterOptions& c) { return c.node.command_timeout; }},
                    topology);
}

}  // namespace

// One I/O thread: its script client (sending through the thread's connection) and, per
// destination (slot 0 on one master, each slot on a cluster), the coalescing of its checks.
struct RedisStore::Lane {
  std::size_t index = 0;
  std::unique_ptr<redis::Connection> connection;  // one server only
  std::unique_ptr<detail::ScriptClient> client;
  detail::Coalescer::Options coalescing;
  EventLoop* loop = nullptr;

  // By destination: one for a single master, one per slot (made on first use) on a cluster.
  std::unique_ptr<std::atomic<detail::Coalescer*>[]> coalescers;
  std::size_t destinations = 0;
  std::mutex mu;  // guards making a coalescer, and closing
  bool closed = false;

  Lane(std::size_t count) : coalescers(new std::atomic<detail::Coalescer*>[count]), destinations(count) {
    for (std::size_t i = 0; i < count; ++i) coalescers[i].store(nullptr, std::memory_order_relaxed);
  }
  ~Lane() {
    for (std::size_t i = 0; i < destinations; ++i) delete coalescers[i].load(std::memory_order_relaxed);
  }

  // The coalescer of `slot`, made on first use; nullptr once closed.
  detail::Coalescer* coalescer(std::uint16_t slot) {
    if (detail::Coalescer* c = coalescers[slot].load(std::memory_order_acquire)) return c;
    std::lock_guard lock(mu);
    if (closed) return nullptr;
    if (detail::Coalescer* c = coalescers[slot].load(std::memory_order_relaxed)) return c;
    auto options = coalescing;
    options.slot = slot;
    // One master: the checks of one turn of the loop go out together, at its end. A cluster
    // slot: only checks of one key set share a call, rarely issued in one turn, so a check
    // goes out at once and only those that wait for a call in flight are batched.
    detail::Coalescer::Post post;
    if (!options.same_keys_only) {
      post = [loop = loop, i = index](std::function<void()> fn) { loop->post(i, std::move(fn)); };
    }
    auto* c = new detail::Coalescer(*client, std::move(post), options);
    coalescers[slot].store(c, std::memory_order_release);
    return c;
  }

  // Closed coalescers answer every check "closed" (unavailable), so a check that found one
  // before close() is still answered.
  void close() {
    std::lock_guard lock(mu);
    closed = true;
    for (std::size_t i = 0; i < destinations; ++i) {
      if (auto* c = coalescers[i].load(std::memory_order_relaxed)) c->close();
    }
  }

  template <class F>
  void each(F f) const {
    for (std::size_t i = 0; i < destinations; ++i) {
      if (const auto* c = coalescers[i].load(std::memory_order_acquire)) f(*c);
    }
  }
};

RedisStore::RedisStore(RedisStoreOptions options)
    : options_(std::move(options)),
      clock_(&clock_or_system(options_.clock)),
      command_timeout_(command_timeout_of(options_.topology)),
      health_(std::make_unique<detail::ScriptHealth>(options_.health, clock_)) {
  loop_ = options_.loop ? options_.loop : std::make_shared<EventLoop>(std::max(1, options_.connections));
  const int threads = static_cast<int>(loop_->size());
  // The client of a sentinel deployment or a cluster runs on the store's loop.
  if (auto* s = std::get_if<redis::SentinelOptions>(&options_.topology)) {
    s->loop = loop_;
    s->io_threads = threads;
    router_ = std::make_unique<redis::Sentinel>(*s);
  } else if (auto* c = std::get_if<redis::ClusterOptions>(&options_.topology)) {
    c->loop = loop_;
    c->io_threads = threads;
    router_ = std::make_unique<redis::Cluster>(*c);
    cross_slot_ = std::make_unique<detail::CrossSlotChecks>(*clock_, command_timeout_);
  }
  for (std::size_t i = 0; i < loop_->size(); ++i) {
    auto lane = std::make_unique<Lane>(cross_slot_ ? std::size_t{redis::kClusterSlots} : 1);
    lane->index = i;
    lane->loop = loop_.get();
    lane->coalescing = {.max_batch = std::max<std::size_t>(1, options_.max_batch),
                        .max_in_flight = options_.max_in_flight,
                        .same_keys_only = cross_slot_ != nullptr};
    detail::ScriptSender send;
    if (const auto* single = std::get_if<redis::ConnectionOptions>(&options_.topology)) {
      lane->connection = std::make_unique<redis::Connection>(*loop_, *single, i);
      send = [connection = lane->connection.get()](std::uint16_t, std::span<const std::string_view> argv,
                                                   Micros timeout, redis::ReplyCallback cb) {
        connection->command(argv, std::move(cb), timeout);
      };
    } else if (auto* sentinel = std::get_if<std::unique_ptr<redis::Sentinel>>(&router_)) {
      send = [s = sentinel->get()](std::uint16_t, std::span<const std::string_view> argv, Micros timeout,
                                   redis::ReplyCallback cb) { s->command(argv, std::move(cb), timeout); };
    } else {
      send = [c = std::get<std::unique_ptr<redis::Cluster>>(router_).get()](
                 std::uint16_t slot, std::span<const std::string_view> argv, Micros timeout,
                 redis::ReplyCallback cb) { c->command(slot, argv, std::move(cb), timeout); };
    }
    lane->client = std::make_unique<detail::ScriptClient>(std::move(send), health_.get(), clock_, options_.functions);
    lanes_.push_back(std::move(lane));
  }
}

RedisStore::~RedisStore() {
  // Nothing new is sent; flushes already posted run out (and find the coalescers closed),
  // then closing the connections fails whatever is pending, on the loop threads; those
  // callbacks still reach the coalescers and clients, destroyed last.
  for (auto& lane : lanes_) lane->close();
  if (!loop_->on_loop_thread()) loop_->barrier();
  for (auto& lane : lanes_) lane->connection.reset();
  router_ = std::monostate{};
  lanes_.clear();
  loop_.reset();
}

std::string_view RedisStore::kind() const noexcept {
  switch (options_.topology.index()) {
    case 1: return "redis-sentinel";
    case 2: return "redis-cluster";
    default: return "redis";
  }
}

RedisStore::Lane& RedisStore::lane() {
  std::size_t index = loop_->current_index();
  if (index >= lanes_.size()) {
    index = lanes_.size() == 1 ? 0 : next_.fetch_add(1, std::memory_order_relaxed) % lanes_.size();
  }
  return *lanes_[index];
}

std::uint16_t RedisStore::slot_of(std::string_view key) const {
  return cross_slot_ ? redis::key_slot(key) : 0;
}

void RedisStore::check(std::vector<CheckItem> items, std::optional<Micros> now, CheckCallback done) {
  if (detail::answered_locally(items, now, done)) return;
  const Micros deadline = clock_->steady() + command_timeout_;
  Lane& here = lane();
  const std::uint16_t first = slot_of(items[0].key);
  if (cross_slot_) {
    std::vector<std::uint16_t> slots;
    slots.reserve(items.size());
    for (const auto& item : items) slots.push_back(slot_of(item.key));
    const auto other = std::find_if(slots.begin(), slots.end(), [&](std::uint16_t s) { return s != first; });
    if (other != slots.end()) {
      if (options_.reject_cross_slot) {
        done(make_error(ErrorCode::invalid_argument,
                        fmt::format("keys span slots: '{}' and '{}' have different hash tags", items[0].key,
                                    items[static_cast<std::size_t>(other - slots.begin())].key)));
        return;
      }
      cross_slot_->check(*here.client, std::move(items), slots, now, deadline, std::move(done));
      return;
    }
  }
  detail::Coalescer* coalescer = here.coalescer(first);
  if (coalescer == nullptr) {
    done(make_error(ErrorCode::unavailable, "redis store closed"));
    return;
  }
  coalescer->check(std::move(items), now, deadline, std::move(done));
}

void RedisStore::lease_grant(const CheckItem& item, std::int64_t want, LeaseCallback done) {
  const Micros deadline = clock_->steady() + command_timeout_;
  detail::run_lease_grant(*lane().client, slot_of(item.key), item, want, std::nullopt, deadline, std::move(done));
}

void RedisStore::lease_return(const CheckItem& item, std::int64_t units, Micros at, Micros reset_after,
                              LeaseReturnCallback done) {
  const Micros deadline = clock_->steady() + command_timeout_;
  detail::run_lease_return(*lane().client, slot_of(item.key), item, units, at, reset_after, deadline,
                           std::move(done));
}

void RedisStore::reset(std::vector<std::string> keys, ResetCallback done) {
  if (keys.empty()) return done(make_error(ErrorCode::invalid_argument, "no key to reset"));
  const auto slot = one_slot(keys);
  if (!slot) return done(std::unexpected(slot.error()));
  // The call and the strings its argument vector points into, alive until answered.
  struct ResetCall {
    std::vector<std::string> keys;
    detail::ScriptCall call;
    ResetCallback done;
  };
  auto owned = std::make_shared<ResetCall>();
  owned->keys = std::move(keys);
  owned->done = std::move(done);
  owned->call.argv.call("reset", owned->keys, {});
  owned->call.deadline = clock_->steady() + command_timeout_;
  owned->call.slot = *slot;
  owned->call.done = [owned](Result<redis::Reply> reply) mutable {
    auto done = std::move(owned->done);
    owned.reset();
    done(integer_reply(std::move(reply), "reset"));
  };
  lane().client->send(owned->call);
}

namespace {

// A table's version as a script answers it: decimal text (a Lua number past 2^31 cannot be
// an integer reply).
Result<std::int64_t> table_version(const redis::Reply& reply, std::string_view script) {
  std::int64_t version = 0;
  const auto* end = reply.str.data() + reply.str.size();
  if (reply.type != redis::Reply::Type::string ||
      std::from_chars(reply.str.data(), end, version).ptr != end || version < 0) {
    return make_error(ErrorCode::protocol, fmt::format("{} reply: expected a version, got {}", script, reply.to_string()));
  }
  return version;
}

// A table's call and the strings its argument vector points into, alive until answered.
struct TableCall {
  std::string key;
  std::vector<std::string> args;
  detail::ScriptCall call;
};

}  // namespace

void RedisStore::read_table(std::string key, std::int64_t known_version, TableCallback done) {
  auto owned = std::make_shared<TableCall>();
  owned->key = std::move(key);
  owned->args.push_back(fmt::format("{}", known_version));
  owned->call.argv.call("table_read", std::span(&owned->key, 1), owned->args);
  owned->call.deadline = clock_->steady() + command_timeout_;
  owned->call.slot = slot_of(owned->key);
  owned->call.done = [owned, known_version, done = std::move(done)](Result<redis::Reply> reply) mutable {
    owned.reset();
    auto answer = [&]() -> Result<std::optional<SharedTable>> {
      if (!reply) return std::unexpected(std::move(reply.error()));
      if (reply->is_error()) return std::unexpected(redis::reply_error(*reply));
      auto& e = reply->elements;
      if (!reply->is_array() || e.empty() || e.size() % 2 != 1) {
        return make_error(ErrorCode::protocol, fmt::format("table_read reply: {}", reply->to_string()));
      }
      auto version = table_version(e[0], "table_read");
      if (!version) return std::unexpected(std::move(version.error()));
      if (e.size() == 1 && *version == known_version) return std::optional<SharedTable>();
      SharedTable table{*version, {}};
      table.entries.reserve(e.size() / 2);
      for (std::size_t i = 1; i + 1 < e.size(); i += 2) {
        if (e[i].type != redis::Reply::Type::string || e[i + 1].type != redis::Reply::Type::string) {
          return make_error(ErrorCode::protocol, "table_read reply: an entry that is not two strings");
        }
        table.entries.emplace_back(std::move(e[i].str), std::move(e[i + 1].str));
      }
      return std::optional<SharedTable>(std::move(table));
    }();
    done(std::move(answer));
  };
  lane().client->send(owned->call);
}

void RedisStore::write_table(std::string key, std::string field, std::optional<std::string> value,
                             std::size_t max_entries, TableWriteCallback done) {
  if (field.empty()) return done(make_error(ErrorCode::invalid_argument, "an entry needs a name"));
  auto owned = std::make_shared<TableCall>();
  owned->key = std::move(key);
  owned->args.push_back(fmt::format("{}", std::min(max_entries, kMaxTableEntries)));
  owned->args.push_back(std::move(field));
  if (value) owned->args.push_back(std::move(*value));
  owned->call.argv.call("table_write", std::span(&owned->key, 1), owned->args);
  owned->call.deadline = clock_->steady() + command_timeout_;
  owned->call.slot = slot_of(owned->key);
  owned->call.done = [owned, done = std::move(done)](Result<redis::Reply> reply) mutable {
    owned.reset();
    auto answer = [&]() -> Result<TableWrite> {
      if (!reply) return std::unexpected(std::move(reply.error()));
      if (reply->is_error()) {
        // The script's refusal (a full table) is the caller's to fix.
        const bool refused = reply->str.find("remove one first") != std::string::npos;
        if (refused) return make_error(ErrorCode::invalid_argument, reply->str);
        return std::unexpected(redis::reply_error(*reply));
      }
      const auto& e = reply->elements;
      if (!reply->is_array() || e.size() != 2 || !e[1].is_integer()) {
        return make_error(ErrorCode::protocol, fmt::format("table_write reply: {}", reply->to_string()));
      }
      auto version = table_version(e[0], "table_write");
      if (!version) return std::unexpected(std::move(version.error()));
      return TableWrite{*version, e[1].integer == 1};
    }();
    done(std::move(answer));
  };
  lane().client->send(owned->call);
}

namespace {

// A reservation's or a settlement's call and the strings its argument vector points into,
// alive until answered.
template <class Callback>
struct ReservationCall {
  std::vector<std::string> keys;  // the record, then the items' keys
  std::vector<std::string> args;
  std::size_t items = 0;
  detail::ScriptCall call;
  Callback done;
};

// KEYS = record, k1..kN; ARGV = now, [ttl, first (from 1), count,] then algorithm, capacity,
// period, cost per item.
template <class Callback>
std::shared_ptr<ReservationCall<Callback>> reservation_call(std::string record, const ReservationRecord* recorded,
                                                            std::vector<CheckItem> items, std::optional<Micros> now,
                                                            Callback done) {
  auto owned = std::make_shared<ReservationCall<Callback>>();
  owned->items = items.size();
  owned->keys.reserve(items.size() + 1);
  owned->keys.push_back(std::move(record));
  owned->args.reserve(4 + 4 * items.size());
  owned->args.push_back(std::to_string(now ? *now : -1));
  if (recorded != nullptr) {
    owned->args.push_back(std::to_string(recorded->ttl));
    owned->args.push_back(std::to_string(recorded->first + 1));
    owned->args.push_back(std::to_string(recorded->end(items.size()) - recorded->first));
  }
  for (auto& item : items) {
    owned->keys.push_back(std::move(item.key));
    owned->args.push_back(std::to_string(static_cast<int>(item.limit.algorithm)));
    owned->args.push_back(std::to_string(item.limit.capacity));
    owned->args.push_back(std::to_string(item.limit.period));
    owned->args.push_back(std::to_string(item.cost));
  }
  owned->done = std::move(done);
  return owned;
}

}  // namespace

Result<std::uint16_t> RedisStore::one_slot(std::span<const std::string> keys) const {
  for (const auto& key : keys) {
    if (slot_of(key) != slot_of(keys[0])) {
      return make_error(ErrorCode::invalid_argument,
                        fmt::format("keys span slots: '{}' and '{}' have different hash tags", keys[0], key));
    }
  }
  return slot_of(keys[0]);
}

void RedisStore::reserve(ReservationRecord record, std::vector<CheckItem> items, std::optional<Micros> now,
                         CheckCallback done) {
  if (auto ok = validate_reservation(record, items); !ok) return done(std::unexpected(ok.error()));
  if (cross_slot_) {
    const std::uint16_t slot = slot_of(record.key);
    for (const auto& item : items) {
      if (slot_of(item.key) != slot) return reserve_across_slots(std::move(record), std::move(items), now, std::move(done));
    }
  }
  auto owned = reservation_call(std::move(record.key), &record, std::move(items), now, std::move(done));
  auto slot = one_slot(owned->keys);
  if (!slot) return owned->done(std::unexpected(slot.error()));
  owned->call.argv.call("reserve", owned->keys, owned->args, /*now_arg=*/0);
  owned->call.deadline = clock_->steady() + command_timeout_;
  owned->call.slot = *slot;
  owned->call.done = [owned](Result<redis::Reply> reply) mutable {
    auto done = std::move(owned->done);
    const std::size_t items = owned->items;
    owned.reset();
    if (!reply) return done(std::unexpected(std::move(reply.error())));
    auto timed = detail::parse_timed_outcome(*reply, items);
    if (!timed) return done(std::unexpected(std::move(timed.error())));
    timed->outcome.recorded = timed->outcome.decision.allowed;
    done(std::move(timed->outcome));
  };
  lane().client->send(owned->call);
}

void RedisStore::reserve_across_slots(ReservationRecord record, std::vector<CheckItem> items,
                                      std::optional<Micros> now, CheckCallback done) {
  const std::uint16_t slot = slot_of(record.key);
  const std::size_t end = record.end(items.size());
  bool slots = false;
  for (std::size_t i = record.first; i < end; ++i) {
    slots = slots || items[i].limit.algorithm == algorithms::Algorithm::concurrency;
  }
  // Without slots, as check() checks it, recorded nowhere: the estimate stays.
  if (!slots) return check(std::move(items), now, std::move(done));
  for (std::size_t i = record.first; i < end; ++i) {
    if (slot_of(items[i].key) != slot) {
      return done(make_error(ErrorCode::invalid_argument,
                             fmt::format("the reserved key '{}' is not in the slot of its record", items[i].key)));
    }
  }
  // With slots: the record's slot first, its record holding every item there (so that one
  // settlement at 0 undoes it whole); then the others, as check() checks them. When they deny
  // or fail, the first part is settled at 0: given back, its slots released.
  struct Across {
    std::vector<std::size_t> here, there;  // positions in the check
    std::vector<CheckItem> items;
    std::string record;
    std::optional<Micros> now;
    CheckCallback done;
  };
  auto a = std::make_shared<Across>();
  std::vector<CheckItem> here_items, there_items;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const bool here = slot_of(items[i].key) == slot;
    (here ? a->here : a->there).push_back(i);
    (here ? here_items : there_items).push_back(items[i]);
  }
  a->items = std::move(items);
  a->record = record.key;
  a->now = now;
  a->done = std::move(done);
  ReservationRecord whole{std::move(record.key), record.ttl, 0, here_items.size()};
  reserve(std::move(whole), std::move(here_items), now, [this, a, there_items = std::move(there_items)](Result<CheckOutcome> first) mutable {
    if (!first) return a->done(std::unexpected(std::move(first.error())));
    auto answer = [a](const CheckOutcome& here, const CheckOutcome& there, bool recorded) {
      CheckOutcome out;
      out.items.resize(a->items.size());
      for (std::size_t i = 0; i < a->here.size(); ++i) out.items[a->here[i]] = here.items[i];
      for (std::size_t i = 0; i < a->there.size(); ++i) out.items[a->there[i]] = there.items[i];
      out.decision = algorithms::combine(out.items);
      out.recorded = recorded && out.decision.allowed;
      a->done(std::move(out));
    };
    // Denied here: the others are only peeked, for their decisions.
    const bool admitted = first->decision.allowed;
    if (!admitted) {
      for (auto& item : there_items) item.cost = 0;
    }
    check(std::move(there_items), a->now,
          [this, a, first = std::move(*first), admitted, answer](Result<CheckOutcome> second) mutable {
            if (admitted && (!second || !second->decision.allowed)) {
              std::vector<CheckItem> undo;
              for (std::size_t i : a->here) undo.push_back(CheckItem{a->items[i].key, a->items[i].limit, 0});
              cross_slot_->undo_sent();
              settle(a->record, std::move(undo), a->now,
                     [this, record = a->record](Result<bool> r) { cross_slot_->undo_answered(record, r); });
            }
            if (!second) return a->done(std::unexpected(std::move(second.error())));
            answer(first, *second, admitted);
          });
  });
}

void RedisStore::settle(std::string record, std::vector<CheckItem> items, std::optional<Micros> now,
                        SettleCallback done) {
  if (auto ok = validate_settlement(record, items); !ok) return done(std::unexpected(ok.error()));
  send_settlement("settle", std::nullopt, std::move(record), std::move(items), now, std::move(done));
}

void RedisStore::renew(std::string record, std::vector<CheckItem> items, Micros ttl, std::optional<Micros> now,
                       SettleCallback done) {
  if (auto ok = validate_renewal(record, items, ttl); !ok) return done(std::unexpected(ok.error()));
  send_settlement("renew", ttl, std::move(record), std::move(items), now, std::move(done));
}

void RedisStore::send_settlement(std::string_view script, std::optional<Micros> ttl, std::string record,
                                 std::vector<CheckItem> items, std::optional<Micros> now, SettleCallback done) {
  auto owned = reservation_call(std::move(record), nullptr, std::move(items), now, std::move(done));
  if (ttl) owned->args.insert(owned->args.begin() + 1, std::to_string(*ttl));
  auto slot = one_slot(owned->keys);
  if (!slot) return owned->done(std::unexpected(slot.error()));
  owned->call.argv.call(script, owned->keys, owned->args);
  owned->call.deadline = clock_->steady() + command_timeout_;
  owned->call.slot = *slot;
  owned->call.done = [owned, script](Result<redis::Reply> reply) mutable {
    auto done = std::move(owned->done);
    owned.reset();
    auto answer = integer_reply(std::move(reply), script);
    if (!answer) return done(std::unexpected(std::move(answer.error())));
    done(*answer == 1);
  };
  lane().client->send(owned->call);
}

StoreHealth RedisStore::health() const {
  std::string status = "ok";
  if (const auto* sentinel = std::get_if<std::unique_ptr<redis::Sentinel>>(&router_)) {
    status = (*sentinel)->status();
  } else if (const auto* cluster = std::get_if<std::unique_ptr<redis::Cluster>>(&router_)) {
    status = (*cluster)->status();
  } else {
    for (const auto& lane : lanes_) {
      const auto& c = *lane->connection;
      if (c.state() != redis::ConnectionState::connected ||
          c.breaker_state() != redis::CircuitBreaker::State::closed) {
        status = c.status();
        break;
      }
    }
  }
  if (status != "ok") return {false, std::move(status)};
  if (auto why = health_->failing()) return {false, std::move(*why)};
  return {true, "ok"};
}

bool RedisStore::using_functions() const noexcept {
  return std::all_of(lanes_.begin(), lanes_.end(), [](const auto& lane) { return lane->client->functions(); });
}

redis::Connection& RedisStore::connection(std::size_t index) {
  std::get<redis::ConnectionOptions>(options_.topology);  // throws on another topology
  return *lanes_.at(index)->connection;
}

redis::Sentinel& RedisStore::sentinel() { return *std::get<std::unique_ptr<redis::Sentinel>>(router_); }
redis::Cluster& RedisStore::cluster() { return *std::get<std::unique_ptr<redis::Cluster>>(router_); }

RedisStore::Stats RedisStore::stats() const noexcept {
  Stats s;
  for (const auto& lane : lanes_) {
    lane->each([&s](const detail::Coalescer& c) {
      s.batches += c.batches();
      s.batched_checks += c.batched_checks();
    });
  }
  s.noscript_reloads = health_->noscript_reloads();
  s.library_loads = health_->library_loads();
  if (cross_slot_) {
    s.cross_slot_checks = cross_slot_->checks();
    s.cross_slot_partial = cross_slot_->partial();
    s.refunds_sent = cross_slot_->refunds_sent();
    s.refunds_failed = cross_slot_->refunds_failed();
  }
  return s;
}

void RedisStore::write_metrics(MetricsWriter& out) const {
  const Stats s = stats();
  out.counter("ratekeeper_redis_batches_total", "Batch script calls sent (checks coalesced into one call).",
              s.batches);
  out.counter("ratekeeper_redis_batched_checks_total", "Checks answered through batch script calls.",
              s.batched_checks);
  out.counter("ratekeeper_redis_noscript_reloads_total",
              "Script calls sent again with their source after NOSCRIPT (restart, failover, SCRIPT FLUSH).",
              s.noscript_reloads);
  out.counter("ratekeeper_redis_library_loads_total",
              "FUNCTION LOADs of the scripts' library (first use, after a flush or restart).", s.library_loads);
  out.gauge("ratekeeper_redis_functions", "1 while the scripts are called as Redis Functions (FCALL), 0: EVALSHA.",
            std::int64_t{using_functions() ? 1 : 0});
  if (std::holds_alternative<redis::ConnectionOptions>(options_.topology)) {
    redis::Connection::Stats c;
    for (const auto& lane : lanes_) {
      const auto l = lane->connection->stats();
      c.commands += l.commands;
      c.writes += l.writes;
      c.timeouts += l.timeouts;
      c.reconnects += l.reconnects;
      c.breaker_opened += l.breaker_opened;
    }
    out.counter("ratekeeper_redis_commands_total", "Commands queued on the store's connections.", c.commands);
    out.counter("ratekeeper_redis_writes_total", "Writes to the store's connections (each a pipeline of commands).",
                c.writes);
    out.counter("ratekeeper_redis_timeouts_total", "Commands that missed their deadline.", c.timeouts);
    out.counter("ratekeeper_redis_reconnects_total", "Connections made again after a loss.", c.reconnects);
    out.counter("ratekeeper_redis_breaker_opened_total", "Times a connection's circuit breaker opened.",
                c.breaker_opened);
  }
  if (const auto* sentinel = std::get_if<std::unique_ptr<redis::Sentinel>>(&router_)) {
    const auto st = (*sentinel)->stats();
    out.counter("ratekeeper_sentinel_master_switches_total", "Changes of master after the first resolution.",
                st.switches);
    out.counter("ratekeeper_sentinel_resolutions_total", "Masters resolved through a sentinel.", st.resolutions);
    out.gauge("ratekeeper_sentinel_subscribed", "Sentinels whose +switch-master subscription is up.",
              static_cast<std::int64_t>(st.subscribed));
  }
  if (const auto* cluster = std::get_if<std::unique_ptr<redis::Cluster>>(&router_)) {
    const auto c = (*cluster)->stats();
    out.counter("ratekeeper_cluster_cross_slot_checks_total", "Checks whose keys span several slots of the cluster.",
                s.cross_slot_checks);
    out.counter("ratekeeper_cluster_cross_slot_partial_total",
                "Of those, checks some slots admitted while another denied or failed (their consumption refunded).",
                s.cross_slot_partial);
    out.counter("ratekeeper_cluster_refunds_total", "Refund calls sent, one per slot that consumed.", s.refunds_sent);
    out.counter("ratekeeper_cluster_refund_failures_total",
                "Refunds not confirmed (failed, or left unsent by the deadline): their consumption stays.",
                s.refunds_failed);
    out.counter("ratekeeper_cluster_redirects_total", "Redirections followed.", c.moved, {{"kind", "moved"}});
    out.counter("ratekeeper_cluster_redirects_total", "Redirections followed.", c.ask, {{"kind", "ask"}});
    out.counter("ratekeeper_cluster_slot_map_refreshes_total", "Slot maps loaded from the cluster.", c.refreshes);
  }
}

}  // namespace ratekeeper::store
