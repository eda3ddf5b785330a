#pragma once
// The argument checks every store applies before a check reaches its state or the network,
// so that every store answers invalid arguments alike. Internal to the store layer.
// Stateless; thread-safe.

#include <optional>
#include <span>

#include "ratekeeper/core/error.hpp"
#include "ratekeeper/store/store.hpp"

namespace ratekeeper::store::detail {

// The checks MemoryStore applies before touching state: now >= 0, each limit valid, each
// cost within its limit, no key twice.
Result<void> validate_check(std::span<const CheckItem> items, std::optional<Micros> now);

// Answers, through `done`, the checks no Redis call is needed for: an empty batch (admitted)
// and invalid arguments (validate_check). Returns true when it answered.
bool answered_locally(std::span<const CheckItem> items, std::optional<Micros> now, const CheckCallback& done);

}  // namespace ratekeeper::store::detail
