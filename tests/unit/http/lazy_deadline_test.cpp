// LazyDeadline (src/http/lazy_deadline.hpp): one timer bounds a connection's operations, each by
// its own timeout, however the timeouts of successive operations differ.

#include "http/lazy_deadline.hpp"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <memory>

namespace ratekeeper::http {
namespace {

namespace net = boost::asio;
using namespace std::chrono_literals;

struct Connection {
  explicit Connection(net::io_context& context) : deadline(context.get_executor()) {}
  LazyDeadline deadline;
  int cuts = 0;
  void begin(std::chrono::steady_clock::duration timeout) {
    deadline.begin(timeout, owner, [this](const std::shared_ptr<int>&) { ++cuts; });
  }
  std::shared_ptr<int> owner = std::make_shared<int>(0);
};

// An operation with a short timeout after one with a long timeout (a response written within
// upstream.timeout after a request read within read_timeout): cut at its own deadline, not at
// the longer one the timer was armed for.
TEST(LazyDeadline, AShorterTimeoutAfterALongerOneIsEnforcedOnTime) {
  net::io_context context;
  Connection c(context);
  c.begin(3600s);
  EXPECT_EQ(c.deadline.done({}), boost::beast::error_code());
  c.begin(20ms);
  context.run_for(2s);  // the hour's wait is cancelled: the context runs out of work once cut
  EXPECT_EQ(c.cuts, 1);
  EXPECT_EQ(c.deadline.done(net::error::operation_aborted), boost::beast::error::timeout);
}

// A longer timeout after a shorter one moves the deadline later: the timer armed for the
// shorter one waits again, and nothing is cut before the longer deadline.
TEST(LazyDeadline, ALongerTimeoutAfterAShorterOneIsNotCutEarly) {
  net::io_context context;
  Connection c(context);
  c.begin(10ms);
  EXPECT_EQ(c.deadline.done({}), boost::beast::error_code());
  c.begin(3600s);
  context.run_for(300ms);
  EXPECT_EQ(c.cuts, 0);
  EXPECT_EQ(c.deadline.done({}), boost::beast::error_code());
  c.deadline.cancel();
}

// No operation under way when the deadline passes: nothing to cut.
TEST(LazyDeadline, NothingUnderWayIsNotCut) {
  net::io_context context;
  Connection c(context);
  c.begin(10ms);
  EXPECT_EQ(c.deadline.done({}), boost::beast::error_code());
  context.run_for(300ms);
  EXPECT_EQ(c.cuts, 0);
}

}  // namespace
}  // namespace ratekeeper::http
