#pragma once
// A check whose keys span slots of a Redis Cluster (several identities on one request): one
// atomic "multi_at" call per slot, sent concurrently; admitted when every slot admits. When a
// slot denies or fails, every slot that consumed is refunded (lua/refund.lua) before the
// answer, so that a denied check leaves nothing consumed. The refund is not atomic with the
// check: until it runs, others see that consumption. A refund that fails is counted, logged
// and not retried. The reasoning and the refund's exact amounts: docs/design/architecture.md,
// "Checks that span cluster slots"; for users, docs/configuration.md. Internal to the store.
// Thread-safe.

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "script_client.hpp"

namespace ratekeeper::store::detail {

class CrossSlotChecks {
 public:
  // `command_timeout`: the deadline of refunds sent after a part failed.
  CrossSlotChecks(const Clock& clock, Micros command_timeout);

  // `items` valid, their slots `slots` (one per item, not all equal); sent through `client`.
  void check(const ScriptClient& client, std::vector<CheckItem> items, std::span<const std::uint16_t> slots,
             std::optional<Micros> now, Micros deadline, CheckCallback done);

  std::uint64_t checks() const noexcept { return checks_.load(std::memory_order_relaxed); }
  std::uint64_t partial() const noexcept { return partial_.load(std::memory_order_relaxed); }
  std::uint64_t refunds_sent() const noexcept { return refunds_sent_.load(std::memory_order_relaxed); }
  std::uint64_t refunds_failed() const noexcept { return refunds_failed_.load(std::memory_order_relaxed); }

  // A reservation across slots (RedisStore::reserve) whose other slots denied or failed: the
  // part it reserved is given back by a settlement at 0, counted as a partial check and a
  // refund. Call when it is sent; then with its answer (a failure is logged: that part stays).
  void undo_sent() noexcept;
  void undo_answered(std::string_view record, const Result<bool>& answer);

 private:
  struct Check;
  void part_answered(const std::shared_ptr<Check>& check, std::size_t part, Result<TimedOutcome> outcome);
  void refund_answered(const std::shared_ptr<Check>& check, std::size_t part,
                       std::span<const std::size_t> positions, Result<RefundOutcome> outcome);
  static void answer(const std::shared_ptr<Check>& check);

  const Clock& clock_;
  Micros command_timeout_;
  std::atomic<std::uint64_t> checks_{0};
  std::atomic<std::uint64_t> partial_{0};
  std::atomic<std::uint64_t> refunds_sent_{0};
  std::atomic<std::uint64_t> refunds_failed_{0};
};

}  // namespace ratekeeper::store::detail
