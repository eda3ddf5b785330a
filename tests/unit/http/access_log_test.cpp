// The access log's line: one JSON object, whatever bytes the request's method and target
// hold (control characters escaped, bytes that are not UTF-8 written as U+FFFD), the time in
// local time with its zone's offset.

#include "ratekeeper/http/access_log.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <ctime>
#include <string>

namespace ratekeeper::http {
namespace {

using json = nlohmann::json;

AccessRecord record(std::string_view method, std::string_view path) {
  return AccessRecord{.time = 1'796'496'639'598'638,  // 2026-12-05T18:50:39.598 UTC
                      .client = "203.0.113.7",
                      .method = method,
                      .path = path,
                      .status = 429,
                      .rule = "api",
                      .outcome = RequestOutcome::rejected,
                      .duration = 412,
                      .upstream = std::nullopt,
                      .bytes = 52};
}

TEST(AccessLogLine, HasEveryFieldAsDocumented) {
  ::setenv("TZ", "UTC", 1);
  ::tzset();
  const auto line = AccessLog::format(record("GET", "/api/data?x=1"));
  EXPECT_EQ(line,
            R"({"time":"2026-12-05T18:50:39.598+00:00","client":"203.0.113.7","method":"GET","path":"/api/data?x=1",)"
            R"("status":429,"rule":"api","outcome":"rejected","duration_ms":0.412,"upstream_ms":null,"bytes":52})");
  ::unsetenv("TZ");
  ::tzset();
}

TEST(AccessLogLine, SaysHowManyLinesWereDroppedBeforeIt) {
  const auto parsed = json::parse(AccessLog::format(record("GET", "/"), 7));
  EXPECT_EQ(parsed["dropped"], 7);
}

TEST(AccessLogLine, HostileBytesStayOneValidJsonObject) {
  const std::string path = std::string("/a\"b\\c\n\r\x01") + "\xff\x83\x83" + "\xc3\xa9" + "\xed\xa0\x80" + "\xf4\x90\x80\x80";
  const auto line = AccessLog::format(record("G\tET", path));
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const auto parsed = json::parse(line);  // throws when not JSON
  EXPECT_EQ(parsed["method"], "G\tET");
  // Quotes, backslashes and controls kept as escapes; é kept; a lone 0xff, a stray
  // continuation byte, a surrogate and a code point above U+10FFFF each replaced.
  EXPECT_EQ(parsed["path"].get<std::string>().substr(0, 9), "/a\"b\\c\n\r\x01");
  EXPECT_NE(parsed["path"].get<std::string>().find("\xc3\xa9"), std::string::npos);
  EXPECT_EQ(parsed["path"].get<std::string>().find("\xff"), std::string::npos);
  EXPECT_EQ(parsed["path"].get<std::string>().find("\xed\xa0\x80"), std::string::npos);
}

TEST(AccessLogLine, WithoutRuleOrOutcomeTheyAreNull) {
  auto r = record("GET", "/metrics");
  r.rule = {};
  r.outcome = std::nullopt;
  r.upstream = 2500;
  const auto parsed = json::parse(AccessLog::format(r));
  EXPECT_TRUE(parsed["rule"].is_null());
  EXPECT_TRUE(parsed["outcome"].is_null());
  EXPECT_DOUBLE_EQ(parsed["upstream_ms"].get<double>(), 2.5);
}

}  // namespace
}  // namespace ratekeeper::http
