#include "server_clock.hpp"

#include <charconv>
#include <chrono>
#include <string_view>

namespace ratekeeper::store::detail {
namespace {

std::optional<Micros> integer(std::string_view text) noexcept {
  Micros v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 0) return std::nullopt;
  return v;
}

}  // namespace

Micros ServerClock::steady_now() noexcept {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::optional<Micros> ServerClock::deadline_in(Micros left) const noexcept {
  const Micros offset = offset_.load(std::memory_order_relaxed);
  if (offset == kNone) return std::nullopt;
  return steady_now() + left + offset;
}

bool ServerClock::start_sample() noexcept {
  const Micros now = steady_now();
  const Micros last = last_started_.load(std::memory_order_relaxed);
  if (last != kNone && now - last < kRefresh) return false;
  if (in_flight_.exchange(true, std::memory_order_acq_rel)) return false;
  last_started_.store(now, std::memory_order_relaxed);
  return true;
}

void ServerClock::sampled(Micros sent, const redis::Reply& reply) noexcept {
  const Micros received = steady_now();
  std::optional<Micros> seconds, micros;
  if (reply.is_array() && reply.elements.size() == 2) {
    seconds = integer(reply.elements[0].str);
    micros = integer(reply.elements[1].str);
  }
  if (seconds && micros && *seconds < INT64_MAX / kMicrosPerSecond && *micros < kMicrosPerSecond) {
    const Micros server = *seconds * kMicrosPerSecond + *micros;
    const Micros rtt = received - sent;
    std::lock_guard lock(mu_);
    // A round trip at most twice the kept one's (and 1 ms) replaces it; any does once it is old.
    if (kept_at_ == kNone || rtt <= 2 * kept_rtt_ + kMicrosPerMilli || received - kept_at_ >= kKeep) {
      kept_rtt_ = rtt;
      kept_at_ = received;
      offset_.store(server - received, std::memory_order_relaxed);
    }
  }
  in_flight_.store(false, std::memory_order_release);
}

void ServerClock::failed() noexcept { in_flight_.store(false, std::memory_order_release); }

}  // namespace ratekeeper::store::detail
