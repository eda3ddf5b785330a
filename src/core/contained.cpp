#include "ratekeeper/core/contained.hpp"

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <string>
#include <typeinfo>

namespace ratekeeper {
namespace {

std::atomic<std::uint64_t> total{0};
std::atomic<std::uint64_t> unreported{0};
std::atomic<std::int64_t> last_report_ms{-1'000'000};

constexpr std::int64_t kReportIntervalMs = 1'000;

std::string describe_current() {
  try {
    throw;
  } catch (const std::exception& e) {
    return fmt::format("{}: {}", typeid(e).name(), e.what());
  } catch (...) {
    return "an exception of unknown type";
  }
}

std::int64_t steady_ms() noexcept {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void note_contained_exception(std::string_view where) noexcept {
  total.fetch_add(1, std::memory_order_relaxed);
  const auto now = steady_ms();
  auto last = last_report_ms.load(std::memory_order_relaxed);
  if (now - last < kReportIntervalMs ||
      !last_report_ms.compare_exchange_strong(last, now, std::memory_order_relaxed)) {
    unreported.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  try {
    const auto skipped = unreported.exchange(0, std::memory_order_relaxed);
    spdlog::error("exception contained in {}: {} (the process goes on{})", where,
                  describe_current(),
                  skipped ? fmt::format("; {} more since the last report", skipped) : "");
  } catch (...) {
    // Logging itself failed (out of memory): the count above still holds.
  }
}

std::uint64_t contained_exceptions() noexcept { return total.load(std::memory_order_relaxed); }

}  // namespace ratekeeper
