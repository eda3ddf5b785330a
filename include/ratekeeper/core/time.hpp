#pragma once
// Time in ratekeeper is integer microseconds; algorithms take `now` as an argument.

#include <cstdint>

namespace ratekeeper {

using Micros = std::int64_t;

inline constexpr Micros kMicrosPerMilli = 1'000;
inline constexpr Micros kMicrosPerSecond = 1'000'000;

// Largest integer every Lua (double) and C++ computation stays exact below: 2^53.
inline constexpr std::int64_t kMaxExact = std::int64_t{1} << 53;

}  // namespace ratekeeper
