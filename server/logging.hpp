#pragma once
// The server's own log: every level on stderr, one line per message, as text or as one JSON
// object per line (`logging.format`), each stamped with the local time and its zone offset.
// The decision log is another stream: stdout (limiter::stdout_decision_sink), so that the two
// can be collected apart.

#include <spdlog/formatter.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace ratekeeper::server {

enum class LogFormat { text, json };

// "text" or "json"; nothing for anything else.
std::optional<LogFormat> parse_log_format(std::string_view text) noexcept;

// RFC 3339 in local time with milliseconds and the zone's offset: "2026-12-05T04:11:13.123+00:00".
std::string log_time(std::chrono::system_clock::time_point at);

// {"time": log_time, "level": "info", "logger": name (when it has one), "message": ...} and a
// newline; text that is not UTF-8 is written with U+FFFD, control characters escaped.
std::unique_ptr<spdlog::formatter> json_log_formatter();

// Makes the default logger write to stderr in `format` from `level` on. Called at start and
// on a reload; thread-safe.
void set_up_logging(LogFormat format, spdlog::level::level_enum level);

}  // namespace ratekeeper::server
