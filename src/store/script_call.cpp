#include "script_call.hpp"

#include <fmt/format.h>

#include <array>
#include <charconv>

#include "../redis/sha1.hpp"
#include "ratekeeper/algorithms/step.hpp"
#include "ratekeeper/redis/circuit_breaker.hpp"
#include "ratekeeper/store/lua_scripts.hpp"

namespace ratekeeper::store::detail {

bool answered_locally(std::span<const CheckItem> items, std::optional<Micros> now,
                      const CheckCallback& done) {
  if (items.empty()) {
    done(CheckOutcome{algorithms::combine({}), {}});
    return true;
  }
  if (auto ok = validate_check(items, now); !ok) {
    done(std::unexpected(ok.error()));
    return true;
  }
  return false;
}

redis::ConnectionOptions connection_options(const StoreOptions& options, const redis::Url& url) {
  redis::ConnectionOptions c;
  if (!url.endpoints.empty()) c.endpoint = url.endpoints.front();
  c.credentials = url.credentials;
  c.db = url.db;
  c.connect_timeout = options.connect_timeout;
  c.command_timeout = options.command_timeout;
  c.reconnect_min = options.reconnect_min;
  c.reconnect_max = options.reconnect_max;
  c.breaker.failures = options.breaker_failures;
  c.breaker.open_for = options.breaker_open_for;
  return c;
}

ReplyHealthOptions reply_health_options(const StoreOptions& options) {
  return {options.error_window, options.clock};
}

namespace {

constexpr std::size_t kDecisionFields = 5;
constexpr std::size_t kNumberChars = 24;

std::string_view append_number(std::string& buf, std::int64_t v) {
  char tmp[kNumberChars];
  auto [end, ec] = std::to_chars(tmp, tmp + sizeof tmp, v);
  (void)ec;
  const std::size_t start = buf.size();
  buf.append(tmp, end);
  return std::string_view(buf).substr(start);
}

std::vector<EmbeddedScript> load_scripts() {
  std::vector<EmbeddedScript> out;
  for (std::string_view name :
       {"token_bucket", "sliding_window_log", "sliding_window_counter", "fixed_window", "multi", "batch"}) {
    if (auto source = lua_script(name)) out.push_back({name, *source, redis::detail::sha1_hex(*source)});
  }
  return out;
}

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

Result<void> validate_check(std::span<const CheckItem> items, std::optional<Micros> now) {
  if (now && *now < 0) {
    return make_error(ErrorCode::invalid_argument, fmt::format("now must be >= 0, got {}", *now));
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    const auto& item = items[i];
    if (auto ok = algorithms::Limit::make(item.limit.algorithm, item.limit.capacity, item.limit.period); !ok) {
      return std::unexpected(ok.error());
    }
    if (auto ok = algorithms::validate_cost(item.limit, item.cost); !ok) return std::unexpected(ok.error());
    for (std::size_t j = 0; j < i; ++j) {
      if (items[j].key == item.key) {
        return make_error(ErrorCode::invalid_argument,
                          fmt::format("key '{}' appears twice in one check", item.key));
      }
    }
  }
  return {};
}

namespace {

const EmbeddedScript* script_named(std::string_view name) noexcept {
  static const std::vector<EmbeddedScript> scripts = load_scripts();
  for (const auto& s : scripts) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

}  // namespace

const EmbeddedScript* script_for(std::span<const CheckItem> items) noexcept {
  return script_named(items.size() == 1 ? algorithms::to_string(items[0].limit.algorithm) : "multi");
}

ScriptCall::ScriptCall(std::vector<CheckItem> items, std::optional<Micros> now)
    : items_(std::move(items)), now_(now) {}

Result<std::span<const std::string_view>> ScriptCall::argv(bool eval) {
  const EmbeddedScript* s = script_for(items_);
  if (s == nullptr) {
    return make_error(ErrorCode::protocol, fmt::format("lua script for {} item(s) is not embedded", items_.size()));
  }
  evaluated_ = evaluated_ || eval;
  // EVALSHA sha numkeys keys... args... (single.lua: capacity period cost now; multi.lua:
  // now, then algorithm capacity period cost per key).
  const std::size_t n = items_.size();
  numbers_.clear();
  numbers_.reserve((2 + 4 * n) * kNumberChars);  // no reallocation: views stay valid
  argv_.clear();
  argv_.reserve(3 + n + 1 + 4 * n);
  argv_.push_back(eval ? std::string_view("EVAL") : std::string_view("EVALSHA"));
  argv_.push_back(eval ? s->source : std::string_view(s->sha));
  argv_.push_back(append_number(numbers_, static_cast<std::int64_t>(n)));
  for (const auto& item : items_) argv_.push_back(item.key);
  const std::int64_t now = now_ ? *now_ : -1;
  if (n == 1) {
    const auto& item = items_[0];
    argv_.push_back(append_number(numbers_, item.limit.capacity));
    argv_.push_back(append_number(numbers_, item.limit.period));
    argv_.push_back(append_number(numbers_, item.cost));
    argv_.push_back(append_number(numbers_, now));
  } else {
    argv_.push_back(append_number(numbers_, now));
    for (const auto& item : items_) {
      argv_.push_back(append_number(numbers_, static_cast<std::int64_t>(item.limit.algorithm)));
      argv_.push_back(append_number(numbers_, item.limit.capacity));
      argv_.push_back(append_number(numbers_, item.limit.period));
      argv_.push_back(append_number(numbers_, item.cost));
    }
  }
  return std::span<const std::string_view>(argv_);
}

Result<std::span<const std::string_view>> BatchArgv::build(std::span<const BatchEntry> entries,
                                                           std::optional<Micros> now, bool eval) {
  const EmbeddedScript* s = script_named("batch");
  if (s == nullptr) return make_error(ErrorCode::protocol, "lua script batch is not embedded");
  std::size_t keys = 0;
  for (const auto& e : entries) keys += e.items->size();
  // EVALSHA sha numkeys keys... now entries, then per entry: n repeats, then per key:
  // algorithm capacity period cost.
  numbers_.clear();
  numbers_.reserve((3 + 2 * entries.size() + 4 * keys) * kNumberChars);  // no reallocation: views stay valid
  argv_.clear();
  argv_.reserve(3 + keys + 2 + 2 * entries.size() + 4 * keys);
  argv_.push_back(eval ? std::string_view("EVAL") : std::string_view("EVALSHA"));
  argv_.push_back(eval ? s->source : std::string_view(s->sha));
  argv_.push_back(append_number(numbers_, static_cast<std::int64_t>(keys)));
  for (const auto& e : entries) {
    for (const auto& item : *e.items) argv_.push_back(item.key);
  }
  argv_.push_back(append_number(numbers_, now ? *now : -1));
  argv_.push_back(append_number(numbers_, static_cast<std::int64_t>(entries.size())));
  for (const auto& e : entries) {
    argv_.push_back(append_number(numbers_, static_cast<std::int64_t>(e.items->size())));
    argv_.push_back(append_number(numbers_, static_cast<std::int64_t>(e.repeats)));
    for (const auto& item : *e.items) {
      argv_.push_back(append_number(numbers_, static_cast<std::int64_t>(item.limit.algorithm)));
      argv_.push_back(append_number(numbers_, item.limit.capacity));
      argv_.push_back(append_number(numbers_, item.limit.period));
      argv_.push_back(append_number(numbers_, item.cost));
    }
  }
  return std::span<const std::string_view>(argv_);
}

namespace {

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
      out.push_back(CheckOutcome{d, {d}});
    }
  }
  if (admitted < repeats) {
    auto denial = to_decision(reply.elements.data() + at);
    if (!denial) return malformed();
    out.resize(e.repeats, CheckOutcome{*denial, {*denial}});
  }
  return out;
}

}  // namespace

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

bool needs_eval(const Result<redis::Reply>& reply, bool evaluated, ScriptReplies* replies) {
  const bool again = !evaluated && is_noscript(reply);
  if (replies != nullptr) {
    if (again) {
      replies->reloaded();
    } else {
      replies->answered(reply);
    }
  }
  return again;
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

}  // namespace ratekeeper::store::detail

namespace ratekeeper::store::detail {
namespace {

struct ScriptRun {
  std::shared_ptr<ScriptCall> call;
  Micros deadline = 0;
  ScriptSender send;
  CheckCallback done;
  ScriptReplies* replies = nullptr;
};

void run_step(std::shared_ptr<ScriptRun> run, bool eval) {
  auto argv = run->call->argv(eval);
  if (!argv) {
    auto done = std::move(run->done);
    done(std::unexpected(argv.error()));
    return;
  }
  const Micros left = std::max<Micros>(1, run->deadline - SystemClock::instance().steady());
  // The sender keeps `run` (and so the argument vector) alive until it answers.
  auto& send = run->send;
  send(*argv, left, [run](Result<redis::Reply> reply) {
    if (needs_eval(reply, run->call->evaluated(), run->replies)) {
      run_step(run, true);
      return;
    }
    auto done = std::move(run->done);
    if (!reply) {
      done(std::unexpected(std::move(reply.error())));
      return;
    }
    done(parse_outcome(*reply, run->call->items().size()));
  });
}

}  // namespace

void run_script(std::shared_ptr<ScriptCall> call, Micros deadline, ScriptSender send, CheckCallback done,
                ScriptReplies* replies) {
  auto run = std::make_shared<ScriptRun>(ScriptRun{std::move(call), deadline, std::move(send), std::move(done),
                                                   replies});
  run_step(std::move(run), false);
}

}  // namespace ratekeeper::store::detail
