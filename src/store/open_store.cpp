#include "ratekeeper/store/open_store.hpp"

#include <fmt/format.h>

#include "ratekeeper/redis/url.hpp"
#include "ratekeeper/store/memory_store.hpp"
#include "ratekeeper/store/redis_cluster_store.hpp"
#include "ratekeeper/store/redis_sentinel_store.hpp"
#include "ratekeeper/store/redis_store.hpp"

namespace ratekeeper::store {
namespace {

Result<std::unique_ptr<Store>> open_redis(const StoreOptions& options, const redis::Url& url) {
  if (options.command_timeout <= 0 || options.connect_timeout <= 0) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("store url '{}': connect and command timeouts must be > 0", options.url));
  }
  return std::make_unique<RedisStore>(redis_store_options(options, url));
}

Result<void> check_timeouts(const StoreOptions& options) {
  if (options.command_timeout <= 0 || options.connect_timeout <= 0) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("store url '{}': connect and command timeouts must be > 0", options.url));
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<Store>> open_store(const StoreOptions& options) {
  const std::string_view url = options.url;
  if (url == "memory://" || url == "memory:") {
    MemoryStoreOptions m;
    m.max_keys = options.max_keys;
    if (options.clock != nullptr) m.clock = options.clock;
    return std::make_unique<MemoryStore>(m);
  }
  if (url.starts_with("redis://") || url.starts_with("unix://") || url.starts_with("redis-cluster://") ||
      url.starts_with("redis-sentinel://")) {
    auto parsed = redis::parse_url(url);
    if (!parsed) return std::unexpected(parsed.error());
    switch (parsed->scheme) {
      case redis::UrlScheme::redis:
      case redis::UrlScheme::unix_socket: return open_redis(options, *parsed);
      case redis::UrlScheme::cluster:
        if (auto ok = check_timeouts(options); !ok) return std::unexpected(ok.error());
        return std::make_unique<RedisClusterStore>(redis_cluster_store_options(options, *parsed));
      case redis::UrlScheme::sentinel:
        if (auto ok = check_timeouts(options); !ok) return std::unexpected(ok.error());
        return std::make_unique<RedisSentinelStore>(redis_sentinel_store_options(options, *parsed));
    }
  }
  return make_error(ErrorCode::invalid_argument,
                    fmt::format("store url '{}': unsupported scheme (memory://, redis://, unix://, "
                                "redis-cluster://, redis-sentinel://)",
                                url));
}

}  // namespace ratekeeper::store
