#include "ratekeeper/store/redis_store.hpp"

#include <algorithm>
#include <mutex>
#include <utility>

#include "../redis/sha1.hpp"
#include "ratekeeper/algorithms/step.hpp"
#include "ratekeeper/core/event_loop.hpp"
#include "script_call.hpp"

namespace ratekeeper::store {

// One check in flight: owned by exactly one pending command (or one batch) at a time.
struct RedisStore::Call {
  detail::ScriptCall script;  // the items, `now`, and the argument vector
  CheckCallback done;
  Micros deadline = 0;  // steady clock; a retry gets what is left
  Lane* lane = nullptr;
  bool retried = false;
};

// Checks sent together in one call of the batch script; identical checks share one entry.
struct RedisStore::Batch {
  std::vector<detail::BatchEntry> entries;
  std::vector<std::vector<Call*>> calls;  // per entry, in issue order
  detail::BatchArgv argv;
  Lane* lane = nullptr;
  Micros deadline = 0;  // the earliest of the calls'
  bool retried = false;
};

// One connection and the checks waiting for its thread's next flush.
struct RedisStore::Lane {
  std::unique_ptr<redis::Connection> connection;
  std::size_t context = 0;  // the loop thread that drives the connection
  std::mutex mu;
  std::vector<Call*> queued;
  bool flush_posted = false;
  std::size_t in_flight = 0;  // script calls sent and not answered yet
};

RedisStoreOptions redis_store_options(const StoreOptions& options, const redis::Url& url) {
  RedisStoreOptions out;
  out.connection = detail::connection_options(options, url);
  out.connections = std::max(1, options.io_threads);
  out.loop = options.loop;
  out.max_batch = std::max<std::size_t>(1, options.max_batch);
  return out;
}

std::string RedisStore::script_sha1(std::string_view source) { return redis::detail::sha1_hex(source); }

RedisStore::RedisStore(RedisStoreOptions options) : options_(std::move(options)) {
  loop_ = options_.loop ? options_.loop : std::make_shared<core::EventLoop>(std::max(1, options_.connections));
  for (std::size_t i = 0; i < loop_->size(); ++i) {
    auto lane = std::make_unique<Lane>();
    lane->context = i;
    lane->connection = std::make_unique<redis::Connection>(*loop_, options_.connection, i);
    lanes_.push_back(std::move(lane));
  }
}

RedisStore::~RedisStore() {
  // Nothing new is sent; flushes already posted run out first, then closing the connections
  // fails whatever is pending, and what is still queued fails here.
  closing_.store(true);
  if (!loop_->on_loop_thread()) loop_->barrier();
  std::vector<Call*> left;
  for (auto& lane : lanes_) {
    lane->connection.reset();
    std::lock_guard lock(lane->mu);
    left.insert(left.end(), lane->queued.begin(), lane->queued.end());
    lane->queued.clear();
  }
  for (Call* call : left) {
    auto done = std::move(call->done);
    delete call;
    done(make_error(ErrorCode::unavailable, "redis store closed"));
  }
  lanes_.clear();
  loop_.reset();
}

void RedisStore::check(std::vector<CheckItem> items, std::optional<Micros> now, CheckCallback done) {
  if (detail::answered_locally(items, now, done)) return;
  auto* call = new Call{detail::ScriptCall(std::move(items), now), std::move(done), 0, nullptr, false};
  call->deadline = redis::steady_micros() + options_.connection.command_timeout;
  std::size_t index = loop_->current_index();
  if (index >= lanes_.size()) {
    index = lanes_.size() == 1 ? 0 : next_.fetch_add(1, std::memory_order_relaxed) % lanes_.size();
  }
  Lane& lane = *lanes_[index];
  call->lane = &lane;
  if (options_.max_batch <= 1) {
    started(lane);
    send(call, false);
    return;
  }
  bool post = false;
  {
    std::lock_guard lock(lane.mu);
    lane.queued.push_back(call);
    post = !std::exchange(lane.flush_posted, true);
  }
  if (post) loop_->post(lane.context, [this, &lane] { flush(lane); });
}

void RedisStore::flush(Lane& lane) {
  std::vector<Call*> calls;
  {
    std::lock_guard lock(lane.mu);
    lane.flush_posted = false;
    if (closing_.load(std::memory_order_relaxed)) return;
    // Enough in flight: what is queued goes with the next completion, in fewer, larger calls.
    if (lane.in_flight >= options_.max_in_flight) return;
    calls.swap(lane.queued);
  }
  // Runs of calls with the same `now` (the script takes one), at most max_batch each.
  for (std::size_t i = 0; i < calls.size();) {
    std::size_t j = i + 1;
    while (j < calls.size() && j - i < options_.max_batch && calls[j]->script.now() == calls[i]->script.now()) ++j;
    started(lane);
    if (j - i == 1) {
      send(calls[i], false);
    } else {
      auto* batch = new Batch;
      batch->lane = &lane;
      batch->deadline = calls[i]->deadline;
      for (std::size_t k = i; k < j; ++k) {
        const auto& items = calls[k]->script.items();
        // Identical to an earlier check of the batch (typically one client's key): one entry.
        std::size_t e = 0;
        while (e < batch->entries.size() && *batch->entries[e].items != items) ++e;
        if (e == batch->entries.size()) {
          batch->entries.push_back({&items, 0});
          batch->calls.emplace_back();
        }
        ++batch->entries[e].repeats;
        batch->calls[e].push_back(calls[k]);
        batch->deadline = std::min(batch->deadline, calls[k]->deadline);
      }
      batches_.fetch_add(1, std::memory_order_relaxed);
      batched_checks_.fetch_add(j - i, std::memory_order_relaxed);
      send_batch(batch, false);
    }
    i = j;
  }
}

void RedisStore::started(Lane& lane) {
  std::lock_guard lock(lane.mu);
  ++lane.in_flight;
}

void RedisStore::finished(Lane& lane) {
  bool post = false;
  {
    std::lock_guard lock(lane.mu);
    --lane.in_flight;
    post = !lane.queued.empty() && !closing_.load(std::memory_order_relaxed) &&
           !std::exchange(lane.flush_posted, true);
  }
  if (post) loop_->post(lane.context, [this, &lane] { flush(lane); });
}

void RedisStore::send(Call* call, bool retry) {
  // EVALSHA sha numkeys keys... args... (EVAL with the source when retrying after NOSCRIPT).
  auto argv = call->script.argv(retry);
  if (!argv) {
    auto done = std::move(call->done);
    Lane& lane = *call->lane;
    delete call;
    finished(lane);
    done(std::unexpected(argv.error()));
    return;
  }
  const Micros left = std::max<Micros>(1, call->deadline - redis::steady_micros());
  call->lane->connection->command(
      *argv, [this, call](Result<redis::Reply> reply) { on_reply(call, std::move(reply)); }, left);
}

void RedisStore::on_reply(Call* call, Result<redis::Reply> reply) {
  if (detail::is_noscript(reply) && !call->retried) {
    // The server lost its script cache (restart, failover, SCRIPT FLUSH): EVAL loads it.
    call->retried = true;
    noscript_reloads_.fetch_add(1, std::memory_order_relaxed);
    send(call, true);
    return;
  }
  auto done = std::move(call->done);
  const std::size_t n = call->script.items().size();
  Lane& lane = *call->lane;
  delete call;
  finished(lane);
  if (!reply) {
    done(std::unexpected(std::move(reply.error())));
    return;
  }
  done(detail::parse_outcome(*reply, n));
}

void RedisStore::send_batch(Batch* batch, bool retry) {
  const auto& now = batch->calls.front().front()->script.now();
  auto argv = batch->argv.build(batch->entries, now, retry);
  if (!argv) {
    on_batch_reply(batch, std::unexpected(argv.error()));
    return;
  }
  const Micros left = std::max<Micros>(1, batch->deadline - redis::steady_micros());
  batch->lane->connection->command(
      *argv, [this, batch](Result<redis::Reply> reply) { on_batch_reply(batch, std::move(reply)); }, left);
}

void RedisStore::on_batch_reply(Batch* batch, Result<redis::Reply> reply) {
  if (detail::is_noscript(reply) && !batch->retried) {
    batch->retried = true;
    noscript_reloads_.fetch_add(1, std::memory_order_relaxed);
    send_batch(batch, true);
    return;
  }
  std::vector<std::vector<Result<CheckOutcome>>> outcomes;
  if (reply) outcomes = detail::parse_batch(*reply, batch->entries);
  std::vector<std::vector<Call*>> calls = std::move(batch->calls);
  Lane& lane = *batch->lane;
  delete batch;
  finished(lane);
  for (std::size_t e = 0; e < calls.size(); ++e) {
    for (std::size_t r = 0; r < calls[e].size(); ++r) {
      auto done = std::move(calls[e][r]->done);
      delete calls[e][r];
      if (reply) {
        done(std::move(outcomes[e][r]));
      } else {
        done(std::unexpected(reply.error()));
      }
    }
  }
}

StoreHealth RedisStore::health() const {
  for (const auto& lane : lanes_) {
    const auto& c = *lane->connection;
    if (c.state() != redis::ConnectionState::connected || c.breaker_state() != redis::CircuitBreaker::State::closed) {
      return {false, c.status()};
    }
  }
  return {true, "ok"};
}

redis::Connection& RedisStore::connection(std::size_t index) { return *lanes_.at(index)->connection; }

RedisStore::Stats RedisStore::stats() const noexcept {
  return Stats{batches_.load(std::memory_order_relaxed), batched_checks_.load(std::memory_order_relaxed)};
}

}  // namespace ratekeeper::store
