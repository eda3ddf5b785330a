#pragma once
// What every Redis store derives from StoreOptions and its parsed URL. Internal to the store
// layer. Stateless; thread-safe.

#include "ratekeeper/redis/connection.hpp"
#include "ratekeeper/redis/url.hpp"
#include "ratekeeper/store/open_store.hpp"

namespace ratekeeper::store::detail {

// The connection settings (credentials, db, deadlines, reconnect backoff, breaker).
redis::ConnectionOptions connection_options(const StoreOptions& options, const redis::Url& url);

// The health settings of the store's script replies.
ReplyHealthOptions reply_health_options(const StoreOptions& options);

}  // namespace ratekeeper::store::detail
