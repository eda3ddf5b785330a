#pragma once
// The one client of the embedded scripts: sends a script call (script_argv.hpp) as EVALSHA
// and, when the server does not know the script (a restart, a promoted replica, SCRIPT
// FLUSH), once again as EVAL with the source, which also loads it there; a second NOSCRIPT
// is the call's answer. Every final reply is noted in the store's ScriptHealth, every
// fallback counted there. Deadlines are absolute on the steady reading of the store's clock.
// Internal to the store layer; used by the Coalescer (RedisStore, RedisSentinelStore) and
// RedisClusterStore. Thread-safe: the client is immutable, each ScriptCall belongs to one
// call at a time.

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "ratekeeper/core/clock.hpp"
#include "ratekeeper/redis/connection.hpp"
#include "ratekeeper/store/store.hpp"
#include "script_argv.hpp"
#include "script_health.hpp"
#include "script_reply.hpp"

namespace ratekeeper::store::detail {

// Sends one command to wherever the store's topology says: the master of `slot` (a
// cluster's; single-master stores ignore it), with the given deadline in microseconds from
// now. Calls `done` exactly once.
using ScriptSender = std::function<void(std::uint16_t slot, std::span<const std::string_view> argv, Micros timeout,
                                        redis::ReplyCallback done)>;

// One script call: its arguments, where and until when it goes, and who gets its final
// reply. Owned by the caller, which keeps it alive and in place until `done` has been called.
struct ScriptCall {
  ScriptArgv argv;
  Micros deadline = 0;     // steady clock
  std::uint16_t slot = 0;  // see ScriptSender
  bool evaluated = false;  // sent as EVAL already: a NOSCRIPT now is the answer
  redis::ReplyCallback done;
};

class ScriptClient {
 public:
  // `health` may be null; `clock` nullptr: the system clock.
  ScriptClient(ScriptSender send, ScriptHealth* health, const Clock* clock);

  // Sends `call` (built: call.argv) and gives its final reply to call.done, exactly once,
  // possibly on this stack. A script that is not embedded is answered with a protocol error.
  void send(ScriptCall& call) const { send(call, false); }

  // The steady reading of the store's clock.
  Micros steady() const noexcept { return clock_->steady(); }

 private:
  void send(ScriptCall& call, bool eval) const;

  ScriptSender send_;
  ScriptHealth* health_;
  const Clock* clock_;
};

// One check as its own script call, parsed: `items` as ScriptArgv::check encodes them.
void run_check(const ScriptClient& client, std::uint16_t slot, std::vector<CheckItem> items,
               std::optional<Micros> now, Micros deadline, CheckCallback done);

// "multi_at" over `items` (keys of one slot).
void run_timed_check(const ScriptClient& client, std::uint16_t slot, std::vector<CheckItem> items,
                     std::optional<Micros> now, Micros deadline, TimedCallback done);

// "refund" of `items`, each with the cost it consumed in a check decided at `at` (a
// TimedOutcome's) and the reset_after of its admitted decision there (`reset_after[i]`).
// `now`: the check's explicit instant, or absent for the server's clock, as the check had it.
void run_refund(const ScriptClient& client, std::uint16_t slot, std::vector<CheckItem> items,
                std::vector<Micros> reset_after, Micros at, std::optional<Micros> now, Micros deadline,
                RefundCallback done);

}  // namespace ratekeeper::store::detail
