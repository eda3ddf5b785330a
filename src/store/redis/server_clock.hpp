#pragma once
// The Redis server's clock as seen from this host, so that a script call can carry its
// deadline on the server's clock (ScriptArgv::bound): a call that waited in a stopped or busy
// server past the moment its caller gave up does nothing there. Estimated from TIME: a
// sample sent at s0 and answered at s1 (this host's steady clock) with the server's T puts
// the offset T − s in [T − s1, T − s0]; the lower end is kept, so a deadline is never later on
// the server than here (a call may be cut up to one round trip early, never run late). The
// sample with the shortest round trip wins, and one is taken every kRefresh.
// Real steady time: the store's clock (a manual one in tests) measures budgets, not this.
// Internal to the store layer. Thread-safe.

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>

#include "ratekeeper/core/time.hpp"
#include "redis/reply.hpp"

namespace ratekeeper::store::detail {

class ServerClock {
 public:
  static constexpr Micros kRefresh = 10 * kMicrosPerSecond;  // a sample this often
  static constexpr Micros kKeep = 60 * kMicrosPerSecond;     // a better one is kept this long

  // This host's steady clock (µs).
  static Micros steady_now() noexcept;

  // The server's clock reading `left` µs from now, at the latest; nothing before the first
  // sample.
  std::optional<Micros> deadline_in(Micros left) const noexcept;

  // Whether a sample is due (none in flight, and none yet or the last taken kRefresh ago);
  // true: the caller sends TIME, then calls sampled() or failed().
  bool start_sample() noexcept;
  // The reply to a TIME sent at `sent` (steady_now()).
  void sampled(Micros sent, const redis::Reply& reply) noexcept;
  void failed() noexcept;

 private:
  static constexpr Micros kNone = INT64_MIN;
  std::atomic<Micros> offset_{kNone};  // the server's clock − steady_now(), lower bound
  std::atomic<bool> in_flight_{false};
  std::atomic<Micros> last_started_{kNone};
  std::mutex mu_;            // the kept sample's quality
  Micros kept_rtt_ = 0;
  Micros kept_at_ = kNone;
};

}  // namespace ratekeeper::store::detail
