#pragma once
// The identities denied most often, per rule, over the last minutes: in process, one report
// per instance (an operator adds up the instances' reports, as Prometheus adds up their
// counters). Per rule and per minute, a Space-Saving sketch of `capacity` counters (Metwally,
// Agrawal, El Abbadi, 2005): an identity denied more than 1/capacity of a minute's denials is
// always among that minute's counters, and every count is exact within its stated error. So
// memory is bounded whatever the number of identities (a flood from made-up addresses fills the
// counters, it does not grow them). Thread-safe: one lock per rule, taken on denials only.

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "ratekeeper/core/time.hpp"

namespace ratekeeper::limiter {

class TopDenied {
 public:
  static constexpr std::size_t kDefaultCapacity = 64;
  static constexpr int kMinutes = 15;  // kept, the current one included

  // One sketch per rule, by index (Rule order in the limiter).
  explicit TopDenied(std::size_t rules, std::size_t capacity = kDefaultCapacity);
  ~TopDenied();

  // A denial of `identity` by rule `rule` at `now` (a steady reading).
  void record(std::size_t rule, std::string_view identity, Micros now);

  struct Entry {
    std::string identity;
    std::uint64_t at_least = 0;  // denials certainly counted for it
    std::uint64_t at_most = 0;   // what it may have had at most
  };
  struct Report {
    std::uint64_t denials = 0;   // every denial of the rule over the minutes (exact)
    std::vector<Entry> top;      // by at_least, then at_most, descending; at most `n`
  };
  // Over the last `minutes` (1..kMinutes, the current one included) before `now`.
  Report top(std::size_t rule, int minutes, std::size_t n, Micros now) const;

 private:
  struct Minute;
  struct Rule;
  std::size_t capacity_;
  std::unique_ptr<Rule[]> rules_;
  std::size_t count_;
};

}  // namespace ratekeeper::limiter
