// on_thread_of (src/http/executor_thread.hpp): what the proxy and the server act on at once
// must be on the connection's own thread; anywhere else it is dispatched there.

#include "http/executor_thread.hpp"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <thread>

namespace ratekeeper::http {
namespace {

namespace net = boost::asio;

TEST(ExecutorThread, TrueOnlyOnTheThreadRunningTheContext) {
  net::io_context context;
  net::io_context other;
  const net::any_io_executor executor = context.get_executor();
  bool on_own = false;
  bool other_seen_from_own = true;
  net::post(context, [&] {
    on_own = on_thread_of(executor);
    other_seen_from_own = on_thread_of(other.get_executor());
  });
  std::thread runner([&] { context.run(); });
  runner.join();
  EXPECT_TRUE(on_own);
  EXPECT_FALSE(other_seen_from_own);
  EXPECT_FALSE(on_thread_of(executor));  // this thread does not run it
}

TEST(ExecutorThread, AnExecutorOfAnotherKindIsNeverTakenForTheThread) {
  net::io_context context;
  const net::any_io_executor strand = net::make_strand(context);
  bool on_own = true;
  net::post(context, [&] { on_own = on_thread_of(strand); });
  context.run();
  EXPECT_FALSE(on_own);  // dispatched instead: correct whatever the executor
}

}  // namespace
}  // namespace ratekeeper::http
