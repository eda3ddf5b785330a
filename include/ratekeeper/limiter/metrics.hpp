#pragma once
// Limiter metrics in the Prometheus text exposition format: decisions by rule and outcome,
// near-limit decisions, store latency histogram, store errors by kind, suppressed decision log
// lines and the store's health. Recording is lock-free (relaxed atomics); thread-safe.

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ratekeeper/core/error.hpp"
#include "ratekeeper/core/time.hpp"
#include "ratekeeper/store/store.hpp"

namespace ratekeeper {
class MetricsWriter;
}

namespace ratekeeper::limiter {

enum class Outcome : std::uint8_t {
  allowed,
  denied,
  shadow_denied,   // a shadow rule would have denied; the request was not rejected for it
  failure_policy,  // the store failed and the rule's failure policy answered
};
inline constexpr std::size_t kOutcomeCount = 4;
std::string_view to_string(Outcome outcome) noexcept;

inline constexpr std::size_t kErrorCodeCount = 9;  // ErrorCode values

// What became of reservations (Limiter::reserve, settle, release, renew).
enum class Reservation : std::uint8_t {
  reserved,  // admitted and recorded, the estimate taken
  settled,   // settled to its actual cost
  unknown,   // a settlement that found nothing: settled already, never made, or expired
  failed,    // a settlement the store failed: the estimate stays
  unreported,  // a response that reported no valid cost (proxy): never settled, the estimate stays
  released,  // ended as reserved (its concurrency slots given back, its rate limits as estimated)
  renewed,   // a heartbeat that kept the reservation and its slots
  lost,      // a heartbeat that found the reservation or a slot expired (the request holds none)
};
inline constexpr std::size_t kReservationCount = 8;
std::string_view to_string(Reservation r) noexcept;

class Metrics {
 public:
  // Upper bounds of the store latency histogram, in microseconds.
  static constexpr std::array<Micros, 14> kLatencyBuckets = {
      50,     100,    250,    500,     1'000,   2'500,   5'000,
      10'000, 25'000, 50'000, 100'000, 250'000, 500'000, 1'000'000};

  // One counter row per rule, by index (Rule order in the limiter).
  explicit Metrics(std::vector<std::string> rule_names);
  // Counters that continue `previous`'s (a limiter rebuilt from a reloaded configuration):
  // the rows of rules named as in `previous`, the store latency, store errors and suppressed
  // log lines are shared with it (counted once, by either); new rules start at zero.
  Metrics(std::vector<std::string> rule_names, const Metrics& previous);
  ~Metrics();

  void record_decision(std::size_t rule, Outcome outcome) noexcept;
  // An allowed decision whose remaining units are below 10% of the limit.
  void record_near_limit(std::size_t rule) noexcept;
  // An allowed decision that waits `delay` > 0 before the request is passed on (on_limit: delay).
  void record_delayed(std::size_t rule, Micros delay) noexcept;
  // A reservation event; `cost`: the estimate reserved, or the actual cost settled.
  void record_reservation(std::size_t rule, Reservation what, std::int64_t cost = 0) noexcept;
  void record_store_latency(Micros latency) noexcept;
  void record_store_error(ErrorCode code) noexcept;
  void record_log_suppressed(std::uint64_t lines) noexcept;

  std::uint64_t decisions(std::size_t rule, Outcome outcome) const noexcept;
  std::uint64_t near_limit(std::size_t rule) const noexcept;
  std::uint64_t delayed(std::size_t rule) const noexcept;
  std::uint64_t reservations(std::size_t rule, Reservation what) const noexcept;
  std::uint64_t store_errors(ErrorCode code) const noexcept;
  std::uint64_t store_latency_count() const noexcept;

  // The families, through `out`. Health and kind of the store are given by the caller
  // (Limiter::metrics_text does so); render() is the same as exposition text.
  void write(MetricsWriter& out, const store::StoreHealth& health, std::string_view store_kind) const;
  std::string render(const store::StoreHealth& health, std::string_view store_kind) const;

  const std::vector<std::string>& rule_names() const noexcept { return rule_names_; }

 private:
  struct RuleRow;
  struct Totals;  // the counters that are not per rule
  std::vector<std::string> rule_names_;
  std::vector<std::shared_ptr<RuleRow>> rows_;
  std::shared_ptr<Totals> totals_;
};

}  // namespace ratekeeper::limiter
