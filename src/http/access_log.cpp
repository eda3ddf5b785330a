#include "ratekeeper/http/access_log.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <iterator>

#include "ratekeeper/core/metrics_writer.hpp"

namespace ratekeeper::http {

namespace {

// Lines waiting for the writer beyond this are dropped (a disk that cannot keep up).
constexpr std::size_t kMaxPending = std::size_t{8} << 20;
constexpr auto kFlushInterval = std::chrono::milliseconds(500);

// JSON string contents: quotes, backslashes and control characters escaped; bytes that are
// not UTF-8 written as U+FFFD, so that a line is always valid JSON.
void append_escaped(std::string& out, std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
      ++i;
    } else if (c < 0x20 || c == 0x7f) {
      fmt::format_to(std::back_inserter(out), "\\u{:04x}", c);
      ++i;
    } else if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
    } else {
      // A well-formed UTF-8 sequence goes as it is.
      const std::size_t n = c >= 0xc2 && c <= 0xdf   ? 2
                            : c >= 0xe0 && c <= 0xef ? 3
                            : c >= 0xf0 && c <= 0xf4 ? 4
                                                     : 0;
      bool ok = n > 0 && i + n <= s.size();
      for (std::size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
      if (ok && n == 3) {
        const auto c1 = static_cast<unsigned char>(s[i + 1]);
        ok = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0);  // overlong, surrogates
      } else if (ok && n == 4) {
        const auto c1 = static_cast<unsigned char>(s[i + 1]);
        ok = !(c == 0xf0 && c1 < 0x90) && !(c == 0xf4 && c1 >= 0x90);  // overlong, > U+10FFFF
      }
      if (ok) {
        out.append(s.substr(i, n));
        i += n;
      } else {
        out += "\xef\xbf\xbd";
        ++i;
      }
    }
  }
}

void append_string(std::string& out, std::string_view key, std::string_view value) {
  out += '"';
  out += key;
  out += "\":\"";
  append_escaped(out, value);
  out += '"';
}

void append_millis(std::string& out, std::string_view key, Micros us) {
  fmt::format_to(std::back_inserter(out), "\"{}\":{}.{:03d}", key, us / 1000, static_cast<int>(us % 1000));
}

// "2026-12-05T18:40:31.308+00:00": local time with its zone's offset, as the server's own log.
// The part up to the second is made once a second per thread.
void append_time(std::string& out, Micros unix_us) {
  thread_local std::time_t cached_second = -1;
  thread_local std::string prefix;  // "2026-12-05T18:40:31"
  thread_local std::string zone;    // "+00:00"
  const std::time_t second = static_cast<std::time_t>(unix_us / kMicrosPerSecond);
  if (second != cached_second) {
    std::tm tm{};
    localtime_r(&second, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    prefix = buf;
    const long offset = tm.tm_gmtoff / 60;
    zone = fmt::format("{}{:02d}:{:02d}", offset < 0 ? '-' : '+', std::abs(offset) / 60, std::abs(offset) % 60);
    cached_second = second;
  }
  fmt::format_to(std::back_inserter(out), "\"time\":\"{}.{:03d}{}\"", prefix,
                 static_cast<int>((unix_us % kMicrosPerSecond) / 1000), zone);
}

}  // namespace

std::string AccessLog::format(const AccessRecord& r, std::uint64_t dropped_before) {
  std::string out;
  out.reserve(256);
  out += '{';
  append_time(out, r.time);
  out += ',';
  append_string(out, "client", r.client);
  out += ',';
  append_string(out, "method", r.method);
  out += ',';
  append_string(out, "path", r.path);
  fmt::format_to(std::back_inserter(out), ",\"status\":{},", r.status);
  if (r.rule.empty()) {
    out += "\"rule\":null";
  } else {
    append_string(out, "rule", r.rule);
  }
  out += ',';
  if (r.outcome) {
    append_string(out, "outcome", to_string(*r.outcome));
  } else {
    out += "\"outcome\":null";
  }
  out += ',';
  append_millis(out, "duration_ms", r.duration);
  out += ',';
  if (r.upstream) {
    append_millis(out, "upstream_ms", *r.upstream);
  } else {
    out += "\"upstream_ms\":null";
  }
  fmt::format_to(std::back_inserter(out), ",\"bytes\":{}", r.bytes);
  if (dropped_before > 0) fmt::format_to(std::back_inserter(out), ",\"dropped\":{}", dropped_before);
  out += '}';
  return out;
}

Result<std::shared_ptr<AccessLog>> AccessLog::open(AccessLogOptions options) {
  std::FILE* file = stdout;
  if (options.path != "stdout") {
    file = std::fopen(options.path.c_str(), "a");
    if (file == nullptr) {
      return make_error(ErrorCode::invalid_argument,
                        fmt::format("access log '{}': cannot open: {}", options.path, std::strerror(errno)));
    }
  }
  return std::shared_ptr<AccessLog>(new AccessLog(std::move(options), file));
}

AccessLog::AccessLog(AccessLogOptions options, std::FILE* file)
    : options_(std::move(options)),
      limit_(options_.max_lines_per_second > 0 ? options_.max_lines_per_second : 1,
             options_.max_lines_per_second > 0 ? options_.max_lines_per_second : 1),
      file_(file),
      thread_([this] { run(); }) {}

AccessLog::~AccessLog() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  std::lock_guard lock(file_mu_);
  if (file_ != stdout) std::fclose(file_);
}

void AccessLog::write(const AccessRecord& record) {
  std::uint64_t dropped_before = 0;
  if (options_.max_lines_per_second > 0 && !limit_.admit(dropped_before)) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  std::string line = format(record, dropped_before);
  line += '\n';
  std::lock_guard lock(mu_);
  if (pending_.size() + line.size() > kMaxPending) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  pending_ += line;
  written_.fetch_add(1, std::memory_order_relaxed);
}

void AccessLog::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    wake_.wait_for(lock, kFlushInterval, [this] { return stopping_; });
    const bool last = stopping_;
    writing_.clear();
    writing_.swap(pending_);
    lock.unlock();
    flush_pending();
    lock.lock();
    if (last && pending_.empty()) return;
  }
}

void AccessLog::flush_pending() {
  if (writing_.empty()) return;
  std::lock_guard lock(file_mu_);
  const std::size_t n = std::fwrite(writing_.data(), 1, writing_.size(), file_);
  if (std::fflush(file_) == 0 && n == writing_.size()) return;
  // A full disk or a file gone bad: the block's lines are lost. They count as dropped, and
  // the failure is logged (once every 10 s at most) with the reason.
  const int error = errno;
  std::clearerr(file_);
  const auto lines = static_cast<std::uint64_t>(std::count(writing_.begin(), writing_.end(), '\n'));
  written_.fetch_sub(lines, std::memory_order_relaxed);
  dropped_.fetch_add(lines, std::memory_order_relaxed);
  std::uint64_t suppressed = 0;
  if (failure_log_.admit(suppressed)) {
    spdlog::error("access log '{}': {} line(s) could not be written: {}{}", options_.path, lines,
                  std::strerror(error),
                  suppressed > 0 ? fmt::format(" ({} more failed writes not logged)", suppressed) : "");
  }
}

Result<void> AccessLog::reopen() {
  if (options_.path == "stdout") return {};
  std::FILE* file = std::fopen(options_.path.c_str(), "a");
  if (file == nullptr) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("access log '{}': cannot open: {}", options_.path, std::strerror(errno)));
  }
  std::lock_guard lock(file_mu_);
  std::fclose(file_);
  file_ = file;
  return {};
}

void AccessLog::write_metrics(MetricsWriter& out) const {
  constexpr std::string_view kHelp = "Access log lines, written or dropped (over the rate bound, or the disk behind).";
  out.counter("ratekeeper_access_log_lines_total", kHelp, lines_written(), {{"result", "written"}});
  out.counter("ratekeeper_access_log_lines_total", kHelp, lines_dropped(), {{"result", "dropped"}});
}

}  // namespace ratekeeper::http
