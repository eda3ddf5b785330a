#pragma once
// Polls a condition in tests: true as soon as `ok()` holds, false when `limit` passes first.

#include <chrono>
#include <thread>

namespace ratekeeper::testing {

template <class F>
bool eventually(F ok, std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (ok()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return ok();
}

}  // namespace ratekeeper::testing
