#pragma once
// Concurrency slots: the requests in flight of one key. State::log holds when each held slot
// expires (µs, ascending); a slot is taken by a step of cost 1, given back by release() when
// its request ends, moved on by renew() while it lasts (heartbeats of long streams), and
// reclaimed by any call once it has expired, so a holder that crashed leaks its slot for at
// most the limit's period (slot_ttl). lua/concurrency.lua mirrors it, with each slot a member
// of a sorted set scored by its expiry.

#include <optional>

#include "ratekeeper/algorithms/limit.hpp"
#include "ratekeeper/algorithms/state.hpp"

namespace ratekeeper::algorithms::concurrency {

// Pure: no clock is read. Preconditions (checked by algorithms::step): cost 0 or 1,
// now >= 0. Cost 0 is a peek: expired slots are forgotten, none is taken.
//  - allowed: the live slots plus `cost` fit in the capacity; a slot expiring at now + period
//    is taken; remaining the free slots left, reset_after until the last slot expires.
//  - denied: remaining 0, retry_after until the oldest slot expires, at most
//    kConcurrencyRetryAfter (a release may free one any time).
Step step(const Limit& limit, State state, Micros now, std::int64_t cost);

// Gives back the slot that expires at `expires_at`, if it is still held (not reclaimed).
Step release(const Limit& limit, State state, Micros now, Micros expires_at);

// Moves the slot that expires at `expires_at` to now + period. nullopt when that slot is no
// longer held (it expired and was reclaimed: the request runs without one).
std::optional<Step> renew(const Limit& limit, State state, Micros now, Micros expires_at);

}  // namespace ratekeeper::algorithms::concurrency
