#include "ratekeeper/store/redis_store.hpp"

#include <algorithm>
#include <utility>

#include "ratekeeper/core/event_loop.hpp"
#include "check_validation.hpp"
#include "coalescer.hpp"
#include "lease_script.hpp"
#include "redis_options.hpp"
#include "script_client.hpp"
#include "script_health.hpp"

namespace ratekeeper::store {

// One connection, driven by one loop thread, and the coalescing of the checks sent on it.
struct RedisStore::Lane {
  std::unique_ptr<redis::Connection> connection;
  std::unique_ptr<detail::ScriptClient> client;
  std::unique_ptr<detail::Coalescer> coalescer;
  std::size_t context = 0;  // the loop thread that drives the connection
};

RedisStoreOptions redis_store_options(const StoreOptions& options, const redis::Url& url) {
  RedisStoreOptions out;
  out.connection = detail::connection_options(options, url);
  out.connections = std::max(1, options.io_threads);
  out.loop = options.loop;
  out.max_batch = std::max<std::size_t>(1, options.max_batch);
  out.health = detail::reply_health_options(options);
  out.functions = options.redis_functions;
  out.clock = options.clock;
  return out;
}

RedisStore::RedisStore(RedisStoreOptions options)
    : options_(std::move(options)),
      clock_(&clock_or_system(options_.clock)),
      health_(std::make_unique<detail::ScriptHealth>(options_.health, clock_)) {
  loop_ = options_.loop ? options_.loop : std::make_shared<EventLoop>(std::max(1, options_.connections));
  for (std::size_t i = 0; i < loop_->size(); ++i) {
    auto lane = std::make_unique<Lane>();
    lane->context = i;
    lane->connection = std::make_unique<redis::Connection>(*loop_, options_.connection, i);
    auto* connection = lane->connection.get();
    lane->client = std::make_unique<detail::ScriptClient>(
        [connection](std::uint16_t, std::span<const std::string_view> argv, Micros timeout, redis::ReplyCallback cb) {
          connection->command(argv, std::move(cb), timeout);
        },
        health_.get(), clock_, options_.functions);
    lane->coalescer = std::make_unique<detail::Coalescer>(
        *lane->client, [loop = loop_.get(), i](std::function<void()> fn) { loop->post(i, std::move(fn)); },
        detail::Coalescer::Options{options_.max_batch, options_.max_in_flight});
    lanes_.push_back(std::move(lane));
  }
}

RedisStore::~RedisStore() {
  // Nothing new is sent; flushes already posted run out (and find the coalescers closed),
  // then closing the connections fails whatever is pending, on the loop threads.
  for (auto& lane : lanes_) lane->coalescer->close();
  if (!loop_->on_loop_thread()) loop_->barrier();
  for (auto& lane : lanes_) lane->connection.reset();
  lanes_.clear();
  loop_.reset();
}

RedisStore::Lane& RedisStore::lane() {
  std::size_t index = loop_->current_index();
  if (index >= lanes_.size()) {
    index = lanes_.size() == 1 ? 0 : next_.fetch_add(1, std::memory_order_relaxed) % lanes_.size();
  }
  return *lanes_[index];
}

void RedisStore::check(std::vector<CheckItem> items, std::optional<Micros> now, CheckCallback done) {
  if (detail::answered_locally(items, now, done)) return;
  const Micros deadline = clock_->steady() + options_.connection.command_timeout;
  lane().coalescer->check(std::move(items), now, deadline, std::move(done));
}

void RedisStore::lease_grant(const CheckItem& item, std::int64_t want, LeaseCallback done) {
  const Micros deadline = clock_->steady() + options_.connection.command_timeout;
  detail::run_lease_grant(*lane().client, 0, item, want, std::nullopt, deadline, std::move(done));
}

void RedisStore::lease_return(const CheckItem& item, std::int64_t units, Micros at, Micros reset_after,
                              LeaseReturnCallback done) {
  const Micros deadline = clock_->steady() + options_.connection.command_timeout;
  detail::run_lease_return(*lane().client, 0, item, units, at, reset_after, deadline, std::move(done));
}

StoreHealth RedisStore::health() const {
  for (const auto& lane : lanes_) {
    const auto& c = *lane->connection;
    if (c.state() != redis::ConnectionState::connected || c.breaker_state() != redis::CircuitBreaker::State::closed) {
      return {false, c.status()};
    }
  }
  if (auto why = health_->failing()) return {false, std::move(*why)};
  return {true, "ok"};
}

std::uint64_t RedisStore::noscript_reloads() const noexcept { return health_->noscript_reloads(); }
std::uint64_t RedisStore::library_loads() const noexcept { return health_->library_loads(); }
bool RedisStore::using_functions() const noexcept {
  for (const auto& lane : lanes_) {
    if (!lane->client->functions()) return false;
  }
  return true;
}

redis::Connection& RedisStore::connection(std::size_t index) { return *lanes_.at(index)->connection; }

RedisStore::Stats RedisStore::stats() const noexcept {
  Stats s;
  for (const auto& lane : lanes_) {
    s.batches += lane->coalescer->batches();
    s.batched_checks += lane->coalescer->batched_checks();
  }
  return s;
}

}  // namespace ratekeeper::store
