#pragma once
// Threads that run asynchronous I/O: one io_context per thread, so whatever is bound to a
// context is driven by exactly one thread and needs no strand. The HTTP server and the Redis
// clients can share one loop: a request accepted on thread i then talks to Redis over thread
// i's connection and gets its reply on the same thread, with no hand-off between threads.
// An exception thrown by a handler is contained (core/contained.hpp): noted, counted, and the
// thread runs on. Thread-safe. The loop must outlive everything bound to its contexts.

#include <cstddef>
#include <functional>
#include <memory>

#include "ratekeeper/core/time.hpp"

namespace boost::asio {
class io_context;
}

namespace ratekeeper {

class EventLoop {
 public:
  static constexpr std::size_t kNoContext = static_cast<std::size_t>(-1);

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
  // The index of the calling thread's context, or kNoContext when called from another thread.
  std::size_t current_index() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ratekeeper
