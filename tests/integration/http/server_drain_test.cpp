// http::Server's graceful drain over real sockets, in process: the handler holds a request in
// flight while the test asks for new connections.

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>

#include "ratekeeper/core/event_loop.hpp"
#include "ratekeeper/http/server.hpp"
#include "support/http_client.hpp"

namespace ratekeeper::testing {
namespace {

using Clock = std::chrono::steady_clock;

// While draining, the server takes no new connection (refused, or closed unanswered) and still
// completes the request in flight, whose response closes its connection; then run() returns.
TEST(HttpServer, DrainRefusesNewConnectionsWhileTheRequestInFlightCompletes) {
  http::ServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.threads = 1;
  options.handle_signals = false;
  std::promise<http::Responder> held;
  http::Server server(options, [&held](http::Request request, http::Responder respond) {
    if (request.path() == "/hold") return held.set_value(std::move(respond));
    respond(http::Response{200, "text/plain", {}, "ok"});
  });
  ASSERT_TRUE(server.listen());
  const int port = server.port();
  std::thread runner([&server] { server.run(); });
  ASSERT_EQ(http_get(port, "/now").body, "ok");

  auto in_flight = std::async(std::launch::async, [port] { return http_get(port, "/hold"); });
  auto responder = held.get_future();
  ASSERT_EQ(responder.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  server.stop();

  // stop() is handled on the server's thread: once it has been, a new connection gets no
  // answer. Until then one may still be served.
  bool refused = false;
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!refused && Clock::now() < deadline) {
    try {
      HttpClient fresh(port);
      fresh.get("/now");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } catch (const std::runtime_error&) {
      refused = true;
    }
  }
  EXPECT_TRUE(refused) << "new connections were still served while draining";
  EXPECT_EQ(in_flight.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout)
      << "the request in flight was answered before its handler responded";

  responder.get()(http::Response{200, "text/plain", {}, "finished"});
  const auto response = in_flight.get();
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.body, "finished");
  EXPECT_EQ(response.header("Connection"), "close");
  runner.join();
  EXPECT_EQ(server.stats().connections_open, 0u);
}

// The drain begins when the server's thread handles stop(). A response delivered from another
// thread right after, while that handling has not yet finished, still says Connection: close.
// The order is made certain by holding the loop's only thread busy: stop() and then the
// response are queued behind it, in that order.
TEST(HttpServer, DrainClosesTheConnectionOfAResponseQueuedRightAfterStop) {
  auto loop = std::make_shared<EventLoop>(1);
  http::ServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.handle_signals = false;
  options.loop = loop;
  std::promise<http::Responder> held;
  http::Server server(options, [&held](http::Request, http::Responder respond) {
    held.set_value(std::move(respond));
  });
  ASSERT_TRUE(server.listen());
  const int port = server.port();
  std::thread runner([&server] { server.run(); });

  auto in_flight = std::async(std::launch::async, [port] { return http_get(port, "/hold"); });
  auto responder = held.get_future();
  ASSERT_EQ(responder.wait_for(std::chrono::seconds(20)), std::future_status::ready);

  std::promise<void> busy;
  std::promise<void> release;
  loop->post(0, [&busy, gate = release.get_future().share()] {
    busy.set_value();
    gate.wait();
  });
  busy.get_future().wait();
  server.stop();
  responder.get()(http::Response{200, "text/plain", {}, "finished"});
  release.set_value();

  const auto response = in_flight.get();
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.body, "finished");
  EXPECT_EQ(response.header("Connection"), "close");
  runner.join();
  EXPECT_EQ(server.stats().connections_open, 0u);
}

}  // namespace
}  // namespace ratekeeper::testing
