#pragma once
// Per-identity overrides: one identity's limits under one rule multiplied by a factor
// ("customer 42: 10× the default", "this scraper: 0.1×"), set at runtime without a reload and
// shared by every instance through the store: the entries of the shared table
// <prefix>:{overrides} (Store::read_table). Each instance holds the table in process and reads
// it again only when its version moved (Overrides::refresh; `serve` refreshes every
// `overrides.refresh`, 1 s by default): a change reaches every instance within one refresh,
// and a decision asks the store for nothing more than without overrides. An override removed
// (or never set) leaves the rule's own limits.
//
// Scaling (scale_limit): a window's or a concurrency limit's capacity is multiplied; a token
// bucket's capacity is multiplied and its refill interval divided (so both its burst and its
// rate scale); the period of a window and the slot_ttl stay. Results are rounded to whole
// numbers and kept within Limit::make's bounds, and a capacity never falls below the rule's
// cost (at least 1). The state already counted stays: a count of 80 under a limit of 100
// raised to 1000 leaves 920.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ratekeeper/algorithms/limit.hpp"
#include "ratekeeper/core/error.hpp"
#include "ratekeeper/core/shared_value.hpp"
#include "ratekeeper/limiter/rule.hpp"

namespace ratekeeper {
class MetricsWriter;
}
namespace ratekeeper::store {
class Store;
}

namespace ratekeeper::limiter {

inline constexpr double kMinOverrideFactor = 0.001;
inline constexpr double kMaxOverrideFactor = 1'000'000;
inline constexpr std::size_t kMaxOverrideNoteBytes = 256;
// The latest `set_at` an entry may hold (µs, 9999-12-31T23:59:59Z): the admin's list writes it
// as a date.
inline constexpr Micros kMaxOverrideSetAt = Micros{253'402'300'799} * kMicrosPerSecond;
// The most overrides the table holds (a write of one more is refused).
inline constexpr std::size_t kMaxOverrides = 10'000;

struct Override {
  std::string rule;
  std::string identity;  // as the rule resolves it: "user:42", "ip:192.0.2.7", "org:acme"
  double factor = 1;     // in [kMinOverrideFactor, kMaxOverrideFactor]
  std::string note;      // why: free text, at most kMaxOverrideNoteBytes
  std::string set_by;    // who: the admin call's peer address
  Micros set_at = 0;     // when: the wall clock, µs since the epoch
};

// The factor, note and identity of `o` as an override can hold them (the rule is the caller's
// to check); the error names the field.
Result<void> validate_override(const Override& o);

// The table's entry of an override: its field "<rule>:<identity>" (a rule's name holds no
// ':') and its value, JSON {"factor", "note", "set_by", "set_at_us"}; and back.
std::string override_field(std::string_view rule, std::string_view identity);
std::string override_value(const Override& o);
Result<Override> parse_override(std::string_view field, std::string_view value);

// `limit` scaled by `factor` (see above); its capacity at least max(1, min_capacity).
algorithms::Limit scale_limit(const algorithms::Limit& limit, double factor, std::int64_t min_capacity);
Policy scale_policy(const Policy& policy, double factor, std::int64_t min_capacity);

// The overrides in effect in this process: a snapshot of the shared table, replaced whole by
// refresh(). Shared by every generation of a configuration (Limiter::share_overrides).
// Thread-safe.
class Overrides {
 public:
  struct Table {
    std::int64_t version = 0;
    // rule → identity → override
    std::map<std::string, std::unordered_map<std::string, Override>, std::less<>> by_rule;
    std::size_t size = 0;

    const Override* find(std::string_view rule, std::string_view identity) const;
  };

  // nullptr while no override is in effect: the hot path pays one atomic load then.
  std::shared_ptr<const Table> table() const {
    if (!any_.load(std::memory_order_acquire)) return nullptr;
    return table_.load();
  }
  std::int64_t version() const noexcept { return version_.load(std::memory_order_relaxed); }

  // Reads the shared table under `key` from `store` when its version moved from the one held,
  // and puts it in effect. Answers whether it changed. Entries that do not parse are left out,
  // counted and logged (rate-bounded). A failure keeps the table held. `done` is called
  // exactly once, possibly inline, possibly on a store thread.
  void refresh(store::Store& store, std::string key, std::function<void(Result<bool>)> done);
  // Puts `entries` (the whole table at `version`) in effect. Returns how many did not parse.
  std::size_t apply(std::int64_t version, const std::vector<std::pair<std::string, std::string>>& entries);

  // ratekeeper_overrides, ratekeeper_overrides_refreshes_total{result}.
  void write_metrics(MetricsWriter& out) const;

 private:
  SharedValue<const Table> table_{std::make_shared<const Table>()};
  std::atomic<bool> any_{false};
  std::atomic<std::int64_t> version_{0};
  std::mutex refresh_mu_;            // orders the tables put in effect
  std::uint64_t refresh_started_ = 0;  // under refresh_mu_
  std::uint64_t refresh_applied_ = 0;  // under refresh_mu_: the latest refresh put in effect
  std::atomic<std::uint64_t> refreshed_{0};
  std::atomic<std::uint64_t> unchanged_{0};
  std::atomic<std::uint64_t> failed_{0};
  std::atomic<std::uint64_t> invalid_{0};
};

}  // namespace ratekeeper::limiter
