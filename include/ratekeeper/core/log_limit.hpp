#pragma once
// Bounds the log lines of one kind of event (a failure repeated by every request): a burst,
// then at most `per_second` lines a second; the lines left out are counted and the next line
// written says how many. A limit given the name of its kind also has that count written on its
// own when no next line comes (report_left_out): the end of a burst is never lost.
// Thread-safe.

#include <cstdint>
#include <mutex>
#include <string_view>

#include "ratekeeper/core/clock.hpp"

namespace ratekeeper {

class LogLimit {
 public:
  explicit LogLimit(double per_second = 1, double burst = 5, const Clock* clock = nullptr);
  // `what`: the lines' kind, e.g. "upstream failures (502, 504)", with static storage.
  explicit LogLimit(std::string_view what, double per_second = 1, double burst = 5, const Clock* clock = nullptr);
  ~LogLimit();
  LogLimit(const LogLimit&) = delete;
  LogLimit& operator=(const LogLimit&) = delete;

  // Whether to write a line now; when it is, `suppressed` is set to the number of lines left
  // out since the last one written.
  bool admit(std::uint64_t& suppressed) noexcept;

  // For every named limit with lines left out since its last line, once the rate allows a
  // line: a warning "N lines left out since: <what>", and the count starts again from zero.
  // The server calls it every second; returns the lines written.
  static std::size_t report_left_out();

 private:
  std::mutex mu_;
  const Clock& clock_;
  std::string_view what_;
  double per_second_;
  double burst_;
  double tokens_;
  Micros last_ = 0;
  std::uint64_t suppressed_ = 0;
};

}  // namespace ratekeeper
