#pragma once
// The two script calls behind the refund of a check whose keys span Redis Cluster slots
// (RedisClusterStore): "multi_at", one slot's part of the check and the instant it was
// decided at, and "refund", which gives back what an admitted part consumed once another
// part was denied (lua/multi_at.lua, lua/refund.lua). Internal to the store layer.

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "script_call.hpp"

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

// Runs "multi_at" over `items` (keys of one slot) through `send`: EVALSHA, and EVAL once
// after NOSCRIPT. `deadline` is absolute on the steady clock. `done` is called exactly once.
// The replies are noted in `replies` (may be null).
void run_timed_check(std::span<const CheckItem> items, std::optional<Micros> now, Micros deadline, ScriptSender send,
                     TimedCallback done, ScriptReplies* replies);

// Runs "refund" of `items`, each with the cost it consumed in a check decided at `at` (a
// TimedOutcome's) and the reset_after of its admitted decision there (`reset_after[i]`).
// `now`: the check's explicit instant, or absent for the server's clock, as the check had
// it. As run_timed_check otherwise.
void run_refund(std::span<const CheckItem> items, std::span<const Micros> reset_after, Micros at,
                std::optional<Micros> now, Micros deadline, ScriptSender send, RefundCallback done,
                ScriptReplies* replies);

// The replies, parsed. Errors: ErrorCode::reply for an error reply, protocol for any
// other shape than the script's.
Result<TimedOutcome> parse_timed_outcome(const redis::Reply& reply, std::size_t items);
Result<RefundOutcome> parse_refund(const redis::Reply& reply, std::size_t items);

}  // namespace ratekeeper::store::detail
