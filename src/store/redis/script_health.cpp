#include "script_health.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>


namespace ratekeeper::store::detail {
namespace {

// Enough for any message Redis or a script writes, bounded whatever a reply holds.
constexpr std::size_t kMaxErrorBytes = 256;

// The length of the valid UTF-8 sequence at the start of `s` (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF), or 0 when it is not one.
std::size_t utf8_sequence(std::string_view s) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b = byte(0);
  if (b < 0x80) return 1;
  std::size_t n = 0;
  unsigned char low = 0x80, high = 0xBF;  // the range of the second byte
  if (b >= 0xC2 && b <= 0xDF) {
    n = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    n = 3;
    if (b == 0xE0) low = 0xA0;
    if (b == 0xED) high = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    n = 4;
    if (b == 0xF0) low = 0x90;
    if (b == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (s.size() < n || byte(1) < low || byte(1) > high) return 0;
  for (std::size_t i = 2; i < n; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
  }
  return n;
}

}  // namespace

std::string bounded_text(std::string_view text, std::size_t max_bytes) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  std::string out;
  out.reserve(std::min(text.size(), max_bytes) + 3);
  while (!text.empty()) {
    const std::size_t n = utf8_sequence(text);
    const std::string_view piece = n > 0 ? text.substr(0, n) : kReplacement;
    if (out.size() + piece.size() > max_bytes) {
      out += "...";
      break;
    }
    out += piece;
    text.remove_prefix(n > 0 ? n : 1);
  }
  return out;
}

ScriptHealth::ScriptHealth(ReplyHealthOptions options, const Clock* clock)
    : options_(options), clock_(&clock_or_system(clock)) {}

void ScriptHealth::answered(const Result<redis::Reply>& reply) {
  if (!reply || !reply->is_error()) return;
  std::string text = bounded_text(reply->str, kMaxErrorBytes);
  {
    std::lock_guard lock(mu_);
    last_error_ = std::move(text);
  }
  last_failure_.store(clock_->steady(), std::memory_order_release);
  failed_.store(true, std::memory_order_release);
}

std::optional<std::string> ScriptHealth::failing() const {
  if (!failed_.load(std::memory_order_acquire)) return std::nullopt;
  const Micros at = last_failure_.load(std::memory_order_acquire);
  if (clock_->steady() - at >= options_.error_window) return std::nullopt;
  std::lock_guard lock(mu_);
  return fmt::format("redis answered a script call with an error within the last {} ms: {}",
                     options_.error_window / kMicrosPerMilli, last_error_);
}

void ScriptHealth::functions_refused(std::string_view why) {
  functions_refusals_.fetch_add(1, std::memory_order_relaxed);
  spdlog::warn("redis: functions cannot be used ({}): scripts (EVALSHA) from now on",
               bounded_text(why, kMaxErrorBytes));
}

}  // namespace ratekeeper::store::detail
