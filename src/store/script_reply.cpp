#include "script_reply.hpp"

#include <fmt/format.h>

namespace ratekeeper::store::detail {
namespace {

constexpr std::size_t kDecisionFields = 5;
constexpr std::size_t kRefundFields = 1 + kDecisionFields;

// The closed-form reply of a repeated one-key token bucket entry (token_bucket_repeated in
// lua/token_bucket.lua): {admitted, first decision if admitted > 0, denial if admitted <
// repeats}. The k-th admitted check (k = 1, 2, ...) has remaining lower by (k − 1)·cost and
// reset_after longer by (k − 1)·cost·interval than the first: GCRA's tat advances by
// cost·interval per admission.
bool is_compact(const BatchEntry& e) noexcept {
  return e.repeats > 1 && e.items->size() == 1 && (*e.items)[0].limit.algorithm == algorithms::Algorithm::token_bucket;
}

std::vector<Result<CheckOutcome>> parse_compact(const redis::Reply& reply, const BatchEntry& e) {
  const CheckItem& item = (*e.items)[0];
  std::vector<Result<CheckOutcome>> out;
  auto malformed = [&] {
    out.assign(e.repeats, make_error(ErrorCode::protocol, fmt::format("batch script reply: token bucket entry: {}",
                                                                      reply.to_string())));
    return out;
  };
  if (!reply.is_array() || reply.elements.empty() || !reply.elements[0].is_integer()) return malformed();
  const auto admitted = reply.elements[0].integer;
  const auto repeats = static_cast<std::int64_t>(e.repeats);
  const std::size_t expected = 1 + (admitted > 0 ? kDecisionFields : 0) + (admitted < repeats ? kDecisionFields : 0);
  if (admitted < 0 || admitted > repeats || reply.elements.size() != expected) return malformed();
  std::size_t at = 1;
  if (admitted > 0) {
    auto first = to_decision(reply.elements.data() + at);
    if (!first) return malformed();
    at += kDecisionFields;
    // The last admitted check left first.remaining − (admitted − 1)·cost ≥ 0 units, and its
    // reset_after is (admitted − 1)·cost·interval longer: a first decision that cannot be so
    // (a reply that is not the script's) would make them overflow.
    std::int64_t units = 0;
    std::int64_t refill = 0;
    std::int64_t last_reset = 0;
    if (__builtin_mul_overflow(admitted - 1, item.cost, &units) || first->remaining < units ||
        __builtin_mul_overflow(units, item.limit.period, &refill) ||
        __builtin_add_overflow(first->reset_after, refill, &last_reset)) {
      return malformed();
    }
    for (std::int64_t k = 0; k < admitted; ++k) {
      Decision d = *first;
      d.remaining -= k * item.cost;
      d.reset_after += k * item.cost * item.limit.period;
      out.emplace_back(CheckOutcome{d, {d}});
    }
  }
  if (admitted < repeats) {
    auto denial = to_decision(reply.elements.data() + at);
    if (!denial) return malformed();
    out.resize(e.repeats, CheckOutcome{*denial, {*denial}});
  }
  return out;
}

Result<void> expect_integers(const redis::Reply& reply, std::size_t count, std::string_view script) {
  if (reply.is_error()) return make_error(ErrorCode::reply, reply.str);
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
  if (reply.is_error()) return make_error(ErrorCode::reply, reply.str);
  const std::size_t expected = items == 1 ? kDecisionFields : kDecisionFields * (items + 1);
  if (!reply.is_array() || reply.elements.size() != expected) {
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

std::vector<std::vector<Result<CheckOutcome>>> parse_batch(const redis::Reply& reply,
                                                           std::span<const BatchEntry> entries) {
  std::vector<std::vector<Result<CheckOutcome>>> out(entries.size());
  auto fail_all = [&](const Error& error) {
    for (std::size_t i = 0; i < entries.size(); ++i) out[i].assign(entries[i].repeats, std::unexpected(error));
    return out;
  };
  if (reply.is_error()) return fail_all(Error{ErrorCode::reply, reply.str});
  if (!reply.is_array() || reply.elements.size() != entries.size()) {
    return fail_all(Error{ErrorCode::protocol, fmt::format("batch script reply: expected {} entries, got {}",
                                                           entries.size(), reply.to_string())});
  }
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& replies = reply.elements[i];
    const std::size_t repeats = entries[i].repeats;
    const std::size_t items = entries[i].items->size();
    if (is_compact(entries[i])) {
      out[i] = parse_compact(replies, entries[i]);
      continue;
    }
    if (!replies.is_array() || replies.elements.empty() || replies.elements.size() > repeats) {
      out[i].assign(repeats, make_error(ErrorCode::protocol, fmt::format("batch script reply: entry {}: {}", i,
                                                                         replies.to_string())));
      continue;
    }
    out[i].reserve(repeats);
    for (const auto& r : replies.elements) out[i].push_back(parse_outcome(r, items));
    // The checks after the first denial were denied alike (nothing changed in between).
    if (out[i].size() < repeats) {
      const Result<CheckOutcome>& last = out[i].back();
      if (last && last->decision.allowed) {
        out[i].resize(repeats, make_error(ErrorCode::protocol, "batch script reply: fewer replies than checks"));
      } else {
        out[i].resize(repeats, last);
      }
    }
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
