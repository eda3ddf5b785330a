#include "ratekeeper/store/redis_sentinel_store.hpp"

#include "ratekeeper/redis/url.hpp"
#include "check_validation.hpp"
#include "coalescer.hpp"
#include "redis_options.hpp"
#include "lease_script.hpp"
#include "script_client.hpp"
#include "script_health.hpp"

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
  s.loop = options.loop;
  out.max_batch = std::max<std::size_t>(1, options.max_batch);
  out.health = detail::reply_health_options(options);
  out.functions = options.redis_functions;
  out.clock = options.clock;
  return out;
}

RedisSentinelStore::RedisSentinelStore(RedisSentinelStoreOptions options)
    : options_(std::move(options)),
      clock_(&clock_or_system(options_.clock)),
      health_(std::make_unique<detail::ScriptHealth>(options_.health, clock_)),
      client_(std::make_unique<detail::ScriptClient>(
          [this](std::uint16_t, std::span<const std::string_view> argv, Micros timeout, redis::ReplyCallback cb) {
            sentinel_->command(argv, std::move(cb), timeout);
          },
          health_.get(), clock_, options_.functions)),
      // No event loop of its own to post to: checks that waited go out when a call completes.
      coalescer_(std::make_unique<detail::Coalescer>(*client_, detail::Coalescer::Post{},
                                                     detail::Coalescer::Options{options_.max_batch, 1})),
      sentinel_(std::make_unique<redis::Sentinel>(options_.sentinel)) {}

RedisSentinelStore::~RedisSentinelStore() {
  coalescer_->close();  // the checks still waiting fail
  sentinel_.reset();    // fails what is pending; its callbacks still reach the coalescer
}

void RedisSentinelStore::check(std::vector<CheckItem> items, std::optional<Micros> now, CheckCallback done) {
  if (detail::answered_locally(items, now, done)) return;
  const Micros deadline = clock_->steady() + options_.sentinel.master.command_timeout;
  coalescer_->check(std::move(items), now, deadline, std::move(done));
}

StoreHealth RedisSentinelStore::health() const {
  auto status = sentinel_->status();
  if (status != "ok") return {false, std::move(status)};
  if (auto why = health_->failing()) return {false, std::move(*why)};
  return {true, "ok"};
}

std::uint64_t RedisSentinelStore::noscript_reloads() const noexcept { return health_->noscript_reloads(); }

void RedisSentinelStore::lease_grant(const CheckItem& item, std::int64_t want, LeaseCallback done) {
  const Micros deadline = clock_->steady() + options_.sentinel.master.command_timeout;
  detail::run_lease_grant(*client_, 0, item, want, std::nullopt, deadline, std::move(done));
}

void RedisSentinelStore::lease_return(const CheckItem& item, std::int64_t units, Micros at, Micros reset_after,
                              LeaseReturnCallback done) {
  const Micros deadline = clock_->steady() + options_.sentinel.master.command_timeout;
  detail::run_lease_return(*client_, 0, item, units, at, reset_after, deadline, std::move(done));
}

}  // namespace ratekeeper::store
