#pragma once
// The distributed store on a Sentinel-managed master: the Lua scripts of lua/*.lua by EVALSHA
// on the master that redis::Sentinel resolves and follows across failovers (periodic and
// on-error re-resolution). Scripts are loaded on NOSCRIPT (EVAL once), e.g. on the promoted
// replica. Every check is all-or-nothing on one server, as RedisStore, and checks issued while
// a script call is pending go out together in one call of the batch script (coalescing as in
// RedisStore: store/coalescer.hpp). Thread-safe.

#include <atomic>
#include <memory>
#include <string_view>

#include "ratekeeper/redis/sentinel.hpp"
#include "ratekeeper/store/open_store.hpp"
#include "ratekeeper/store/store.hpp"

namespace ratekeeper::store {

namespace detail {
class Coalescer;
class ScriptClient;
class ScriptHealth;
}

struct RedisSentinelStoreOptions {
  redis::SentinelOptions sentinel;
  std::size_t max_batch = 64;  // checks coalesced into one script call at most; 1: never
  ReplyHealthOptions health;
  // Call the scripts as Redis Functions (FCALL; the library loaded on first use), falling
  // back to EVALSHA where the server refuses them; false: EVALSHA only.
  bool functions = true;
  // Deadlines and health are measured on its steady reading (nullptr: the system clock).
  const Clock* clock = nullptr;
};

// StoreOptions + a parsed redis-sentinel:// URL → options. The URL's credentials and db
// apply to the master, not to the sentinels.
RedisSentinelStoreOptions redis_sentinel_store_options(const StoreOptions& options, const redis::Url& url);

class RedisSentinelStore final : public Store {
 public:
  explicit RedisSentinelStore(RedisSentinelStoreOptions options);
  ~RedisSentinelStore() override;

  // Store interface. Invalid arguments are answered on the caller's stack, as MemoryStore.
  void check(std::vector<CheckItem> items, std::optional<Micros> now, CheckCallback done) override;
  std::string_view kind() const noexcept override { return "redis-sentinel"; }
  // Ready iff the master is resolved and its connection is up, and no script call got an
  // error reply within the last health.error_window (see ReplyHealthOptions).
  StoreHealth health() const override;
  // Leases (lua/lease.lua; the return through lua/refund.lua), one script call each.
  bool supports_leases() const noexcept override { return true; }
  void lease_grant(const CheckItem& item, std::int64_t want, LeaseCallback done) override;
  void lease_return(const CheckItem& item, std::int64_t units, Micros at, Micros reset_after,
                    LeaseReturnCallback done) override;

  std::uint64_t noscript_reloads() const noexcept;
  redis::Sentinel& sentinel() noexcept { return *sentinel_; }

 private:
  RedisSentinelStoreOptions options_;
  const Clock* clock_;
  std::unique_ptr<detail::ScriptHealth> health_;  // outlives the client
  std::unique_ptr<detail::ScriptClient> client_;  // outlives the coalescer
  std::unique_ptr<detail::Coalescer> coalescer_;  // destroyed after the sentinel's callbacks ran
  std::unique_ptr<redis::Sentinel> sentinel_;
};

}  // namespace ratekeeper::store
