#pragma once
// How a limit is leased (store/leasing_store.hpp): at most `max` units per lease, each lease
// held at most `ttl`. A plain value, cheap to copy; max 0 means "not leased".

#include <cstdint>

#include "ratekeeper/core/time.hpp"

namespace ratekeeper::store {

// The longest a lease may be held.
inline constexpr Micros kMaxLeaseTtl = Micros{3600} * kMicrosPerSecond;

struct LeasePolicy {
  std::int64_t max = 0;  // units of one lease at most; 0: the limit is not leased
  Micros ttl = 0;        // how long a lease is held before its unused units go back

  bool enabled() const noexcept { return max > 0; }
  friend bool operator==(const LeasePolicy&, const LeasePolicy&) = default;
};

}  // namespace ratekeeper::store
