#pragma once
// The replies of the embedded scripts (store/redis/lua_scripts.hpp), parsed into decisions: the one
// place that reads them, for every shape of call that script_argv.hpp encodes. Internal to
// the store layer. Stateless; thread-safe.
//
// Errors: ErrorCode::reply for an error reply (Redis's or the script's; auth for NOAUTH,
// WRONGPASS, NOPERM: redis::reply_error), protocol for any other shape than the script's.

#include <cstddef>
#include <functional>
#include <span>
#include <vector>

#include "ratekeeper/core/error.hpp"
#include "redis/reply.hpp"
#include "ratekeeper/store/store.hpp"
#include "script_argv.hpp"

namespace ratekeeper::store::detail {

// One slot's part of a check: its outcome (as parse_outcome), and the instant in µs the
// script decided at: the explicit `now`, or the node's TIME.
struct TimedOutcome {
  CheckOutcome outcome;
  Micros at = 0;
};
using TimedCallback = std::function<void(Result<TimedOutcome>)>;

// Per refunded item, in order: whether state was given back (false: nothing of that
// consumption counted any more), and the decision of a peek right after the refund.
struct RefundOutcome {
  std::vector<bool> refunded;
  std::vector<Decision> items;
};
using RefundCallback = std::function<void(Result<RefundOutcome>)>;

// True when the reply says the server does not know the script (EVALSHA → EVAL).
bool is_noscript(const Result<redis::Reply>& reply) noexcept;

// The five integers at `fields` as a Decision; protocol error when one is not an integer.
Result<Decision> to_decision(const redis::Reply* fields);

// A check's reply ("multi" or a single-key script) for `items` items.
Result<CheckOutcome> parse_outcome(const redis::Reply& reply, std::size_t items);

// A "multi_delay" reply for `items` items: "multi"'s, then the check's delay, which every
// decision of an admission carries (Decision::delay).
Result<CheckOutcome> parse_delayed_outcome(const redis::Reply& reply, std::size_t items);

// The reply of ScriptArgv::check(items): parse_delayed_outcome when may_delay(items), else
// parse_outcome.
Result<CheckOutcome> parse_check_outcome(const redis::Reply& reply, std::span<const CheckItem> items);

// A batch script reply → one outcome per check, each parsed as parse_outcome does: the
// entries in order, each entry's repetitions one after the other (entries[0].repeats outcomes,
// then entries[1]'s, ...). An error reply (or a malformed one) gives every check that error.
std::vector<Result<CheckOutcome>> parse_batch(const redis::Reply& reply, std::span<const BatchEntry> entries);

// "multi_at" and "refund" replies for `items` items.
Result<TimedOutcome> parse_timed_outcome(const redis::Reply& reply, std::size_t items);
Result<RefundOutcome> parse_refund(const redis::Reply& reply, std::size_t items);

}  // namespace ratekeeper::store::detail
