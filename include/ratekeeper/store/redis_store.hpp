#pragma once
// The distributed store: the Lua scripts of lua/*.lua run by EVALSHA on one Redis server
// (TCP or unix socket) over auto-pipelined connections (one per I/O thread). On NOSCRIPT
// (restart, failover, SCRIPT FLUSH) the script is loaded and the call retried once.
// Decisions are identical to MemoryStore's for the same explicit `now`. Thread-safe.

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "ratekeeper/redis/connection.hpp"
#include "ratekeeper/store/open_store.hpp"
#include "ratekeeper/store/store.hpp"

namespace ratekeeper::redis {
class EventLoop;
}

namespace ratekeeper::store {

struct RedisStoreOptions {
  redis::ConnectionOptions connection;  // endpoint, credentials, db, deadlines, breaker
  int connections = 1;                  // connections, each on its own I/O thread
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
  // Ready iff every connection is connected and its breaker closed.
  StoreHealth health() const override;

  // SHA1 of a script's source as Redis computes it (lowercase hex), for EVALSHA.
  static std::string script_sha1(std::string_view source);

  std::uint64_t noscript_reloads() const noexcept { return noscript_reloads_.load(std::memory_order_relaxed); }
  redis::Connection& connection(std::size_t index = 0) { return *connections_.at(index); }

 private:
  struct Call;
  void send(Call* call, bool retry);
  void on_reply(Call* call, Result<redis::Reply> reply);

  RedisStoreOptions options_;
  std::unique_ptr<redis::EventLoop> loop_;
  std::vector<std::unique_ptr<redis::Connection>> connections_;
  std::atomic<std::size_t> next_{0};
  std::atomic<std::uint64_t> noscript_reloads_{0};
};

}  // namespace ratekeeper::store
