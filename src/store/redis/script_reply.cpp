#include "script_reply.hpp"

#include <fmt/format.h>

#include <optional>

#include "algorithms/step.hpp"
#include "ratekeeper/algorithms/token_bucket.hpp"

namespace ratekeeper::store::detail {
namespace {

constexpr std::size_t kDecisionFields = 5;
// The scripts' integers are Lua numbers: doubles, exact below 2^53.
constexpr std::int64_t kMaxScriptInteger = std::int64_t{1} << 53;
constexpr std::size_t kRefundFields = 1 + kDecisionFields;

Result<void> expect_integers(const redis::Reply& reply, std::size_t count, std::string_view script) {
  if (reply.is_error()) return std::unexpected(redis::reply_error(reply));
  bool ok = reply.is_array() && reply.elements.size() == count;
  for (std::size_t i = 0; ok && i < count; ++i) ok = reply.elements[i].is_integer();
  if (!ok) {
    return make_error(ErrorCode::protocol,
                      fmt::format("{} reply: expected {} integers, got {}", script, count, reply.to_string()));
  }
  return {};
}

// Five integers at `offset`, already checked to be integers.
Decision decision_at(const redis::Reply& reply, std::size_t offset) { return *to_decision(reply.elements.data() + offset); }

}  // namespace

Result<Decision> to_decision(const redis::Reply* fields) {
  for (std::size_t i = 0; i < kDecisionFields; ++i) {
    if (!fields[i].is_integer()) {
      return make_error(ErrorCode::protocol,
                        fmt::format("script reply field {} is not an integer: {}", i, fields[i].to_string()));
    }
  }
  Decision d;
  d.allowed = fields[0].integer == 1;
  d.limit = fields[1].integer;
  d.remaining = fields[2].integer;
  d.retry_after = fields[3].integer;
  d.reset_after = fields[4].integer;
  return d;
}

Result<CheckOutcome> parse_outcome(const redis::Reply& reply, std::size_t items) {
  if (reply.is_error()) return std::unexpected(redis::reply_error(reply));
  // One item: a single-key script's decision, or "multi"'s combined one and the item's (a
  // concurrency limit has no script of its own).
  const std::size_t expected = kDecisionFields * (items + 1);
  const bool single = items == 1 && reply.is_array() && reply.elements.size() == kDecisionFields;
  if (!reply.is_array() || (reply.elements.size() != expected && !single)) {
    return make_error(ErrorCode::protocol,
                      fmt::format("script reply: expected {} integers, got {}", expected, reply.to_string()));
  }
  CheckOutcome out;
  auto combined = to_decision(reply.elements.data());
  if (!combined) return std::unexpected(combined.error());
  out.decision = *combined;
  if (items == 1) {
    out.items.push_back(out.decision);
    return out;
  }
  out.items.reserve(items);
  for (std::size_t i = 0; i < items; ++i) {
    auto d = to_decision(reply.elements.data() + kDecisionFields * (i + 1));
    if (!d) return std::unexpected(d.error());
    out.items.push_back(*d);
  }
  return out;
}

Result<CheckOutcome> parse_delayed_outcome(const redis::Reply& reply, std::size_t items) {
  const std::size_t decisions = kDecisionFields * (items + 1);
  if (auto ok = expect_integers(reply, decisions + 1, "multi_delay"); !ok) return std::unexpected(ok.error());
  CheckOutcome out;
  out.decision = decision_at(reply, 0);
  out.items.reserve(items);
  for (std::size_t i = 0; i < items; ++i) out.items.push_back(decision_at(reply, kDecisionFields * (i + 1)));
  const Micros delay = reply.elements[decisions].integer;
  if (delay < 0 || delay > algorithms::kMaxDelay || (delay > 0 && !out.decision.allowed)) {
    return make_error(ErrorCode::protocol, fmt::format("multi_delay reply: delay {} of a {}", delay,
                                                       out.decision.allowed ? "admission" : "denial"));
  }
  out.decision.delay = delay;
  for (auto& d : out.items) d.delay = delay;
  return out;
}

Result<CheckOutcome> parse_check_outcome(const redis::Reply& reply, std::span<const CheckItem> items) {
  return may_delay(items) ? parse_delayed_outcome(reply, items.size()) : parse_outcome(reply, items.size());
}

namespace {

// Reads the flat batch reply (lua/batch.lua) from the front.
class BatchReader {
 public:
  explicit BatchReader(const redis::Reply& reply) : fields_(reply.elements) {}

  bool at_end() const noexcept { return at_ == fields_.size(); }

  std::optional<std::int64_t> integer() {
    if (at_ >= fields_.size() || !fields_[at_].is_integer()) return std::nullopt;
    return fields_[at_++].integer;
  }

  // A decision of `item`: allowed, remaining, retry_after, reset_after.
  std::optional<Decision> decision(const CheckItem& item) {
    if (at_ + 4 > fields_.size()) return std::nullopt;
    for (std::size_t i = at_; i < at_ + 4; ++i) {
      if (!fields_[i].is_integer()) return std::nullopt;
    }
    const auto* f = fields_.data() + at_;
    at_ += 4;
    if (f[0].integer != 0 && f[0].integer != 1) return std::nullopt;
    Decision d;
    d.allowed = f[0].integer == 1;
    d.limit = item.limit.capacity;
    d.remaining = f[1].integer;
    d.retry_after = f[2].integer;
    d.reset_after = f[3].integer;
    return d;
  }

  // A token bucket's decision in one integer (lua/batch.lua): reset_after when admitted,
  // −1 − reset_after when denied. The rest is token_bucket::step's from the bucket's state
  // before the check (TAT relative to now = 0), which the integer gives; a value that step
  // does not turn back into it is not the script's.
  static algorithms::State state_at(Micros tat) {
    algorithms::State state;
    state.t = tat;
    return state;
  }

  std::optional<Decision> packed_token_bucket(const CheckItem& item) {
    const auto packed = integer();
    if (!packed || *packed < -kMaxScriptInteger || *packed > kMaxScriptInteger) return std::nullopt;
    const bool allowed = *packed >= 0;
    const Micros reset_after = allowed ? *packed : -1 - *packed;
    // Admitted, the TAT advanced by cost·interval from where it was.
    const Micros tat = allowed ? reset_after - item.cost * item.limit.period : reset_after;
    if (tat < 0) return std::nullopt;
    auto step = algorithms::token_bucket::step(item.limit, state_at(tat), 0, item.cost);
    if (step.decision.allowed != allowed || step.decision.reset_after != reset_after) return std::nullopt;
    return step.decision;
  }

 private:
  const std::vector<redis::Reply>& fields_;
  std::size_t at_ = 0;
};

// The closed form of a repeated one-key token bucket entry (token_bucket_repeated in
// lua/token_bucket.lua): the number admitted, the first decision if admitted > 0, the denial
// if admitted < repeats. The k-th admitted check (k = 1, 2, ...) has remaining lower by
// (k − 1)·cost and reset_after longer by (k − 1)·cost·interval than the first: GCRA's tat
// advances by cost·interval per admission.
bool read_closed_form(BatchReader& in, const BatchEntry& e, std::vector<Result<CheckOutcome>>& out) {
  const CheckItem& item = (*e.items)[0];
  const auto admitted = in.integer();
  const auto repeats = static_cast<std::int64_t>(e.repeats);
  if (!admitted || *admitted < 0 || *admitted > repeats) return false;
  if (*admitted > 0) {
    const auto first = in.decision(item);
    if (!first || !first->allowed) return false;
    // The last admitted check left first.remaining − (admitted − 1)·cost ≥ 0 units, and its
    // reset_after is (admitted − 1)·cost·interval longer: a first decision that cannot be so
    // (a reply that is not the script's) would make them overflow.
    std::int64_t units = 0;
    std::int64_t refill = 0;
    std::int64_t last_reset = 0;
    if (__builtin_mul_overflow(*admitted - 1, item.cost, &units) || first->remaining < units ||
        __builtin_mul_overflow(units, item.limit.period, &refill) ||
        __builtin_add_overflow(first->reset_after, refill, &last_reset)) {
      return false;
    }
    for (std::int64_t k = 0; k < *admitted; ++k) {
      Decision d = *first;
      d.remaining -= k * item.cost;
      d.reset_after += k * item.cost * item.limit.period;
      out.emplace_back(CheckOutcome{d, {d}});
    }
  }
  if (*admitted < repeats) {
    const auto denial = in.decision(item);
    if (!denial || denial->allowed) return false;
    out.resize(out.size() + static_cast<std::size_t>(repeats - *admitted), CheckOutcome{*denial, {*denial}});
  }
  return true;
}

// A one-key check sent once: a token bucket's decision in one integer, another's in four.
bool read_single(BatchReader& in, const CheckItem& item, std::vector<Result<CheckOutcome>>& out) {
  const auto d = item.limit.algorithm == algorithms::Algorithm::token_bucket ? in.packed_token_bucket(item)
                                                                             : in.decision(item);
  if (!d) return false;
  out.emplace_back(CheckOutcome{*d, {*d}});
  return true;
}

// One check of `items`: a decision per item, combined as the script combines them.
bool read_check(BatchReader& in, const std::vector<CheckItem>& items, std::vector<Result<CheckOutcome>>& out) {
  CheckOutcome outcome;
  outcome.items.reserve(items.size());
  for (const auto& item : items) {
    const auto d = in.decision(item);
    if (!d) return false;
    outcome.items.push_back(*d);
  }
  outcome.decision = items.size() == 1 ? outcome.items[0] : algorithms::combine(outcome.items);
  out.emplace_back(std::move(outcome));
  return true;
}

// Appends the entry's e.repeats outcomes to `out`.
bool read_entry(BatchReader& in, const BatchEntry& e, std::vector<Result<CheckOutcome>>& out) {
  const auto& items = *e.items;
  const std::size_t start = out.size();
  if (items.size() == 1 && e.repeats == 1) return read_single(in, items[0], out);
  if (items.size() == 1 && e.repeats > 1 && items[0].limit.algorithm == algorithms::Algorithm::token_bucket) {
    return read_closed_form(in, e, out);
  }
  const auto answered = in.integer();
  if (!answered || *answered < 1 || *answered > static_cast<std::int64_t>(e.repeats)) return false;
  for (std::int64_t r = 0; r < *answered; ++r) {
    if (!read_check(in, items, out)) return false;
    // Replies stop at the first denial.
    if (!out.back()->decision.allowed && r + 1 < *answered) return false;
  }
  // The checks after the first denial were denied alike (nothing changed in between).
  if (out.size() - start < e.repeats) {
    if (out.back()->decision.allowed) return false;
    out.resize(start + e.repeats, out.back());
  }
  return true;
}

}  // namespace

std::vector<Result<CheckOutcome>> parse_batch(const redis::Reply& reply, std::span<const BatchEntry> entries) {
  std::size_t checks = 0;
  for (const auto& e : entries) checks += e.repeats;
  std::vector<Result<CheckOutcome>> out;
  out.reserve(checks);
  auto fail_all = [&](const Error& error) {
    out.assign(checks, std::unexpected(error));
    return out;
  };
  if (reply.is_error()) return fail_all(redis::reply_error(reply));
  if (!reply.is_array()) {
    return fail_all(Error{ErrorCode::protocol, fmt::format("batch script reply: {}", reply.to_string())});
  }
  BatchReader in(reply);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (!read_entry(in, entries[i], out)) {
      return fail_all(Error{ErrorCode::protocol, fmt::format("batch script reply: entry {} of {} malformed: {}", i,
                                                             entries.size(), reply.to_string())});
    }
  }
  if (!in.at_end()) {
    return fail_all(Error{ErrorCode::protocol,
                          fmt::format("batch script reply: more than {} entries: {}", entries.size(), reply.to_string())});
  }
  return out;
}

bool is_noscript(const Result<redis::Reply>& reply) noexcept {
  return reply && reply->is_error() && reply->error_code() == "NOSCRIPT";
}

Result<TimedOutcome> parse_timed_outcome(const redis::Reply& reply, std::size_t items) {
  // "multi": the combined decision, then one per item; then the instant.
  const std::size_t decisions = kDecisionFields * (items + 1);
  if (auto ok = expect_integers(reply, decisions + 1, "multi_at"); !ok) return std::unexpected(ok.error());
  TimedOutcome out;
  out.outcome.decision = decision_at(reply, 0);
  out.outcome.items.reserve(items);
  for (std::size_t i = 0; i < items; ++i) out.outcome.items.push_back(decision_at(reply, kDecisionFields * (i + 1)));
  out.at = reply.elements[decisions].integer;
  return out;
}

Result<RefundOutcome> parse_refund(const redis::Reply& reply, std::size_t items) {
  if (auto ok = expect_integers(reply, kRefundFields * items, "refund"); !ok) return std::unexpected(ok.error());
  RefundOutcome out;
  out.refunded.reserve(items);
  out.items.reserve(items);
  for (std::size_t i = 0; i < items; ++i) {
    out.refunded.push_back(reply.elements[kRefundFields * i].integer == 1);
    out.items.push_back(decision_at(reply, kRefundFields * i + 1));
  }
  return out;
}

}  // namespace ratekeeper::store::detail
