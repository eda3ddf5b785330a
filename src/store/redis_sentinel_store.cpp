#include "ratekeeper/store/redis_sentinel_store.hpp"

#include "ratekeeper/algorithms/step.hpp"
#include "ratekeeper/redis/circuit_breaker.hpp"
#include "ratekeeper/redis/url.hpp"
#include "script_call.hpp"

namespace ratekeeper::store {

RedisSentinelStoreOptions redis_sentinel_store_options(const StoreOptions& options, const redis::Url& url) {
  RedisSentinelStoreOptions out;
  auto& s = out.sentinel;
  s.sentinels = url.endpoints;
  s.master_name = url.master;
  s.master = detail::connection_options(options, url);
  s.master.endpoint = {};  // resolved through the sentinels
  s.sentinel = s.master;
  s.sentinel.credentials = {};
  s.sentinel.db = 0;
  s.io_threads = std::max(1, options.io_threads);
  return out;
}

RedisSentinelStore::RedisSentinelStore(RedisSentinelStoreOptions options)
    : options_(std::move(options)), sentinel_(std::make_unique<redis::Sentinel>(options_.sentinel)) {}

RedisSentinelStore::~RedisSentinelStore() = default;

void RedisSentinelStore::check(std::vector<CheckItem> items, std::optional<Micros> now, CheckCallback done) {
  if (detail::answered_locally(items, now, done)) return;
  const Micros deadline = redis::steady_micros() + options_.sentinel.master.command_timeout;
  auto call = std::make_shared<detail::ScriptCall>(std::move(items), now);
  detail::run_script(
      std::move(call), deadline,
      [this](std::span<const std::string_view> argv, Micros timeout, redis::ReplyCallback cb) {
        sentinel_->command(argv, std::move(cb), timeout);
      },
      std::move(done), &noscript_reloads_);
}

StoreHealth RedisSentinelStore::health() const {
  auto status = sentinel_->status();
  return {status == "ok", std::move(status)};
}

}  // namespace ratekeeper::store
