#pragma once
// A scripted HTTP/1.1 upstream for the proxy's tests: a real listening socket on 127.0.0.1
// and a thread per connection. What it answers depends on the request's path:
//   /stream/N     N bytes of pattern (see pattern_byte), with Content-Length
//   /chunked/N    the same N bytes, chunked (64 KiB chunks)
//   /sleep/MS     waits MS milliseconds, then as the default
//   /stall-body/MS     reads the header, waits MS milliseconds, then reads the body, as the default
//   /status/N     status N without body (a 304 with the Content-Length of the resource)
//   /garbage      bytes that are no HTTP response, then closes
//   /close-in-header   half a response header, then closes
//   /close-in-body     a header announcing 1 MB, 1000 bytes, then closes
//   /endless-chunk-line   a chunked header, then a chunk size line of 16 MiB (extensions)
//   /hop-by-hop   the default, with hop-by-hop fields and a field named in Connection
//   /usage/V      the default with X-Usage-Tokens: V (none: without it)
//   /usage-json/V a JSON body with "usage": {"total_tokens": V}
//   /usage-sse/V  an event stream (chunked) whose last event but [DONE] holds that usage
//   /then-close   the default (keep-alive), then closes the idle connection
//   /drop-next    the default; the next request on the connection is read, then the
//                 connection closed without an answer
//   anything else 200 "ok" (X-Body-Bytes: the request body's size)
// Every request is recorded (the body kept up to 1 MiB, its size and checksum always).
// Thread-safe.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "http_client.hpp"

namespace ratekeeper::testing {

// The byte at offset i of the pattern bodies.
inline char pattern_byte(std::uint64_t i) {
  return static_cast<char>('a' + i % 26);
}

// n bytes of the pattern from offset `offset` on.
std::string pattern(std::uint64_t offset, std::size_t n);
inline constexpr std::size_t kPatternPiece = std::size_t{1} << 20;

// FNV-1a over bytes, continued from `hash`.
std::uint64_t checksum(std::string_view bytes, std::uint64_t hash = 14695981039346656037ULL);

class TestUpstream {
 public:
  struct Seen {
    std::string method;
    std::string target;
    Headers headers;
    std::uint64_t body_size = 0;
    std::uint64_t body_checksum = 0;
    std::string body;  // up to 1 MiB
    bool chunked = false;

    std::optional<std::string> header(std::string_view name) const;
  };

  TestUpstream();
  ~TestUpstream();
  TestUpstream(const TestUpstream&) = delete;
  TestUpstream& operator=(const TestUpstream&) = delete;

  int port() const { return port_; }

  std::vector<Seen> requests() const;
  std::size_t request_count() const;
  std::size_t connections() const;
  // Connections the proxy closed while the upstream was reading a body or writing a response.
  std::size_t cut_off() const;
  // Connections open now.
  std::size_t open_connections() const;

  // Waits until `done()` holds (checked whenever something happens); false at the deadline.
  bool wait_for(const std::function<bool()>& done,
                std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;

 private:
  void accept_loop();
  void serve(int fd);
  void notify();

  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::vector<std::thread> threads_;
  std::set<int> open_fds_;
  std::vector<Seen> seen_;
  std::size_t connections_ = 0;
  std::size_t cut_off_ = 0;
};

}  // namespace ratekeeper::testing
