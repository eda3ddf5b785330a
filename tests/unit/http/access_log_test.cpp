// The access log's line: one JSON object, whatever bytes the request's method and target
// hold (control characters escaped, bytes that are not UTF-8 written as U+FFFD), the time in
// local time with its zone's offset.

#include "ratekeeper/http/access_log.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "support/doc_blocks.hpp"
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

// A write the file refuses (a full disk: /dev/full) loses its lines: they count as dropped,
// not written.
TEST(AccessLogFile, LinesAFullDiskLosesCountAsDropped) {
  auto log = AccessLog::open(AccessLogOptions{.path = "/dev/full", .max_lines_per_second = 0});
  ASSERT_TRUE(log) << log.error().message;
  (*log)->write(record("GET", "/"));
  (*log)->write(record("GET", "/again"));
  for (int i = 0; i < 100 && (*log)->lines_dropped() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ((*log)->lines_dropped(), 2u);
  EXPECT_EQ((*log)->lines_written(), 0u);
}

// The line docs/configuration.md shows has the fields the log writes, in its order.
TEST(AccessLogLine, TheDocumentedLineIsOneTheLogWrites) {
  const auto blocks = testing::fenced_blocks(std::filesystem::path(RATEKEEPER_SOURCE_DIR) / "docs/configuration.md");
  const testing::FencedBlock* documented = nullptr;
  for (const auto& b : blocks) {
    if (b.language == "json" && b.text.find("\"duration_ms\"") != std::string::npos) documented = &b;
  }
  ASSERT_NE(documented, nullptr);
  const auto doc = json::parse(documented->text);
  const auto written = json::parse(AccessLog::format(record("GET", "/api/data")));
  std::vector<std::string> doc_keys, written_keys;
  for (const auto& [k, v] : doc.items()) doc_keys.push_back(k);
  for (const auto& [k, v] : written.items()) written_keys.push_back(k);
  EXPECT_EQ(doc_keys, written_keys);
  for (const auto& [k, v] : written.items()) EXPECT_EQ(doc[k].type(), v.type()) << k;
}

}  // namespace
}  // namespace ratekeeper::http
