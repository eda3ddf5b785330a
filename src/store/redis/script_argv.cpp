#include "script_argv.hpp"

#include <charconv>

#include "ratekeeper/algorithms/limit.hpp"

namespace ratekeeper::store::detail {
namespace {

constexpr std::size_t kNumberChars = 24;

}  // namespace

void ScriptArgv::start(std::string_view name, std::size_t numbers, std::size_t count) {
  script_ = find_lua_script(name);
  numbers_.clear();
  numbers_.reserve(numbers * kNumberChars);  // no reallocation: the views stay valid
  argv_.clear();
  argv_.reserve(2 + count);
  now_at_ = 0;
  argv_.emplace_back("EVALSHA");
  argv_.push_back(script_ != nullptr ? script_->sha : std::string_view());
}

void ScriptArgv::now_number(std::optional<Micros> now) {
  number(now ? *now : -1);
  now_at_ = argv_.size() - 1;
  now_ = argv_.back();
}

void ScriptArgv::bound(Micros deadline) {
  if (now_at_ == 0) return;
  bounded_.assign(now_);
  bounded_ += ':';
  char tmp[kNumberChars];
  auto [end, ec] = std::to_chars(tmp, tmp + sizeof tmp, deadline);
  (void)ec;
  bounded_.append(tmp, end);
  argv_[now_at_] = bounded_;
}

void ScriptArgv::number(std::int64_t v) {
  char tmp[kNumberChars];
  auto [end, ec] = std::to_chars(tmp, tmp + sizeof tmp, v);
  (void)ec;
  const std::size_t at = numbers_.size();
  numbers_.append(tmp, end);
  argv_.push_back(std::string_view(numbers_).substr(at));
}

void ScriptArgv::items(std::span<const CheckItem> items, std::span<const Micros> tail, bool max_delays) {
  for (std::size_t i = 0; i < items.size(); ++i) {
    const auto& item = items[i];
    number(static_cast<std::int64_t>(item.limit.algorithm));
    number(item.limit.capacity);
    number(item.limit.period);
    number(item.cost);
    if (max_delays) number(item.max_delay);
    if (!tail.empty()) number(tail[i]);
  }
}

void ScriptArgv::check(std::span<const CheckItem> items, std::optional<Micros> now) {
  const std::size_t n = items.size();
  if (may_delay(items)) {
    start("multi_delay", 2 + 5 * n, 2 + 6 * n);
    number(static_cast<std::int64_t>(n));
    for (const auto& item : items) argv_.push_back(item.key);
    now_number(now);
    this->items(items, {}, true);
    return;
  }
  // A concurrency limit has no script of its own: "multi" checks it.
  if (n == 1 && items[0].limit.algorithm != algorithms::Algorithm::concurrency) {
    start(algorithms::to_string(items[0].limit.algorithm), 5, 6);
    number(1);
    argv_.push_back(items[0].key);
    number(items[0].limit.capacity);
    number(items[0].limit.period);
    number(items[0].cost);
    now_number(now);
    return;
  }
  start("multi", 2 + 4 * n, 2 + 5 * n);
  number(static_cast<std::int64_t>(n));
  for (const auto& item : items) argv_.push_back(item.key);
  now_number(now);
  this->items(items, {});
}

void ScriptArgv::multi_at(std::span<const CheckItem> items, std::optional<Micros> now) {
  const std::size_t n = items.size();
  start("multi_at", 2 + 4 * n, 2 + 5 * n);
  number(static_cast<std::int64_t>(n));
  for (const auto& item : items) argv_.push_back(item.key);
  now_number(now);
  this->items(items, {});
}

void ScriptArgv::refund(std::span<const CheckItem> items, std::span<const Micros> reset_after, Micros at,
                        std::optional<Micros> now) {
  const std::size_t n = items.size();
  start("refund", 3 + 5 * n, 3 + 6 * n);
  number(static_cast<std::int64_t>(n));
  for (const auto& item : items) argv_.push_back(item.key);
  number(at);
  number(now ? *now : -1);
  this->items(items, reset_after);
}

void ScriptArgv::batch(std::span<const BatchEntry> entries, std::optional<Micros> now) {
  // Each distinct limit (algorithm, capacity, period, cost) once; per item its number.
  limits_.clear();
  limit_numbers_.clear();
  std::size_t keys = 0;
  std::size_t singles = 0;
  for (const auto& e : entries) {
    keys += e.items->size();
    if (e.items->size() == 1 && e.repeats == 1) ++singles;
    for (const auto& item : *e.items) {
      std::size_t i = 0;
      while (i < limits_.size() &&
             !(limits_[i]->limit == item.limit && limits_[i]->cost == item.cost)) {
        ++i;
      }
      if (i == limits_.size()) limits_.push_back(&item);
      limit_numbers_.push_back(static_cast<std::uint32_t>(i + 1));
    }
  }
  const std::size_t general = entries.size() - singles;
  const std::size_t numbers = 3 + 4 * limits_.size() + singles + 3 * general + (keys - singles);
  start("batch", numbers, 1 + keys + numbers - 1);
  number(static_cast<std::int64_t>(keys));
  for (const auto& e : entries) {
    for (const auto& item : *e.items) argv_.push_back(item.key);
  }
  now_number(now);
  number(static_cast<std::int64_t>(limits_.size()));
  for (const CheckItem* l : limits_) {
    number(static_cast<std::int64_t>(l->limit.algorithm));
    number(l->limit.capacity);
    number(l->limit.period);
    number(l->cost);
  }
  std::size_t at = 0;
  for (const auto& e : entries) {
    const std::size_t n = e.items->size();
    if (n == 1 && e.repeats == 1) {
      number(limit_numbers_[at++]);
      continue;
    }
    number(0);
    number(static_cast<std::int64_t>(n));
    number(static_cast<std::int64_t>(e.repeats));
    for (std::size_t k = 0; k < n; ++k) number(limit_numbers_[at++]);
  }
}

void ScriptArgv::call(std::string_view script, std::span<const std::string> keys, std::span<const std::string> args,
                      std::optional<std::size_t> now_arg) {
  start(script, 1, 1 + keys.size() + args.size());
  number(static_cast<std::int64_t>(keys.size()));
  for (const auto& k : keys) argv_.push_back(k);
  for (const auto& a : args) argv_.push_back(a);
  if (now_arg && *now_arg < args.size()) {
    now_at_ = argv_.size() - args.size() + *now_arg;
    now_ = argv_[now_at_];
  }
}

std::span<const std::string_view> ScriptArgv::argv(Invocation how) noexcept {
  if (script_ != nullptr) {
    switch (how) {
      case Invocation::fcall:
        argv_[0] = "FCALL";
        argv_[1] = script_->function;
        break;
      case Invocation::evalsha:
        argv_[0] = "EVALSHA";
        argv_[1] = script_->sha;
        break;
      case Invocation::eval:
        argv_[0] = "EVAL";
        argv_[1] = script_->source;
        break;
    }
  }
  return argv_;
}

}  // namespace ratekeeper::store::detail
