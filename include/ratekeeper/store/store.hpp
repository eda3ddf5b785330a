#pragma once
// The Store interface: check a batch of {key, limit, cost} at one instant, all-or-nothing.

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ratekeeper/algorithms/decision.hpp"
#include "ratekeeper/algorithms/limit.hpp"
#include "ratekeeper/core/error.hpp"

namespace ratekeeper::store {

using algorithms::Decision;
using algorithms::Limit;

struct CheckItem {
  std::string key;  // full key, see limiter/keys.hpp
  Limit limit;
  std::int64_t cost = 1;
  // How long the request may wait for its turn instead of being denied (token buckets only,
  // in [0, algorithms::kMaxDelay]); 0: denied when it does not fit now. A check with any
  // max_delay > 0 is decided as algorithms::step_all with max_delays: one send time for the
  // whole check, Decision::delay.
  Micros max_delay = 0;

  friend bool operator==(const CheckItem&, const CheckItem&) = default;
};

// Whether some item of a check may wait for its turn (max_delay > 0).
inline bool may_delay(std::span<const CheckItem> items) noexcept {
  for (const auto& item : items) {
    if (item.max_delay > 0) return true;
  }
  return false;
}

struct CheckOutcome {
  Decision decision;            // combined (algorithms::combine); `delay`: the check's send delay
  std::vector<Decision> items;  // one per CheckItem, in order
};

using CheckCallback = std::function<void(Result<CheckOutcome>)>;

struct StoreHealth {
  bool ready = true;
  std::string detail;  // "ok", or why not: breaker open, connection refused...
};

class Store {
 public:
  virtual ~Store() = default;

  // Checks every item at one instant and consumes from all of them or from none.
  // `now` is an explicit time; without it the store's own clock is used (Redis: TIME).
  // Thread-safe. `done` is called exactly once, possibly before check() returns, on the
  // caller's thread or on one of the store's threads; it must not block.
  virtual void check(std::vector<CheckItem> items, std::optional<Micros> now,
                     CheckCallback done) = 0;

  // Blocking convenience over check(). Not for use on a thread that runs the store's callbacks.
  Result<CheckOutcome> check_sync(std::vector<CheckItem> items, std::optional<Micros> now = {});

  // "memory", "redis", "redis-cluster", "redis-sentinel".
  virtual std::string_view kind() const noexcept = 0;

  // Whether the store can currently answer, for /readyz. Thread-safe.
  virtual StoreHealth health() const { return {}; }
};

}  // namespace ratekeeper::store
