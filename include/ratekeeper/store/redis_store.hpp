#pragma once
// The distributed store: the Lua scripts of lua/*.lua run by EVALSHA on one Redis server
// (TCP or unix socket) over auto-pipelined connections (one per I/O thread). On NOSCRIPT
// (restart, failover, SCRIPT FLUSH) the script is loaded and the call retried once.
// Decisions are identical to MemoryStore's for the same explicit `now`. Thread-safe.
//
// Coalescing: checks issued to one connection while its thread is busy (e.g. every request
// an HTTP server read in one turn of its event loop) are sent as one call of the batch script
// (lua/batch.lua), which runs them one after the other at one instant, each all-or-nothing:
// the same decisions as separate calls issued back to back, for one script call's overhead on
// the Redis server. A check waits for the rest of its thread's current turn, and while
// max_in_flight script calls are pending on its connection, for one of them to complete:
// under load, the checks that arrive during one round trip go out as the next call. One
// check alone goes out as its own script. An error reply to a batch (e.g. Redis out of
// memory) answers every check of the batch with that error, and makes the store not ready
// for a while (see health()).

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "ratekeeper/redis/connection.hpp"
#include "ratekeeper/store/open_store.hpp"
#include "ratekeeper/store/store.hpp"

namespace ratekeeper {
class EventLoop;
}

namespace ratekeeper::store::detail {
class ScriptHealth;
}

namespace ratekeeper::store {

struct RedisStoreOptions {
  redis::ConnectionOptions connection;  // endpoint, credentials, db, deadlines, breaker
  int connections = 1;                  // connections, each on its own I/O thread
  // Run on this loop instead of starting threads: one connection per loop thread, and a
  // check issued on a loop thread uses that thread's connection (no hand-off between
  // threads; see core/event_loop.hpp). `connections` is then ignored.
  std::shared_ptr<EventLoop> loop;
  std::size_t max_batch = 64;  // checks coalesced into one script call at most; 1: never
  // Script calls in flight per connection before new checks wait for one to complete (and
  // then go out together). Bounds nothing else: each check keeps its own deadline.
  std::size_t max_in_flight = 4;
  ReplyHealthOptions health;
  // Call the scripts as Redis Functions (FCALL; the library loaded on first use), falling
  // back to EVALSHA where the server refuses them; false: EVALSHA only.
  bool functions = true;
  // Deadlines and health are measured on its steady reading (nullptr: the system clock).
  const Clock* clock = nullptr;
};

// StoreOptions + a parsed redis:// or unix:// URL → RedisStoreOptions.
RedisStoreOptions redis_store_options(const StoreOptions& options, const redis::Url& url);

class RedisStore final : public Store {
 public:
  explicit RedisStore(RedisStoreOptions options);
  ~RedisStore() override;

  // Store interface. Invalid arguments (cost above capacity, a key twice, now < 0) are
  // answered on the caller's stack, exactly as MemoryStore answers them.
  void check(std::vector<CheckItem> items, std::optional<Micros> now, CheckCallback done) override;
  std::string_view kind() const noexcept override { return "redis"; }
  // Ready iff every connection is connected and its breaker closed, and no script call got
  // an error reply within the last health.error_window (e.g. OOM under maxmemory with
  // noeviction: see ReplyHealthOptions).
  StoreHealth health() const override;
  // Leases: lua/lease.lua grants, lua/refund.lua takes unused units back; one script call
  // each on the caller's loop thread's connection (or the next one), not coalesced.
  bool supports_leases() const noexcept override { return true; }
  void lease_grant(const CheckItem& item, std::int64_t want, LeaseCallback done) override;
  void lease_return(const CheckItem& item, std::int64_t units, Micros at, Micros reset_after,
                    LeaseReturnCallback done) override;

  std::uint64_t noscript_reloads() const noexcept;
  // FUNCTION LOADs of the library, and whether calls go out as FCALL now (false: functions
  // are off, or the server refused them).
  std::uint64_t library_loads() const noexcept;
  bool using_functions() const noexcept;
  redis::Connection& connection(std::size_t index = 0);

  struct Stats {
    std::uint64_t batches = 0;         // batch script calls sent
    std::uint64_t batched_checks = 0;  // checks answered through them
  };
  Stats stats() const noexcept;

 private:
  struct Lane;
  Lane& lane();

  RedisStoreOptions options_;
  const Clock* clock_;
  std::unique_ptr<detail::ScriptHealth> health_;  // outlives the lanes
  std::shared_ptr<EventLoop> loop_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::atomic<std::size_t> next_{0};
};

}  // namespace ratekeeper::store
