#include "ratekeeper/limiter/top_denied.hpp"

#include <algorithm>
#include <array>
#include <unordered_map>

namespace ratekeeper::limiter {

namespace {

constexpr Micros kMinute = 60 * kMicrosPerSecond;

// Looked up by string_view: a denial allocates only for an identity not yet counted.
struct Hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

struct Counter {
  std::uint64_t count = 0;  // an over-estimate by at most `error`
  std::uint64_t error = 0;
};

}  // namespace

// One minute of one rule's denials: at most `capacity` counters.
struct TopDenied::Minute {
  std::int64_t index = -1;  // now / kMinute; -1: never used
  std::uint64_t denials = 0;
  std::unordered_map<std::string, Counter, Hash, std::equal_to<>> counters;

  // The smallest count, 0 while there is room (an identity absent then was never denied).
  std::uint64_t floor(std::size_t capacity) const {
    if (counters.size() < capacity) return 0;
    std::uint64_t least = UINT64_MAX;
    for (const auto& [identity, c] : counters) least = std::min(least, c.count);
    return least;
  }
};

struct TopDenied::Rule {
  mutable std::mutex mu;
  std::array<Minute, kMinutes> minutes;
};

TopDenied::TopDenied(std::size_t rules, std::size_t capacity)
    : capacity_(std::max<std::size_t>(1, capacity)), rules_(std::make_unique<Rule[]>(rules)), count_(rules) {}

TopDenied::~TopDenied() = default;

void TopDenied::record(std::size_t rule, std::string_view identity, Micros now) {
  if (rule >= count_) return;
  const std::int64_t index = now / kMinute;
  Rule& r = rules_[rule];
  std::lock_guard lock(r.mu);
  Minute& m = r.minutes[static_cast<std::size_t>(index % kMinutes)];
  if (m.index != index) {
    m.index = index;
    m.denials = 0;
    m.counters.clear();
  }
  ++m.denials;
  if (const auto it = m.counters.find(identity); it != m.counters.end()) {
    ++it->second.count;
    return;
  }
  if (m.counters.size() < capacity_) {
    m.counters.emplace(std::string(identity), Counter{1, 0});
    return;
  }
  // Space-Saving: the least counted makes room; the newcomer inherits its count as its error.
  auto least = m.counters.begin();
  for (auto it = m.counters.begin(); it != m.counters.end(); ++it) {
    if (it->second.count < least->second.count) least = it;
  }
  const std::uint64_t inherited = least->second.count;
  m.counters.erase(least);
  m.counters.emplace(std::string(identity), Counter{inherited + 1, inherited});
}

TopDenied::Report TopDenied::top(std::size_t rule, int minutes, std::size_t n, Micros now) const {
  Report out;
  if (rule >= count_) return out;
  minutes = std::clamp(minutes, 1, kMinutes);
  const std::int64_t last = now / kMinute;
  const Rule& r = rules_[rule];
  std::lock_guard lock(r.mu);
  std::vector<const Minute*> window;
  for (const auto& m : r.minutes) {
    if (m.index >= 0 && m.index <= last && m.index > last - minutes) window.push_back(&m);
  }
  std::unordered_map<std::string_view, Entry> merged;
  for (const Minute* m : window) {
    out.denials += m->denials;
    for (const auto& [identity, c] : m->counters) {
      Entry& e = merged[identity];
      e.at_least += c.count - c.error;
      e.at_most += c.count;
    }
  }
  // In a minute where an identity has no counter, it had at most that minute's floor.
  for (const Minute* m : window) {
    const std::uint64_t floor = m->floor(capacity_);
    if (floor == 0) continue;
    for (auto& [identity, e] : merged) {
      if (!m->counters.contains(identity)) e.at_most += floor;
    }
  }
  out.top.reserve(merged.size());
  for (auto& [identity, e] : merged) {
    e.identity = std::string(identity);
    out.top.push_back(std::move(e));
  }
  std::sort(out.top.begin(), out.top.end(), [](const Entry& a, const Entry& b) {
    if (a.at_least != b.at_least) return a.at_least > b.at_least;
    if (a.at_most != b.at_most) return a.at_most > b.at_most;
    return a.identity < b.identity;
  });
  if (out.top.size() > n) out.top.resize(n);
  return out;
}

}  // namespace ratekeeper::limiter
