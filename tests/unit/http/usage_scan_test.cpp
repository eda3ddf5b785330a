// Reading a response body for its cost (http/usage_scan.hpp): a JSON body's field, or the last
// event of an event stream that holds it; whatever the reads that cut the body, and within
// bounds of memory.

#include "ratekeeper/http/usage_scan.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <string>

#include "ratekeeper/algorithms/lease.hpp"

namespace ratekeeper::http {
namespace {

std::optional<std::int64_t> scan(std::string_view body, bool events, std::size_t piece = 0) {
  UsageScanner s({"usage", "total_tokens"}, events);
  if (piece == 0) {
    s.feed(body);
  } else {
    for (std::size_t at = 0; at < body.size(); at += piece) s.feed(body.substr(at, piece));
  }
  return s.finish();
}

TEST(UsageScanner, AJsonBodyGivesItsFieldWhateverItsReads) {
  const std::string body = R"({"id":"c-1","usage":{"prompt_tokens":2,"total_tokens":30},"model":"m"})";
  for (std::size_t piece : {0, 1, 3, 64}) EXPECT_EQ(scan(body, false, piece), 30) << piece;
  EXPECT_EQ(scan(R"({"usage":{"total_tokens":0}})", false), 0);
  EXPECT_EQ(scan(R"({"usage":{"total_tokens":2199023255552}})", false), algorithms::kMaxCharged);
}

TEST(UsageScanner, AnythingButAnIntegerInRangeIsNoCost) {
  for (const char* body : {R"({"usage":{"total_tokens":-1}})", R"({"usage":{"total_tokens":1.5}})",
                           R"({"usage":{"total_tokens":"30"}})", R"({"usage":{"total_tokens":2199023255553}})",
                           R"({"usage":{"total_tokens":null}})", R"({"usage":30})", R"({"total_tokens":30})",
                           R"([{"usage":{"total_tokens":30}}])", R"({"usage":{"total_tokens":30})", "", "30"}) {
    EXPECT_EQ(scan(body, false), std::nullopt) << body;
  }
}

TEST(UsageScanner, AJsonBodyAboveItsBoundReportsNothing) {
  std::string body = R"({"usage":{"total_tokens":30},"pad":")";
  body += std::string(UsageScanner::kMaxJsonBody, 'x');
  body += "\"}";
  EXPECT_EQ(scan(body, false, 4096), std::nullopt);
}

TEST(UsageScanner, AnEventStreamGivesTheLastEventThatHoldsTheField) {
  const std::string stream =
      "data: {\"choices\":[{\"delta\":\"he\"}],\"usage\":null}\n\n"
      ": keep-alive\r\n\r\n"
      "event: chunk\r\ndata: {\"usage\":{\"total_tokens\":12}}\r\n\r\n"
      "data: {\"choices\":[],\n"
      "data: \"usage\":{\"total_tokens\":45}}\n\n"  // data lines of one event are joined
      "data: [DONE]\n\n";
  for (std::size_t piece : {0, 1, 2, 7, 100}) EXPECT_EQ(scan(stream, true, piece), 45) << piece;
  // The last event needs no blank line after it; other fields are not data.
  EXPECT_EQ(scan("data: {\"usage\":{\"total_tokens\":3}}", true), 3);
  EXPECT_EQ(scan("database: {\"usage\":{\"total_tokens\":3}}\n\n", true), std::nullopt);
  EXPECT_EQ(scan("data:{\"usage\":{\"total_tokens\":4}}\n\n", true), 4);
  EXPECT_EQ(scan("data: [DONE]\n\n", true), std::nullopt);
}

TEST(UsageScanner, AnEventAboveItsBoundIsSkippedAndTheRestRead) {
  std::string stream = "data: {\"usage\":{\"total_tokens\":8}}\n\n";
  stream += "data: " + std::string(UsageScanner::kMaxEventBytes, 'x') + " total_tokens\n\n";
  EXPECT_EQ(scan(stream, true, 4096), 8);
  stream += "data: {\"usage\":{\"total_tokens\":9}}\n\n";
  EXPECT_EQ(scan(stream, true, 4096), 9);
}

TEST(UsageScanner, FieldPathsAreDottedNames) {
  EXPECT_EQ(split_field_path("usage.total_tokens"), (std::vector<std::string>{"usage", "total_tokens"}));
  EXPECT_EQ(split_field_path("tokens"), (std::vector<std::string>{"tokens"}));
  for (const char* bad : {"", ".", "a..b", ".a", "a."}) EXPECT_EQ(split_field_path(bad), std::nullopt) << bad;
}

RC_GTEST_PROP(UsageScanner, ReadsCutAnywhereGiveTheCostOfTheWholeBody, ()) {
  const auto events = *rc::gen::arbitrary<bool>();
  const auto value = *rc::gen::inRange<std::int64_t>(0, 1'000'000);
  const auto noise = *rc::gen::container<std::string>(rc::gen::elementOf(std::string("ab{}\":\n\r data")));
  std::string body = events ? noise + "\n\ndata: {\"usage\":{\"total_tokens\":" + std::to_string(value) + "}}\n\n" + noise
                            : "{\"x\":\"" + std::string(noise.size(), 'n') + "\",\"usage\":{\"total_tokens\":" +
                                  std::to_string(value) + "}}";
  const auto piece = *rc::gen::inRange<std::size_t>(1, 40);
  const auto whole = scan(body, events);
  RC_ASSERT(scan(body, events, piece) == whole);
  if (!events) RC_ASSERT(whole == std::optional<std::int64_t>(value));
}

}  // namespace
}  // namespace ratekeeper::http
