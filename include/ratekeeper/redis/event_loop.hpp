#pragma once
// The threads that run Redis connections: one io_context per thread, connections are
// assigned round-robin, so each connection is driven by exactly one thread (no strand).
// Thread-safe. The loop must outlive every connection created on it.

#include <cstddef>
#include <functional>
#include <memory>

#include "ratekeeper/core/time.hpp"

namespace boost::asio {
class io_context;
}

namespace ratekeeper::redis {

class EventLoop {
 public:
  explicit EventLoop(int threads = 1);
  ~EventLoop();  // stops the threads and joins them
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  std::size_t size() const noexcept;
  // The next context round-robin, or context number `index % size()`.
  boost::asio::io_context& next() noexcept;
  boost::asio::io_context& context(std::size_t index) noexcept;

  // Runs `fn` on context `index`'s thread after `delay` (0: as soon as possible).
  void post(std::size_t index, std::function<void()> fn, Micros delay = 0);

  // Returns once every thread has run what was posted to it before the call. Not for use on
  // the loop's own threads.
  void barrier();

  // True when called on one of this loop's threads.
  bool on_loop_thread() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ratekeeper::redis
