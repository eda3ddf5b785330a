#pragma once
// TLS to Redis: what a store's URL (rediss://, rediss-cluster://, rediss-sentinel://) and its
// options say about certificates, and the client context every connection of one store shares.
// The options and the context are the core's (core/tls.hpp): the same as an https upstream's.

#include "ratekeeper/core/tls.hpp"

namespace ratekeeper::redis {

using ratekeeper::make_tls_context;
using ratekeeper::TlsContext;
using ratekeeper::TlsOptions;

}  // namespace ratekeeper::redis
