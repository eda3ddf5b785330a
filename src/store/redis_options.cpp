#include "redis_options.hpp"

namespace ratekeeper::store::detail {

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

ReplyHealthOptions reply_health_options(const StoreOptions& options) { return {options.error_window}; }

}  // namespace ratekeeper::store::detail
