#pragma once
// The Redis scripts, assembled from lua/*.lua and embedded at build time. Each script is
// self-contained. Single-key scripts "token_bucket", "sliding_window_log",
// "sliding_window_counter", "fixed_window": KEYS[1] = key, ARGV = {capacity, period_us, cost,
// now_us}, now_us -1 = the server's clock (TIME); reply {allowed 1/0, limit, remaining,
// retry_after_us, reset_after_us}. "multi": KEYS = k1..kN, ARGV = {now_us, then per key:
// algorithm (enum algorithms::Algorithm), capacity, period_us, cost}; reply: the combined
// decision, then one per key, 5 integers each, as algorithms::step_all. "multi_at": as
// "multi", its reply followed by the instant (µs) it decided at. "multi_delay": as "multi"
// with a fifth argument per key, its max_delay_us, its reply followed by the delay (µs) of
// the check (algorithms::step_all with max_delays). "refund": KEYS = k1..kN,
// ARGV = {at_us, now_us, then per key: algorithm, capacity, period_us, cost, reset_after_us},
// gives back what a "multi_at" decided at `at_us` consumed (lua/refund.lua); reply per key:
// refunded 1/0, then a peek's 5 integers. "batch": see lua/batch.lua. "lease": a block of
// units of one key consumed at once (lua/lease.lua). "reset": KEYS = one identity's keys,
// deleted; reply: how many existed (lua/reset.lua). "reserve" and "settle": a check admitted
// at an estimated cost, recorded, and settled to the actual cost (lua/reservation.lua).
//
// This is the one registry of the scripts: each one's name, source, and the SHA1 Redis knows
// it by (EVALSHA), computed at build time; and the same scripts as one library of Redis
// Functions (Redis >= 7: FUNCTION LOAD once per server, then FCALL <function>), in which the
// code every script shares is loaded once instead of run on every call. The library and its
// functions are named after the SHA1 of its code ("ratekeeper_<16 hex>", functions
// "ratekeeper_<16 hex>_<script>"), so that servers shared by two versions of ratekeeper hold
// both. Immutable; thread-safe.

#include <optional>
#include <span>
#include <string_view>

namespace ratekeeper::store {

struct LuaScript {
  std::string_view name;  // "token_bucket", ..., "multi"
  std::string_view source;
  std::string_view sha;       // SHA1 of source, lowercase hex
  std::string_view function;  // its function in the library (FCALL)
};

struct LuaLibrary {
  std::string_view name;    // "ratekeeper_<16 hex>"
  std::string_view source;  // FUNCTION LOAD's argument ("#!lua name=...")
};

std::span<const LuaScript> lua_scripts();
LuaLibrary lua_library();

// The script named `name`, or nullptr.
inline const LuaScript* find_lua_script(std::string_view name) noexcept {
  for (const auto& s : lua_scripts()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

inline std::optional<std::string_view> lua_script(std::string_view name) {
  if (const LuaScript* s = find_lua_script(name)) return s->source;
  return std::nullopt;
}

}  // namespace ratekeeper::store
