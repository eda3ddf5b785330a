#include "ratekeeper/store/redis_store.hpp"

#include <algorithm>

#include "../redis/sha1.hpp"
#include "ratekeeper/algorithms/step.hpp"
#include "ratekeeper/redis/event_loop.hpp"
#include "script_call.hpp"

namespace ratekeeper::store {

// One check in flight: owned by exactly one pending command at a time.
struct RedisStore::Call {
  detail::ScriptCall script;  // the items, `now`, and the argument vector
  CheckCallback done;
  Micros deadline = 0;  // steady clock; a retry gets what is left
  std::size_t connection = 0;
  bool retried = false;
};

RedisStoreOptions redis_store_options(const StoreOptions& options, const redis::Url& url) {
  RedisStoreOptions out;
  out.connection = detail::connection_options(options, url);
  out.connections = std::max(1, options.io_threads);
  return out;
}

std::string RedisStore::script_sha1(std::string_view source) { return redis::detail::sha1_hex(source); }

RedisStore::RedisStore(RedisStoreOptions options) : options_(std::move(options)) {
  const int n = std::max(1, options_.connections);
  loop_ = std::make_unique<redis::EventLoop>(n);
  for (int i = 0; i < n; ++i) connections_.push_back(std::make_unique<redis::Connection>(*loop_, options_.connection));
}

RedisStore::~RedisStore() {
  connections_.clear();  // fails whatever is still pending, on the loop threads
  loop_.reset();
}

void RedisStore::check(std::vector<CheckItem> items, std::optional<Micros> now, CheckCallback done) {
  if (detail::answered_locally(items, now, done)) return;
  auto* call = new Call{detail::ScriptCall(std::move(items), now), std::move(done), 0, 0, false};
  call->deadline = redis::steady_micros() + options_.connection.command_timeout;
  call->connection = connections_.size() == 1 ? 0 : next_.fetch_add(1, std::memory_order_relaxed) % connections_.size();
  send(call, false);
}

void RedisStore::send(Call* call, bool retry) {
  // EVALSHA sha numkeys keys... args... (EVAL with the source when retrying after NOSCRIPT).
  auto argv = call->script.argv(retry);
  if (!argv) {
    auto done = std::move(call->done);
    delete call;
    done(std::unexpected(argv.error()));
    return;
  }
  const Micros left = std::max<Micros>(1, call->deadline - redis::steady_micros());
  connections_[call->connection]->command(*argv,
                                          [this, call](Result<redis::Reply> reply) { on_reply(call, std::move(reply)); },
                                          left);
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
  delete call;
  if (!reply) {
    done(std::unexpected(std::move(reply.error())));
    return;
  }
  done(detail::parse_outcome(*reply, n));
}

StoreHealth RedisStore::health() const {
  for (const auto& c : connections_) {
    if (c->state() != redis::ConnectionState::connected || c->breaker_state() != redis::CircuitBreaker::State::closed) {
      return {false, c->status()};
    }
  }
  return {true, "ok"};
}

}  // namespace ratekeeper::store
