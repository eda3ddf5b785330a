#pragma once
// The one client of the embedded scripts: sends a script call (script_argv.hpp) as FCALL of
// its function in the library, loading the library where it is missing, and falls back to
// EVALSHA (EVAL on NOSCRIPT) for good where functions cannot be used, or for one call where
// an FCALL cannot run (OOM, a library missing on the node an ASK reached). Every final reply
// is noted in the store's ScriptHealth. Deadlines are absolute on the steady reading of the
// store's clock; each call but a refund also carries its deadline on the server's clock
// (server_clock.hpp). Why each fallback: docs/design/architecture.md, "The script client".
// Internal to the store layer. Thread-safe: the client is immutable, each ScriptCall belongs
// to one call at a time.

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "ratekeeper/core/clock.hpp"
#include "redis/connection.hpp"
#include "ratekeeper/store/store.hpp"
#include "script_argv.hpp"
#include "script_health.hpp"
#include "script_reply.hpp"
#include "server_clock.hpp"

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
  // Set by the client: how the call was last sent, and whether the library was loaded for it
  // (a "Function not found" now is the answer).
  Invocation sent = Invocation::fcall;
  bool loaded = false;
  redis::ReplyCallback done;
};

class ScriptClient {
 public:
  // `health` may be null; `clock` nullptr: the system clock. `functions` false: scripts
  // only (EVALSHA), never FCALL.
  ScriptClient(ScriptSender send, ScriptHealth* health, const Clock* clock, bool functions = true);

  // Sends `call` (built: call.argv) and gives its final reply to call.done, exactly once,
  // possibly on this stack. A script that is not embedded is answered with a protocol error.
  void send(ScriptCall& call) const;

  // Whether calls go out as FCALL (false: functions are off, or were refused).
  bool functions() const noexcept { return functions_.load(std::memory_order_relaxed); }

  // The steady reading of the store's clock.
  Micros steady() const noexcept { return clock_->steady(); }

 private:
  void dispatch(ScriptCall& call, Invocation how) const;
  void load_library(ScriptCall& call) const;
  void refused(std::string_view why) const;  // functions cannot be used: scripts from now on
  void finish(ScriptCall& call, Result<redis::Reply> reply) const;
  // A TIME to the call's destination, for server_clock_, when one is due.
  void sample_clock(std::uint16_t slot, Micros timeout) const;

  ScriptSender send_;
  ScriptHealth* health_;
  const Clock* clock_;
  mutable std::atomic<bool> functions_;
  // The store's (ScriptHealth's), or this client's own without one.
  ServerClock& server_clock() const noexcept { return health_ != nullptr ? health_->server_clock() : own_clock_; }
  mutable ServerClock own_clock_;
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
