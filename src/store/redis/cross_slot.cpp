#include "cross_slot.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <mutex>

#include "ratekeeper/core/log_limit.hpp"

#include "algorithms/step.hpp"

namespace ratekeeper::store::detail {

// One check spanning several slots: its parts (one per slot), answered concurrently, then
// the refunds of the parts that consumed when another part denied.
struct CrossSlotChecks::Check {
  struct Part {
    std::uint16_t slot = 0;
    std::vector<std::size_t> positions;  // of its items in the check
    bool allowed = false;
    Micros at = 0;  // the instant the part was decided at
  };

  const ScriptClient* client = nullptr;  // the lane's: parts and refunds go through it
  std::vector<CheckItem> items;
  std::optional<Micros> now;
  Micros deadline = 0;
  std::vector<Part> parts;
  CheckCallback done;

  std::mutex mu;  // guards what follows, written by the parts' and refunds' callbacks
  std::size_t left = 0;  // parts, then refunds, not answered yet
  std::vector<Decision> decisions;
  std::optional<Error> error;
};

CrossSlotChecks::CrossSlotChecks(const Clock& clock, Micros command_timeout)
    : clock_(clock), command_timeout_(command_timeout) {}

void CrossSlotChecks::check(const ScriptClient& client, std::vector<CheckItem> items,
                            std::span<const std::uint16_t> slots, std::optional<Micros> now, Micros deadline,
                            CheckCallback done) {
  checks_.fetch_add(1, std::memory_order_relaxed);
  auto check = std::make_shared<Check>();
  // One part per slot, in order of first appearance.
  for (std::size_t i = 0; i < items.size(); ++i) {
    auto it = std::find_if(check->parts.begin(), check->parts.end(),
                           [&](const Check::Part& p) { return p.slot == slots[i]; });
    if (it == check->parts.end()) {
      check->parts.push_back({slots[i], {}});
      it = check->parts.end() - 1;
    }
    it->positions.push_back(i);
  }
  check->decisions.resize(items.size());
  check->client = &client;
  check->items = std::move(items);
  check->now = now;
  check->deadline = deadline;
  check->done = std::move(done);
  check->left = check->parts.size();
  // From here on the parts' callbacks may run, on this stack or another thread: the loop
  // only reads what they never write.
  const std::size_t count = check->parts.size();
  for (std::size_t g = 0; g < count; ++g) {
    const auto& part = check->parts[g];
    std::vector<CheckItem> group;
    group.reserve(part.positions.size());
    for (std::size_t i : part.positions) group.push_back(check->items[i]);
    run_timed_check(
        client, part.slot, std::move(group), now, deadline,
        [this, check, g](Result<TimedOutcome> r) { part_answered(check, g, std::move(r)); });
  }
}

void CrossSlotChecks::part_answered(const std::shared_ptr<Check>& check, std::size_t g,
                                      Result<TimedOutcome> r) {
  {
    std::lock_guard lock(check->mu);
    auto& part = check->parts[g];
    if (!r) {
      if (!check->error) check->error = r.error();
    } else {
      for (std::size_t k = 0; k < part.positions.size(); ++k) {
        check->decisions[part.positions[k]] = r->outcome.items[k];
      }
      part.allowed = r->outcome.decision.allowed;
      part.at = r->at;
    }
    if (--check->left > 0) return;
  }
  // Every part has answered: nothing else touches `check` until the refunds are sent. A
  // part that failed (an error, its deadline) makes the check fail: what the admitted parts
  // consumed is then given back too, behind the answer, with a deadline of its own.
  const bool failed = check->error.has_value();
  const bool denied = failed || std::any_of(check->parts.begin(), check->parts.end(),
                                            [](const Check::Part& p) { return !p.allowed; });
  // The parts that consumed: admitted, with some positive cost.
  std::vector<std::size_t> refunds;
  for (std::size_t p = 0; denied && p < check->parts.size(); ++p) {
    const auto& part = check->parts[p];
    if (part.allowed && std::any_of(part.positions.begin(), part.positions.end(),
                                    [&](std::size_t i) { return check->items[i].cost > 0; })) {
      refunds.push_back(p);
    }
  }
  CheckCallback failed_done;
  if (failed) failed_done = std::move(check->done);  // answered below, refunds or not
  if (refunds.empty()) {
    if (failed) return failed_done(std::unexpected(*check->error));
    answer(check);
    return;
  }
  partial_.fetch_add(1, std::memory_order_relaxed);
  const Micros refund_deadline =
      failed ? clock_.steady() + command_timeout_ : check->deadline;
  // Built before any is sent: a refund's callback may answer the check on this stack.
  struct Refund {
    std::size_t part = 0;
    std::vector<std::size_t> positions;
    std::vector<CheckItem> items;
    std::vector<Micros> reset_after;
  };
  std::vector<Refund> pending;
  for (std::size_t p : refunds) {
    Refund& r = pending.emplace_back();
    r.part = p;
    for (std::size_t i : check->parts[p].positions) {
      if (check->items[i].cost == 0) continue;
      r.positions.push_back(i);
      r.items.push_back(check->items[i]);
      r.reset_after.push_back(check->decisions[i].reset_after);
    }
  }
  check->left = pending.size();
  for (auto& r : pending) {
    const auto& part = check->parts[r.part];
    if (clock_.steady() >= refund_deadline) {
      refund_answered(check, r.part, r.positions,
                      make_error(ErrorCode::timeout, "the deadline passed before the refund could be sent"));
      continue;
    }
    refunds_sent_.fetch_add(1, std::memory_order_relaxed);
    run_refund(*check->client, part.slot, std::move(r.items), std::move(r.reset_after), part.at, check->now,
                       refund_deadline,
                       [this, check, p = r.part, positions = r.positions](Result<RefundOutcome> outcome) {
                         refund_answered(check, p, positions, std::move(outcome));
                       });
  }
  if (failed) failed_done(std::unexpected(*check->error));
}

void CrossSlotChecks::undo_sent() noexcept {
  partial_.fetch_add(1, std::memory_order_relaxed);
  refunds_sent_.fetch_add(1, std::memory_order_relaxed);
}

void CrossSlotChecks::undo_answered(std::string_view record, const Result<bool>& answer) {
  if (answer) return;
  refunds_failed_.fetch_add(1, std::memory_order_relaxed);
  static LogLimit log("redis-cluster: reservations not given back on another slot");
  if (std::uint64_t suppressed = 0; log.admit(suppressed)) {
    spdlog::warn("redis-cluster: the reservation {} was denied or failed on another slot, and giving back what it "
                 "reserved failed: its estimate stays and its slots are held until they expire: {}{}",
                 record, answer.error().message,
                 suppressed > 0 ? fmt::format(" ({} similar lines left out)", suppressed) : std::string());
  }
}

void CrossSlotChecks::refund_answered(const std::shared_ptr<Check>& check, std::size_t p,
                                        std::span<const std::size_t> positions, Result<RefundOutcome> r) {
  {
    std::lock_guard lock(check->mu);
    if (!r) {
      refunds_failed_.fetch_add(1, std::memory_order_relaxed);
      std::string keys;
      for (std::size_t i : positions) {
        keys += keys.empty() ? "" : ", ";
        keys += fmt::format("'{}' ({})", check->items[i].key, check->items[i].cost);
      }
      spdlog::warn("redis-cluster: refund on slot {} failed, the consumption of {} by a check denied or failed on another slot stays: {}",
                   check->parts[p].slot, keys, r.error().message);
    } else {
      // What the refunded keys hold now, as a peek reports it.
      for (std::size_t k = 0; k < positions.size(); ++k) check->decisions[positions[k]] = r->items[k];
    }
    if (--check->left > 0) return;
  }
  answer(check);
}

void CrossSlotChecks::answer(const std::shared_ptr<Check>& check) {
  if (!check->done) return;  // a failed check, answered before its refunds
  CheckOutcome out;
  out.decision = algorithms::combine(check->decisions);
  out.items = std::move(check->decisions);
  auto done = std::move(check->done);
  done(std::move(out));
}

}  // namespace ratekeeper::store::detail
