#include "ratekeeper/store/open_store.hpp"

#include <fmt/format.h>

#include "ratekeeper/redis/url.hpp"
#include "ratekeeper/store/denial_cache.hpp"
#include "ratekeeper/store/leasing_store.hpp"
#include "ratekeeper/store/memory_store.hpp"
#include "core/overloaded.hpp"
#include "redis/redis_store.hpp"

namespace ratekeeper::store {
namespace {

Result<void> check_timeouts(const StoreOptions& options) {
  if (options.command_timeout <= 0 || options.connect_timeout <= 0) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("store url '{}': connect and command timeouts must be > 0",
                                  redis::redact_url(options.url)));
  }
  return {};
}

// The store's TLS context: StoreOptions::tls under the URL's own options; nullptr without TLS.
Result<std::shared_ptr<redis::TlsContext>> tls_context(const StoreOptions& options, const redis::Url& url) {
  const redis::TlsOptions& base = options.tls;
  if (!url.tls.enabled) {
    if (base != redis::TlsOptions{}) {
      return make_error(ErrorCode::invalid_argument,
                        fmt::format("store url '{}': TLS options are set but the scheme is not one of "
                                    "rediss, rediss-cluster, rediss-sentinel",
                                    redis::redact_url(options.url)));
    }
    return nullptr;
  }
  redis::TlsOptions merged = url.tls;
  const auto pick = [](std::string& field, const std::string& fallback) {
    if (field.empty()) field = fallback;
  };
  pick(merged.ca_file, base.ca_file);
  pick(merged.ca_dir, base.ca_dir);
  pick(merged.cert_file, base.cert_file);
  pick(merged.key_file, base.key_file);
  pick(merged.server_name, base.server_name);
  merged.verify = url.tls.verify && base.verify;
  auto context = redis::make_tls_context(merged);
  if (!context) {
    return make_error(ErrorCode::invalid_argument, fmt::format("store url '{}': {}", redis::redact_url(options.url), context.error().message));
  }
  return std::move(*context);
}

bool is_memory_url(std::string_view url) { return url == "memory://" || url == "memory:"; }

bool is_redis_url(std::string_view url) {
  return url.starts_with("redis://") || url.starts_with("rediss://") || url.starts_with("unix://") ||
         url.starts_with("redis-cluster://") || url.starts_with("rediss-cluster://") ||
         url.starts_with("redis-sentinel://") || url.starts_with("rediss-sentinel://");
}

Error unsupported_scheme(std::string_view url) {
  return Error{ErrorCode::invalid_argument,
               fmt::format("store url '{}': unsupported scheme (memory://, redis://, rediss://, unix://, "
                           "redis-cluster://, rediss-cluster://, redis-sentinel://, rediss-sentinel://)",
                           redis::redact_url(url))};
}

// A Redis store's URL and TLS context, checked as one: what open_store opens and what
// check_store_options refuses.
struct RedisTarget {
  redis::Url url;
  std::shared_ptr<redis::TlsContext> tls;
};

Result<RedisTarget> redis_target(const StoreOptions& options) {
  auto parsed = redis::parse_url(options.url);
  if (!parsed) return std::unexpected(parsed.error());
  if (auto ok = check_timeouts(options); !ok) return std::unexpected(ok.error());
  auto tls = tls_context(options, *parsed);
  if (!tls) return std::unexpected(tls.error());
  return RedisTarget{std::move(*parsed), std::move(*tls)};
}

}  // namespace

Result<void> check_store_options(const StoreOptions& options) {
  if (is_memory_url(options.url)) return {};
  if (!is_redis_url(options.url)) return std::unexpected(unsupported_scheme(options.url));
  auto target = redis_target(options);
  if (!target) return std::unexpected(target.error());
  return {};
}

Result<std::unique_ptr<Store>> open_store(const StoreOptions& options) {
  const std::string_view url = options.url;
  if (is_memory_url(url)) {
    MemoryStoreOptions m;
    m.max_keys = options.max_keys;
    if (options.clock != nullptr) m.clock = options.clock;
    return std::make_unique<MemoryStore>(m);
  }
  if (!is_redis_url(url)) return std::unexpected(unsupported_scheme(url));
  auto target = redis_target(options);
  if (!target) return std::unexpected(target.error());
  auto& [parsed, tls] = *target;
  auto o = redis_store_options(options, parsed);
  std::visit(Overloaded{[&](redis::ConnectionOptions& c) { c.tls = tls; },
                        [&](redis::SentinelOptions& s) { s.master.tls = s.sentinel.tls = tls; },
                        [&](redis::ClusterOptions& c) { c.node.tls = tls; }},
             o.topology);
  return std::make_unique<RedisStore>(std::move(o));
}

Result<StoreStack> open_store_stack(const StoreOptions& options, const StackOptions& stack) {
  auto opened = open_store(options);
  if (!opened) return std::unexpected(opened.error());
  StoreStack out{std::move(*opened)};
  if (out.store->kind() == "memory") return out;
  if (stack.denied_cache_keys > 0) {
    auto cache = std::make_unique<DenialCache>(
        std::move(out.store), DenialCacheOptions{.max_keys = stack.denied_cache_keys, .clock = options.clock});
    out.denial_cache = cache.get();
    out.store = std::move(cache);
  }
  if (stack.leases) {
    auto leased = std::make_unique<LeasingStore>(std::move(out.store),
                                                 LeasingStoreOptions{.clock = options.clock, .reaper_thread = true});
    out.leasing = leased.get();
    out.store = std::move(leased);
  }
  return out;
}

}  // namespace ratekeeper::store
