#pragma once
// The access log: one JSON object per line for each request served, written to a file or to
// stdout. Lines are formatted on the request's thread and written in blocks by a thread of
// the log's own (at least twice a second), so a request never waits for the disk. A rate bound
// keeps a flood from filling the disk: lines beyond it are dropped and counted, and the next
// line written says how many went ("dropped": n). Lines a write to the file loses (a full
// disk) count as dropped too, and the failure is logged.
//
//   {"time":"2026-12-05T18:40:31.308+00:00","client":"203.0.113.7","method":"GET",
//    "path":"/api/data","status":429,"rule":"api","outcome":"rejected","duration_ms":0.412,
//    "upstream_ms":null,"bytes":52}
//
// Thread-safe.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "ratekeeper/core/error.hpp"
#include "ratekeeper/core/log_limit.hpp"
#include "ratekeeper/core/time.hpp"
#include "ratekeeper/http/request.hpp"

namespace ratekeeper {
class MetricsWriter;
}

namespace ratekeeper::http {

struct AccessLogOptions {
  std::string path = "stdout";    // "stdout", or a file appended to (created when missing)
  double max_lines_per_second = 10'000;  // a burst of as many is allowed; 0: no bound
};

// One request served.
struct AccessRecord {
  Micros time = 0;            // wall clock (Unix microseconds) when its header was read
  std::string_view client;    // the peer's address
  std::string_view method;
  std::string_view path;      // the target in normal form (http/path.hpp), query included
  int status = 0;             // what the client was sent; 0: nothing (the connection broke)
  std::string_view rule;      // the rule the middleware's answer came from; empty: none
  std::optional<RequestOutcome> outcome;  // nullopt: the middleware was not asked
  Micros duration = 0;        // from its header read to its response written
  std::optional<Micros> upstream;  // proxied: from its head sent to the response's head read
  std::uint64_t bytes = 0;    // response body bytes written to the client
};

class AccessLog {
 public:
  // Opens the file (or takes stdout). invalid_argument naming the path and the reason when it
  // cannot be opened for appending.
  static Result<std::shared_ptr<AccessLog>> open(AccessLogOptions options);
  ~AccessLog();  // writes what is pending
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  void write(const AccessRecord& record);
  // Opens the file again by its path (after log rotation moved it away); stdout stays. On
  // failure the open file is kept and the reason returned.
  Result<void> reopen();

  std::uint64_t lines_written() const noexcept { return written_.load(std::memory_order_relaxed); }
  std::uint64_t lines_dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }
  // ratekeeper_access_log_lines_total{result="written"|"dropped"}.
  void write_metrics(MetricsWriter& out) const;

  // One line, without its newline (for tests and the fuzzer).
  static std::string format(const AccessRecord& record, std::uint64_t dropped_before = 0);

 private:
  AccessLog(AccessLogOptions options, std::FILE* file);
  void run();
  void flush_pending();

  AccessLogOptions options_;
  LogLimit limit_;
  LogLimit failure_log_{"access log: failed writes", 0.1, 1};  // a line every 10 s at most
  std::mutex mu_;
  std::condition_variable wake_;
  std::string pending_;       // lines not yet written to the file
  std::string writing_;       // the block being written (writer thread)
  std::FILE* file_ = nullptr;  // guarded by file_mu_
  std::mutex file_mu_;
  bool stopping_ = false;
  std::atomic<std::uint64_t> written_{0};
  std::atomic<std::uint64_t> dropped_{0};
  std::thread thread_;
};

}  // namespace ratekeeper::http
