#pragma once
// The argument vector of one call of an embedded script (store/redis/lua_scripts.hpp), for every
// shape of call: a check (its algorithm's own script for one item, "multi" for several),
// several checks in one call of "batch", one cluster slot's part of a check ("multi_at"),
// and its "refund". The calling conventions are those documented in lua_scripts.hpp and
// lua/*.lua; this is the one place that encodes them. Internal to the store layer.
//
// The argument vector starts FCALL function, EVALSHA sha or EVAL source (Invocation: switching
// costs nothing, the rest is encoded once). Its views point into the checked items (which must
// outlive the call and not move) and into this object's own buffer. Building again reuses
// the buffers. Not thread-safe (one call at a time).

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ratekeeper/core/time.hpp"
#include "store/redis/lua_scripts.hpp"
#include "ratekeeper/store/store.hpp"

namespace ratekeeper::store::detail {

// How a script is called: as its function in the library (FCALL), by its SHA1 (EVALSHA), or
// with its source (EVAL, which also loads it).
enum class Invocation : std::uint8_t { fcall, evalsha, eval };

// One entry of a batch script call: a check, or `repeats` identical checks issued one after
// the other.
struct BatchEntry {
  const std::vector<CheckItem>* items = nullptr;
  std::size_t repeats = 1;
};

class ScriptArgv {
 public:
  // One check: the single-key script of its algorithm (KEYS[1]; ARGV capacity, period,
  // cost, now) or "multi" (ARGV now, then algorithm, capacity, period, cost per key); a check
  // that may wait for its turn (may_delay): "multi_delay" (per key also max_delay).
  void check(std::span<const CheckItem> items, std::optional<Micros> now);
  // Several checks at one `now`, in order (lua/batch.lua: ARGV now, the distinct limits,
  // then per entry its limit number, or 0, n, repeats and n limit numbers).
  void batch(std::span<const BatchEntry> entries, std::optional<Micros> now);
  // "multi_at": as "multi" over `items`, answering the instant it decided at too.
  void multi_at(std::span<const CheckItem> items, std::optional<Micros> now);
  // "refund" of `items` consumed by a "multi_at" decided at `at`, each with the reset_after
  // of its admitted decision (ARGV at, now, then per key algorithm, capacity, period, cost,
  // reset_after).
  void refund(std::span<const CheckItem> items, std::span<const Micros> reset_after, Micros at,
              std::optional<Micros> now);

  // A call of the script named `script` with `keys` and `args` as they are, for a caller
  // that encodes its own arguments (the lease grant, the tests' direct line to the scripts).
  // The views point into `keys` and `args`. `now_arg`: the index in `args` of the call's
  // `now`, which bound() extends; none: the call cannot be bounded.
  void call(std::string_view script, std::span<const std::string> keys, std::span<const std::string> args,
            std::optional<std::size_t> now_arg = std::nullopt);

  // Makes the call do nothing when it runs after `deadline`, on the server's clock (µs): its
  // `now` argument becomes "now:deadline" (lua/prelude.lua: resolve_now). Every call but a
  // refund can be bounded (a refund that runs late still gives back what it should: it is
  // never bounded). Building again clears it; bounding again replaces it.
  void bound(Micros deadline);
  // Whether bound() applies to the call built.
  bool boundable() const noexcept { return now_at_ != 0; }

  // The script the last build is for; nullptr when it is not embedded (nothing to send).
  const LuaScript* script() const noexcept { return script_; }
  // FCALL function, EVALSHA sha or EVAL source, then numkeys keys... args...
  std::span<const std::string_view> argv(Invocation how) noexcept;
  // numkeys keys... args...: what follows the script.
  std::span<const std::string_view> args() const noexcept {
    return std::span<const std::string_view>(argv_).subspan(2);
  }

 private:
  // Starts the vector of script `name` with room for `numbers` encoded integers and `count`
  // arguments after the script.
  void start(std::string_view name, std::size_t numbers, std::size_t count);
  void number(std::int64_t v);
  void now_number(std::optional<Micros> now);  // `now` (-1: the server's clock), bound() extends it
  // Per item: algorithm, capacity, period, cost, [max_delay,] [tail[i]].
  void items(std::span<const CheckItem> items, std::span<const Micros> tail, bool max_delays = false);

  const LuaScript* script_ = nullptr;
  std::size_t now_at_ = 0;  // the index in argv_ of `now`; 0: none that bound() extends
  std::string_view now_;    // `now` as built
  std::string bounded_;     // "now:deadline"
  std::string numbers_;
  std::vector<std::string_view> argv_;
  std::vector<const CheckItem*> limits_;        // batch: the distinct limits
  std::vector<std::uint32_t> limit_numbers_;  // batch: per item, its limit's number (1-based)
};

}  // namespace ratekeeper::store::detail
