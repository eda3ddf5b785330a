// The server's own log (server/logging.hpp): times in local time with their zone's offset, and
// JSON lines that stay one valid JSON object whatever the message holds.

#include "logging.hpp"

#include <gtest/gtest.h>
#include <spdlog/details/log_msg.h>

#include <cstdlib>
#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "config.hpp"

namespace ratekeeper::server {
namespace {

// Sets TZ for the scope (POSIX form: "XYZ-5:30" is five and a half hours east of UTC).
class TimeZone {
 public:
  explicit TimeZone(const char* tz) {
    if (const char* old = std::getenv("TZ")) old_ = old;
    ::setenv("TZ", tz, 1);
    ::tzset();
  }
  ~TimeZone() {
    if (old_) {
      ::setenv("TZ", old_->c_str(), 1);
    } else {
      ::unsetenv("TZ");
    }
    ::tzset();
  }

 private:
  std::optional<std::string> old_;
};

TEST(Logging, TimesAreLocalWithTheirZonesOffset) {
  const auto at = std::chrono::system_clock::time_point(std::chrono::milliseconds(1'764'900'673'123));
  {
    TimeZone tz("XYZ-5:30");
    EXPECT_EQ(log_time(at), "2025-12-05T07:41:13.123+05:30");
  }
  {
    TimeZone tz("ABC+3");
    EXPECT_EQ(log_time(at), "2025-12-04T23:11:13.123-03:00");
  }
  {
    TimeZone tz("UTC0");
    EXPECT_EQ(log_time(at), "2025-12-05T02:11:13.123+00:00");
  }
}

std::string formatted(spdlog::formatter& f, spdlog::level::level_enum level, std::string_view message,
                      std::string_view logger = "") {
  spdlog::details::log_msg msg(spdlog::string_view_t(logger.data(), logger.size()), level,
                               spdlog::string_view_t(message.data(), message.size()));
  spdlog::memory_buf_t out;
  f.format(msg, out);
  return std::string(out.data(), out.size());
}

TEST(Logging, JsonLinesAreOneValidObjectWhateverTheMessage) {
  TimeZone tz("UTC0");
  auto f = json_log_formatter();
  const std::string hostile = "quote \" backslash \\ newline \n cr \r tab \t nul " + std::string(1, '\0') +
                              " bell \x07 invalid \xff\xfe utf-8 \xc3\xa9";
  for (const auto level : {spdlog::level::trace, spdlog::level::debug, spdlog::level::info, spdlog::level::warn,
                           spdlog::level::err, spdlog::level::critical}) {
    const auto line = formatted(*f, level, hostile);
    ASSERT_FALSE(line.empty());
    EXPECT_EQ(line.back(), '\n');
    EXPECT_EQ(line.find('\n'), line.size() - 1) << line;  // one line
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j.at("level"), std::string(spdlog::level::to_string_view(level).data(),
                                          spdlog::level::to_string_view(level).size()));
    const std::string message = j.at("message");
    EXPECT_NE(message.find("quote \" backslash \\ newline \n cr \r tab \t nul "), std::string::npos) << message;
    EXPECT_NE(message.find("invalid \xef\xbf\xbd"), std::string::npos) << message;  // U+FFFD
    EXPECT_NE(message.find("utf-8 \xc3\xa9"), std::string::npos) << message;
    const std::string time = j.at("time");
    EXPECT_TRUE(time.ends_with("+00:00")) << time;
    EXPECT_FALSE(j.contains("logger"));
  }
  const auto named = nlohmann::json::parse(formatted(*f, spdlog::level::info, "m", "rls"));
  EXPECT_EQ(named.at("logger"), "rls");
}

TEST(Logging, TheFormatIsReadFromTheConfiguration) {
  EXPECT_EQ(parse_config("logging: {format: json}\n", "logging_test.yaml").logging.format, LogFormat::json);
  EXPECT_EQ(parse_config("logging: {format: text}\n", "logging_test.yaml").logging.format, LogFormat::text);
  EXPECT_EQ(parse_config("rules: []\n", "logging_test.yaml").logging.format, LogFormat::text);
  try {
    parse_config("logging: {format: xml}\n", "logging_test.yaml");
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("logging.format"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ratekeeper::server
