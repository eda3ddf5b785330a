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
  argv_.emplace_back("EVALSHA");
  argv_.push_back(script_ != nullptr ? script_->sha : std::string_view());
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
    number(now ? *now : -1);
    this->items(items, {}, true);
    return;
  }
  if (n == 1) {
    start(algorithms::to_string(items[0].limit.algorithm), 5, 6);
    number(1);
    argv_.push_back(items[0].key);
    number(items[0].limit.capacity);
    number(items[0].limit.period);
    number(items[0].cost);
    number(now ? *now : -1);
    return;
  }
  start("multi", 2 + 4 * n, 2 + 5 * n);
  number(static_cast<std::int64_t>(n));
  for (const auto& item : items) argv_.push_back(item.key);
  number(now ? *now : -1);
  this->items(items, {});
}

void ScriptArgv::multi_at(std::span<const CheckItem> items, std::optional<Micros> now) {
  const std::size_t n = items.size();
  start("multi_at", 2 + 4 * n, 2 + 5 * n);
  number(static_cast<std::int64_t>(n));
  for (const auto& item : items) argv_.push_back(item.key);
  number(now ? *now : -1);
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
  std::size_t keys = 0;
  for (const auto& e : entries) keys += e.items->size();
  start("batch", 3 + 2 * entries.size() + 4 * keys, 3 + keys + 2 * entries.size() + 4 * keys);
  number(static_cast<std::int64_t>(keys));
  for (const auto& e : entries) {
    for (const auto& item : *e.items) argv_.push_back(item.key);
  }
  number(now ? *now : -1);
  number(static_cast<std::int64_t>(entries.size()));
  for (const auto& e : entries) {
    number(static_cast<std::int64_t>(e.items->size()));
    number(static_cast<std::int64_t>(e.repeats));
    items(*e.items, {});
  }
}

void ScriptArgv::call(std::string_view script, std::span<const std::string> keys, std::span<const std::string> args) {
  start(script, 1, 1 + keys.size() + args.size());
  number(static_cast<std::int64_t>(keys.size()));
  for (const auto& k : keys) argv_.push_back(k);
  for (const auto& a : args) argv_.push_back(a);
}

std::span<const std::string_view> ScriptArgv::argv(bool eval) noexcept {
  if (script_ != nullptr) {
    argv_[0] = eval ? std::string_view("EVAL") : std::string_view("EVALSHA");
    argv_[1] = eval ? script_->source : script_->sha;
  }
  return argv_;
}

}  // namespace ratekeeper::store::detail
