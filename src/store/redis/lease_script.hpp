#pragma once
// The calls of lua/lease.lua (a lease's grant) and their replies; a lease's return is a call
// of the refund script (script_client.hpp: run_refund). Internal to the store layer.
// Stateless; thread-safe.

#include <cstdint>
#include <optional>

#include "redis/reply.hpp"
#include "ratekeeper/store/store.hpp"
#include "script_client.hpp"

namespace ratekeeper::store::detail {

// The lease script's reply {granted, the grant's decision (5 integers), at}. Errors:
// ErrorCode::reply for an error reply (auth for NOAUTH, WRONGPASS, NOPERM), protocol for any
// other shape, or a grant that is not in [0, want] or does not agree with its decision.
Result<LeaseGrant> parse_lease_grant(const redis::Reply& reply, std::int64_t want);

// A lease of min(want, available) units of item.key, at least item.cost, through `client` to
// `slot`; `now` explicit or the server's clock.
void run_lease_grant(const ScriptClient& client, std::uint16_t slot, const CheckItem& item, std::int64_t want,
                     std::optional<Micros> now, Micros deadline, LeaseCallback done);

// Gives back `units` of a grant decided at `at` with `reset_after`: the refund script, at
// the server's clock.
void run_lease_return(const ScriptClient& client, std::uint16_t slot, const CheckItem& item, std::int64_t units,
                      Micros at, Micros reset_after, Micros deadline, LeaseReturnCallback done);

}  // namespace ratekeeper::store::detail
