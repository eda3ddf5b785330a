#pragma once
// What a Redis store learns from the replies to its script calls, shared by every call of
// the store: reloads (NOSCRIPT, FUNCTION LOAD), functions refused, the server's clock, and
// whether calls currently succeed, for Store::health(): not ready while a script call got
// an error reply within the last error_window (e.g. OOM under maxmemory with noeviction,
// where denials and peeks still succeed between failing admissions), ready again once it has
// passed without one. Timeouts and connection failures are the connection's to report.
// Time is the store's clock, its steady reading. Internal; one per store. Thread-safe.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "ratekeeper/core/clock.hpp"
#include "ratekeeper/core/error.hpp"
#include "redis/reply.hpp"
#include "ratekeeper/store/open_store.hpp"
#include "server_clock.hpp"

namespace ratekeeper::store::detail {

class ScriptHealth {
 public:
  // `clock` nullptr: the system clock.
  explicit ScriptHealth(ReplyHealthOptions options = {}, const Clock* clock = nullptr);

  // A NOSCRIPT reply, about to be answered with EVAL.
  void reloaded() noexcept { noscript_reloads_.fetch_add(1, std::memory_order_relaxed); }
  // The library of functions loaded on a server that did not have it (FUNCTION LOAD).
  void library_loaded() noexcept { library_loads_.fetch_add(1, std::memory_order_relaxed); }
  // Functions refused by the server (`why`: its error reply): scripts from now on. Logged.
  void functions_refused(std::string_view why);
  // The final reply of one script call (after the EVAL, if any), however many checks it answers.
  void answered(const Result<redis::Reply>& reply);

  std::uint64_t noscript_reloads() const noexcept {
    return noscript_reloads_.load(std::memory_order_relaxed);
  }
  std::uint64_t library_loads() const noexcept { return library_loads_.load(std::memory_order_relaxed); }
  std::uint64_t functions_refusals() const noexcept {
    return functions_refusals_.load(std::memory_order_relaxed);
  }
  // Why the store is not ready (the last error reply, its text bounded), or nothing.
  std::optional<std::string> failing() const;

  // The Redis server's clock as this store knows it, shared by all its calls (every lane and
  // connection): one sample serves them all.
  ServerClock& server_clock() noexcept { return server_clock_; }

 private:
  ReplyHealthOptions options_;
  const Clock* clock_;
  ServerClock server_clock_;
  std::atomic<std::uint64_t> noscript_reloads_{0};
  std::atomic<std::uint64_t> library_loads_{0};
  std::atomic<std::uint64_t> functions_refusals_{0};
  std::atomic<bool> failed_{false};      // an error reply was ever recorded
  std::atomic<Micros> last_failure_{0};  // when, on the steady clock
  mutable std::mutex mu_;                // guards last_error_
  std::string last_error_;
};

// `text` made safe to show: valid UTF-8 (each invalid byte replaced by U+FFFD), at most
// `max_bytes` of it, cut at a character boundary and then followed by "...".
std::string bounded_text(std::string_view text, std::size_t max_bytes);

}  // namespace ratekeeper::store::detail
