#pragma once
// The Lua scripts of lua/*.lua, embedded at build time.

#include <optional>
#include <span>
#include <string_view>

namespace ratekeeper::store {

struct LuaScript {
  std::string_view name;  // file stem: "token_bucket", "multi", ...
  std::string_view source;
};

std::span<const LuaScript> lua_scripts();

inline std::optional<std::string_view> lua_script(std::string_view name) {
  for (const auto& s : lua_scripts()) {
    if (s.name == name) return s.source;
  }
  return std::nullopt;
}

}  // namespace ratekeeper::store
