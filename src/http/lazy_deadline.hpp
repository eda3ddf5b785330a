#pragma once
// One deadline for a connection's operations under way, kept by one timer armed lazily.
// Internal to src/http.

#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>
#include <chrono>
#include <cstddef>

#include "stream.hpp"

namespace ratekeeper::http {

// The deadline of one connection's operations under way, kept by one timer armed lazily: each
// operation moves the deadline, and the timer, when it fires before it, waits again until it;
// once it passes with an operation under way, `cut` closes the connection, and its operations
// complete with an error read as Beast's timeout (done()). One wait a timeout, where
// Beast's stream arms and cancels a timer for every operation.
class LazyDeadline {
 public:
  explicit LazyDeadline(const Stream::executor_type& executor) : timer_(executor) {}

  // An operation begins, bounded by `timeout` from now. `owner` (a shared_ptr to what holds
  // this) is kept while the timer waits; `cut(owner)` closes the connection.
  template <class Owner, class Cut>
  void begin(std::chrono::steady_clock::duration timeout, const Owner& owner, Cut cut) {
    deadline_ = std::chrono::steady_clock::now() + timeout;
    ++ops_;
    timed_out_ = false;
    // Armed for later than this operation's deadline (an operation with a longer timeout came
    // before): armed again for it, so that no timeout is enforced late.
    if (!armed_ || deadline_ < armed_for_) arm(owner, cut);
  }

  // The operation completed with `ec`: the error its handler reads.
  boost::beast::error_code done(boost::beast::error_code ec) {
    if (ops_ > 0) --ops_;
    return ec && timed_out_ ? boost::beast::error_code(boost::beast::error::timeout) : ec;
  }

  // No operation of the connection's is bounded any more (it closed, or it is handed on).
  void cancel() {
    ops_ = 0;
    timer_.cancel();
  }

 private:
  template <class Owner, class Cut>
  void arm(const Owner& owner, Cut cut) {
    armed_ = true;
    armed_for_ = deadline_;
    timer_.expires_at(deadline_);  // a wait armed before is cancelled (its handler returns)
    timer_.async_wait([this, owner, cut](boost::beast::error_code ec) {
      if (ec) return;  // cancelled
      armed_ = false;
      if (ops_ == 0) return;
      if (std::chrono::steady_clock::now() < deadline_) return arm(owner, cut);
      timed_out_ = true;
      cut(owner);
    });
  }

  boost::asio::steady_timer timer_;
  std::chrono::steady_clock::time_point deadline_{};
  std::chrono::steady_clock::time_point armed_for_{};  // when the armed wait ends
  std::size_t ops_ = 0;
  bool armed_ = false;
  bool timed_out_ = false;
};

}  // namespace ratekeeper::http
