#pragma once
// What a limiter answers when its store cannot: allow (fail open), deny (fail closed), or
// local (an in-process MemoryStore with every limit divided by the number of instances).
// Every decision taken under the policy is marked and counted.

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>

#include "ratekeeper/store/memory_store.hpp"
#include "ratekeeper/store/store.hpp"

namespace ratekeeper::limiter {

using algorithms::Decision;

enum class FailureMode { allow, deny, local };

std::string_view to_string(FailureMode mode) noexcept;
std::optional<FailureMode> parse_failure_mode(std::string_view name) noexcept;

struct FailurePolicy {
  FailureMode mode = FailureMode::allow;
  int instances = 1;                              // local: limits are divided by this
  Micros deny_retry_after = 1 * kMicrosPerSecond; // deny: the Retry-After to advertise
};

// A checked decision, with how it was reached.
struct Verdict {
  Decision decision;
  std::vector<Decision> items;
  bool by_failure_policy = false;  // true: the store failed and the policy answered
  std::optional<Error> store_error;
};

using VerdictCallback = std::function<void(Result<Verdict>)>;

// Wraps a store with a failure policy. Invalid arguments pass through as errors; store
// failures (unavailable, timeout, circuit_open, store_full, ...) are answered by the policy.
// Thread-safe.
class GuardedStore {
 public:
  GuardedStore(store::Store& store, FailurePolicy policy);

  // `done` may run on the caller's stack or on a store thread.
  void check(std::vector<store::CheckItem> items, std::optional<Micros> now, VerdictCallback done);
  Result<Verdict> check_sync(std::vector<store::CheckItem> items, std::optional<Micros> now = {});

  const FailurePolicy& policy() const noexcept { return policy_; }
  store::Store& store() noexcept { return *store_; }
  std::uint64_t failure_decisions() const noexcept { return failures_.load(std::memory_order_relaxed); }

  // The policy's answer for `items` after the store failed with `error`.
  Result<Verdict> fallback(std::vector<store::CheckItem> items, std::optional<Micros> now, Error error);

 private:
  store::Store* store_;
  FailurePolicy policy_;
  std::unique_ptr<store::MemoryStore> local_;
  std::atomic<std::uint64_t> failures_{0};
};

// A limit divided among `instances` (at least one unit of capacity is kept).
algorithms::Limit divide_limit(const algorithms::Limit& limit, int instances);

}  // namespace ratekeeper::limiter
