#include "redis_store.hpp"

#include <algorithm>

namespace ratekeeper::store {
namespace {

// The connection settings (credentials, db, deadlines, reconnect backoff, breaker).
redis::ConnectionOptions connection_options(const StoreOptions& options, const redis::Url& url) {
  redis::ConnectionOptions c;
  if (!url.endpoints.empty()) c.endpoint = url.endpoints.front();
  c.credentials = url.credentials;
  c.db = url.db;
  c.connect_timeout = options.connect_timeout;
  c.command_timeout = options.command_timeout;
  c.reconnect_min = options.reconnect_min;
  c.reconnect_max = options.reconnect_max;
  c.breaker.failures = options.breaker_failures;
  c.breaker.open_for = options.breaker_open_for;
  c.clock = options.clock;
  return c;
}

RedisTopology topology(const StoreOptions& options, const redis::Url& url) {
  switch (url.scheme) {
    case redis::UrlScheme::cluster: {
      redis::ClusterOptions c;
      c.seeds = url.endpoints;
      c.node = connection_options(options, url);
      c.node.endpoint = {};  // each node's own, from the slot map
      return c;
    }
    case redis::UrlScheme::sentinel: {
      redis::SentinelOptions s;
      s.sentinels = url.endpoints;
      s.master_name = url.master;
      s.master = connection_options(options, url);
      s.master.endpoint = {};  // resolved through the sentinels
      s.sentinel = s.master;
      s.sentinel.credentials = {};
      s.sentinel.db = 0;
      return s;
    }
    case redis::UrlScheme::redis:
    case redis::UrlScheme::unix_socket:
      break;
  }
  return connection_options(options, url);
}

}  // namespace

RedisStoreOptions redis_store_options(const StoreOptions& options, const redis::Url& url) {
  RedisStoreOptions out;
  out.topology = topology(options, url);
  out.connections = std::max(1, options.io_threads);
  out.loop = options.loop;
  out.max_batch = std::max<std::size_t>(1, options.max_batch);
  out.health = ReplyHealthOptions{options.error_window};
  out.functions = options.redis_functions;
  out.reject_cross_slot = options.reject_cross_slot;
  out.clock = options.clock;
  return out;
}

}  // namespace ratekeeper::store
