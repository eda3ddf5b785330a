#include "logging.hpp"

#include <fmt/format.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <ctime>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>

namespace ratekeeper::server {
namespace {

class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    nlohmann::ordered_json line;
    line["time"] = log_time(msg.time);
    const auto level = spdlog::level::to_string_view(msg.level);
    line["level"] = std::string_view(level.data(), level.size());
    if (msg.logger_name.size() > 0) {
      line["logger"] = std::string_view(msg.logger_name.data(), msg.logger_name.size());
    }
    line["message"] = std::string_view(msg.payload.data(), msg.payload.size());
    const std::string text = line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    dest.append(text.data(), text.data() + text.size());
    dest.push_back('\n');
  }
  std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<JsonFormatter>(); }
};

// The text lines: "[2026-12-05T04:11:13.123+00:00] [info] message".
constexpr const char* kTextPattern = "[%Y-%m-%dT%H:%M:%S.%e%z] [%l] %v";

}  // namespace

std::optional<LogFormat> parse_log_format(std::string_view text) noexcept {
  if (text == "text") return LogFormat::text;
  if (text == "json") return LogFormat::json;
  return std::nullopt;
}

std::string log_time(std::chrono::system_clock::time_point at) {
  const auto since = at.time_since_epoch();
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(since);
  const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(since - seconds).count();
  const std::time_t t = static_cast<std::time_t>(seconds.count());
  std::tm local{};
  localtime_r(&t, &local);
  const long offset = local.tm_gmtoff / 60;  // minutes east of UTC
  const long magnitude = offset < 0 ? -offset : offset;
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}{}{:02}:{:02}", local.tm_year + 1900,
                     local.tm_mon + 1, local.tm_mday, local.tm_hour, local.tm_min, local.tm_sec, millis,
                     offset < 0 ? '-' : '+', magnitude / 60, magnitude % 60);
}

std::unique_ptr<spdlog::formatter> json_log_formatter() { return std::make_unique<JsonFormatter>(); }

void set_up_logging(LogFormat format, spdlog::level::level_enum level) {
  static std::once_flag once;
  std::call_once(once, [] {
    auto logger = std::make_shared<spdlog::logger>("", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    spdlog::set_default_logger(std::move(logger));
  });
  auto logger = spdlog::default_logger();
  if (format == LogFormat::json) {
    logger->set_formatter(json_log_formatter());
  } else {
    logger->set_pattern(kTextPattern);
  }
  logger->set_level(level);
  logger->flush_on(std::min(level, spdlog::level::info));
}

}  // namespace ratekeeper::server
