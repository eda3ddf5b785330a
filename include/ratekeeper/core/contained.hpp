#pragma once
// Exceptions must not end the process from an event-loop thread or a completion handler.
// Where code runs callbacks it does not own (the event loop, Redis completions, the HTTP
// server's handler), it runs them through contain(): an exception is caught, logged with where
// it happened (at most one line per second, with how many were left out) and counted, and the
// caller goes on. A request whose continuation threw is answered by its own owner (the HTTP
// server answers 500 for a responder dropped unanswered).
// Thread-safe.

#include <cstdint>
#include <string_view>
#include <utility>

namespace ratekeeper {

// Records the exception being handled (call only inside a catch block): logs and counts it.
void note_contained_exception(std::string_view where) noexcept;

// Exceptions contained since the process started.
std::uint64_t contained_exceptions() noexcept;

// Runs fn(); an exception is noted and swallowed. True when fn returned normally.
template <class F>
bool contain(std::string_view where, F&& fn) noexcept {
  try {
    std::forward<F>(fn)();
    return true;
  } catch (...) {
    note_contained_exception(where);
    return false;
  }
}

}  // namespace ratekeeper
