#pragma once
// What the limiter answers for a rule's limits when its store cannot: allow (fail open), deny
// (fail closed), local (an in-process MemoryStore with every limit divided by the number of
// instances), or error (no answer: the store's error is the check's, for callers that have a
// failure setting of their own, such as Envoy's failure_mode_deny). The Limiter applies each
// rule's mode and marks and counts every decision taken under it. answer_by_policy is
// thread-safe (the local store is).

#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "ratekeeper/store/memory_store.hpp"
#include "ratekeeper/store/store.hpp"

namespace ratekeeper::limiter {

using algorithms::Decision;

enum class FailureMode { allow, deny, local, error };

std::string_view to_string(FailureMode mode) noexcept;
// "allow", "deny" or "local": the modes a configuration names (error is the absence of one).
std::optional<FailureMode> parse_failure_mode(std::string_view name) noexcept;

// What the modes need beyond the items, shared by every rule of a limiter.
struct FailurePolicy {
  int instances = 1;                               // local: limits are divided by this
  Micros deny_retry_after = 1 * kMicrosPerSecond;  // deny: the Retry-After to advertise
  store::MemoryStore* local = nullptr;             // local: the in-process store (not owned)
};

// The answer of `mode` for `items` after the store failed with `error`: one decision per item.
// An error that is no store failure (invalid_argument) is no case for a policy and comes back
// as it is, as does any error when `mode` is error, or local and `policy.local` is null. local: the items
// are checked all-or-nothing in `policy.local` at `now` (nullopt: its own time), each limit
// divided among `policy.instances` and each cost capped at the divided capacity.
Result<std::vector<Decision>> answer_by_policy(std::span<const store::CheckItem> items,
                                               const Error& error, FailureMode mode,
                                               const FailurePolicy& policy,
                                               std::optional<Micros> now = {});

// A limit divided among `instances` (at least one unit of capacity is kept).
algorithms::Limit divide_limit(const algorithms::Limit& limit, int instances);

}  // namespace ratekeeper::limiter
