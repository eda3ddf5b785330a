#include "refund_call.hpp"

#include <fmt/format.h>

#include <memory>
#include <string>
#include <string_view>

#include "../redis/sha1.hpp"
#include "ratekeeper/redis/circuit_breaker.hpp"
#include "ratekeeper/store/lua_scripts.hpp"

namespace ratekeeper::store::detail {
namespace {

constexpr std::size_t kDecisionFields = 5;
constexpr std::size_t kRefundFields = 1 + kDecisionFields;

struct Script {
  std::string_view name;
  std::string_view source;
  std::string sha;
};

// nullptr when the script is not embedded.
const Script* embedded(std::string_view name) {
  static const std::vector<Script> scripts = [] {
    std::vector<Script> out;
    for (std::string_view n : {"multi_at", "refund"}) {
      if (auto source = lua_script(n)) out.push_back({n, *source, redis::detail::sha1_hex(*source)});
    }
    return out;
  }();
  for (const auto& s : scripts) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

// One script call with owned arguments (numkeys, keys, then ARGV), sent as EVALSHA and,
// after NOSCRIPT, once as EVAL with the source.
struct Call {
  const Script* script = nullptr;
  std::vector<std::string> args;
  std::vector<std::string_view> argv;
  Micros deadline = 0;
  ScriptSender send;
  redis::ReplyCallback done;
  ScriptReplies* replies = nullptr;
  bool evaluated = false;
};

void send_call(std::shared_ptr<Call> call, bool eval) {
  call->evaluated = call->evaluated || eval;
  call->argv.clear();
  call->argv.reserve(2 + call->args.size());
  call->argv.push_back(eval ? std::string_view("EVAL") : std::string_view("EVALSHA"));
  call->argv.push_back(eval ? call->script->source : std::string_view(call->script->sha));
  for (const auto& a : call->args) call->argv.push_back(a);
  const Micros left = std::max<Micros>(1, call->deadline - SystemClock::instance().steady());
  // The sender keeps `call` (and so the argument vector) alive until it answers.
  auto& send = call->send;
  send(call->argv, left, [call](Result<redis::Reply> reply) {
    if (needs_eval(reply, call->evaluated, call->replies)) {
      send_call(call, true);
      return;
    }
    auto done = std::move(call->done);
    done(std::move(reply));
  });
}

// numkeys, the keys, then `head`, then per item algorithm, capacity, period, cost and, when
// given, `tail[i]` (the conventions of multi.lua and refund.lua).
std::vector<std::string> script_args(std::span<const CheckItem> items, std::initializer_list<std::int64_t> head,
                                     std::span<const Micros> tail) {
  std::vector<std::string> args;
  args.reserve(1 + items.size() + head.size() + 5 * items.size());
  args.push_back(std::to_string(items.size()));
  for (const auto& item : items) args.push_back(item.key);
  for (std::int64_t v : head) args.push_back(std::to_string(v));
  for (std::size_t i = 0; i < items.size(); ++i) {
    const auto& item = items[i];
    args.push_back(std::to_string(static_cast<std::int64_t>(item.limit.algorithm)));
    args.push_back(std::to_string(item.limit.capacity));
    args.push_back(std::to_string(item.limit.period));
    args.push_back(std::to_string(item.cost));
    if (!tail.empty()) args.push_back(std::to_string(tail[i]));
  }
  return args;
}

void start(std::string_view script, std::vector<std::string> args, Micros deadline, ScriptSender send,
           redis::ReplyCallback done, ScriptReplies* replies) {
  const Script* s = embedded(script);
  if (s == nullptr) {
    done(make_error(ErrorCode::protocol, fmt::format("lua script {} is not embedded", script)));
    return;
  }
  auto call = std::make_shared<Call>();
  call->script = s;
  call->args = std::move(args);
  call->deadline = deadline;
  call->send = std::move(send);
  call->done = std::move(done);
  call->replies = replies;
  send_call(std::move(call), false);
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

void run_timed_check(std::span<const CheckItem> items, std::optional<Micros> now, Micros deadline, ScriptSender send,
                     TimedCallback done, ScriptReplies* replies) {
  const std::size_t n = items.size();
  start("multi_at", script_args(items, {now ? *now : -1}, {}), deadline, std::move(send),
        [n, done = std::move(done)](Result<redis::Reply> reply) {
          if (!reply) {
            done(std::unexpected(std::move(reply.error())));
            return;
          }
          done(parse_timed_outcome(*reply, n));
        },
        replies);
}

void run_refund(std::span<const CheckItem> items, std::span<const Micros> reset_after, Micros at,
                std::optional<Micros> now, Micros deadline, ScriptSender send, RefundCallback done,
                ScriptReplies* replies) {
  const std::size_t n = items.size();
  start("refund", script_args(items, {at, now ? *now : -1}, reset_after), deadline, std::move(send),
        [n, done = std::move(done)](Result<redis::Reply> reply) {
          if (!reply) {
            done(std::unexpected(std::move(reply.error())));
            return;
          }
          done(parse_refund(*reply, n));
        },
        replies);
}

}  // namespace ratekeeper::store::detail
