// LogLimit on a manual clock: a burst, then one line per 1/per_second; the next line written
// names how many were left out.

#include "ratekeeper/core/log_limit.hpp"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <functional>
#include <memory>
#include <sstream>
#include <string>

namespace ratekeeper {
namespace {

TEST(LogLimit, ABurstThenOneLinePerIntervalNamingTheLinesLeftOut) {
  ManualClock clock;
  LogLimit limit(/*per_second=*/2, /*burst=*/3, &clock);
  std::uint64_t suppressed = 99;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(limit.admit(suppressed)) << i;
    EXPECT_EQ(suppressed, 0u);
  }
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(limit.admit(suppressed)) << i;
  clock.advance(kMicrosPerSecond / 2 - 1);
  EXPECT_FALSE(limit.admit(suppressed));  // 6 left out so far
  clock.advance(1);
  ASSERT_TRUE(limit.admit(suppressed));
  EXPECT_EQ(suppressed, 6u);
  EXPECT_FALSE(limit.admit(suppressed));
  clock.advance(10 * kMicrosPerSecond);  // refills to the burst, no more
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limit.admit(suppressed)) << i;
  EXPECT_FALSE(limit.admit(suppressed));
}

// What report_left_out writes, through the default logger, while `run` runs.
std::string logged_during(const std::function<void()>& run) {
  std::ostringstream out;
  const auto previous = spdlog::default_logger();
  auto capture = std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(out));
  capture->set_pattern("%v");
  spdlog::set_default_logger(capture);
  run();
  spdlog::set_default_logger(previous);
  return out.str();
}

// The count of lines left out at the end of a burst is written on its own once the rate allows
// a line, not kept for a next line of the kind that may never come; once, and within the rate.
TEST(LogLimit, TheLinesLeftOutAtTheEndOfABurstAreReportedOnTheirOwn) {
  ManualClock clock;
  LogLimit limit("lines of the test's kind", /*per_second=*/1, /*burst=*/1, &clock);
  std::uint64_t suppressed = 0;
  ASSERT_TRUE(limit.admit(suppressed));
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(limit.admit(suppressed));
  const std::string line = "4 lines left out since the last: lines of the test's kind\n";
  // Too early: a line of the kind could not be written yet either.
  EXPECT_EQ(logged_during([] { LogLimit::report_left_out(); }).find("test's kind"), std::string::npos);
  clock.advance(kMicrosPerSecond);
  const auto reported = logged_during([] { LogLimit::report_left_out(); });
  EXPECT_NE(reported.find(line), std::string::npos) << reported;
  clock.advance(kMicrosPerSecond);
  EXPECT_EQ(logged_during([] { LogLimit::report_left_out(); }).find("test's kind"), std::string::npos);
  // The count starts again: the next line written names none left out.
  ASSERT_TRUE(limit.admit(suppressed));
  EXPECT_EQ(suppressed, 0u);
  // An unnamed limit is its callers' to report.
  LogLimit unnamed(1, 1, &clock);
  ASSERT_TRUE(unnamed.admit(suppressed));
  EXPECT_FALSE(unnamed.admit(suppressed));
  clock.advance(kMicrosPerSecond);
  EXPECT_EQ(logged_during([] { LogLimit::report_left_out(); }).find("1 lines left out"), std::string::npos);
}

}  // namespace
}  // namespace ratekeeper
