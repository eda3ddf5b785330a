#pragma once
// Opens a store from its URL: memory://, redis://[user:pass@]host:port[/db],
// unix:///path/redis.sock[?db=N], redis-cluster://h:p[,h:p...], redis-sentinel://h:p[,h:p...]/master,
// and over TLS rediss://, rediss-cluster://, rediss-sentinel:// (redis/url.hpp, redis/tls.hpp).

#include <memory>
#include <string>

#include "ratekeeper/core/clock.hpp"
#include "ratekeeper/redis/tls.hpp"
#include "ratekeeper/store/store.hpp"

namespace ratekeeper {
class EventLoop;
}

namespace ratekeeper::store {

class DenialCache;
class LeasingStore;

// How a Redis store's health() judges whether its script calls currently succeed: not ready
// while a script call got an error reply (OOM under maxmemory with noeviction, a command an
// ACL refuses, ...) within the last error_window, ready again once it has passed without one.
struct ReplyHealthOptions {
  Micros error_window = 10 * kMicrosPerSecond;  // measured on the store's steady clock
};

struct StoreOptions {
  std::string url = "memory://";
  // TLS files and checks for the rediss* schemes (`enabled` is the scheme's); the URL's query
  // parameters override them one by one, and verify=false in either turns verification off.
  // Set with a scheme without TLS: invalid_argument.
  redis::TlsOptions tls;
  Micros connect_timeout = 1 * kMicrosPerSecond;  // per connection attempt
  Micros command_timeout = 100 * kMicrosPerMilli; // deadline of every check, queueing included
  // Circuit breaker: open after this many consecutive failures, for this long, then probe.
  int breaker_failures = 3;
  Micros breaker_open_for = 1 * kMicrosPerSecond;
  // Reconnect backoff: doubles from min to max.
  Micros reconnect_min = 50 * kMicrosPerMilli;
  Micros reconnect_max = 2 * kMicrosPerSecond;
  int io_threads = 1;  // threads running the Redis client's event loop
  // Redis stores: run on this loop (shared with e.g. the HTTP server) instead of starting
  // io_threads threads: a check issued on a loop thread is sent from that thread.
  std::shared_ptr<EventLoop> loop;
  // Redis stores: checks coalesced into one script call at most (1: one script call per
  // check; docs/design/architecture.md, "Coalescing").
  std::size_t max_batch = 64;
  // Redis stores: health() reports not ready while a script call got an error reply within
  // this long (see ReplyHealthOptions).
  Micros error_window = 10 * kMicrosPerSecond;
  // Redis stores: call the scripts as Redis Functions (FCALL), falling back to EVALSHA where
  // the server refuses them; false: EVALSHA only.
  bool redis_functions = true;
  // Redis Cluster: a check whose keys span slots is invalid_argument instead of split per slot
  // and refunded where another slot denies (docs/configuration.md, "Redis Cluster").
  bool reject_cross_slot = false;
  // memory:// only.
  std::size_t max_keys = 1'000'000;
  // The store's one clock (nullptr: the system clock). memory://: its wall reading is the
  // time of checks without an explicit `now`. Redis stores: its steady reading measures
  // every deadline and error_window.
  const Clock* clock = nullptr;
};

// Errors: invalid_argument naming the URL part that is wrong; unsupported schemes.
// A Redis store is returned even when Redis is down (it connects in the background);
// its health() says whether it can answer.
Result<std::unique_ptr<Store>> open_store(const StoreOptions& options);

// The layers in front of a Redis store (memory:// gets none: it answers locally already).
struct StackOptions {
  // A DenialCache holding this many keys' denials in front of the store; 0: none.
  std::size_t denied_cache_keys = 0;
  // A LeasingStore in front of everything (some rule is leased): a leased key's checks never
  // reach the store but for its grants and returns. Its reaper runs on a thread of its own.
  bool leases = false;
};

// The store a limiter uses, outermost layer first, and its layers for whoever drives them
// (a reload clears the denial cache; a shutdown returns the leases).
struct StoreStack {
  std::unique_ptr<Store> store;
  DenialCache* denial_cache = nullptr;  // in the stack, or nullptr
  LeasingStore* leasing = nullptr;      // in the stack, or nullptr
};

// open_store, then the layers `stack` asks for, each on the store's clock.
Result<StoreStack> open_store_stack(const StoreOptions& options, const StackOptions& stack);

// What open_store would refuse (the URL, the timeouts, the TLS files), checked without opening
// anything: the configuration loader refuses exactly what `serve` would.
Result<void> check_store_options(const StoreOptions& options);

}  // namespace ratekeeper::store
